"""Lesson 03 (multi-head attention): held-out wrong and right implementations, from the exercise
text only."""

import math

import torch
from torch import nn

from .lesson01 import _answer


def _sdpa(q, k, v, mask=None):
    """My passing lesson-02 attention."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


# ---------------------------------------------------------------- practice_thinking

_alpha = torch.softmax(torch.tensor([112.0, 96.0]) / math.sqrt(64), dim=0)
_e = math.exp(14 - 12)

thinking_right = _answer(
    dict,
    {"weights": tuple(_alpha.tolist()), "answer": "C"},
    "thinking_right",
    "Right: torch.softmax of the scores divided by sqrt(64).",
)
thinking_right2 = _answer(
    dict,
    {"weights": (round(_e / (_e + 1), 2), round(1 / (_e + 1), 2)), "answer": "C"},
    "thinking_right2",
    "Right: by hand, e^2 / (e^2 + 1), rounded to two decimals.",
)
thinking_percent = _answer(
    dict,
    {"weights": (88.08, 11.92), "answer": "C"},
    "thinking_percent",
    "The weights given in percent (88.08, 11.92).",
)
thinking_one_decimal = _answer(
    dict,
    {"weights": (0.9, 0.1), "answer": "C"},
    "thinking_one_decimal",
    "The weights rounded to one decimal (0.9, 0.1).",
)
thinking_swapped_letter = _answer(
    dict,
    {"weights": tuple(_alpha.tolist()), "answer": "D"},
    "thinking_swapped_letter",
    "Right weights, but picks D (reads alpha_1 as the weight of Machines).",
)
thinking_scale_by_dk = _answer(
    dict,
    {
        "weights": tuple(torch.softmax(torch.tensor([112.0, 96.0]) / 64, dim=0).tolist()),
        "answer": "B",
    },
    "thinking_scale_by_dk",
    "Scores divided by d_k = 64 instead of sqrt(d_k), answer B.",
)
thinking_only_alpha1 = _answer(
    dict,
    {"weights": 0.88, "answer": "C"},
    "thinking_only_alpha1",
    "Gives only alpha_1 as a number instead of the pair.",
)
thinking_log_weights = _answer(
    dict,
    {
        "weights": tuple(torch.log_softmax(torch.tensor([112.0, 96.0]) / 8, dim=0).tolist()),
        "answer": "C",
    },
    "thinking_log_weights",
    "Gives log_softmax values (the log-weights) instead of the weights.",
)

# ---------------------------------------------------------------- split_heads


def split_view_transpose(x, n_heads):
    """Right: view to (B, L, h, d_k), then transpose(1, 2)."""
    B, L, d_model = x.shape
    return x.view(B, L, n_heads, d_model // n_heads).transpose(1, 2)


def split_chunk_stack(x, n_heads):
    """Right: chunk the features into h blocks and stack them on a new axis 1."""
    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)


def split_float_division(x, n_heads):
    """d_k computed with / (a float), which view rejects."""
    B, L, d_model = x.shape
    d_k = d_model / n_heads
    return x.view(B, L, n_heads, d_k).transpose(1, 2)


def split_transpose_last_two(x, n_heads):
    """Swaps with transpose(-2, -1), as in lesson 02, giving (B, L, d_k, h)."""
    B, L, d_model = x.shape
    return x.view(B, L, n_heads, d_model // n_heads).transpose(-2, -1)


def split_stack_dim0(x, n_heads):
    """Stacks the chunks on dim 0: (h, B, L, d_k)."""
    return torch.stack(x.chunk(n_heads, dim=-1), dim=0)


def split_permute_wrong(x, n_heads):
    """Permutes with (0, 2, 3, 1): (B, h, d_k, L)."""
    B, L, d_model = x.shape
    return x.reshape(B, L, n_heads, d_model // n_heads).permute(0, 2, 3, 1)


def split_dk_first(x, n_heads):
    """Views the features as (d_k, h) instead of (h, d_k), then moves h forward."""
    B, L, d_model = x.shape
    return x.view(B, L, d_model // n_heads, n_heads).permute(0, 3, 1, 2)


def split_straight_reshape(x, n_heads):
    """Reshapes (B, L, d_model) straight to (B, h, L, d_k)."""
    B, L, d_model = x.shape
    return x.reshape(B, n_heads, L, d_model // n_heads)


# ---------------------------------------------------------------- merge_heads


def merge_transpose_reshape(x):
    """Right: transpose(1, 2), then reshape to (B, L, h * d_k)."""
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, h * d_k)


def merge_unbind_cat(x):
    """Right: concatenate the heads along the features with torch.cat(x.unbind(1), dim=-1)."""
    return torch.cat(x.unbind(dim=1), dim=-1)


def merge_view_noncontiguous(x):
    """Uses view after transpose, which fails on a non-contiguous tensor."""
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).view(B, L, h * d_k)


def merge_cat_positions(x):
    """Concatenates the heads along dim 1 (the positions), not along the features."""
    return torch.cat(x.unbind(1), dim=1)


def merge_flatten_from_1(x):
    """flatten(1) after the transpose: flattens positions and features together."""
    return x.transpose(1, 2).flatten(1)


def merge_transpose_last_two(x):
    """Transposes the last two axes instead of the head and position axes."""
    B, h, L, d_k = x.shape
    return x.transpose(2, 3).reshape(B, L, h * d_k)


def merge_no_transpose(x):
    """Reshapes (B, h, L, d_k) straight to (B, L, h * d_k)."""
    B, h, L, d_k = x.shape
    return x.reshape(B, L, h * d_k)


# ---------------------------------------------------------------- MultiHeadAttention


def _split(x, n_heads):
    """My passing split_heads."""
    return split_view_transpose(x, n_heads)


def _merge(x):
    """My passing merge_heads."""
    return merge_transpose_reshape(x)


class _MHABase(nn.Module):
    """The given __init__ of the exercise."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        assert d_model % n_heads == 0
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.last_weights = None


