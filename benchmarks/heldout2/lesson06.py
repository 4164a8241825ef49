"""Lesson 06 (masking): held-out wrong and right implementations, written from the exercise text."""

import math

import numpy as np
import torch


def _answer(base, value, name, doc):
    """A practice answer (a float) that carries a name and a one-line docstring."""
    cls = type(name, (base,), {"__doc__": doc})
    obj = cls(value)
    obj.__name__ = name
    return obj


# ---------------------------------------------------------------- causal_mask


def causal_tril(n):
    """Right: torch.tril of a bool ones matrix."""
    return torch.tril(torch.ones(n, n, dtype=torch.bool))


def causal_arange(n):
    """Right: compare arange with itself, key index <= query index."""
    i = torch.arange(n)
    return i[None, :] <= i[:, None]


def causal_uint8(n):
    """Wrong: a uint8 0/1 mask (the old PyTorch mask type), not bool."""
    return torch.tril(torch.ones(n, n, dtype=torch.uint8))


def causal_annotated_batch_axis(n):
    """Wrong: the Annotated Transformer's subsequent_mask, shape (1, n, n) instead of (n, n)."""
    attn_shape = (1, n, n)
    subsequent = torch.triu(torch.ones(attn_shape), diagonal=1).type(torch.uint8)
    return subsequent == 0


def causal_numpy(n):
    """Wrong: np.tril returns a numpy array, not a torch tensor."""
    return np.tril(np.ones((n, n), dtype=bool))


def causal_triu(n):
    """Wrong: torch.triu where tril belongs (True on and above the diagonal)."""
    return torch.triu(torch.ones(n, n, dtype=torch.bool))


def causal_strict(n):
    """Wrong: tril with diagonal=-1, so a position may not attend to itself."""
    return torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1)


# ---------------------------------------------------------------- alpha_22

alpha_right = _answer(float, 0.5, "alpha_right", "Right: 0.5, on paper.")
alpha_right2 = _answer(
    float,
    torch.softmax(torch.tensor([1.0, 1.0]), dim=0)[1].item(),
    "alpha_right2",
    "Right: the softmax of the two surviving scores, computed with torch.",
)
alpha_wrong = [
    _answer(
        float,
        math.e / (2 * math.e + 2),
        "alpha_masked_zero",
        "Wrong: the masked scores set to 0 instead of -inf, e / (2e + 2).",
    ),
    _answer(
        float,
        math.e / (1 + 2 * math.e),
        "alpha_zero_based",
        "Wrong: rows counted from 0, so the third row [0, 1, 1] is used, e / (1 + 2e).",
    ),
    _answer(
        float,
        math.e / (math.e + math.exp(-1) + 1),
        "alpha_mask_transposed",
        "Wrong: the mask transposed, keys j >= i kept: e / (e + e^-1 + 1).",
    ),
    _answer(float, 0.0, "alpha_zero", "Wrong: 0, the diagonal taken as masked."),
    _answer(
        float,
        math.e / (2 * math.e + math.exp(-1) + 1),
        "alpha_no_mask",
        "Wrong: the softmax of the whole row, the mask forgotten.",
    ),
]


# ---------------------------------------------------------------- padding_mask


def padding_unsqueeze(tokens, pad_id):
    """Right: tokens != pad_id, then two singleton axes with [:, None, None, :]."""
    return (tokens != pad_id)[:, None, None, :]


def padding_view(tokens, pad_id):
    """Right: torch.ne and view(B, 1, 1, L)."""
    B, L = tokens.shape
    return torch.ne(tokens, pad_id).view(B, 1, 1, L)


def padding_trailing_axes(tokens, pad_id):
    """Wrong: the singleton axes added at the end, (B, L, 1, 1)."""
    return (tokens != pad_id).unsqueeze(-1).unsqueeze(-1)


def padding_float(tokens, pad_id):
    """Wrong: a float 0/1 mask instead of a bool one."""
    return (tokens != pad_id).float()[:, None, None, :]


def padding_from_lengths(tokens, pad_id):
    """Wrong: built from the count of real tokens, assuming all padding sits at the end."""
    B, L = tokens.shape
    lengths = (tokens != pad_id).sum(dim=1)
    keep = torch.arange(L, device=tokens.device)[None, :] < lengths[:, None]
    return keep[:, None, None, :]


def padding_expanded(tokens, pad_id):
    """Wrong: expanded over the queries to (B, 1, L, L) instead of (B, 1, 1, L)."""
    B, L = tokens.shape
    return (tokens != pad_id)[:, None, None, :].expand(B, 1, L, L)


def padding_inverted(tokens, pad_id):
    """Wrong: tokens == pad_id, True at the padding."""
    return (tokens == pad_id)[:, None, None, :]


WRONG = {
    "causal_mask": [
        causal_uint8,
        causal_annotated_batch_axis,
        causal_numpy,
        causal_triu,
        causal_strict,
    ],
    "alpha_22": alpha_wrong,
    "padding_mask": [
        padding_trailing_axes,
        padding_float,
        padding_from_lengths,
        padding_expanded,
        padding_inverted,
    ],
}
RIGHT = {
    "causal_mask": causal_tril,
    "alpha_22": alpha_right,
    "padding_mask": padding_unsqueeze,
}
RIGHT2 = {
    "causal_mask": causal_arange,
    "alpha_22": alpha_right2,
    "padding_mask": padding_view,
}
