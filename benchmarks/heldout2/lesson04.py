"""Lesson 04 (positional encoding): held-out wrong and right implementations, from the exercise text."""

import math

import numpy as np
import torch
from torch import nn

# ---------------------------------------------------------------- sinusoidal_positional_encoding


def pe_vectorised(n_positions, d_model):
    """Right: one frequency per pair, even and odd columns filled by slicing, odd d_model trimmed."""
    t = torch.arange(n_positions, dtype=torch.get_default_dtype())[:, None]
    k2 = torch.arange(0, d_model, 2, dtype=torch.get_default_dtype())
    omega = 10000.0 ** (-k2 / d_model)
    angles = t * omega
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)[:, : d_model // 2]
    return pe


def pe_loops(n_positions, d_model):
    """Right: two Python loops with math.sin and math.cos, written into a tensor at the end."""
    rows = []
    for t in range(n_positions):
        row = []
        for i in range(d_model):
            k = i // 2
            omega = 1.0 / 10000 ** (2 * k / d_model)
            row.append(math.sin(t * omega) if i % 2 == 0 else math.cos(t * omega))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.get_default_dtype()).reshape(n_positions, d_model)


def pe_numpy_float64(n_positions, d_model):
    """Wrong: written in numpy and returned with torch.from_numpy, float64, not the default dtype."""
    t = np.arange(n_positions)[:, None]
    omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)
    pe = np.zeros((n_positions, d_model))
    pe[:, 0::2] = np.sin(t * omega)
    pe[:, 1::2] = np.cos(t * omega)[:, : d_model // 2]
    return torch.from_numpy(pe)


def pe_odd_crash(n_positions, d_model):
    """Wrong: the cos columns assigned the full (n, ceil(d/2)) block, which fails for odd d_model."""
    t = torch.arange(n_positions).float()[:, None]
    omega = torch.exp(-torch.arange(0, d_model, 2).float() * math.log(10000.0) / d_model)
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)
    return pe


def pe_exponent_doubled(n_positions, d_model):
    """Wrong: arange(0, d, 2) already gives 2k, and it is multiplied by 2 again: exponent 4k/d."""
    t = torch.arange(n_positions).float()[:, None]
    two_k = torch.arange(0, d_model, 2).float()
    omega = 10000.0 ** (-2 * two_k / d_model)
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)[:, : d_model // 2]
    return pe


def pe_sin_then_cos(n_positions, d_model):
    """Wrong: all the sin columns first, then all the cos columns (torch.cat), not interleaved."""
    t = torch.arange(n_positions).float()[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 2).float() / d_model)
    return torch.cat([torch.sin(t * omega), torch.cos(t * omega)], dim=-1)[:, :d_model]