class MHASplitAttendMerge(_MHABase):
    """Right: my split_heads, my attention function, my merge_heads, W^O."""

    def forward(self, x, context=None, mask=None):
        if context is None:
            context = x
        q = _split(self.w_q(x), self.n_heads)
        k = _split(self.w_k(context), self.n_heads)
        v = _split(self.w_v(context), self.n_heads)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(_merge(out))


class MHAInlineReshape(_MHABase):
    """Right: all reshapes inline with -1 and permute, the attention function on 4-D tensors."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        B = x.size(0)

        def heads(t):
            return t.reshape(B, -1, self.n_heads, self.d_k).permute(0, 2, 1, 3)

        out, weights = _sdpa(
            heads(self.w_q(x)), heads(self.w_k(context)), heads(self.w_v(context)), mask=mask
        )
        self.last_weights = weights
        out = out.permute(0, 2, 1, 3).reshape(B, -1, self.d_model)
        return self.w_o(out)


class MHAUnsqueezesMask(_MHABase):
    """Always adds a head axis to the mask with mask.unsqueeze(1), as for a (B, L, L) mask."""

    def forward(self, x, context=None, mask=None):
        if context is None:
            context = x
        if mask is not None:
            mask = mask.unsqueeze(1)
        q = _split(self.w_q(x), self.n_heads)
        k = _split(self.w_k(context), self.n_heads)
        v = _split(self.w_v(context), self.n_heads)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(_merge(out))


class MHALengthFromX(_MHABase):
    """Splits keys and values with the length L of x, which breaks when context is longer."""

    def forward(self, x, context=None, mask=None):
        if context is None:
            context = x
        B, L, _ = x.shape
        q = self.w_q(x).view(B, L, self.n_heads, self.d_k).transpose(1, 2)
        k = self.w_k(context).view(B, L, self.n_heads, self.d_k).transpose(1, 2)
        v = self.w_v(context).view(B, L, self.n_heads, self.d_k).transpose(1, 2)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(_merge(out))


class MHAReturnsTuple(_MHABase):
    """Returns (output, weights) instead of the output alone."""

    def forward(self, x, context=None, mask=None):
        if context is None:
            context = x
        q = _split(self.w_q(x), self.n_heads)
        k = _split(self.w_k(context), self.n_heads)
        v = _split(self.w_v(context), self.n_heads)
        out, weights = _sdpa(q, k, v, mask)
        return self.w_o(_merge(out)), weights


class MHAQueriesFromContext(_MHABase):
    """Copy-paste slip: the queries are projected from context as well."""

    def forward(self, x, context=None, mask=None):
        if context is None:
            context = x
        q = _split(self.w_q(context), self.n_heads)
        k = _split(self.w_k(context), self.n_heads)
        v = _split(self.w_v(context), self.n_heads)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(_merge(out))


class MHAContextOr(_MHABase):
    """Defaults the context with `context = context or x`, which fails on a tensor."""

    def forward(self, x, context=None, mask=None):
        context = context or x
        q = _split(self.w_q(x), self.n_heads)
        k = _split(self.w_k(context), self.n_heads)
        v = _split(self.w_v(context), self.n_heads)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(_merge(out))


class MHAScalesTwice(_MHABase):
    """Divides q by sqrt(d_k) before calling the attention function, which divides again."""

    def forward(self, x, context=None, mask=None):
        if context is None:
            context = x
        q = _split(self.w_q(x), self.n_heads) / math.sqrt(self.d_k)
        k = _split(self.w_k(context), self.n_heads)
        v = _split(self.w_v(context), self.n_heads)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(_merge(out))


WRONG = {
    "practice_thinking": [
        thinking_percent,
        thinking_one_decimal,
        thinking_swapped_letter,
        thinking_scale_by_dk,
        thinking_only_alpha1,
        thinking_log_weights,
    ],
    "split_heads": [
        split_float_division,
        split_transpose_last_two,
        split_stack_dim0,
        split_permute_wrong,
        split_dk_first,
        split_straight_reshape,
    ],
    "merge_heads": [
        merge_view_noncontiguous,
        merge_cat_positions,
        merge_flatten_from_1,
        merge_transpose_last_two,
        merge_no_transpose,
    ],
    "MultiHeadAttention": [
        MHAUnsqueezesMask,
        MHALengthFromX,
        MHAReturnsTuple,
        MHAQueriesFromContext,
        MHAContextOr,
        MHAScalesTwice,
    ],
}
RIGHT = {
    "practice_thinking": thinking_right,
    "split_heads": split_view_transpose,
    "merge_heads": merge_transpose_reshape,
    "MultiHeadAttention": MHASplitAttendMerge,
}
RIGHT2 = {
    "practice_thinking": thinking_right2,
    "split_heads": split_chunk_stack,
    "merge_heads": merge_unbind_cat,
    "MultiHeadAttention": MHAInlineReshape,
}
