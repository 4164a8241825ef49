"""Lesson 04 — positional encoding.

Self-attention treats its input as a set: permute the tokens and the outputs permute the same
way. Order must be added to the input. A raw index t grows without bound and a normalised t/L
changes meaning with the length L; the sinusoidal encoding is bounded and length-independent:

    PE[t, 2k]   = sin(t · ω_k)
    PE[t, 2k+1] = cos(t · ω_k),        ω_k = 10000^(-2k / d_model)

Learned absolute positions are an embedding table (they cannot extrapolate past the table);
rotary embeddings (RoPE) rotate each (2k, 2k+1) pair of q and k by the angle t · ω_k so that q·k
depends only on the offset between the two positions.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import require_min_ndim


def _frequencies(d_model: int, base: float, device=None) -> torch.Tensor:
    """ω_k = base^(-2k/d_model) for k = 0 .. ceil(d_model/2) - 1, in float64."""
    two_k = torch.arange(0, d_model, 2, dtype=torch.float64, device=device)
    return base ** (-two_k / d_model)


def sinusoidal_positional_encoding(
    n_positions: int, d_model: int, base: float = 10000.0, dtype=None, device=None
) -> torch.Tensor:
    """(n_positions, d_model): column 2k is sin(t·ω_k), column 2k+1 is cos(t·ω_k)."""
    if n_positions < 0 or d_model < 1:
        raise ValueError(f"need n_positions >= 0 and d_model >= 1, got {n_positions}, {d_model}")
    t = torch.arange(n_positions, dtype=torch.float64, device=device)[:, None]
    angles = t * _frequencies(d_model, base, device)[None, :]  # (n, ceil(d/2))
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64, device=device)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe.to(dtype or torch.get_default_dtype())


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table to (B, L, d_model) embeddings; nothing is learned."""

    def __init__(self, d_model: int, max_len: int = 5000, base: float = 10000.0):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.register_buffer(
            "pe", sinusoidal_positional_encoding(max_len, d_model, base), persistent=False
        )

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        require_min_ndim("x", x, 2, "(B, L, d_model)")
        L = x.shape[-2]
        if offset + L > self.max_len:
            raise ValueError(f"sequence of length {offset + L} exceeds max_len={self.max_len}")
        return x + self.pe[offset : offset + L].to(x.dtype)


class LearnedPositionalEmbedding(nn.Module):
    """A learned vector per position, added to (B, L, d_model) embeddings (GPT-2, BERT, ViT)."""

    def __init__(self, n_positions: int, d_model: int):
        super().__init__()
        self.n_positions = n_positions
        self.embedding = nn.Embedding(n_positions, d_model)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        require_min_ndim("x", x, 2, "(B, L, d_model)")
        L = x.shape[-2]
        if offset + L > self.n_positions:
            raise ValueError(
                f"position {offset + L - 1} is beyond the {self.n_positions} learned positions: "
                "a learned table cannot extrapolate"
            )
        positions = torch.arange(offset, offset + L, device=x.device)
        return x + self.embedding(positions)


def rotary_embedding(
    x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0
) -> torch.Tensor:
    """RoPE: rotate each feature pair (2k, 2k+1) of x (..., L, d) by the angle t·ω_k.

    positions: (L,) integer or float positions; defaults to 0 .. L-1.
    After rotating queries and keys, q_s · k_t depends only on s - t.
    """
    require_min_ndim("x", x, 2, "(..., L, d)")
    L, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"rotary embedding needs an even feature size, got d={d}")
    if positions is None:
        positions = torch.arange(L, device=x.device)
    if positions.shape != (L,):
        raise ValueError(f"positions must have shape ({L},), got {tuple(positions.shape)}")
    angles = (
        positions.to(torch.float64)[:, None] * _frequencies(d, base, x.device)[None, :]
    )  # (L, d/2)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x_even * cos - x_odd * sin
    out[..., 1::2] = x_even * sin + x_odd * cos
    return out
