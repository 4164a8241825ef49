"""Lesson 02 (QKV attention): held-out wrong and right implementations, from the exercise text only."""

import math

import torch
from torch import nn

# ---------------------------------------------------------------- scaled_dot_product_attention


def sdpa_masked_fill(q, k, v, mask=None):
    """Right: matmul, divide by sqrt(d_k), masked_fill(~mask, -inf), softmax(-1), nan_to_num."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_einsum_where(q, k, v, mask=None):
    """Right: einsum for both products, torch.where for the mask, zeros for fully masked rows."""
    d_k = q.size(-1)
    scores = torch.einsum("...qd,...kd->...qk", q * (1.0 / math.sqrt(d_k)), k)
    if mask is not None:
        mask = mask.to(torch.bool)
        scores = torch.where(mask, scores, torch.full_like(scores, -math.inf))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.where(torch.isnan(weights), torch.zeros_like(weights), weights)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights


def sdpa_scaled_by_dv(q, k, v, mask=None):
    """Wrong: divides by sqrt of v's last dimension (d_v) instead of d_k."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_scaled_by_length(q, k, v, mask=None):
    """Wrong: d_k read as q.shape[1], which is L_q for a (B, L, d) query."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_transpose_1_2(q, k, v, mask=None):
    """Wrong: k.transpose(1, 2), right for 3-D inputs only (swaps heads and keys in 4-D)."""
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_big_negative(q, k, v, mask=None):
    """Wrong: masked scores set to -1e9: a fully masked row gets uniform weights, not zeros."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_additive_bool(q, k, v, mask=None):
    """Wrong: the bool mask is added to the scores as 0/1 (an additive-mask mix-up)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + mask.to(scores.dtype)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_inplace_scale(q, k, v, mask=None):
    """Wrong: scales the caller's q in place (q /= sqrt(d_k)), changing the input tensor."""
    with torch.no_grad():
        q /= math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_boolean_index(q, k, v, mask=None):
    """Wrong: scores[~mask] = -inf by boolean indexing, which needs the mask's full shape (no broadcasting)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores[~mask] = float("-inf")
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_float32_softmax(q, k, v, mask=None):
    """Wrong: the softmax is taken in float32 (dtype=torch.float32), so float64 inputs lose precision and dtype."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).nan_to_num(0.0)
    return weights @ v.to(weights.dtype), weights


def sdpa_returns_swapped(q, k, v, mask=None):
    """Wrong: returns (weights, output) in the wrong order."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights, weights @ v


def sdpa_scale_after_softmax(q, k, v, mask=None):
    """Wrong: the 1/sqrt(d_k) is applied to the weights after the softmax."""
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0) / math.sqrt(q.shape[-1])
    return weights @ v, weights


# ---------------------------------------------------------------- SelfAttention


class _SABase(nn.Module):
    def __init__(self, d_model, d_k=None, d_v=None):
        super().__init__()
        d_k = d_k or d_model
        d_v = d_v or d_model
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_v
        self.w_q = nn.Linear(d_model, d_k, bias=False)
        self.w_k = nn.Linear(d_model, d_k, bias=False)
        self.w_v = nn.Linear(d_model, d_v, bias=False)
        self.last_weights = None


class SelfAttentionPlain(_SABase):
    """Right: three projections, the course function, last_weights replaced on every call."""

    def forward(self, x, mask=None):
        out, weights = sdpa_masked_fill(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        self.last_weights = weights
        return out


class SelfAttentionFunctional(_SABase):
    """Right: F.linear with the weight matrices, the einsum attention, weights stored by unpacking."""

    def forward(self, x, mask=None):
        q = nn.functional.linear(x, self.w_q.weight)
        k = nn.functional.linear(x, self.w_k.weight)
        v = nn.functional.linear(x, self.w_v.weight)
        out, self.last_weights = sdpa_einsum_where(q, k, v, mask=mask)
        return out


class SelfAttentionFirstWeightsOnly(_SABase):
    """Wrong: last_weights is set only on the first call (if it is still None)."""

    def forward(self, x, mask=None):
        out, weights = sdpa_masked_fill(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        if self.last_weights is None:
            self.last_weights = weights
        return out


class SelfAttentionMaskDropped(_SABase):
    """Wrong: the mask is accepted but never passed on."""

    def forward(self, x, mask=None):
        out, weights = sdpa_masked_fill(self.w_q(x), self.w_k(x), self.w_v(x))
        self.last_weights = weights
        return out


class SelfAttentionUnprojectedValues(_SABase):
    """Wrong: the values are x itself, w_v is never used."""

    def forward(self, x, mask=None):
        out, weights = sdpa_masked_fill(self.w_q(x), self.w_k(x), x, mask)
        self.last_weights = weights
        return out


class SelfAttentionQueryFromKeyLayer(_SABase):
    """Wrong: a copy-paste slip, the queries go through w_k too."""

    def forward(self, x, mask=None):
        out, weights = sdpa_masked_fill(self.w_k(x), self.w_k(x), self.w_v(x), mask)
        self.last_weights = weights
        return out


class SelfAttentionDoubleScaled(_SABase):
    """Wrong: q is divided by sqrt(d_k) before the function, which divides again."""

    def forward(self, x, mask=None):
        q = self.w_q(x) / math.sqrt(self.d_k)
        out, weights = sdpa_masked_fill(q, self.w_k(x), self.w_v(x), mask)
        self.last_weights = weights
        return out


class SelfAttentionQKSwapped(_SABase):
    """Wrong: keys passed as queries and queries as keys (weights transposed)."""

    def forward(self, x, mask=None):
        out, weights = sdpa_masked_fill(self.w_k(x), self.w_q(x), self.w_v(x), mask)
        self.last_weights = weights
        return out


class SelfAttentionReturnsTuple(_SABase):
    """Wrong: returns (output, weights) instead of the output alone."""

    def forward(self, x, mask=None):
        out, weights = sdpa_masked_fill(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        self.last_weights = weights
        return out, weights


class SelfAttentionStoresOutput(_SABase):
    """Wrong: stores the output, not the weights, in last_weights."""

    def forward(self, x, mask=None):
        out, _ = sdpa_masked_fill(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        self.last_weights = out
        return out


WRONG = {
    "scaled_dot_product_attention": [
        sdpa_scaled_by_dv,
        sdpa_scaled_by_length,
        sdpa_transpose_1_2,
        sdpa_big_negative,
        sdpa_additive_bool,
        sdpa_inplace_scale,
        sdpa_boolean_index,
        sdpa_float32_softmax,
        sdpa_returns_swapped,
        sdpa_scale_after_softmax,
    ],
    "SelfAttention": [
        SelfAttentionFirstWeightsOnly,
        SelfAttentionMaskDropped,
        SelfAttentionUnprojectedValues,
        SelfAttentionQueryFromKeyLayer,
        SelfAttentionDoubleScaled,
        SelfAttentionQKSwapped,
        SelfAttentionReturnsTuple,
        SelfAttentionStoresOutput,
    ],
}

RIGHT = {
    "scaled_dot_product_attention": sdpa_masked_fill,
    "SelfAttention": SelfAttentionPlain,
}

RIGHT2 = {
    "scaled_dot_product_attention": sdpa_einsum_where,
    "SelfAttention": SelfAttentionFunctional,
}
