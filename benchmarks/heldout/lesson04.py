"""Lesson 04: sinusoidal table, learned positions, rotary embeddings."""

import math

import torch
from torch import nn


def _omega(n_pairs, d, base=10000.0):
    return base ** (-2 * torch.arange(n_pairs, dtype=torch.get_default_dtype()) / d)


def sinusoidal_right(n_positions, d_model):
    """Correct."""
    t = torch.arange(n_positions, dtype=torch.get_default_dtype())[:, None]
    angles = t * _omega((d_model + 1) // 2, d_model)
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe


def sinusoidal_half_split(n_positions, d_model):
    """Sin in the first half of the columns, cos in the second half (not interleaved)."""
    t = torch.arange(n_positions, dtype=torch.get_default_dtype())[:, None]
    angles = t * _omega(d_model // 2, d_model)
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


def sinusoidal_positions_from_1(n_positions, d_model):
    """Counts positions from 1."""
    return sinusoidal_right(n_positions + 1, d_model)[1:]


def sinusoidal_column_index(n_positions, d_model):
    """Uses the column index i (not 2k) in the exponent: omega = 10000^(-i/d) per column."""
    t = torch.arange(n_positions, dtype=torch.get_default_dtype())[:, None]
    i = torch.arange(d_model, dtype=torch.get_default_dtype())
    angles = t * 10000.0 ** (-i / d_model)
    pe = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, 1::2])
    return pe


def sinusoidal_d_minus_1(n_positions, d_model):
    """Odd d_model handled by using d_model - 1 in the exponent."""
    d = d_model - (d_model % 2)
    t = torch.arange(n_positions, dtype=torch.get_default_dtype())[:, None]
    angles = t * _omega((d_model + 1) // 2, d)
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe


def sinusoidal_float64(n_positions, d_model):
    """Builds the table in float64 (numpy-style) and returns it without casting back."""
    t = torch.arange(n_positions, dtype=torch.float64)[:, None]
    angles = t * 10000.0 ** (-2 * torch.arange((d_model + 1) // 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe


def sinusoidal_even_only(n_positions, d_model):
    """Ignores odd d_model: builds d_model - 1 columns for an odd width."""
    return sinusoidal_right(n_positions, d_model - d_model % 2)


class _LPEBase(nn.Module):
    def __init__(self, n_positions, d_model):
        super().__init__()
        self.n_positions = n_positions
        self.embedding = nn.Embedding(n_positions, d_model)


class LPERight(_LPEBase):
    """Correct."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError(
                f"positions {offset}..{offset + L - 1} exceed the table of {self.n_positions}"
            )
        pos = torch.arange(offset, offset + L, device=x.device)
        return x + self.embedding(pos).to(x.dtype)


class LPEOffByOneBound(_LPEBase):
    """Raises only when offset + L exceeds n_positions + 1 (>= instead of >, off by one)."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L - 1 > self.n_positions:
            raise ValueError("too long")
        pos = torch.arange(offset, offset + L, device=x.device)
        return x + self.embedding(pos).to(x.dtype)


class LPEBatchAxisPositions(_LPEBase):
    """Indexes positions by the batch axis (x.shape[0])."""

    def forward(self, x, offset=0):
        B = x.shape[0]
        if offset + x.shape[1] > self.n_positions:
            raise ValueError("too long")
        pos = torch.arange(offset, offset + B, device=x.device)
        return x + self.embedding(pos).to(x.dtype)[:, None, :]


class LPEIndexError(_LPEBase):
    """Lets nn.Embedding raise its own IndexError instead of a ValueError."""

    def forward(self, x, offset=0):
        pos = torch.arange(offset, offset + x.shape[1], device=x.device)
        return x + self.embedding(pos).to(x.dtype)


class LPEOffsetSubtracted(_LPEBase):
    """Uses rows offset - L .. offset - 1 (the offset read as the end)."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError("too long")
        start = max(offset - L, 0) if offset else 0
        pos = torch.arange(start, start + L, device=x.device)
        return x + self.embedding(pos).to(x.dtype)


class LPEScaled(_LPEBase):
    """Scales x by sqrt(d_model) before adding positions (the token-embedding convention)."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError("too long")
        pos = torch.arange(offset, offset + L, device=x.device)
        return x * math.sqrt(x.shape[-1]) + self.embedding(pos).to(x.dtype)


def _rope_angles(x, positions):
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    w = 10000.0 ** (-2 * torch.arange(d // 2, device=x.device, dtype=x.dtype) / d)
    return positions.to(x.dtype)[:, None] * w


def rotary_right(x, positions=None):
    """Correct."""
    a = _rope_angles(x, positions)
    c, s = torch.cos(a), torch.sin(a)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def rotary_cos_sin_swapped(x, positions=None):
    """Swaps cos and sin in the rotation (x0 sin - x1 cos)."""
    a = _rope_angles(x, positions)
    c, s = torch.cos(a), torch.sin(a)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * s - x1 * c
    out[..., 1::2] = x0 * c + x1 * s
    return out


def rotary_concat_halves(x, positions=None):
    """Rotates correctly but writes the result as [even outputs, odd outputs] (not interleaved)."""
    a = _rope_angles(x, positions)
    c, s = torch.cos(a), torch.sin(a)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.cat([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1)


def rotary_inplace_overwrite(x, positions=None):
    """Overwrites the even features first, then uses the new even values for the odd ones."""
    a = _rope_angles(x, positions)
    c, s = torch.cos(a), torch.sin(a)
    out = x.clone()
    out[..., 0::2] = out[..., 0::2] * c - out[..., 1::2] * s
    out[..., 1::2] = out[..., 0::2] * s + out[..., 1::2] * c
    return out


def rotary_positions_from_1(x, positions=None):
    """Default positions start at 1."""
    if positions is None:
        positions = torch.arange(1, x.shape[-2] + 1, device=x.device)
    return rotary_right(x, positions)


def rotary_angle_per_feature(x, positions=None):
    """One frequency per feature (10000^(-i/d)) instead of one per pair."""
    L, d = x.shape[-2], x.shape[-1]
    pos = torch.arange(L, device=x.device) if positions is None else positions
    w = 10000.0 ** (-torch.arange(d, device=x.device, dtype=x.dtype) / d)
    a = pos.to(x.dtype)[:, None] * w
    c0, s0 = torch.cos(a[:, 0::2]), torch.sin(a[:, 0::2])
    c1, s1 = torch.cos(a[:, 1::2]), torch.sin(a[:, 1::2])
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * c0 - x1 * s0
    out[..., 1::2] = x0 * s1 + x1 * c1
    return out


WRONG = {
    "sinusoidal_positional_encoding": [
        sinusoidal_half_split,
        sinusoidal_positions_from_1,
        sinusoidal_column_index,
        sinusoidal_d_minus_1,
        sinusoidal_float64,
        sinusoidal_even_only,
    ],
    "LearnedPositionalEmbedding": [
        LPEOffByOneBound,
        LPEBatchAxisPositions,
        LPEIndexError,
        LPEOffsetSubtracted,
        LPEScaled,
    ],
    "rotary_embedding": [
        rotary_cos_sin_swapped,
        rotary_concat_halves,
        rotary_inplace_overwrite,
        rotary_positions_from_1,
        rotary_angle_per_feature,
    ],
}
RIGHT = {
    "sinusoidal_positional_encoding": sinusoidal_right,
    "LearnedPositionalEmbedding": LPERight,
    "rotary_embedding": rotary_right,
}
