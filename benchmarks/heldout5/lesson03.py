"""Lesson 03 (multi-head attention): held-out wrong and right implementations, from the exercise text only."""

import math

import torch
from torch import nn


def _answer(value, name, doc):
    """A practice answer (a dict) that carries a name and a one-line docstring."""
    cls = type(f"Answer_{name}", (dict,), {"__doc__": doc})
    answer = cls(value)
    answer.__name__ = name
    return answer


def _attention(q, k, v, mask=None):
    """Lesson 02's attention function (a right one), used by the layers below."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


# ---------------------------------------------------------------- practice_thinking

_a1 = math.exp(112 / 8) / (math.exp(112 / 8) + math.exp(96 / 8))

THINKING_RIGHT = _answer(
    {"weights": (0.88, 0.12), "answer": "C"},
    "thinking_right",
    "Right: softmax([112, 96] / 8) = (0.88, 0.12), answer C.",
)
THINKING_RIGHT2 = _answer(
    {"weights": torch.softmax(torch.tensor([112.0, 96.0]) / math.sqrt(64), dim=0), "answer": "C"},
    "thinking_right_tensor",
    "Right: the weights as a tensor computed with torch.softmax, answer C.",
)
THINKING_WRONG = [
    _answer(
        {"weights": (1.0, 0.0), "answer": "C"},
        "thinking_unscaled",
        "Wrong: softmax of the unscaled dot products, (1.00, 0.00).",
    ),
    _answer(
        {"weights": (0.56, 0.44), "answer": "B"},
        "thinking_divided_by_dk",
        "Wrong: scores divided by d_k = 64 instead of sqrt(d_k), (0.56, 0.44), B.",
    ),
    _answer(
        {"weights": (0.54, 0.46), "answer": "B"},
        "thinking_normalised_by_sum",
        "Wrong: 112 / (112 + 96) and 96 / (112 + 96) instead of a softmax, B.",
    ),
    _answer(
        {"weights": (0.12, 0.88), "answer": "D"},
        "thinking_swapped",
        "Wrong: the two weights swapped, D.",
    ),
    _answer(
        {"weights": (round(_a1, 2), round(1 - _a1, 2)), "answer": "B"},
        "thinking_right_weights_wrong_letter",
        "Wrong: the right weights but the letter B.",
    ),
    _answer(
        {"weights": (0.9, 0.1), "answer": "C"},
        "thinking_one_decimal",
        "Wrong: weights rounded to one decimal, where the text asks for two.",
    ),
    _answer(
        {"weights": (88, 12), "answer": "C"},
        "thinking_percent",
        "Wrong: the weights given in percent, (88, 12).",
    ),
]


# ---------------------------------------------------------------- split_heads


def split_view_transpose(x, n_heads):
    """Right: view (B, L, h, d_k), then transpose(1, 2)."""
    B, L, d_model = x.shape
    return x.view(B, L, n_heads, d_model // n_heads).transpose(1, 2)


def split_chunk_stack(x, n_heads):
    """Right: chunk the features into h blocks and stack them on a new axis 1."""
    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)


def split_straight_view(x, n_heads):
    """Wrong: views (B, L, d_model) straight to (B, h, L, d_k)."""
    B, L, d_model = x.shape
    return x.view(B, n_heads, L, d_model // n_heads)


def split_strided_heads(x, n_heads):
    """Wrong: views the last axis as (d_k, h), so head i takes every h-th feature."""
    B, L, d_model = x.shape
    return x.view(B, L, d_model // n_heads, n_heads).permute(0, 3, 1, 2)


def split_no_transpose(x, n_heads):
    """Wrong: stops at (B, L, h, d_k), the head axis after the positions."""
    B, L, d_model = x.shape
    return x.view(B, L, n_heads, d_model // n_heads)


def split_true_division(x, n_heads):
    """Wrong: d_k = d_model / n_heads is a float, which view does not accept."""
    B, L, d_model = x.shape
    d_k = d_model / n_heads
    return x.view(B, L, n_heads, d_k).transpose(1, 2)


def split_last_two_swapped(x, n_heads):
    """Wrong: transposes the last two axes, giving (B, L, d_k, h)."""
    B, L, d_model = x.shape
    return x.reshape(B, L, n_heads, d_model // n_heads).transpose(-2, -1)


def split_shape_unpacked_l_b(x, n_heads):
    """Wrong: unpacks the shape as L, B, d (wrong order) and views (B, L, h, d_k) with them."""
    L, B, d_model = x.shape
    return x.reshape(B, L, n_heads, d_model // n_heads).transpose(1, 2)


def split_heads_as_width(x, n_heads):
    """Wrong: treats n_heads as the head width: view(B, L, -1, n_heads)."""
    B, L, _ = x.shape
    return x.view(B, L, -1, n_heads).transpose(1, 2)


# ---------------------------------------------------------------- merge_heads


def merge_transpose_reshape(x):
    """Right: transpose(1, 2), then reshape to (B, L, h * d_k)."""
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, h * d_k)


def merge_cat_unbind(x):
    """Right: concatenate the heads, x.unbind(1), along the features."""
    return torch.cat(x.unbind(dim=1), dim=-1)


def merge_straight_reshape(x):
    """Wrong: reshapes (B, h, L, d_k) straight to (B, L, h * d_k) without transposing."""
    B, h, L, d_k = x.shape
    return x.reshape(B, L, h * d_k)


def merge_view_after_transpose(x):
    """Wrong: .view after the transpose, on a non-contiguous tensor."""
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).view(B, L, h * d_k)


def merge_interleaved(x):
    """Wrong: permute(0, 2, 3, 1) puts d_k before h, interleaving the heads."""
    B, h, L, d_k = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, L, h * d_k)


def merge_transpose_only(x):
    """Wrong: transposes back but never reshapes, still 4-D (B, L, h, d_k)."""
    return x.transpose(1, 2)


def merge_shape_unpacked_as_blhd(x):
    """Wrong: unpacks the shape as (B, L, h, d_k) though the input is (B, h, L, d_k)."""
    B, L, h, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, h * d_k)


def merge_cat_along_positions(x):
    """Wrong: concatenates the heads along the positions, (B, h * L, d_k)."""
    return torch.cat(x.unbind(1), dim=1)


def merge_flatten_from_1(x):
    """Wrong: transpose then flatten(1), flattening the positions in too: (B, L * h * d_k)."""
    return x.transpose(1, 2).flatten(1)


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


class MHASplitMerge(_MHABase):
    """Right: project, split, attend, merge, W^O."""

    def forward(self, x, context=None, mask=None):
        if context is None:
            context = x
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_v(context), self.n_heads)
        out, self.last_weights = _attention(q, k, v, mask)
        return self.w_o(merge_transpose_reshape(out))


class MHAEinsum(_MHABase):
    """Right: per-head weights viewed as (h, d_k, d_model) and einsum throughout."""

    def forward(self, x, context=None, mask=None):
        c = x if context is None else context
        h, d_k = self.n_heads, self.d_k

        def project(layer, t):
            w = layer.weight.view(h, d_k, self.d_model)
            out = torch.einsum("bld,hkd->bhlk", t, w)
            if layer.bias is not None:
                out = out + layer.bias.view(1, h, 1, d_k)
            return out

        q, k, v = project(self.w_q, x), project(self.w_k, c), project(self.w_v, c)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d_k)
        if mask is not None:
            scores = scores.masked_fill(mask.logical_not(), float("-inf"))
        weights = torch.nan_to_num(scores.softmax(dim=-1), nan=0.0)
        self.last_weights = weights
        heads = torch.einsum("bhqk,bhkd->bqhd", weights, v)
        return self.w_o(heads.flatten(2))


class MHAContextOrX(_MHABase):
    """Wrong: `context = context or x` tests a tensor's truth value (crashes when context is given)."""

    def forward(self, x, context=None, mask=None):
        context = context or x
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_v(context), self.n_heads)
        out, self.last_weights = _attention(q, k, v, mask)
        return self.w_o(merge_transpose_reshape(out))


