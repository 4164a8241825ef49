"""Lesson 06 (masking): held-out wrong and right implementations, from the exercise text only."""

import math

import torch

from .lesson01 import _answer

# ---------------------------------------------------------------- causal_mask


def causal_tril(n):
    """Right: torch.tril of a bool matrix of ones."""
    return torch.tril(torch.ones(n, n, dtype=torch.bool))


def causal_arange(n):
    """Right: compare the key index with the query index, j <= i."""
    i = torch.arange(n).unsqueeze(1)
    j = torch.arange(n).unsqueeze(0)
    return j <= i


def causal_one_future(n):
    """tril with diagonal=1: each query also sees the next key."""
    return torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=1)


def causal_uint8(n):
    """Returns tril of a uint8 matrix (0/1 bytes), not a bool tensor."""
    return torch.tril(torch.ones(n, n, dtype=torch.uint8))


def causal_not_triu(n):
    """~triu(ones): negating the upper triangle also drops the diagonal."""
    return ~torch.triu(torch.ones(n, n, dtype=torch.bool))


def causal_4d(n):
    """Returns (1, 1, n, n), ready to broadcast over batch and heads."""
    return torch.tril(torch.ones(n, n, dtype=torch.bool))[None, None]


def causal_future_only(n):
    """triu(ones, diagonal=1).bool(): the 'subsequent' mask, True on the future."""
    return torch.triu(torch.ones(n, n), diagonal=1).bool()


def causal_float_ones(n):
    """Returns torch.ones(n, n).tril(): a float 0/1 mask, not bool."""
    return torch.ones(n, n).tril()


# ---------------------------------------------------------------- alpha_22

_e = math.e

alpha_right = _answer(float, 0.5, "alpha_right", "Right: e / (e + e) = 1/2.")
alpha_right2 = _answer(
    float,
    torch.softmax(torch.tensor([1.0, 1.0]), dim=0)[1].item(),
    "alpha_right2",
    "Right: the softmax of the two surviving scores computed with torch.",
)
alpha_zero_indexed = _answer(
    float,
    _e / (1 + 2 * _e),
    "alpha_zero_indexed",
    "Counts rows and columns from 0: row 3 of the matrix, scores (0, 1, 1).",
)
alpha_masked_zero = _answer(
    float,
    _e / (2 * _e + 2),
    "alpha_masked_zero",
    "Sets the masked scores to 0 instead of -inf: softmax of (1, 1, 0, 0).",
)
alpha_column = _answer(
    float,
    _e / (2 * _e + math.exp(-1)),
    "alpha_column",
    "Softmax over column 2 (queries 2-4 that may see key 2) instead of row 2.",
)
alpha_after_softmax = _answer(
    float,
    _e / (2 * _e + math.exp(-1) + 1),
    "alpha_after_softmax",
    "Softmax of the whole row, the future zeroed afterwards (not renormalised).",
)
alpha_percent = _answer(float, 50.0, "alpha_percent", "The right weight written as a percentage.")

# ---------------------------------------------------------------- padding_mask


def padding_not_equal(tokens, pad_id):
    """Right: tokens != pad_id with two singleton axes by indexing with None."""
    return (tokens != pad_id)[:, None, None, :]


def padding_ne_view(tokens, pad_id):
    """Right: tokens.ne(pad_id) viewed as (B, 1, 1, L)."""
    B, L = tokens.shape
    return tokens.ne(pad_id).view(B, 1, 1, L)


def padding_unsqueeze_front(tokens, pad_id):
    """unsqueeze(0) twice: the singleton axes in front, (1, 1, B, L)."""
    return (tokens != pad_id).unsqueeze(0).unsqueeze(0)


def padding_long(tokens, pad_id):
    """Returns a 0/1 long mask, as Hugging Face's attention_mask, not a bool tensor."""
    return (tokens != pad_id).long()[:, None, None, :]


def padding_expanded(tokens, pad_id):
    """Expands the mask to (B, 1, L, L), one row per query."""
    B, L = tokens.shape
    return (tokens != pad_id)[:, None, None, :].expand(B, 1, L, L)


def padding_tokens_bool(tokens, pad_id):
    """tokens.bool(): True for every nonzero id, so pad_id is taken to be 0."""
    return tokens.bool()[:, None, None, :]


def padding_three_axes(tokens, pad_id):
    """One singleton axis only: (B, 1, L)."""
    return (tokens != pad_id)[:, None, :]


def padding_in_place(tokens, pad_id):
    """Rewrites the tokens in place (pads to 0, words to 1) and returns them as the mask."""
    tokens[tokens != pad_id] = 1
    tokens[tokens == pad_id] = 0
    return tokens.bool()[:, None, None, :]


WRONG = {
    "causal_mask": [
        causal_one_future,
        causal_uint8,
        causal_not_triu,
        causal_4d,
        causal_future_only,
        causal_float_ones,
    ],
    "alpha_22": [
        alpha_zero_indexed,
        alpha_masked_zero,
        alpha_column,
        alpha_after_softmax,
        alpha_percent,
    ],
    "padding_mask": [
        padding_unsqueeze_front,
        padding_long,
        padding_expanded,
        padding_tokens_bool,
        padding_three_axes,
        padding_in_place,
    ],
}
RIGHT = {"causal_mask": causal_tril, "alpha_22": alpha_right, "padding_mask": padding_not_equal}
RIGHT2 = {"causal_mask": causal_arange, "alpha_22": alpha_right2, "padding_mask": padding_ne_view}
