"""Lesson 02 (QKV attention): held-out wrong and right implementations, from the exercise text only."""

import math

import torch
from torch import nn

# ---------------------------------------------------------------- scaled_dot_product_attention


def sdpa_masked_fill(q, k, v, mask=None):
    """Right: matmul, masked_fill with -inf, softmax, nan_to_num."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_einsum_where(q, k, v, mask=None):
    """Right: einsum for both products, torch.where for the mask, fully masked rows zeroed."""
    d_k = k.size(-1)
    scores = torch.einsum("...qd,...kd->...qk", q, k) * d_k**-0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.full_like(scores, -math.inf))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.where(torch.isnan(weights), torch.zeros_like(weights), weights)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights


def sdpa_scale_dv(q, k, v, mask=None):
    """Divides by sqrt of v's last dimension (d_v) instead of d_k."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_big_negative(q, k, v, mask=None):
    """Masks with -1e9 instead of -inf: a fully masked row gets uniform weights, not zeros."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_transpose_1_2(q, k, v, mask=None):
    """Transposes k with transpose(1, 2): right for 3-D inputs, wrong with a head axis."""
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_nan_to_num_on_scores(q, k, v, mask=None):
    """Applies nan_to_num to the masked scores (turning -inf finite) instead of to the weights."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")).nan_to_num(0.0)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_boolean_index(q, k, v, mask=None):
    """Masks by boolean indexing scores[~mask] = -inf, which needs the mask's full shape."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores[~mask] = float("-inf")
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_softmax_dim1(q, k, v, mask=None):
    """Softmax over dim=1 (the query axis for 3-D inputs) instead of the last axis."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_naive_exp(q, k, v, mask=None):
    """Softmax written as exp / sum of exp, without subtracting the max: overflows."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores)
    weights = (e / e.sum(dim=-1, keepdim=True)).nan_to_num(0.0)
    return weights @ v, weights


# ---------------------------------------------------------------- SelfAttention


class _SelfAttentionBase(nn.Module):
    """The given __init__ of the exercise."""

    def __init__(self, d_model, d_k=None, d_v=None):
        super().__init__()
        d_k = d_k or d_model
        d_v = d_v or d_model
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_v
        self.w_q = nn.Linear(d_model, d_k, bias=False)
        self.w_k = nn.Linear(d_model, d_k, bias=False)
        self.w_v = nn.Linear(d_model, d_v, bias=False)
        self.last_weights = None


class SelfAttentionCallsMine(_SelfAttentionBase):
    """Right: projects, calls my scaled_dot_product_attention, stores the weights."""

    def forward(self, x, mask=None):
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        out, self.last_weights = sdpa_masked_fill(q, k, v, mask)
        return out


class SelfAttentionEinsumMine(_SelfAttentionBase):
    """Right: the projections as einsum with the weight matrices, then my einsum attention."""

    def forward(self, x, mask=None):
        q = torch.einsum("bld,kd->blk", x, self.w_q.weight)
        k = torch.einsum("bld,kd->blk", x, self.w_k.weight)
        v = torch.einsum("bld,kd->blk", x, self.w_v.weight)
        output, weights = sdpa_einsum_where(q, k, v, mask=mask)
        self.last_weights = weights
        return output


class SelfAttentionReturnsTuple(_SelfAttentionBase):
    """Returns (output, weights) like the attention function, not the output alone."""

    def forward(self, x, mask=None):
        out, weights = sdpa_masked_fill(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        self.last_weights = weights
        return out, weights


class SelfAttentionKeepsFirstWeights(_SelfAttentionBase):
    """Stores the weights only on the first call (if self.last_weights is None)."""

    def forward(self, x, mask=None):
        out, weights = sdpa_masked_fill(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        if self.last_weights is None:
            self.last_weights = weights
        return out


class SelfAttentionNoValueProjection(_SelfAttentionBase):
    """Uses x itself as the values (forgets w_v)."""

    def forward(self, x, mask=None):
        out, self.last_weights = sdpa_masked_fill(self.w_q(x), self.w_k(x), x, mask)
        return out


class SelfAttentionSwappedQK(_SelfAttentionBase):
    """Copy-paste slip: queries from w_k and keys from w_q."""

    def forward(self, x, mask=None):
        q, k, v = self.w_k(x), self.w_q(x), self.w_v(x)
        out, self.last_weights = sdpa_masked_fill(q, k, v, mask)
        return out


class SelfAttentionDropsMask(_SelfAttentionBase):
    """Calls the attention without passing the mask on."""

    def forward(self, x, mask=None):
        out, self.last_weights = sdpa_masked_fill(self.w_q(x), self.w_k(x), self.w_v(x))
        return out


class SelfAttentionScalesQueriesToo(_SelfAttentionBase):
    """Divides q by sqrt(d_k) before calling the function, which scales again."""

    def forward(self, x, mask=None):
        q = self.w_q(x) / math.sqrt(self.d_k)
        out, self.last_weights = sdpa_masked_fill(q, self.w_k(x), self.w_v(x), mask)
        return out


class SelfAttentionInlineDModel(_SelfAttentionBase):
    """Writes the attention inline and scales by sqrt(d_model) rather than sqrt(d_k)."""

    def forward(self, x, mask=None):
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_model)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        self.last_weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        return self.last_weights @ v


WRONG = {
    "scaled_dot_product_attention": [
        sdpa_scale_dv,
        sdpa_big_negative,
        sdpa_transpose_1_2,
        sdpa_nan_to_num_on_scores,
        sdpa_boolean_index,
        sdpa_softmax_dim1,
        sdpa_naive_exp,
    ],
    "SelfAttention": [
        SelfAttentionReturnsTuple,
        SelfAttentionKeepsFirstWeights,
        SelfAttentionNoValueProjection,
        SelfAttentionSwappedQK,
        SelfAttentionDropsMask,
        SelfAttentionScalesQueriesToo,
        SelfAttentionInlineDModel,
    ],
}
RIGHT = {
    "scaled_dot_product_attention": sdpa_masked_fill,
    "SelfAttention": SelfAttentionCallsMine,
}
RIGHT2 = {
    "scaled_dot_product_attention": sdpa_einsum_where,
    "SelfAttention": SelfAttentionEinsumMine,
}