class MHANoOutputProjection(_MHABase):
    """Wrong: returns the merged heads without applying W^O."""

    def forward(self, x, context=None, mask=None):
        if context is None:
            context = x
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_v(context), self.n_heads)
        out, self.last_weights = _attention(q, k, v, mask)
        return merge_transpose_reshape(out)


class MHAMaskUnsqueezed(_MHABase):
    """Wrong: always inserts a head axis into the mask (mask.unsqueeze(1)), breaking its broadcast."""

    def forward(self, x, context=None, mask=None):
        if context is None:
            context = x
        if mask is not None:
            mask = mask.unsqueeze(1)
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_v(context), self.n_heads)
        out, self.last_weights = _attention(q, k, v, mask)
        return self.w_o(merge_transpose_reshape(out))


class MHAMergeWithoutTranspose(_MHABase):
    """Wrong: merges with out.reshape(B, L_q, d_model), without transposing the heads back."""

    def forward(self, x, context=None, mask=None):
        if context is None:
            context = x
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_v(context), self.n_heads)
        out, self.last_weights = _attention(q, k, v, mask)
        return self.w_o(out.reshape(x.shape[0], x.shape[1], self.d_model))


class MHAReturnsWeightsToo(_MHABase):
    """Wrong: returns (output, weights) like nn.MultiheadAttention, not the output alone."""

    def forward(self, x, context=None, mask=None):
        if context is None:
            context = x
        q = split_view_transpose(self.w_q(x), self.n_heads)
        k = split_view_transpose(self.w_k(context), self.n_heads)
        v = split_view_transpose(self.w_v(context), self.n_heads)
        out, weights = _attention(q, k, v, mask)
        self.last_weights = weights
        return self.w_o(merge_transpose_reshape(out)), weights.mean(1)


