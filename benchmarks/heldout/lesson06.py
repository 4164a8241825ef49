"""Lesson 06: causal and padding masks."""

import torch


def causal_right(n):
    """Correct."""
    i = torch.arange(n)
    return i[None, :] <= i[:, None]


def causal_triu(n):
    """Uses triu (True on and above the diagonal): keys j >= i."""
    return torch.ones(n, n, dtype=torch.bool).triu()


def causal_blocked_true(n):
    """True means blocked (the future), PyTorch's attn_mask convention for bool masks in nn.MultiheadAttention."""
    return torch.ones(n, n, dtype=torch.bool).triu(1)


def causal_off_by_one(n):
    """Excludes the diagonal (tril(-1)), patching row 0 so it is not empty."""
    m = torch.ones(n, n, dtype=torch.bool).tril(-1)
    if n:
        m[0, 0] = True
    return m


def causal_int(n):
    """Returns an int (0/1) tensor, torch.tril(torch.ones(n, n)).long()."""
    return torch.tril(torch.ones(n, n)).long()


def causal_batch_axis(n):
    """Returns (1, n, n) with a batch axis."""
    return torch.ones(n, n, dtype=torch.bool).tril()[None]


def padding_right(tokens, pad_id):
    """Correct."""
    return (tokens != pad_id)[:, None, None, :]


def padding_int(tokens, pad_id):
    """Returns an int mask (tokens != pad_id).long()."""
    return (tokens != pad_id).long()[:, None, None, :]


def padding_bl11(tokens, pad_id):
    """Shape (B, L, 1, 1): unsqueezes the wrong end."""
    return (tokens != pad_id)[:, :, None, None]


def padding_b1l(tokens, pad_id):
    """Shape (B, 1, L): one singleton axis only."""
    return (tokens != pad_id)[:, None, :]


def padding_after_first_pad(tokens, pad_id):
    """Masks everything from the first pad on (assumes right padding; wrong for left padding)."""
    real = (tokens != pad_id).long().cumprod(dim=1).bool()
    return real[:, None, None, :]


def padding_token_is_truthy(tokens, pad_id):
    """Uses tokens.bool() (non-zero) whatever pad_id is, plus equality for pad_id."""
    return (tokens.bool() & (tokens != pad_id))[:, None, None, :]


WRONG = {
    "causal_mask": [
        causal_triu,
        causal_blocked_true,
        causal_off_by_one,
        causal_int,
        causal_batch_axis,
    ],
    "padding_mask": [
        padding_int,
        padding_bl11,
        padding_b1l,
        padding_after_first_pad,
        padding_token_is_truthy,
    ],
}
RIGHT = {"causal_mask": causal_right, "padding_mask": padding_right}
