"""Lesson 02: scaled dot-product attention and a self-attention layer."""

import math

import torch
from torch import nn


def sdpa_right(q, k, v, mask=None):
    """Correct."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return w @ v, w


def sdpa_scale_dv(q, k, v, mask=None):
    """Scales by sqrt(d_v) instead of sqrt(d_k)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return w @ v, w


def sdpa_scale_d_not_sqrt(q, k, v, mask=None):
    """Divides by d_k, not its square root."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return w @ v, w


def sdpa_large_negative(q, k, v, mask=None):
    """Masks with -1e9 instead of -inf (fully masked rows become uniform, not zero)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    w = torch.softmax(scores, dim=-1)
    return w @ v, w


def sdpa_no_nan_guard(q, k, v, mask=None):
    """Forgets nan_to_num: a fully masked query gives NaN."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    return w @ v, w


def sdpa_transpose_1_2(q, k, v, mask=None):
    """Transposes k with transpose(1, 2): right for (B, L, d), wrong once there is a head axis."""
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return w @ v, w


def sdpa_renormalise_after(q, k, v, mask=None):
    """Masks after softmax by zeroing, then renormalises the rows (NaN on fully masked rows)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = torch.softmax(scores, dim=-1)
    if mask is not None:
        w = w * mask
        w = w / w.sum(-1, keepdim=True)
    return w @ v, w


def sdpa_returns_scores(q, k, v, mask=None):
    """Returns the pre-softmax scores as the weights."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return w @ v, scores


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


class SelfAttentionRight(_SelfAttentionBase):
    """Correct."""

    def forward(self, x, mask=None):
        out, self.last_weights = sdpa_right(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        return out


class SelfAttentionKeyForValue(_SelfAttentionBase):
    """Uses the key projection for the values too (w_k twice)."""

    def forward(self, x, mask=None):
        k = self.w_k(x)
        out, self.last_weights = sdpa_right(
            self.w_q(x), k, k if self.d_k == self.d_v else self.w_v(x), mask
        )
        return out


class SelfAttentionRawValues(_SelfAttentionBase):
    """Attends over the raw x as values (forgets w_v)."""

    def forward(self, x, mask=None):
        v = x if self.d_v == self.d_model else self.w_v(x)
        out, self.last_weights = sdpa_right(self.w_q(x), self.w_k(x), v, mask)
        return out


class SelfAttentionWeightsOnce(_SelfAttentionBase):
    """Keeps the weights of the first call only."""

    def forward(self, x, mask=None):
        out, w = sdpa_right(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        if self.last_weights is None:
            self.last_weights = w
        return out


class SelfAttentionQKSwapped(_SelfAttentionBase):
    """Swaps the roles of queries and keys (weights transposed)."""

    def forward(self, x, mask=None):
        out, self.last_weights = sdpa_right(self.w_k(x), self.w_q(x), self.w_v(x), mask)
        return out


class SelfAttentionDetachedWeights(_SelfAttentionBase):
    """Returns weights @ v computed from detached weights (no gradient to w_q / w_k)."""

    def forward(self, x, mask=None):
        _, w = sdpa_right(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        self.last_weights = w.detach()
        return self.last_weights @ self.w_v(x)


WRONG = {
    "scaled_dot_product_attention": [
        sdpa_scale_dv,
        sdpa_scale_d_not_sqrt,
        sdpa_large_negative,
        sdpa_no_nan_guard,
        sdpa_transpose_1_2,
        sdpa_renormalise_after,
        sdpa_returns_scores,
    ],
    "SelfAttention": [
        SelfAttentionKeyForValue,
        SelfAttentionRawValues,
        SelfAttentionWeightsOnce,
        SelfAttentionQKSwapped,
        SelfAttentionDetachedWeights,
    ],
}
RIGHT = {"scaled_dot_product_attention": sdpa_right, "SelfAttention": SelfAttentionRight}