class MHAQueriesFromContext(_MHABase):
    """Wrong: roles swapped, queries from context and keys and values from x."""

    def forward(self, x, context=None, mask=None):
        if context is None:
            context = x
        q = split_view_transpose(self.w_q(context), self.n_heads)
        k = split_view_transpose(self.w_k(x), self.n_heads)
        v = split_view_transpose(self.w_v(x), self.n_heads)
        out, self.last_weights = _attention(q, k, v, mask)
        return self.w_o(merge_transpose_reshape(out))


class MHAProjectionsWithoutBias(_MHABase):
    """Wrong: projects by hand with x @ W.T and forgets the biases of w_q, w_k, w_v."""

    def forward(self, x, context=None, mask=None):
        if context is None:
            context = x
        q = split_view_transpose(x @ self.w_q.weight.T, self.n_heads)
        k = split_view_transpose(context @ self.w_k.weight.T, self.n_heads)
        v = split_view_transpose(context @ self.w_v.weight.T, self.n_heads)
        out, self.last_weights = _attention(q, k, v, mask)
        return self.w_o(merge_transpose_reshape(out))


WRONG = {
    "practice_thinking": THINKING_WRONG,
    "split_heads": [
        split_straight_view,
        split_strided_heads,
        split_no_transpose,
        split_true_division,
        split_last_two_swapped,
        split_shape_unpacked_l_b,
        split_heads_as_width,
    ],
    "merge_heads": [
        merge_straight_reshape,
        merge_view_after_transpose,
        merge_interleaved,
        merge_transpose_only,
        merge_shape_unpacked_as_blhd,
        merge_cat_along_positions,
        merge_flatten_from_1,
    ],
    "MultiHeadAttention": [
        MHAContextOrX,
        MHANoOutputProjection,
        MHAMaskUnsqueezed,
        MHAMergeWithoutTranspose,
        MHAReturnsWeightsToo,
        MHAQueriesFromContext,
        MHAProjectionsWithoutBias,
    ],
}

RIGHT = {
    "practice_thinking": THINKING_RIGHT,
    "split_heads": split_view_transpose,
    "merge_heads": merge_transpose_reshape,
    "MultiHeadAttention": MHASplitMerge,
}

RIGHT2 = {
    "practice_thinking": THINKING_RIGHT2,
    "split_heads": split_chunk_stack,
    "merge_heads": merge_cat_unbind,
    "MultiHeadAttention": MHAEinsum,
}
