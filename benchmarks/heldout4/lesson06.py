"""Lesson 06 (Masking): held-out wrong and right implementations, from the exercise text only."""

import math

import torch


class Answer(float):
    """A practice answer (a number) that carries a name and a one-line docstring."""

    def __new__(cls, value, name, doc):
        obj = super().__new__(cls, value)
        obj.__name__ = name
        obj.__doc__ = doc
        return obj


# ---------------------------------------------------------------- causal_mask


def causal_mask_tril(n):
    """Right: torch.tril of a bool matrix of ones."""
    return torch.tril(torch.ones(n, n, dtype=torch.bool))


def causal_mask_arange(n):
    """Right: compare the key index with the query index, j <= i."""
    i = torch.arange(n)
    return i[None, :] <= i[:, None]


def causal_mask_triu(n):
    """Wrong: torch.triu instead of tril (each query sees itself and the future)."""
    return torch.triu(torch.ones(n, n, dtype=torch.bool))


def causal_mask_one_ahead(n):
    """Wrong: tril with diagonal=1, so each query also sees the next token."""
    return torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=1)


def causal_mask_strict_arange(n):
    """Wrong: j < i, the strict comparison drops the diagonal."""
    i = torch.arange(n)
    return i[None, :] < i[:, None]


def causal_mask_long(n):
    """Wrong: a 0/1 int64 matrix (tril of default ones, cast to long), not bool."""
    return torch.tril(torch.ones(n, n)).long()


def causal_mask_additive(n):
    """Wrong: an additive float mask, 0 where allowed and -inf in the future."""
    return torch.triu(torch.full((n, n), float("-inf")), diagonal=1)


def causal_mask_hidden_true(n):
    """Wrong: True marks the hidden future (j > i), the convention of nn.MultiheadAttention."""
    i = torch.arange(n)
    return i[None, :] > i[:, None]


def causal_mask_uint8(n):
    """Wrong: an old-style uint8 0/1 mask (torch.ones(..., dtype=torch.uint8).tril())."""
    return torch.ones(n, n, dtype=torch.uint8).tril()


# ---------------------------------------------------------------- alpha_22

_E = math.e

alpha_right = Answer(0.5, "alpha_half", "Right: row 2 keeps scores 1 and 1, so e / (e + e) = 1/2.")
alpha_right2 = Answer(
    torch.softmax(torch.tensor([1.0, 1.0], dtype=torch.float64), 0)[1].item(),
    "alpha_softmax_of_survivors",
    "Right: softmax of the two surviving scores (1, 1) of row 2, second entry.",
)

alpha_wrong = [
    Answer(
        _E / (1 + 2 * _E),
        "alpha_zero_indexed",
        "Wrong: counted from 0, so took row 3 (0, 1, 1) and its third entry.",
    ),
    Answer(
        _E / (_E + _E**-1 + 1),
        "alpha_mask_transposed",
        "Wrong: kept keys j >= 2 (the upper triangle) of row 2: scores 1, -1, 0.",
    ),
    Answer(
        _E / (2 * _E + 2),
        "alpha_masked_to_zero",
        "Wrong: masked scores set to 0 instead of -inf before the softmax.",
    ),
    Answer(
        _E / (1 + 2 * _E + _E**-1),
        "alpha_zero_indexed_unmasked",
        "Wrong: row 3 counted from 0 and no mask applied at all.",
    ),
    Answer(
        _E / (2 * _E + _E**-1),
        "alpha_softmax_over_queries",
        "Wrong: softmax down column 2 (over the queries i >= 2) instead of along row 2.",
    ),
    Answer(50.0, "alpha_percent", "Wrong: the weight given as a percentage, 50."),
]

# ---------------------------------------------------------------- padding_mask


def padding_mask_index(tokens, pad_id):
    """Right: compare with pad_id, then add the two singleton axes by indexing."""
    return (tokens != pad_id)[:, None, None, :]


def padding_mask_view(tokens, pad_id):
    """Right: torch.ne, then view (B, 1, 1, L)."""
    B, L = tokens.shape
    return torch.ne(tokens, pad_id).view(B, 1, 1, L)


def padding_mask_flat(tokens, pad_id):
    """Wrong: returns the (B, L) comparison without the singleton axes."""
    return tokens != pad_id


def padding_mask_query_axis(tokens, pad_id):
    """Wrong: (B, 1, L, 1), the padding runs along the query axis."""
    return (tokens != pad_id)[:, None, :, None]


def padding_mask_true_at_pad(tokens, pad_id):
    """Wrong: True at the padding (tokens == pad_id), the mask is inverted."""
    return (tokens == pad_id)[:, None, None, :]


def padding_mask_nonzero(tokens, pad_id):
    """Wrong: tokens.bool() treats id 0 as the padding whatever pad_id is."""
    return tokens.bool()[:, None, None, :]


def padding_mask_greater(tokens, pad_id):
    """Wrong: tokens > pad_id assumes the padding id is the smallest id."""
    return (tokens > pad_id)[:, None, None, :]


def padding_mask_ne_inplace(tokens, pad_id):
    """Wrong: tokens.ne_(pad_id) overwrites the caller's tokens with 0/1."""
    return tokens.ne_(pad_id).bool()[:, None, None, :]


def padding_mask_float(tokens, pad_id):
    """Wrong: a float 0/1 mask instead of bool."""
    return (tokens != pad_id).float()[:, None, None, :]


def padding_mask_one_singleton(tokens, pad_id):
    """Wrong: only one singleton axis, (B, 1, L)."""
    return (tokens != pad_id).unsqueeze(1)


WRONG = {
    "causal_mask": [
        causal_mask_triu,
        causal_mask_one_ahead,
        causal_mask_strict_arange,
        causal_mask_long,
        causal_mask_additive,
        causal_mask_hidden_true,
        causal_mask_uint8,
    ],
    "alpha_22": alpha_wrong,
    "padding_mask": [
        padding_mask_flat,
        padding_mask_query_axis,
        padding_mask_true_at_pad,
        padding_mask_nonzero,
        padding_mask_greater,
        padding_mask_ne_inplace,
        padding_mask_float,
        padding_mask_one_singleton,
    ],
}

RIGHT = {
    "causal_mask": causal_mask_tril,
    "alpha_22": alpha_right,
    "padding_mask": padding_mask_index,
}

RIGHT2 = {
    "causal_mask": causal_mask_arange,
    "alpha_22": alpha_right2,
    "padding_mask": padding_mask_view,
}
