"""Lesson 03 (multi-head attention): held-out wrong and right implementations, from the exercise text only."""

import math

import torch
from torch import nn


def _answer(value, name, doc):
    """A practice answer (a dict) that carries a __name__ and a one-line __doc__."""
    cls = type(name, (dict,), {"__doc__": doc})
    obj = cls(value)
    obj.__name__ = name
    return obj


def _sdpa(q, k, v, mask=None):
    """Lesson 02's attention, written out (the course's is switched off during the checks)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


# ---------------------------------------------------------------- practice_thinking

_w = torch.softmax(torch.tensor([112.0, 96.0]) / 8, dim=0)

THINKING_RIGHT = _answer(
    {"weights": (0.88, 0.12), "answer": "C"},
    "thinking_right",
    "Right: softmax(112/8, 96/8) = (0.88, 0.12), answer C.",
)
THINKING_RIGHT2 = _answer(
    {"answer": "C", "weights": _w},
    "thinking_right2",
    "Right: the weights as a tensor computed with torch.softmax.",
)

WRONG_THINKING = [
    _answer(
        {"weights": (1.0, 0.0), "answer": "C"},
        "thinking_unscaled",
        "Wrong: softmax of the raw dot products (no division by sqrt(d_k)).",
    ),
    _answer(
        {"weights": (0.56, 0.44), "answer": "B"},
        "thinking_divided_by_dk",
        "Wrong: scores divided by d_k = 64 instead of sqrt(d_k) = 8.",
    ),
    _answer(
        {"weights": (0.54, 0.46), "answer": "B"},
        "thinking_ratio",
        "Wrong: the dot products divided by their sum, no softmax.",
    ),
    _answer(
        {"weights": (0.12, 0.88), "answer": "D"},
        "thinking_swapped",
        "Wrong: the two weights swapped.",
    ),
    _answer(
        {"weights": (0.88, 0.12), "answer": "B"},
        "thinking_wrong_letter",
        "Wrong: the right weights but the letter B.",
    ),
    _answer(
        {"weights": (0.9, 0.1), "answer": "C"},
        "thinking_one_decimal",
        "Wrong: the weights rounded to one decimal (0.9, 0.1), the text asks for two.",
    ),
    _answer(
        {"weights": (88, 12), "answer": "C"},
        "thinking_percent",
        "Wrong: the weights given as percentages.",
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


def split_straight_reshape(x, n_heads):
    """Wrong: reshape (B, L, d_model) straight to (B, h, L, d_k)."""
    B, L, d_model = x.shape
    return x.reshape(B, n_heads, L, d_model // n_heads)


def split_no_transpose(x, n_heads):
    """Wrong: stops after the reshape, (B, L, h, d_k)."""
    B, L, d_model = x.shape
    return x.reshape(B, L, n_heads, d_model // n_heads)


def split_heads_as_dk(x, n_heads):
    """Wrong: n_heads used as the head size: view(B, L, -1, n_heads)."""
    B, L, _ = x.shape
    return x.view(B, L, -1, n_heads).transpose(1, 2)


def split_torch_split(x, n_heads):
    """Wrong: torch.split takes a chunk *size*, so this makes d_model/h chunks of size h."""
    return torch.stack(torch.split(x, n_heads, dim=-1), dim=1)


def split_float_dk(x, n_heads):
    """Wrong: d_k = d_model / n_heads is a float, which view rejects."""
    B, L, d_model = x.shape
    return x.view(B, L, n_heads, d_model / n_heads).transpose(1, 2)


def split_interleaved_permute(x, n_heads):
    """Wrong: view(B, L, d_k, h) and permute, so head i takes every h-th feature."""
    B, L, d_model = x.shape
    return x.view(B, L, d_model // n_heads, n_heads).permute(0, 3, 1, 2)


# ---------------------------------------------------------------- merge_heads


def merge_transpose_reshape(x):
    """Right: transpose(1, 2) then reshape(B, L, h * d_k)."""
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, h * d_k)


def merge_cat_heads(x):
    """Right: concatenate the heads x[:, i] along the features."""
    return torch.cat([x[:, i] for i in range(x.shape[1])], dim=-1)


def merge_straight_reshape(x):
    """Wrong: reshape (B, h, L, d_k) straight to (B, L, h * d_k)."""
    B, h, L, d_k = x.shape
    return x.reshape(B, L, h * d_k)


def merge_view_after_transpose(x):
    """Wrong: .view after transpose, which fails on the non-contiguous tensor."""
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).view(B, L, h * d_k)


def merge_cat_positions(x):
    """Wrong: torch.cat(x.unbind(1), dim=1) concatenates along the positions."""
    return torch.cat(x.unbind(1), dim=1)


def merge_sum_heads(x):
    """Wrong: the heads are summed instead of concatenated."""
    return x.sum(dim=1)


def merge_interleaved(x):
    """Wrong: permute to (B, L, d_k, h) before the reshape, interleaving the heads."""
    B, h, L, d_k = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, L, h * d_k)


def merge_no_reshape(x):
    """Wrong: only transposed back, the result is (B, L, h, d_k)."""
    return x.transpose(1, 2).contiguous()


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


class MHAPlain(_MHABase):
    """Right: split, lesson-02 attention, merge, W^O."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_v(context), self.n_heads)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(merge_transpose_reshape(out))


