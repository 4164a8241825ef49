"""Lesson 04 (positional encoding): held-out wrong and right implementations, from the exercise text only."""

import math

import torch
from torch import nn

# ---------------------------------------------------------------- sinusoidal_positional_encoding


def pe_vectorised(n_positions, d_model):
    """Right: one frequency per pair, angles in float64, even columns sin, odd columns cos."""
    t = torch.arange(n_positions, dtype=torch.float64)[:, None]
    k = torch.arange((d_model + 1) // 2, dtype=torch.float64)
    angles = t * 10000.0 ** (-2 * k / d_model)  # (n_positions, ceil(d_model / 2))
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe.to(torch.get_default_dtype())


def pe_loops(n_positions, d_model):
    """Right: two Python loops with math.sin / math.cos, then torch.tensor in the default dtype."""
    rows = []
    for t in range(n_positions):
        row = []
        for j in range(d_model):
            k = j // 2
            angle = t * math.exp(-(2 * k / d_model) * math.log(10000.0))
            row.append(math.sin(angle) if j % 2 == 0 else math.cos(angle))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.get_default_dtype()).reshape(n_positions, d_model)


def pe_frequency_per_column(n_positions, d_model):
    """Wrong: ω uses the column index i (10000^(-i/d)), so a sin and its cos differ in frequency."""
    t = torch.arange(n_positions, dtype=torch.float64)[:, None]
    i = torch.arange(d_model, dtype=torch.float64)
    angles = t * 10000.0 ** (-i / d_model)
    pe = torch.where(i.long() % 2 == 0, torch.sin(angles), torch.cos(angles))
    return pe.to(torch.get_default_dtype())


def pe_odd_mismatch(n_positions, d_model):
    """Wrong: one frequency vector for both halves, which breaks for odd d_model."""
    t = torch.arange(n_positions).float()[:, None]
    w = 10000.0 ** (-torch.arange(0, d_model, 2).float() / d_model)
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(t * w)
    pe[:, 1::2] = torch.cos(t * w)
    return pe


def pe_odd_rounded_up(n_positions, d_model):
    """Wrong: odd d_model built as d_model + 1 columns (exponent over d_model + 1), then cut."""
    d = d_model + d_model % 2
    t = torch.arange(n_positions, dtype=torch.float64)[:, None]
    k = torch.arange(d // 2, dtype=torch.float64)
    angles = t * 10000.0 ** (-2 * k / d)
    pe = torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).reshape(n_positions, d)
    return pe[:, :d_model].to(torch.get_default_dtype())


