"""Lesson 06 (masking): fifth held-out set of wrong and right implementations, from the exercise text only."""

import math

import torch

# ====================================================================== causal_mask


def causal_mask_right(n):
    """Right: torch.tril of a bool ones matrix."""
    return torch.tril(torch.ones(n, n, dtype=torch.bool))


def causal_mask_right2(n):
    """Right: compare key index with query index via arange broadcasting."""
    i = torch.arange(n).unsqueeze(1)
    j = torch.arange(n).unsqueeze(0)
    return j <= i


def causal_mask_triu(n):
    """Wrong: torch.triu, True on and above the diagonal (the future visible)."""
    return torch.triu(torch.ones(n, n, dtype=torch.bool))


def causal_mask_strict(n):
    """Wrong: strict comparison j < i, so a position cannot attend to itself."""
    idx = torch.arange(n)
    return idx[None, :] < idx[:, None]


def causal_mask_float(n):
    """Wrong: returns the 0/1 float matrix from torch.tril(torch.ones(n, n))."""
    return torch.tril(torch.ones(n, n))


def causal_mask_inverted(n):
    """Wrong: True where attention is forbidden (the future), as in a 'masked-out' convention."""
    return torch.ones(n, n).triu(diagonal=1).bool()


def causal_mask_4d(n):
    """Wrong: returns shape (1, 1, n, n) instead of (n, n)."""
    return torch.tril(torch.ones(n, n, dtype=torch.bool))[None, None]


def causal_mask_one_ahead(n):
    """Wrong: tril(diagonal=1) lets each query see one key into the future."""
    return torch.tril(torch.ones(n, n), diagonal=1).bool()


def causal_mask_uint8(n):
    """Wrong: a uint8 mask (the old PyTorch byte mask), not bool."""
    return torch.tril(torch.ones(n, n, dtype=torch.uint8))


def causal_mask_no_broadcast(n):
    """Wrong: compares arange with itself without new axes, giving an (n,) all-True vector."""
    idx = torch.arange(n)
    return idx <= idx


def causal_mask_additive(n):
    """Wrong: PyTorch's additive float mask, 0 where allowed and -inf in the future."""
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    return torch.zeros(n, n).masked_fill(future, float("-inf"))


# ====================================================================== alpha_22

E = math.e
ALPHA_22_RIGHT = 0.5  # row 2 = (1, 1, -1, 0); keys 1 and 2 survive -> e / (e + e) = 1/2
ALPHA_22_RIGHT2 = E / (E + E)

ALPHA_22_WRONG = [
    E / (1 + 2 * E),  # zero-based: row index 2 = third row (0, 1, 1, -1), keys 0..2
    E / (2 * E + 2),  # masked scores set to 0 instead of -inf before the softmax
    E / (E + 1),  # reads column 2 instead of row 2 (S transposed): (0, 1) survives
    E / (E + math.exp(-1) + 1),  # keeps j >= i (upper triangle): keys 2, 3, 4 of row 2
    50.0,  # the right weight given as a percentage
    E / (2 * E + math.exp(-1) + 1),  # softmax over the full row, then the future zeroed (no renorm)
]

# ====================================================================== padding_mask


def padding_mask_right(tokens, pad_id):
    """Right: tokens != pad_id, two singleton axes inserted with indexing."""
    return (tokens != pad_id)[:, None, None, :]


def padding_mask_right2(tokens, pad_id):
    """Right: torch.ne then view to (B, 1, 1, L)."""
    B, L = tokens.shape
    return torch.ne(tokens, pad_id).view(B, 1, 1, L)


def padding_mask_2d(tokens, pad_id):
    """Wrong: returns (B, L) without the singleton axes."""
    return tokens != pad_id


def padding_mask_query_axis(tokens, pad_id):
    """Wrong: (B, 1, L, 1), the padding along the query axis."""
    return (tokens != pad_id).unsqueeze(1).unsqueeze(-1)


def padding_mask_inverted(tokens, pad_id):
    """Wrong: True at the padding (tokens == pad_id)."""
    return (tokens == pad_id)[:, None, None, :]


def padding_mask_zero(tokens, pad_id):
    """Wrong: ignores pad_id and compares with 0 (BERT's id)."""
    return (tokens != 0).unsqueeze(1).unsqueeze(2)


def padding_mask_ne_inplace(tokens, pad_id):
    """Wrong: tokens.ne_(pad_id) overwrites the caller's token ids with 0/1."""
    return tokens.ne_(pad_id).bool()[:, None, None, :]


def padding_mask_long(tokens, pad_id):
    """Wrong: returns a 0/1 integer mask, not bool."""
    return (tokens != pad_id).long()[:, None, None, :]


def padding_mask_leading_axes(tokens, pad_id):
    """Wrong: unsqueeze(0) twice gives (1, 1, B, L)."""
    return (tokens != pad_id).unsqueeze(0).unsqueeze(0)


def padding_mask_greater(tokens, pad_id):
    """Wrong: tokens > pad_id, assuming the padding id is the smallest id."""
    return (tokens > pad_id)[:, None, None, :]


WRONG = {
    "causal_mask": [
        causal_mask_triu,
        causal_mask_strict,
        causal_mask_float,
        causal_mask_inverted,
        causal_mask_4d,
        causal_mask_one_ahead,
        causal_mask_uint8,
        causal_mask_no_broadcast,
        causal_mask_additive,
    ],
    "alpha_22": ALPHA_22_WRONG,
    "padding_mask": [
        padding_mask_2d,
        padding_mask_query_axis,
        padding_mask_inverted,
        padding_mask_zero,
        padding_mask_ne_inplace,
        padding_mask_long,
        padding_mask_leading_axes,
        padding_mask_greater,
    ],
}
RIGHT = {
    "causal_mask": causal_mask_right,
    "alpha_22": ALPHA_22_RIGHT,
    "padding_mask": padding_mask_right,
}
RIGHT2 = {
    "causal_mask": causal_mask_right2,
    "alpha_22": ALPHA_22_RIGHT2,
    "padding_mask": padding_mask_right2,
}