class MHAEinsum(_MHABase):
    """Right: einsum over an explicit head axis, torch.where for the mask, no helper functions."""

    def forward(self, x, context=None, mask=None):
        if context is None:
            context = x
        B, Lq, _ = x.shape
        Lk = context.shape[1]
        h, dk = self.n_heads, self.d_k
        q = self.w_q(x).reshape(B, Lq, h, dk)
        k = self.w_k(context).reshape(B, Lk, h, dk)
        v = self.w_v(context).reshape(B, Lk, h, dk)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / dk**0.5
        if mask is not None:
            scores = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=scores.dtype))
        weights = torch.softmax(scores, dim=-1)
        weights = torch.nan_to_num(weights, nan=0.0)
        out = torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(B, Lq, h * dk)
        return self.w_o(out)


class MHANoOutputProjection(_MHABase):
    """Wrong: returns the merged heads without W^O."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_v(context), self.n_heads)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return merge_transpose_reshape(out)


class MHAContextOnlyForKeys(_MHABase):
    """Wrong: the keys come from context but the values from x."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_v(x), self.n_heads)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(merge_transpose_reshape(out))


class MHAScaleByDModel(_MHABase):
    """Wrong: its own attention divides by sqrt(d_model), not sqrt(d_k) of one head."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_v(context), self.n_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_model)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        return self.w_o(merge_transpose_reshape(weights @ v))


class MHAMaskUnsqueezed(_MHABase):
    """Wrong: adds a head axis to every mask with mask.unsqueeze(1), breaking (L_q, L_k) and 4-D masks."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_v(context), self.n_heads)
        if mask is not None:
            mask = mask.unsqueeze(1)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(merge_transpose_reshape(out))


class MHAQueryLengthForKeys(_MHABase):
    """Wrong: keys and values are reshaped with the query length L, so another context length breaks."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        B, L, _ = x.shape
        h, dk = self.n_heads, self.d_k
        q = self.w_q(x).view(B, L, h, dk).transpose(1, 2)
        k = self.w_k(context).reshape(B, L, h, -1).transpose(1, 2)
        v = self.w_v(context).reshape(B, L, h, -1).transpose(1, 2)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(out.transpose(1, 2).reshape(B, L, self.d_model))


class MHAInterleavedHeads(_MHABase):
    """Wrong: splits every projection as view(B, L, d_k, h) (head i = every h-th feature), merges back the same way."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_interleaved_permute(self.w_q(x), self.n_heads)
        k = split_interleaved_permute(self.w_k(context), self.n_heads)
        v = split_interleaved_permute(self.w_v(context), self.n_heads)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(merge_interleaved(out))


class MHAValueThroughKey(_MHABase):
    """Wrong: a copy-paste slip, the values go through w_k."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_k(context), self.n_heads)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(merge_transpose_reshape(out))


class MHAReturnsWeights(_MHABase):
    """Wrong: returns (output, head-averaged weights), the text says the output only."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_v(context), self.n_heads)
        out, weights = _sdpa(q, k, v, mask)
        self.last_weights = weights
        return self.w_o(merge_transpose_reshape(out)), weights.mean(1)


class MHAMergeNoTranspose(_MHABase):
    """Wrong: merges the heads with a plain reshape (no transpose back)."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_v(context), self.n_heads)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(merge_straight_reshape(out))


WRONG = {
    "practice_thinking": WRONG_THINKING,
    "split_heads": [
        split_straight_reshape,
        split_no_transpose,
        split_heads_as_dk,
        split_torch_split,
        split_float_dk,
        split_interleaved_permute,
    ],
    "merge_heads": [
        merge_straight_reshape,
        merge_view_after_transpose,
        merge_cat_positions,
        merge_sum_heads,
        merge_interleaved,
        merge_no_reshape,
    ],
    "MultiHeadAttention": [
        MHANoOutputProjection,
        MHAContextOnlyForKeys,
        MHAScaleByDModel,
        MHAMaskUnsqueezed,
        MHAQueryLengthForKeys,
        MHAInterleavedHeads,
        MHAValueThroughKey,
        MHAReturnsWeights,
        MHAMergeNoTranspose,
    ],
}

RIGHT = {
    "practice_thinking": THINKING_RIGHT,
    "split_heads": split_view_transpose,
    "merge_heads": merge_transpose_reshape,
    "MultiHeadAttention": MHAPlain,
}

RIGHT2 = {
    "practice_thinking": THINKING_RIGHT2,
    "split_heads": split_chunk_stack,
    "merge_heads": merge_cat_heads,
    "MultiHeadAttention": MHAEinsum,
}
