"""Lesson 02 (QKV attention): held-out wrong and right implementations, written from the exercise text."""

import math

import torch
from torch import nn

# ---------------------------------------------------------------- scaled_dot_product_attention


def sdpa_masked_fill(q, k, v, mask=None):
    """Right: matmul, masked_fill with -inf, softmax over the last axis, nan_to_num."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_einsum_where(q, k, v, mask=None):
    """Right: einsum for both products, torch.where for the mask, zeroed rows found explicitly."""
    d_k = k.size(-1)
    scores = torch.einsum("...qd,...kd->...qk", q, k) * d_k**-0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.full_like(scores, -math.inf))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.where(torch.isnan(weights), torch.zeros_like(weights), weights)
    out = torch.einsum("...qk,...kd->...qd", weights, v)
    return out, weights


def sdpa_dk_from_dim1(q, k, v, mask=None):
    """Wrong: d_k read as q.shape[1] (the query length for (B, L, d), the heads for 4-D)."""
    d_k = q.shape[1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_transpose_1_2(q, k, v, mask=None):
    """Wrong: k.transpose(1, 2), right for (B, L, d) but not for (B, h, L, d) or 2-D inputs."""
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_big_negative(q, k, v, mask=None):
    """Wrong: masked scores set to -1e9 (as in many tutorials), so a fully masked row is uniform, not 0."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_naive_exp(q, k, v, mask=None):
    """Wrong: softmax written as exp(s) / sum(exp(s)) without subtracting the max (overflows)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores)
    weights = (e / e.sum(dim=-1, keepdim=True)).nan_to_num(0.0)
    return weights @ v, weights


def sdpa_no_nan_to_num(q, k, v, mask=None):
    """Wrong: the nan_to_num step is forgotten, so a fully masked query row is NaN."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_returns_swapped(q, k, v, mask=None):
    """Wrong: returns (weights, output) instead of (output, weights)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights, weights @ v


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


class SelfAttentionCalls(_SelfAttentionBase):
    """Right: the three projections, then my scaled_dot_product_attention."""

    def forward(self, x, mask=None):
        out, weights = sdpa_masked_fill(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        self.last_weights = weights
        return out


class SelfAttentionFunctional(_SelfAttentionBase):
    """Right: projections with F.linear on the weights, the einsum attention, weights detached."""

    def forward(self, x, mask=None):
        q = nn.functional.linear(x, self.w_q.weight)
        k = nn.functional.linear(x, self.w_k.weight)
        v = nn.functional.linear(x, self.w_v.weight)
        out, weights = sdpa_einsum_where(q, k, v, mask=mask)
        self.last_weights = weights.detach()
        return out


class SelfAttentionKeepsFirstWeights(_SelfAttentionBase):
    """Wrong: last_weights is set only on the first call (if it is None), never replaced."""

    def forward(self, x, mask=None):
        out, weights = sdpa_masked_fill(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        if self.last_weights is None:
            self.last_weights = weights
        return out


class SelfAttentionKeyFromWq(_SelfAttentionBase):
    """Wrong: copy-paste slip, the keys are projected with w_q."""

    def forward(self, x, mask=None):
        out, weights = sdpa_masked_fill(self.w_q(x), self.w_q(x), self.w_v(x), mask)
        self.last_weights = weights
        return out


class SelfAttentionDropsMask(_SelfAttentionBase):
    """Wrong: the mask is accepted but not passed on to the attention."""

    def forward(self, x, mask=None):
        out, weights = sdpa_masked_fill(self.w_q(x), self.w_k(x), self.w_v(x))
        self.last_weights = weights
        return out


class SelfAttentionUntransposedWeight(_SelfAttentionBase):
    """Wrong: projections written as x @ W.weight, without the transpose nn.Linear applies."""

    def forward(self, x, mask=None):
        q = x @ self.w_q.weight
        k = x @ self.w_k.weight
        v = x @ self.w_v.weight
        out, weights = sdpa_masked_fill(q, k, v, mask)
        self.last_weights = weights
        return out


class SelfAttentionScaleDModel(_SelfAttentionBase):
    """Wrong: attention written inline and scaled by sqrt(d_model) instead of sqrt(d_k)."""

    def forward(self, x, mask=None):
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_model)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        self.last_weights = weights
        return weights @ v


class SelfAttentionReturnsTuple(_SelfAttentionBase):
    """Wrong: returns (output, weights) like the function, instead of the output alone."""

    def forward(self, x, mask=None):
        out, weights = sdpa_masked_fill(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        self.last_weights = weights
        return out, weights


WRONG = {
    "scaled_dot_product_attention": [
        sdpa_dk_from_dim1,
        sdpa_transpose_1_2,
        sdpa_big_negative,
        sdpa_naive_exp,
        sdpa_no_nan_to_num,
        sdpa_returns_swapped,
    ],
    "SelfAttention": [
        SelfAttentionKeepsFirstWeights,
        SelfAttentionKeyFromWq,
        SelfAttentionDropsMask,
        SelfAttentionUntransposedWeight,
        SelfAttentionScaleDModel,
        SelfAttentionReturnsTuple,
    ],
}
RIGHT = {
    "scaled_dot_product_attention": sdpa_masked_fill,
    "SelfAttention": SelfAttentionCalls,
}
RIGHT2 = {
    "scaled_dot_product_attention": sdpa_einsum_where,
    "SelfAttention": SelfAttentionFunctional,
}
