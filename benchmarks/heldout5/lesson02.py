"""Lesson 02 (QKV attention): held-out wrong and right implementations, from the exercise text only."""

import math

import torch
from torch import nn

# ---------------------------------------------------------------- scaled_dot_product_attention


def sdpa_masked_fill(q, k, v, mask=None):
    """Right: q kᵀ / sqrt(d_k), masked_fill(~mask, -inf), softmax(-1), nan_to_num(0)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_einsum_where(q, k, v, mask=None):
    """Right: einsum for the scores and the output, torch.where for the mask, scale on q."""
    d_k = q.size(-1)
    scores = torch.einsum("...qd,...kd->...qk", q * d_k**-0.5, k)
    if mask is not None:
        scores = torch.where(mask, scores, torch.full_like(scores, -math.inf))
    weights = scores.softmax(-1)
    weights = torch.where(torch.isnan(weights), torch.zeros_like(weights), weights)
    output = torch.einsum("...qk,...kd->...qd", weights, v)
    return output, weights


def sdpa_scale_by_query_length(q, k, v, mask=None):
    """Wrong: divides by sqrt(q.shape[-2]) (L_q) instead of sqrt(d_k)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-2])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_transpose_1_2(q, k, v, mask=None):
    """Wrong: k.transpose(1, 2), right for 3-D inputs but not with a head axis (4-D)."""
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_big_negative(q, k, v, mask=None):
    """Wrong: masks with -1e9 and no nan_to_num: a fully masked row gets uniform weights, not 0."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_nan_only_in_output(q, k, v, mask=None):
    """Wrong: nan_to_num on the output only; the returned weights keep NaN rows."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return (weights @ v).nan_to_num(0.0), weights


def sdpa_softmax_dim_1(q, k, v, mask=None):
    """Wrong: softmax(dim=1), the key axis only for 2-D scores."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_scales_q_in_place(q, k, v, mask=None):
    """Wrong: q /= sqrt(d_k) in place, changing the caller's query tensor."""
    q /= math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_scale_by_d_v(q, k, v, mask=None):
    """Wrong: divides by sqrt(v.shape[-1]) (d_v) instead of sqrt(d_k)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


# ---------------------------------------------------------------- SelfAttention


class _SelfAttentionBase(nn.Module):
    def __init__(self, d_model, d_k=None, d_v=None):
        super().__init__()
        d_k = d_k or d_model
        d_v = d_v or d_model
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_v
        self.w_q = nn.Linear(d_model, d_k, bias=False)
        self.w_k = nn.Linear(d_model, d_k, bias=False)
        self.w_v = nn.Linear(d_model, d_v, bias=False)
        self.last_weights = None


class SelfAttentionPlain(_SelfAttentionBase):
    """Right: the three projections, then the attention function, weights kept."""

    def forward(self, x, mask=None):
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        out, weights = sdpa_masked_fill(q, k, v, mask)
        self.last_weights = weights
        return out


class SelfAttentionMatmul(_SelfAttentionBase):
    """Right: x @ Wᵀ by hand from the layers' weights, the einsum attention function."""

    def forward(self, x, mask=None):
        q = x @ self.w_q.weight.T
        k = x @ self.w_k.weight.T
        v = x @ self.w_v.weight.T
        output, self.last_weights = sdpa_einsum_where(q, k, v, mask=mask)
        return output


class SelfAttentionFirstCallOnly(_SelfAttentionBase):
    """Wrong: stores the weights only when last_weights is still None (the first call)."""

    def forward(self, x, mask=None):
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        out, weights = sdpa_masked_fill(q, k, v, mask)
        if self.last_weights is None:
            self.last_weights = weights
        return out


class SelfAttentionMaskDropped(_SelfAttentionBase):
    """Wrong: never passes the mask on to the attention function."""

    def forward(self, x, mask=None):
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        out, weights = sdpa_masked_fill(q, k, v)
        self.last_weights = weights
        return out


class SelfAttentionReturnsTuple(_SelfAttentionBase):
    """Wrong: returns (output, weights) as the attention function does, not the output alone."""

    def forward(self, x, mask=None):
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        out, weights = sdpa_masked_fill(q, k, v, mask)
        self.last_weights = weights
        return out, weights


class SelfAttentionUntransposedWeights(_SelfAttentionBase):
    """Wrong: x @ self.w_q.weight (no transpose), i.e. X W instead of X Wᵀ (square weights only)."""

    def forward(self, x, mask=None):
        q = x @ self.w_q.weight
        k = x @ self.w_k.weight
        v = x @ self.w_v.weight
        out, weights = sdpa_masked_fill(q, k, v, mask)
        self.last_weights = weights
        return out


class SelfAttentionValuesFromWk(_SelfAttentionBase):
    """Wrong: copy-paste slip, the values come from self.w_k instead of self.w_v."""

    def forward(self, x, mask=None):
        q, k, v = self.w_q(x), self.w_k(x), self.w_k(x)
        out, weights = sdpa_masked_fill(q, k, v, mask)
        self.last_weights = weights
        return out


class SelfAttentionScaleDModel(_SelfAttentionBase):
    """Wrong: attention written inline, scaled by sqrt(d_model) instead of sqrt(d_k)."""

    def forward(self, x, mask=None):
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_model)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        self.last_weights = weights
        return weights @ v


class SelfAttentionKeepsFirstSequence(_SelfAttentionBase):
    """Wrong: keeps only the first sequence's weights, (L, L), for plotting, not (B, L, L)."""

    def forward(self, x, mask=None):
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        out, weights = sdpa_masked_fill(q, k, v, mask)
        self.last_weights = weights[0]
        return out


WRONG = {
    "scaled_dot_product_attention": [
        sdpa_scale_by_query_length,
        sdpa_transpose_1_2,
        sdpa_big_negative,
        sdpa_nan_only_in_output,
        sdpa_softmax_dim_1,
        sdpa_scales_q_in_place,
        sdpa_scale_by_d_v,
    ],
    "SelfAttention": [
        SelfAttentionFirstCallOnly,
        SelfAttentionMaskDropped,
        SelfAttentionReturnsTuple,
        SelfAttentionUntransposedWeights,
        SelfAttentionValuesFromWk,
        SelfAttentionScaleDModel,
        SelfAttentionKeepsFirstSequence,
    ],
}

RIGHT = {
    "scaled_dot_product_attention": sdpa_masked_fill,
    "SelfAttention": SelfAttentionPlain,
}

RIGHT2 = {
    "scaled_dot_product_attention": sdpa_einsum_where,
    "SelfAttention": SelfAttentionMatmul,
}
