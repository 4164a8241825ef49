"""Lesson 06 (masking): a sixth held-out set of wrong and right implementations, from the exercise text only."""

import math

import torch

# ---------------------------------------------------------------- causal_mask


def causal_mask_right(n):
    """Right: torch.tril of a bool ones matrix."""
    return torch.tril(torch.ones(n, n, dtype=torch.bool))


def causal_mask_not_strict_upper(n, device=None):
    """Right: the complement of the strict upper triangle (triu with diagonal=1), with a device argument."""
    upper = torch.ones((n, n), dtype=torch.bool, device=device).triu(diagonal=1)
    return upper.logical_not()


def causal_mask_int_tril(n):
    """Wrong: tril of an int ones matrix, .bool() forgotten (an int32 0/1 mask)."""
    return torch.tril(torch.ones(n, n, dtype=torch.int32))


def causal_mask_uint8(n):
    """Wrong: an old-style uint8 (byte) mask instead of bool."""
    return torch.ones(n, n).tril().byte()


def causal_mask_triu_diag0(n):
    """Wrong: ~triu(diagonal=0) hides the diagonal too (should be diagonal=1)."""
    return ~torch.triu(torch.ones(n, n, dtype=torch.bool))


def causal_mask_list_comprehension(n):
    """Wrong: built from a nested list, i and j swapped (j >= i: each query sees the future)."""
    return torch.tensor([[i <= j for j in range(n)] for i in range(n)], dtype=torch.bool)


def causal_mask_cached_64(n):
    """Wrong: slices a fixed 64 x 64 buffer (nanoGPT style), so n > 64 gets a too-small mask."""
    full = torch.tril(torch.ones(64, 64, dtype=torch.bool))
    return full[:n, :n]


def causal_mask_batched(n):
    """Wrong: returns (1, n, n) 'for the batch axis' instead of (n, n)."""
    return torch.tril(torch.ones(n, n, dtype=torch.bool)).unsqueeze(0)


def causal_mask_arange_flipped(n):
    """Wrong: compares arange(n)[:, None] <= arange(n)[None, :] (rows and columns mixed up: upper triangle)."""
    i = torch.arange(n)
    return i[:, None] <= i[None, :]


# ---------------------------------------------------------------- alpha_22
# Row 2 (counting from 1) is (1, 1, -1, 0); the causal mask keeps keys 1 and 2: e / (e + e) = 1/2.


class Answer(float):
    """A number for alpha_22 that carries a name and a one-line docstring (for the benchmark's rows)."""


def answer(value, name, doc):
    number = Answer(value)
    number.__name__, number.__doc__ = name, doc
    return number


ALPHA_RIGHT = answer(0.5, "alpha_22_half", "Right: e / (e + e) = 1/2.")
ALPHA_RIGHT2 = answer(
    math.exp(1) / (math.exp(1) + math.exp(1)),
    "alpha_22_computed",
    "Right: computed as exp(1) / (exp(1) + exp(1)) with math.exp.",
)

WRONG_ALPHAS = [
    answer(
        math.e / (1 + 2 * math.e),
        "alpha_22_zero_indexed",
        "Wrong: counts from 0 (row [0, 1, 1, -1], keys 0..2 kept): e / (1 + 2e).",
    ),
    answer(
        math.e / (2 * math.e + 2),
        "alpha_22_masked_to_zero",
        "Wrong: the masked scores are set to 0 instead of -inf: e / (2e + 1 + 1).",
    ),
    answer(
        math.e / (math.e + math.exp(-1) + 1),
        "alpha_22_mask_transposed",
        "Wrong: the mask transposed (keys j >= i survive): e / (e + e^-1 + 1).",
    ),
    answer(
        1 / 3, "alpha_22_uniform_three", "Wrong: uniform over the three keys a 0-indexed row keeps."
    ),
    answer(0.25, "alpha_22_uniform_four", "Wrong: uniform over all four keys, the scores ignored."),
    answer(50.0, "alpha_22_percent", "Wrong: the right weight given as a percentage (50)."),
]


# ---------------------------------------------------------------- padding_mask


def padding_mask_right(tokens, pad_id):
    """Right: (tokens != pad_id) with two singleton axes inserted."""
    return (tokens != pad_id)[:, None, None, :]


def padding_mask_subtract(tokens, pad_id):
    """Right: (tokens - pad_id).bool(), reshaped to (B, 1, 1, L)."""
    batch, length = tokens.shape
    return torch.sub(tokens, pad_id).bool().reshape(batch, 1, 1, length)


def padding_mask_greater(tokens, pad_id):
    """Wrong: tokens > pad_id, assuming the pad id is the smallest id."""
    return (tokens > pad_id)[:, None, None, :]


def padding_mask_float(tokens, pad_id):
    """Wrong: a float 0/1 mask instead of bool."""
    return (tokens != pad_id).float().unsqueeze(1).unsqueeze(2)


def padding_mask_expanded(tokens, pad_id):
    """Wrong: expands to (B, 1, L, L) (it broadcasts the same in attention, but is not (B, 1, 1, L))."""
    length = tokens.shape[-1]
    return (tokens != pad_id)[:, None, None, :].expand(-1, 1, length, length)


def padding_mask_leading_axes(tokens, pad_id):
    """Wrong: tokens[None, None] gives (1, 1, B, L): the batch lands on the query axis."""
    return (tokens != pad_id)[None, None]


def padding_mask_in_place(tokens, pad_id):
    """Wrong: rewrites the pads to 0 in the caller's tokens, then compares with 0."""
    tokens[tokens == pad_id] = 0
    return (tokens != 0).unsqueeze(1).unsqueeze(1)


def padding_mask_uint8(tokens, pad_id):
    """Wrong: a uint8 mask (tokens.ne(pad_id).byte())."""
    return tokens.ne(pad_id).byte()[:, None, None, :]


def padding_mask_query_axis(tokens, pad_id):
    """Wrong: unsqueeze(1).unsqueeze(-1) gives (B, 1, L, 1): the padding runs along the queries."""
    return (tokens != pad_id).unsqueeze(1).unsqueeze(-1)


WRONG = {
    "causal_mask": [
        causal_mask_int_tril,
        causal_mask_uint8,
        causal_mask_triu_diag0,
        causal_mask_list_comprehension,
        causal_mask_cached_64,
        causal_mask_batched,
        causal_mask_arange_flipped,
    ],
    "alpha_22": WRONG_ALPHAS,
    "padding_mask": [
        padding_mask_greater,
        padding_mask_float,
        padding_mask_expanded,
        padding_mask_leading_axes,
        padding_mask_in_place,
        padding_mask_uint8,
        padding_mask_query_axis,
    ],
}

RIGHT = {
    "causal_mask": causal_mask_right,
    "alpha_22": ALPHA_RIGHT,
    "padding_mask": padding_mask_right,
}

RIGHT2 = {
    "causal_mask": causal_mask_not_strict_upper,
    "alpha_22": ALPHA_RIGHT2,
    "padding_mask": padding_mask_subtract,
}
