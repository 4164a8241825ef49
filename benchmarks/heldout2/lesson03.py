"""Lesson 03 (multi-head attention): held-out wrong and right implementations, from the exercise text."""

import math

import torch
from torch import nn


def _answer(base, value, name, doc):
    """A practice answer (a dict) that carries a name and a one-line docstring."""
    cls = type(name, (base,), {"__doc__": doc})
    obj = cls(value)
    obj.__name__ = name
    return obj


def _sdpa(q, k, v, mask=None):
    """My passing lesson-02 attention."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


# ---------------------------------------------------------------- practice_thinking

_w = torch.softmax(torch.tensor([112.0, 96.0]) / math.sqrt(64), dim=0)

thinking_right = _answer(
    dict,
    {"weights": (0.88, 0.12), "answer": "C"},
    "thinking_right",
    "Right: the weights by hand, two decimals.",
)
thinking_right2 = _answer(
    dict,
    {"weights": _w, "answer": "C"},
    "thinking_right2",
    "Right: the weights as a tensor computed with torch.softmax.",
)
thinking_wrong = [
    _answer(
        dict,
        {"weights": (0.9, 0.1), "answer": "C"},
        "thinking_one_decimal",
        "Wrong: the weights rounded to one decimal (0.9, 0.1).",
    ),
    _answer(
        dict,
        {"weights": (88, 12), "answer": "C"},
        "thinking_percent",
        "Wrong: the weights given as percentages (88, 12).",
    ),
    _answer(
        dict,
        {"weights": (0.88, 0.12), "answer": "B"},
        "thinking_wrong_letter",
        "Wrong: the right weights, but letter B ticked.",
    ),
    _answer(
        dict,
        {"weights": 0.88, "answer": "C"},
        "thinking_only_alpha1",
        "Wrong: only alpha_1 given as the weights, a single number.",
    ),
    _answer(
        dict,
        {"weights": (0.12, 0.88), "answer": "D"},
        "thinking_swapped",
        "Wrong: the two weights swapped, and letter D.",
    ),
]


# ---------------------------------------------------------------- split_heads


def split_view_transpose(x, n_heads):
    """Right: view to (B, L, h, d_k), then transpose(1, 2)."""
    B, L, d_model = x.shape
    return x.view(B, L, n_heads, d_model // n_heads).transpose(1, 2)


def split_chunk_stack(x, n_heads):
    """Right: chunk the features into h blocks and stack them on a new axis 1."""
    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)


def split_float_dk(x, n_heads):
    """Wrong: d_k = d_model / n_heads is a float, which reshape does not accept."""
    B, L, d_model = x.shape
    d_k = d_model / n_heads
    return x.reshape(B, L, n_heads, d_k).transpose(1, 2)


def split_args_swapped(x, n_heads):
    """Wrong: the last axis viewed as (d_k, h) by putting -1 before n_heads."""
    B, L, _ = x.shape
    return x.reshape(B, L, -1, n_heads).transpose(1, 2)


def split_with_split(x, n_heads):
    """Wrong: x.split(n_heads, -1) cuts blocks of size n_heads (split takes a size, chunk a count)."""
    return torch.stack(x.split(n_heads, dim=-1), dim=1)


def split_straight_view(x, n_heads):
    """Wrong: reshaped straight to (B, h, L, d_k), no transpose."""
    B, L, d_model = x.shape
    return x.reshape(B, n_heads, L, d_model // n_heads)


def split_no_transpose(x, n_heads):
    """Wrong: step 2 forgotten, returns (B, L, h, d_k)."""
    B, L, d_model = x.shape
    return x.reshape(B, L, n_heads, d_model // n_heads)


# ---------------------------------------------------------------- merge_heads


def merge_transpose_reshape(x):
    """Right: transpose(1, 2) then reshape."""
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, h * d_k)


def merge_unbind_cat(x):
    """Right: unbind the heads and concatenate them along the features."""
    return torch.cat(x.unbind(dim=1), dim=-1)


def merge_view_not_contiguous(x):
    """Wrong: .view after transpose, without .contiguous() (RuntimeError)."""
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).view(B, L, h * d_k)


def merge_cat_positions(x):
    """Wrong: the heads concatenated along dim=1 (the positions), giving (B, h*L, d_k)."""
    return torch.cat(x.unbind(dim=1), dim=1)


def merge_length_from_dim1(x):
    """Wrong: L read as x.shape[1], which is h in (B, h, L, d_k)."""
    B, L = x.shape[0], x.shape[1]
    return x.transpose(1, 2).reshape(B, L, -1)


def merge_permute_interleave(x):
    """Wrong: permute(0, 2, 3, 1) puts d_k before h, so the heads are interleaved."""
    B, h, L, d_k = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, L, h * d_k)


def merge_straight_reshape(x):
    """Wrong: reshaped straight to (B, L, h*d_k) without transposing back."""
    B, h, L, d_k = x.shape
    return x.reshape(B, L, h * d_k)


# ---------------------------------------------------------------- MultiHeadAttention


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


class MHAHelpers(_MHABase):
    """Right: split_heads, my attention, merge_heads, W^O."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_v(context), self.n_heads)
        out, weights = _sdpa(q, k, v, mask)
        self.last_weights = weights
        return self.w_o(merge_transpose_reshape(out))


