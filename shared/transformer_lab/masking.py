"""Lesson 06 — masking.

A mask says which keys each query may attend to (True = may attend, as in PyTorch's
`F.scaled_dot_product_attention`). Masked scores are set to -inf *before* the softmax, so they get
exactly zero weight and the remaining weights still sum to one.

- causal mask: position i may see positions 0..i (no peeking at the future);
- padding mask: no query may attend to a padding token.
"""

from __future__ import annotations

import torch

from ._validate import require_ndim


def causal_mask(n: int, device=None) -> torch.Tensor:
    """Bool (n, n), True on and below the diagonal: row i may attend to columns 0..i."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Bool (B, 1, 1, L) from token ids (B, L): False at padding keys, True elsewhere.

    The two singleton axes broadcast over heads and queries in (B, h, L_q, L_k).
    """
    require_ndim("tokens", tokens, 2, "(B, L)")
    if tokens.is_floating_point():
        raise TypeError(f"tokens must be integer ids, got dtype {tokens.dtype}")
    return (tokens != pad_id)[:, None, None, :]


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of broadcastable bool masks (None entries are ignored)."""
    result = None
    for m in masks:
        if m is None:
            continue
        result = m if result is None else (result & m)
    return result