def pe_positions_from_one(n_positions, d_model):
    """Wrong: positions 1 .. n_positions instead of 0 .. n_positions - 1."""
    t = torch.arange(1, n_positions + 1).float()[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 2).float() / d_model)
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)[:, : d_model // 2]
    return pe


def pe_positions_not_column(n_positions, d_model):
    """Wrong: positions kept as a (n,) row, multiplied elementwise with omega (no [:, None])."""
    t = torch.arange(n_positions).float()
    omega = 10000.0 ** (-torch.arange(0, d_model, 2).float() / d_model)
    angles = t * omega
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)[..., : d_model // 2]
    return pe


# ---------------------------------------------------------------- LearnedPositionalEmbedding


class _LearnedBase(nn.Module):
    def __init__(self, n_positions, d_model):
        super().__init__()
        self.n_positions = n_positions
        self.embedding = nn.Embedding(n_positions, d_model)


class LearnedArange(_LearnedBase):
    """Right: look up arange(offset, offset + L) in the embedding and add."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError(
                f"positions {offset}..{offset + L - 1} go past the table's {self.n_positions} rows"
            )
        positions = torch.arange(offset, offset + L, device=x.device)
        return x + self.embedding(positions)


class LearnedSlice(_LearnedBase):
    """Right: slice the weight matrix, check the end first, add with an explicit batch axis."""

    def forward(self, x, offset=0):
        end = offset + x.size(1)
        if end > self.embedding.num_embeddings:
            raise ValueError(f"no row for position {end - 1}: the table has {self.n_positions}")
        return x + self.embedding.weight[offset:end].unsqueeze(0)


class LearnedOffByOneCheck(_LearnedBase):
    """Wrong: raises when offset + L >= n_positions, so an exact fit is refused."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L >= self.n_positions:
            raise ValueError("sequence too long for the position table")
        return x + self.embedding(torch.arange(offset, offset + L, device=x.device))


class LearnedNoCheck(_LearnedBase):
    """Wrong: no length check, so a position past the table raises an IndexError, not a ValueError."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        return x + self.embedding(torch.arange(offset, offset + L, device=x.device))


class LearnedLengthFromDim0(_LearnedBase):
    """Wrong: L read as x.size(0), the batch size."""

    def forward(self, x, offset=0):
        L = x.size(0)
        if offset + L > self.n_positions:
            raise ValueError("sequence too long for the position table")
        return x + self.embedding(torch.arange(offset, offset + L, device=x.device))[None]


class LearnedInPlace(_LearnedBase):
    """Wrong: x += table rows, which modifies the caller's tensor in place."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError("sequence too long for the position table")
        x += self.embedding(torch.arange(offset, offset + L, device=x.device))
        return x


class LearnedArangeToL(_LearnedBase):
    """Wrong: positions arange(offset, L), so an offset shortens the rows instead of shifting them."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError("sequence too long for the position table")
        return x + self.embedding(torch.arange(offset, L, device=x.device))


class LearnedOffsetIgnored(_LearnedBase):
    """Wrong: the offset is checked but the rows 0 .. L-1 are always used."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError("sequence too long for the position table")
        return x + self.embedding.weight[:L]


# ---------------------------------------------------------------- rotary_embedding


def rope_stack(x, positions=None):
    """Right: even/odd slices, rotate, interleave back with stack + flatten."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    omega = 10000.0 ** (-torch.arange(0, d, 2, device=x.device, dtype=x.dtype) / d)
    theta = positions.to(x.dtype)[:, None] * omega
    cos, sin = torch.cos(theta), torch.sin(theta)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def rope_complex(x, positions=None):
    """Right: pairs as complex numbers, multiplied by exp(i * theta) (torch.polar)."""
    *lead, L, d = x.shape
    if positions is None:
        positions = torch.arange(L, device=x.device)
    k = torch.arange(d // 2, device=x.device, dtype=x.dtype)
    theta = torch.outer(positions.to(x.dtype), torch.exp(-2 * k / d * math.log(10000.0)))
    z = torch.view_as_complex(x.reshape(*lead, L, d // 2, 2).contiguous())
    rotated = z * torch.polar(torch.ones_like(theta), theta)
    return torch.view_as_real(rotated).reshape(x.shape)


def rope_sequential_in_place(x, positions=None):
    """Wrong: writes the even features into (a copy of) x, then computes the odd ones from the updated evens."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    omega = 10000.0 ** (-torch.arange(0, d, 2, device=x.device, dtype=x.dtype) / d)
    theta = positions.to(x.dtype)[:, None] * omega
    x = x.clone()
    x[..., 0::2] = x[..., 0::2] * torch.cos(theta) - x[..., 1::2] * torch.sin(theta)
    x[..., 1::2] = x[..., 0::2] * torch.sin(theta) + x[..., 1::2] * torch.cos(theta)
    return x


def rope_unpack_two_dims(x, positions=None):
    """Wrong: L, d = x.shape, which only works for a 2-D x."""
    L, d = x.shape
    if positions is None:
        positions = torch.arange(L, device=x.device)
    omega = 10000.0 ** (-torch.arange(0, d, 2, device=x.device, dtype=x.dtype) / d)
    theta = positions.to(x.dtype)[:, None] * omega
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack(
        [x0 * theta.cos() - x1 * theta.sin(), x0 * theta.sin() + x1 * theta.cos()], -1
    ).flatten(-2)


def rope_concat_halves(x, positions=None):
    """Wrong: the rotated evens and odds concatenated (torch.cat), not put back in their pairs."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    omega = 10000.0 ** (-torch.arange(0, d, 2, device=x.device, dtype=x.dtype) / d)
    theta = positions.to(x.dtype)[:, None] * omega
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.cat([x0 * theta.cos() - x1 * theta.sin(), x0 * theta.sin() + x1 * theta.cos()], -1)


def rope_float32_angles(x, positions=None):
    """Wrong: the angles built in float32 (torch.arange(...).float()), whatever the dtype of x."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    omega = 10000.0 ** (-torch.arange(0, d, 2, device=x.device).float() / d)
    theta = positions.float()[:, None] * omega
    cos, sin = torch.cos(theta), torch.sin(theta)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def rope_sin_sign_swapped(x, positions=None):
    """Wrong: the rotation matrix written with +sin on top and -sin below (rotates by -angle)."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    omega = 10000.0 ** (-torch.arange(0, d, 2, device=x.device, dtype=x.dtype) / d)
    theta = positions.to(x.dtype)[:, None] * omega
    cos, sin = torch.cos(theta), torch.sin(theta)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos + x1 * sin, -x0 * sin + x1 * cos], dim=-1).flatten(-2)


def rope_omega_per_feature(x, positions=None):
    """Wrong: omega over arange(d // 2) with exponent -k/d (the pair index, but not doubled)."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    omega = 10000.0 ** (-torch.arange(d // 2, device=x.device, dtype=x.dtype) / d)
    theta = positions.to(x.dtype)[:, None] * omega
    cos, sin = torch.cos(theta), torch.sin(theta)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


WRONG = {
    "sinusoidal_positional_encoding": [
        pe_numpy_float64,
        pe_odd_crash,
        pe_exponent_doubled,
        pe_sin_then_cos,
        pe_positions_from_one,
        pe_positions_not_column,
    ],
    "LearnedPositionalEmbedding": [
        LearnedOffByOneCheck,
        LearnedNoCheck,
        LearnedLengthFromDim0,
        LearnedInPlace,
        LearnedArangeToL,
        LearnedOffsetIgnored,
    ],
    "rotary_embedding": [
        rope_sequential_in_place,
        rope_unpack_two_dims,
        rope_concat_halves,
        rope_float32_angles,
        rope_sin_sign_swapped,
        rope_omega_per_feature,
    ],
}
RIGHT = {
    "sinusoidal_positional_encoding": pe_vectorised,
    "LearnedPositionalEmbedding": LearnedArange,
    "rotary_embedding": rope_stack,
}
RIGHT2 = {
    "sinusoidal_positional_encoding": pe_loops,
    "LearnedPositionalEmbedding": LearnedSlice,
    "rotary_embedding": rope_complex,
}