class MHAEinsum(_MHABase):
    """Right: per-head einsum over (B, L, h, d_k) views, no transposes, mask via torch.where."""

    def forward(self, x, context=None, mask=None):
        if context is None:
            context = x
        B, Lq, _ = x.shape
        Lk = context.shape[1]
        h, d_k = self.n_heads, self.d_k
        q = self.w_q(x).reshape(B, Lq, h, d_k)
        k = self.w_k(context).reshape(B, Lk, h, d_k)
        v = self.w_v(context).reshape(B, Lk, h, d_k)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / d_k**0.5
        if mask is not None:
            scores = torch.where(mask, scores, scores.new_tensor(float("-inf")))
        weights = torch.softmax(scores, dim=-1)
        weights = torch.nan_to_num(weights, nan=0.0)
        out = torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(B, Lq, self.d_model)
        self.last_weights = weights
        return self.w_o(out)


class MHAMaskUnsqueezed(_MHABase):
    """Wrong: a head axis added to every mask with mask.unsqueeze(1), even a (B, 1, 1, L_k) one."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_v(context), self.n_heads)
        if mask is not None:
            mask = mask.unsqueeze(1)
        out, _ = _sdpa(q, k, v, mask)
        return self.w_o(merge_transpose_reshape(out))


class MHADoubleScaled(_MHABase):
    """Wrong: q divided by sqrt(d_k) before calling the attention, which divides again."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_view_transpose(self.w_q(x), self.n_heads) / math.sqrt(self.d_k)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_v(context), self.n_heads)
        out, _ = _sdpa(q, k, v, mask)
        return self.w_o(merge_transpose_reshape(out))


class MHASplitByDk(_MHABase):
    """Wrong: split_heads called with self.d_k where n_heads belongs (d_k heads of size h)."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_view_transpose(self.w_q(x), self.d_k)
        k = split_view_transpose(self.w_k(context), self.d_k)
        v = split_view_transpose(self.w_v(context), self.d_k)
        out, _ = _sdpa(q, k, v, mask)
        return self.w_o(merge_transpose_reshape(out))


class MHALengthOfX(_MHABase):
    """Wrong: keys and values reshaped with the length of x, so a context of another length breaks."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        B, L, _ = x.shape
        h, d_k = self.n_heads, self.d_k
        q = self.w_q(x).view(B, L, h, d_k).transpose(1, 2)
        k = self.w_k(context).reshape(B, L, h, d_k).transpose(1, 2)
        v = self.w_v(context).reshape(B, L, h, d_k).transpose(1, 2)
        out, _ = _sdpa(q, k, v, mask)
        return self.w_o(out.transpose(1, 2).reshape(B, L, self.d_model))


class MHAReturnsTuple(_MHABase):
    """Wrong: returns (output, weights) instead of the output alone."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_v(context), self.n_heads)
        out, weights = _sdpa(q, k, v, mask)
        return self.w_o(merge_transpose_reshape(out)), weights


class MHAKeyFromWq(_MHABase):
    """Wrong: copy-paste slip, the keys are projected with w_q (from the context)."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_q(context), self.n_heads)
        v = split_view_transpose(self.w_v(context), self.n_heads)
        out, _ = _sdpa(q, k, v, mask)
        return self.w_o(merge_transpose_reshape(out))


WRONG = {
    "practice_thinking": thinking_wrong,
    "split_heads": [
        split_float_dk,
        split_args_swapped,
        split_with_split,
        split_straight_view,
        split_no_transpose,
    ],
    "merge_heads": [
        merge_view_not_contiguous,
        merge_cat_positions,
        merge_length_from_dim1,
        merge_permute_interleave,
        merge_straight_reshape,
    ],
    "MultiHeadAttention": [
        MHAMaskUnsqueezed,
        MHADoubleScaled,
        MHASplitByDk,
        MHALengthOfX,
        MHAReturnsTuple,
        MHAKeyFromWq,
    ],
}
RIGHT = {
    "practice_thinking": thinking_right,
    "split_heads": split_view_transpose,
    "merge_heads": merge_transpose_reshape,
    "MultiHeadAttention": MHAHelpers,
}
RIGHT2 = {
    "practice_thinking": thinking_right2,
    "split_heads": split_chunk_stack,
    "merge_heads": merge_unbind_cat,
    "MultiHeadAttention": MHAEinsum,
}