def pe_positions_from_1(n_positions, d_model):
    """Wrong: positions t = 1 .. n_positions instead of 0 .. n_positions - 1."""
    t = torch.arange(1, n_positions + 1, dtype=torch.float64)[:, None]
    k = torch.arange((d_model + 1) // 2, dtype=torch.float64)
    angles = t * 10000.0 ** (-2 * k / d_model)
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe.to(torch.get_default_dtype())


def pe_float64(n_positions, d_model):
    """Wrong: computed in float64 and returned as float64, not in the default dtype."""
    t = torch.arange(n_positions, dtype=torch.float64)[:, None]
    k = torch.arange((d_model + 1) // 2, dtype=torch.float64)
    angles = t * 10000.0 ** (-2 * k / d_model)
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe


def pe_sin_cos_halves(n_positions, d_model):
    """Wrong: all the sines in the first half and all the cosines in the second, not interleaved."""
    t = torch.arange(n_positions, dtype=torch.float64)[:, None]
    k = torch.arange((d_model + 1) // 2, dtype=torch.float64)
    angles = t * 10000.0 ** (-2 * k / d_model)
    pe = torch.cat([torch.sin(angles), torch.cos(angles[:, : d_model // 2])], dim=-1)
    return pe.to(torch.get_default_dtype())


def pe_divided_by_omega(n_positions, d_model):
    """Wrong: angle t / ω_k (the paper's t / 10000^(2k/d) mixed with ω), frequencies that grow."""
    t = torch.arange(n_positions, dtype=torch.float64)[:, None]
    k = torch.arange((d_model + 1) // 2, dtype=torch.float64)
    omega = 10000.0 ** (-2 * k / d_model)
    angles = t / omega
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe.to(torch.get_default_dtype())


# ---------------------------------------------------------------- LearnedPositionalEmbedding


class _LPEBase(nn.Module):
    def __init__(self, n_positions, d_model):
        super().__init__()
        self.n_positions = n_positions
        self.embedding = nn.Embedding(n_positions, d_model)


class LPEArange(_LPEBase):
    """Right: a bound check, arange(offset, offset + L) through the embedding, cast to x's dtype."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError(
                f"positions {offset}..{offset + L - 1} go past the table's {self.n_positions} rows"
            )
        positions = torch.arange(offset, offset + L, device=x.device)
        return x + self.embedding(positions).to(x.dtype)


class LPEWeightSlice(_LPEBase):
    """Right: slices the embedding's weight rows directly, unsqueezed over the batch."""

    def forward(self, x, offset=0):
        length = x.size(1)
        table = self.embedding.weight
        if offset + length > table.shape[0]:
            raise ValueError(
                f"a learned table of {table.shape[0]} rows has no row for position "
                f"{offset + length - 1}"
            )
        rows = table[offset : offset + length].unsqueeze(0).to(dtype=x.dtype)
        return x + rows.expand_as(x)


class LPEBoundOffByOne(_LPEBase):
    """Wrong: raises when offset + L >= n_positions, rejecting a sequence that exactly fills the table."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L >= self.n_positions:
            raise ValueError("sequence too long for the position table")
        positions = torch.arange(offset, offset + L, device=x.device)
        return x + self.embedding(positions).to(x.dtype)


class LPEBoundIgnoresOffset(_LPEBase):
    """Wrong: checks only L > n_positions, so a shifted sequence past the end hits an IndexError."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if L > self.n_positions:
            raise ValueError("sequence too long for the position table")
        positions = torch.arange(offset, offset + L, device=x.device)
        return x + self.embedding(positions).to(x.dtype)


class LPEOffsetOnlyInCheck(_LPEBase):
    """Wrong: uses offset in the bound check but looks up rows 0 .. L - 1."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError("sequence too long for the position table")
        positions = torch.arange(L, device=x.device)
        return x + self.embedding(positions).to(x.dtype)


class LPEAddsInPlace(_LPEBase):
    """Wrong: x += table rows, changing the caller's tensor in place."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError("sequence too long for the position table")
        positions = torch.arange(offset, offset + L, device=x.device)
        x += self.embedding(positions).to(x.dtype)
        return x


class LPENoDtypeCast(_LPEBase):
    """Wrong: x + table rows without a cast: a float64 table turns a float32 x into float64."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError("sequence too long for the position table")
        positions = torch.arange(offset, offset + L, device=x.device)
        return x + self.embedding(positions)


class LPEWrapsAround(_LPEBase):
    """Wrong: positions taken modulo n_positions (a circular table) instead of raising."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        positions = torch.arange(offset, offset + L, device=x.device) % self.n_positions
        return x + self.embedding(positions).to(x.dtype)


class LPERaisesIndexError(_LPEBase):
    """Wrong: raises IndexError, not the ValueError the text asks for, past the last row."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise IndexError(f"position {offset + L - 1} is beyond the table")
        positions = torch.arange(offset, offset + L, device=x.device)
        return x + self.embedding(positions).to(x.dtype)


# ---------------------------------------------------------------- rotary_embedding


def _angles(positions, d, device):
    k = torch.arange(d // 2, dtype=torch.float64, device=device)
    omega = 10000.0 ** (-2 * k / d)
    return positions.to(device=device, dtype=torch.float64)[:, None] * omega  # (L, d/2)


def rope_pairs(x, positions=None):
    """Right: even and odd features rotated by t·ω_k, interleaved back with stack + flatten."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    theta = _angles(positions, d, x.device)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return rotated.flatten(-2)


def rope_complex(x, positions=None):
    """Right: each pair as a complex number, multiplied by e^(i t ω_k) (torch.polar)."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    theta = _angles(positions, d, x.device)
    rotation = torch.polar(torch.ones_like(theta), theta)
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * rotation).reshape(x.shape).to(x.dtype)


def rope_rotate_half(x, positions=None):
    """Wrong: rotate-half layout, pairing feature k with k + d/2 instead of neighbours."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    theta = _angles(positions, d, x.device)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    first, second = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)


def rope_positions_or_default(x, positions=None):
    """Wrong: `positions = positions or arange(L)` tests a tensor's truth value."""
    L, d = x.shape[-2], x.shape[-1]
    positions = positions or torch.arange(L, device=x.device)
    theta = _angles(positions, d, x.device)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


def rope_two_dim_only(x, positions=None):
    """Wrong: unpacks L, d = x.shape, so batched (..., L, d) inputs fail."""
    L, d = x.shape
    if positions is None:
        positions = torch.arange(L, device=x.device)
    theta = _angles(positions, d, x.device)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


def rope_exponent_k_over_d(x, positions=None):
    """Wrong: ω_k = 10000^(-k/d), the pair index without its factor 2."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    k = torch.arange(d // 2, dtype=torch.float64, device=x.device)
    theta = positions.to(torch.float64)[:, None] * 10000.0 ** (-k / d)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


def rope_sequential_overwrite(x, positions=None):
    """Wrong: writes the new even features first, then computes the odd ones from the overwritten even."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    theta = _angles(positions, d, x.device)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    out = x.clone()
    even, odd = out[..., 0::2], out[..., 1::2]
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def rope_in_place(x, positions=None):
    """Wrong: writes the rotated pairs back into x itself, changing the caller's tensor."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    theta = _angles(positions, d, x.device)
    cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
    even, odd = x[..., 0::2].clone(), x[..., 1::2].clone()
    x[..., 0::2] = even * cos - odd * sin
    x[..., 1::2] = even * sin + odd * cos
    return x


def rope_float64_result(x, positions=None):
    """Wrong: cos and sin left in float64, so a float32 x comes back as float64."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    theta = _angles(positions, d, x.device)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack(
        [even * theta.cos() - odd * theta.sin(), even * theta.sin() + odd * theta.cos()], dim=-1
    ).flatten(-2)


WRONG = {
    "sinusoidal_positional_encoding": [
        pe_frequency_per_column,
        pe_odd_mismatch,
        pe_odd_rounded_up,
        pe_positions_from_1,
        pe_float64,
        pe_sin_cos_halves,
        pe_divided_by_omega,
    ],
    "LearnedPositionalEmbedding": [
        LPEBoundOffByOne,
        LPEBoundIgnoresOffset,
        LPEOffsetOnlyInCheck,
        LPEAddsInPlace,
        LPENoDtypeCast,
        LPEWrapsAround,
        LPERaisesIndexError,
    ],
    "rotary_embedding": [
        rope_rotate_half,
        rope_positions_or_default,
        rope_two_dim_only,
        rope_exponent_k_over_d,
        rope_sequential_overwrite,
        rope_in_place,
        rope_float64_result,
    ],
}

RIGHT = {
    "sinusoidal_positional_encoding": pe_vectorised,
    "LearnedPositionalEmbedding": LPEArange,
    "rotary_embedding": rope_pairs,
}

RIGHT2 = {
    "sinusoidal_positional_encoding": pe_loops,
    "LearnedPositionalEmbedding": LPEWeightSlice,
    "rotary_embedding": rope_complex,
}
