"""Lesson 03 (multi-head attention): held-out set six, wrong and right implementations from the exercise text only."""

import math

import torch
from torch import nn
from torch.nn import functional as F


def _sdpa(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


# ---------------------------------------------------------------- practice_thinking

_w = torch.softmax(torch.tensor([112.0, 96.0]) / 8, dim=0)
THINKING_RIGHT = {"weights": (round(_w[0].item(), 2), round(_w[1].item(), 2)), "answer": "C"}
THINKING_RIGHT2 = {
    "answer": "C",
    "weights": torch.sigmoid(torch.tensor([2.0, -2.0], dtype=torch.float64)),
}

# ---------------------------------------------------------------- split_heads


def split_right(x, n_heads):
    """Right: view to (B, L, h, d_k), transpose(1, 2)."""
    B, L, d_model = x.shape
    return x.view(B, L, n_heads, d_model // n_heads).transpose(1, 2)


def split_right2(x, n_heads):
    """Right: chunk into h blocks along the features and stack them on a new axis 1."""
    return torch.stack(torch.chunk(x, n_heads, dim=-1), dim=1)


def split_float_dk(x, n_heads):
    """Wrong: d_k = d_model / n_heads is a float, which view does not accept."""
    B, L, d_model = x.shape
    return x.view(B, L, n_heads, d_model / n_heads).transpose(1, 2)


def split_split_size_slip(x, n_heads):
    """Wrong: x.split(n_heads, -1) takes a chunk SIZE, not a count: blocks of width h, not d_k."""
    return torch.stack(x.split(n_heads, dim=-1), dim=1)


def split_last_two_swapped(x, n_heads):
    """Wrong: transposes the last two axes (-2, -1) instead of (1, 2): (B, L, d_k, h)."""
    B, L, d_model = x.shape
    return x.reshape(B, L, n_heads, d_model // n_heads).transpose(-2, -1)


def split_no_transpose(x, n_heads):
    """Wrong: stops after the reshape, (B, L, h, d_k)."""
    B, L, d_model = x.shape
    return x.reshape(B, L, n_heads, d_model // n_heads)


def split_permute_slip(x, n_heads):
    """Wrong: permute(0, 2, 3, 1) instead of (0, 2, 1, 3): (B, h, d_k, L)."""
    B, L, d_model = x.shape
    return x.reshape(B, L, n_heads, d_model // n_heads).permute(0, 2, 3, 1)


def split_heads_as_dk(x, n_heads):
    """Wrong: reshapes to (B, L, d_k, h) then transposes, so head i takes every h-th feature."""
    B, L, d_model = x.shape
    return x.reshape(B, L, d_model // n_heads, n_heads).permute(0, 3, 1, 2)


# ---------------------------------------------------------------- merge_heads


def merge_right(x):
    """Right: transpose(1, 2) then reshape to (B, L, h * d_k)."""
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, h * d_k)


def merge_right2(x):
    """Right: concatenate the heads along the features with torch.cat over unbind(1)."""
    return torch.cat(x.unbind(dim=1), dim=-1)


def merge_view_after_transpose(x):
    """Wrong: view after transpose (not contiguous), the text warns against it."""
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).view(B, L, h * d_k)


def merge_flatten_too_much(x):
    """Wrong: flatten(1) after the transpose flattens L with the features: (B, L*h*d_k)."""
    return x.transpose(1, 2).flatten(1)


def merge_cat_wrong_dim(x):
    """Wrong: concatenates the heads along the positions: (B, h*L, d_k)."""
    return torch.cat(x.unbind(1), dim=1)


def merge_permute_interleave(x):
    """Wrong: permute(0, 2, 3, 1) then reshape: features ordered d_k-major, heads interleaved."""
    B, h, L, d_k = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, L, h * d_k)


def merge_sum_heads(x):
    """Wrong: sums the heads instead of concatenating them: (B, L, d_k)."""
    return x.sum(dim=1)


def merge_transpose_only_lastdims(x):
    """Wrong: transposes the last two axes then reshapes, mixing positions and features."""
    B, h, L, d_k = x.shape
    return x.transpose(-2, -1).reshape(B, L, h * d_k)


# ---------------------------------------------------------------- MultiHeadAttention


class _MHA(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        assert d_model % n_heads == 0
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.last_weights = None


class MHARight(_MHA):
    """Right: project, split, sdpa, merge, w_o."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_right(self.w_q(x), self.n_heads)
        k = split_right(self.w_k(context), self.n_heads)
        v = split_right(self.w_v(context), self.n_heads)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(merge_right(out))


class MHARight2(_MHA):
    """Right: einsum over per-head weight views (W reshaped to (h, d_k, d)), explicit broadcast of the mask, W^O as einsum over heads."""

    def forward(self, x, context=None, mask=None):
        c = x if context is None else context
        h, dk, d = self.n_heads, self.d_k, self.d_model

        def proj(lin, t):
            w = lin.weight.view(h, dk, d)
            y = torch.einsum("bld,hkd->bhlk", t, w)
            if lin.bias is not None:
                y = y + lin.bias.view(1, h, 1, dk)
            return y

        q, k, v = proj(self.w_q, x), proj(self.w_k, c), proj(self.w_v, c)
        scores = torch.einsum("bhqk,bhlk->bhql", q, k) / math.sqrt(dk)
        if mask is not None:
            mask = torch.broadcast_to(mask, scores.shape)
            scores = scores.masked_fill(mask.logical_not(), -math.inf)
        weights = torch.softmax(scores, -1)
        weights = torch.where(torch.isnan(weights), torch.zeros_like(weights), weights)
        heads = torch.einsum("bhql,bhlk->bhqk", weights, v)
        wo = self.w_o.weight.view(d, h, dk)
        out = torch.einsum("bhqk,ehk->bqe", heads, wo)
        if self.w_o.bias is not None:
            out = out + self.w_o.bias
        self.last_weights = weights.detach()
        return out


class MHAContextOr(_MHA):
    """Wrong: `context = context or x` (truth value of a tensor is ambiguous when a context is given)."""

    def forward(self, x, context=None, mask=None):
        context = context or x
        q = split_right(self.w_q(x), self.n_heads)
        k = split_right(self.w_k(context), self.n_heads)
        v = split_right(self.w_v(context), self.n_heads)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(merge_right(out))


class MHAValuesFromX(_MHA):
    """Wrong: keys from context but values from x."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_right(self.w_q(x), self.n_heads)
        k = split_right(self.w_k(context), self.n_heads)
        v = split_right(self.w_v(x), self.n_heads)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(merge_right(out))


class MHASplitByDk(_MHA):
    """Wrong: passes self.d_k as the number of heads to split_heads."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_right(self.w_q(x), self.d_k)
        k = split_right(self.w_k(context), self.d_k)
        v = split_right(self.w_v(context), self.d_k)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(merge_right(out))


class MHADoubleScale(_MHA):
    """Wrong: scales q by 1/sqrt(d_k) before calling sdpa, which scales again."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_right(self.w_q(x), self.n_heads) / math.sqrt(self.d_k)
        k = split_right(self.w_k(context), self.n_heads)
        v = split_right(self.w_v(context), self.n_heads)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(merge_right(out))


class MHANoBias(_MHA):
    """Wrong: projects with F.linear(x, weight) and drops the biases."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_right(F.linear(x, self.w_q.weight), self.n_heads)
        k = split_right(F.linear(context, self.w_k.weight), self.n_heads)
        v = split_right(F.linear(context, self.w_v.weight), self.n_heads)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return F.linear(merge_right(out), self.w_o.weight)


class MHAMaskUnsqueezed(_MHA):
    """Wrong: always adds a head axis with mask.unsqueeze(1), which breaks (L_q, L_k) and (B,1,1,L_k) masks."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_right(self.w_q(x), self.n_heads)
        k = split_right(self.w_k(context), self.n_heads)
        v = split_right(self.w_v(context), self.n_heads)
        if mask is not None:
            mask = mask.unsqueeze(1)
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(merge_right(out))


class MHAQueryLengthForKeys(_MHA):
    """Wrong: splits keys and values with the query length L (view(B, L, h, d_k)), wrong when L_k != L_q."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        B, L, _ = x.shape

        def split(t):
            return t.reshape(B, L, self.n_heads, self.d_k).transpose(1, 2)

        q, k, v = split(self.w_q(x)), split(self.w_k(context)), split(self.w_v(context))
        out, self.last_weights = _sdpa(q, k, v, mask)
        return self.w_o(merge_right(out))


class MHANoWoWithMask(_MHA):
    """Wrong: returns the merged heads and forgets W^O when the mask is given (W^O inside the else branch)."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = split_right(self.w_q(x), self.n_heads)
        k = split_right(self.w_k(context), self.n_heads)
        v = split_right(self.w_v(context), self.n_heads)
        if mask is not None:
            out, self.last_weights = _sdpa(q, k, v, mask)
            return merge_right(out)
        out, self.last_weights = _sdpa(q, k, v)
        return self.w_o(merge_right(out))


WRONG = {
    "practice_thinking": [
        {"weights": (1.0, 0.0), "answer": "C"},  # softmax of the unscaled dot products
        {"weights": (0.56, 0.44), "answer": "B"},  # divided by d_k = 64
        {"weights": (0.54, 0.46), "answer": "B"},  # dot products divided by their sum
        {"weights": (0.12, 0.88), "answer": "D"},  # swapped
        {"weights": (0.88, 0.12), "answer": "B"},  # right weights, wrong letter
        {"weights": (0.9, 0.1), "answer": "C"},  # rounded to one decimal, not two
    ],
    "split_heads": [
        split_float_dk,
        split_split_size_slip,
        split_last_two_swapped,
        split_no_transpose,
        split_permute_slip,
        split_heads_as_dk,
    ],
    "merge_heads": [
        merge_view_after_transpose,
        merge_flatten_too_much,
        merge_cat_wrong_dim,
        merge_permute_interleave,
        merge_sum_heads,
        merge_transpose_only_lastdims,
    ],
    "MultiHeadAttention": [
        MHAContextOr,
        MHAValuesFromX,
        MHASplitByDk,
        MHADoubleScale,
        MHANoBias,
        MHAMaskUnsqueezed,
        MHAQueryLengthForKeys,
        MHANoWoWithMask,
    ],
}
RIGHT = {
    "practice_thinking": THINKING_RIGHT,
    "split_heads": split_right,
    "merge_heads": merge_right,
    "MultiHeadAttention": MHARight,
}
RIGHT2 = {
    "practice_thinking": THINKING_RIGHT2,
    "split_heads": split_right2,
    "merge_heads": merge_right2,
    "MultiHeadAttention": MHARight2,
}
