"""Lesson 03: split_heads, merge_heads, MultiHeadAttention."""

import math

import torch
from torch import nn


def _sdpa(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return w @ v, w


def split_heads_right(x, n_heads):
    """Correct."""
    B, L, d = x.shape
    return x.reshape(B, L, n_heads, d // n_heads).permute(0, 2, 1, 3)


def split_heads_transpose_last(x, n_heads):
    """Swaps h and d_k (transpose(2, 3)) instead of L and h."""
    B, L, d = x.shape
    return x.reshape(B, L, n_heads, d // n_heads).transpose(2, 3)


def split_heads_dk_as_heads(x, n_heads):
    """Cuts the features as (d_k, h): the n_heads argument used as the head width."""
    B, L, d = x.shape
    return x.reshape(B, L, d // n_heads, n_heads).permute(0, 3, 1, 2)


def split_heads_chunk_batch(x, n_heads):
    """Chunks along the positions (dim=1) instead of the features, then stacks."""
    B, L, d = x.shape
    return torch.stack(x.reshape(B, n_heads, -1).chunk(n_heads, dim=1), dim=1).reshape(
        B, n_heads, L, d // n_heads
    )


def split_heads_no_transpose(x, n_heads):
    """Returns (B, L, h, d_k): forgets the transpose."""
    B, L, d = x.shape
    return x.view(B, L, n_heads, d // n_heads)


def merge_heads_right(x):
    """Correct."""
    B, h, L, dk = x.shape
    return x.permute(0, 2, 1, 3).reshape(B, L, h * dk)


def merge_heads_transpose_2_3(x):
    """Transposes the last two axes before reshaping."""
    B, h, L, dk = x.shape
    return x.transpose(2, 3).reshape(B, L, h * dk)


def merge_heads_heads_reversed(x):
    """Concatenates the heads in reverse order (torch.cat over reversed(list))."""
    return torch.cat([x[:, i] for i in reversed(range(x.shape[1]))], dim=-1)


def merge_heads_sum(x):
    """Sums the heads instead of concatenating them."""
    return x.sum(dim=1)


def merge_heads_mean_then_tile(x):
    """Averages the heads and tiles the mean h times."""
    return x.mean(dim=1).repeat(1, 1, x.shape[1])


def merge_heads_view_fails(x):
    """Calls view after transpose (raises on non-contiguous input)."""
    B, h, L, dk = x.shape
    return x.transpose(1, 2).view(B, L, h * dk)


class _MHABase(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        assert d_model % n_heads == 0
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.last_weights = None

    def _heads(self, t):
        return split_heads_right(t, self.n_heads)


class MHARight(_MHABase):
    """Correct."""

    def forward(self, x, context=None, mask=None):
        ctx = x if context is None else context
        out, w = _sdpa(
            self._heads(self.w_q(x)), self._heads(self.w_k(ctx)), self._heads(self.w_v(ctx)), mask
        )
        self.last_weights = w
        return self.w_o(merge_heads_right(out))


class MHAQueriesFromContext(_MHABase):
    """Takes the queries from context and the keys/values from x (cross-attention roles swapped)."""

    def forward(self, x, context=None, mask=None):
        ctx = x if context is None else context
        out, _ = _sdpa(
            self._heads(self.w_q(ctx)), self._heads(self.w_k(x)), self._heads(self.w_v(x)), mask
        )
        return self.w_o(merge_heads_right(out))


class MHAMaskOnePerBatch(_MHABase):
    """Adds a head axis to the mask with unsqueeze(1) unconditionally (breaks a (L_q, L_k) mask)."""

    def forward(self, x, context=None, mask=None):
        ctx = x if context is None else context
        if mask is not None:
            mask = mask.unsqueeze(1)
        out, _ = _sdpa(
            self._heads(self.w_q(x)), self._heads(self.w_k(ctx)), self._heads(self.w_v(ctx)), mask
        )
        return self.w_o(merge_heads_right(out))


class MHAResidualInside(_MHABase):
    """Adds a residual (the merged heads) to the W^O output."""

    def forward(self, x, context=None, mask=None):
        ctx = x if context is None else context
        out, _ = _sdpa(
            self._heads(self.w_q(x)), self._heads(self.w_k(ctx)), self._heads(self.w_v(ctx)), mask
        )
        merged = merge_heads_right(out)
        return self.w_o(merged) + merged


class MHAValueFromX(_MHABase):
    """Values from the mean of x where context has another length (a hack for a shape error)."""

    def forward(self, x, context=None, mask=None):
        ctx = x if context is None else context
        v = self.w_v(x)
        if v.shape[1] != ctx.shape[1]:
            v = self.w_v(ctx)[:, :, :] * 0 + self.w_v(x).mean(1, keepdim=True)
        out, _ = _sdpa(self._heads(self.w_q(x)), self._heads(self.w_k(ctx)), self._heads(v), mask)
        return self.w_o(merge_heads_right(out))


class MHASharedProjection(_MHABase):
    """Uses w_q for queries, keys and values."""

    def forward(self, x, context=None, mask=None):
        ctx = x if context is None else context
        out, _ = _sdpa(
            self._heads(self.w_q(x)), self._heads(self.w_q(ctx)), self._heads(self.w_q(ctx)), mask
        )
        return self.w_o(merge_heads_right(out))


WRONG = {
    "split_heads": [
        split_heads_transpose_last,
        split_heads_dk_as_heads,
        split_heads_chunk_batch,
        split_heads_no_transpose,
    ],
    "merge_heads": [
        merge_heads_transpose_2_3,
        merge_heads_heads_reversed,
        merge_heads_sum,
        merge_heads_mean_then_tile,
        merge_heads_view_fails,
    ],
    "MultiHeadAttention": [
        MHAQueriesFromContext,
        MHAMaskOnePerBatch,
        MHAResidualInside,
        MHAValueFromX,
        MHASharedProjection,
    ],
}
RIGHT = {
    "split_heads": split_heads_right,
    "merge_heads": merge_heads_right,
    "MultiHeadAttention": MHARight,
}
