"""Lesson 04 (positional encoding): held-out set six, wrong and right implementations from the exercise text only."""

import math

import torch
from torch import nn

# ---------------------------------------------------------------- sinusoidal_positional_encoding


def sin_right(n_positions, d_model):
    """Right: omega from arange(0, d, 2), sin into even columns, cos into the odd ones (trimmed for odd d)."""
    t = torch.arange(n_positions, dtype=torch.float32)[:, None]
    omega = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)[:, : d_model // 2]
    return pe


def sin_right2(n_positions, d_model):
    """Right: complex exponentials e^{i t w} in float64, interleaved (sin, cos) via stack/flatten, cut to d_model, cast to the default dtype."""
    k = torch.arange((d_model + 1) // 2, dtype=torch.float64)
    omega = torch.exp(-(2 * k / d_model) * math.log(10000.0))
    angles = torch.outer(torch.arange(n_positions, dtype=torch.float64), omega)
    z = torch.polar(torch.ones_like(angles), angles)  # cos + i sin
    pe = torch.stack([z.imag, z.real], dim=-1).flatten(-2)[:, :d_model]
    return pe.to(torch.get_default_dtype())


def sin_int_div_exponent(n_positions, d_model):
    """Wrong: integer division in the exponent (2k // d_model is 0), every frequency is 1."""
    pe = torch.zeros(n_positions, d_model)
    t = torch.arange(n_positions)[:, None]
    two_k = torch.arange(0, d_model, 2)
    omega = 10000.0 ** (-(two_k // d_model)).float()
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)[:, : d_model // 2]
    return pe


def sin_double_counted(n_positions, d_model):
    """Wrong: k taken from arange(0, d, 2) and then doubled again: exponent 4k/d."""
    pe = torch.zeros(n_positions, d_model)
    t = torch.arange(n_positions, dtype=torch.float32)[:, None]
    k = torch.arange(0, d_model, 2, dtype=torch.float32)
    omega = 10000.0 ** (-2 * k / d_model)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)[:, : d_model // 2]
    return pe


def sin_odd_exponent_d_minus_one(n_positions, d_model):
    """Wrong: for odd d_model uses d_model - 1 in the exponent (rounds d down to even)."""
    d_even = d_model - d_model % 2
    pe = torch.zeros(n_positions, d_model)
    t = torch.arange(n_positions, dtype=torch.float32)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_even)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)[:, : d_model // 2]
    return pe


def sin_odd_crash(n_positions, d_model):
    """Wrong: assigns the full cos block to pe[:, 1::2], which fails for odd d_model."""
    pe = torch.zeros(n_positions, d_model)
    t = torch.arange(n_positions, dtype=torch.float32)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)
    return pe


def sin_float64(n_positions, d_model):
    """Wrong: computed and returned in float64, not the default dtype."""
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    t = torch.arange(n_positions, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)[:, : d_model // 2]
    return pe


def sin_cat_halves(n_positions, d_model):
    """Wrong: torch.cat([sin, cos], -1): all sines first, then all cosines."""
    t = torch.arange(n_positions, dtype=torch.float32)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    return torch.cat([torch.sin(t * omega), torch.cos(t * omega)], dim=-1)[:, :d_model]


def sin_positions_from_one(n_positions, d_model):
    """Wrong: positions t = 1 .. n_positions."""
    t = torch.arange(1, n_positions + 1, dtype=torch.float32)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)[:, : d_model // 2]
    return pe


# ---------------------------------------------------------------- LearnedPositionalEmbedding


class _LPE(nn.Module):
    def __init__(self, n_positions, d_model):
        super().__init__()
        self.n_positions = n_positions
        self.embedding = nn.Embedding(n_positions, d_model)


class LPERight(_LPE):
    """Right: ValueError past the table, then x + embedding(arange(offset, offset + L))."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError(
                f"positions up to {offset + L - 1} but the table has {self.n_positions} rows"
            )
        pos = torch.arange(offset, offset + L, device=x.device)
        return x + self.embedding(pos).to(x.dtype)


class LPERight2(_LPE):
    """Right: narrow() on the weight table, unsqueeze for the batch, type_as; checks with a negated test."""

    def forward(self, x, offset=0):
        length = x.size(-2)
        if not offset + length <= self.embedding.num_embeddings:
            raise ValueError("sequence runs past the learned position table")
        rows = self.embedding.weight.narrow(0, offset, length)
        return torch.add(x, rows.unsqueeze(0).type_as(x))


class LPEOffByOneCheck(_LPE):
    """Wrong: raises when offset + L >= n_positions, rejecting a sequence that exactly fills the table."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L >= self.n_positions:
            raise ValueError("too long")
        return x + self.embedding(torch.arange(offset, offset + L, device=x.device))


class LPELengthOnlyCheck(_LPE):
    """Wrong: checks only L > n_positions, so a shifted sequence past the end raises IndexError, not ValueError."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if L > self.n_positions:
            raise ValueError("too long")
        return x + self.embedding(torch.arange(offset, offset + L, device=x.device))


class LPEArangeSlip(_LPE):
    """Wrong: torch.arange(offset, L) instead of arange(offset, offset + L)."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError("too long")
        return x + self.embedding(torch.arange(offset, L, device=x.device))


class LPEInPlace(_LPE):
    """Wrong: adds the positions into x in place (x += ...), editing the caller's tensor."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError("too long")
        x += self.embedding(torch.arange(offset, offset + L, device=x.device))
        return x


class LPEDetachedTable(_LPE):
    """Wrong: reads the rows through .data, so no gradient reaches the table."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError("too long")
        return x + self.embedding.weight.data[offset : offset + L]


class LPEModuloWrap(_LPE):
    """Wrong: wraps positions modulo n_positions instead of raising."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        pos = torch.arange(offset, offset + L, device=x.device) % self.n_positions
        return x + self.embedding(pos)


class LPESeqAxisFromBatch(_LPE):
    """Wrong: takes L from x.shape[0] (the batch size)."""

    def forward(self, x, offset=0):
        L = x.shape[0]
        if offset + L > self.n_positions:
            raise ValueError("too long")
        return x + self.embedding(torch.arange(offset, offset + x.shape[1], device=x.device))


# ---------------------------------------------------------------- rotary_embedding


def rope_right(x, positions=None):
    """Right: angles t * w_k, rotate the even/odd pairs, interleave back with stack/flatten."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    omega = 10000.0 ** (-torch.arange(0, d, 2, device=x.device, dtype=x.dtype) / d)
    angles = positions.to(device=x.device, dtype=x.dtype)[:, None] * omega
    cos, sin = torch.cos(angles), torch.sin(angles)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def rope_right2(x, positions=None):
    """Right: complex multiplication: view pairs as complex numbers, multiply by e^{i theta} (float64 angles)."""
    *_, L, d = x.shape
    t = torch.arange(L, device=x.device) if positions is None else positions.to(x.device)
    k = torch.arange(d // 2, device=x.device, dtype=torch.float64)
    theta = t.to(torch.float64)[:, None] * torch.exp(-(2 * k / d) * math.log(10000.0))
    rot = torch.polar(torch.ones_like(theta), theta)
    xc = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], d // 2, 2).contiguous())
    out = torch.view_as_real(xc * rot).reshape(x.shape)
    return out.to(x.dtype)


def rope_aliasing(x, positions=None):
    """Wrong: writes the first rotated half into a clone, then reads x0 from the clone (aliased view) for the second."""
    L, d = x.shape[-2], x.shape[-1]
    t = torch.arange(L, device=x.device) if positions is None else positions
    omega = 10000.0 ** (-torch.arange(0, d, 2, device=x.device, dtype=x.dtype) / d)
    angles = t.to(x.dtype)[:, None] * omega
    out = x.clone()
    x0, x1 = out[..., 0::2], out[..., 1::2]
    out[..., 0::2] = x0 * torch.cos(angles) - x1 * torch.sin(angles)
    out[..., 1::2] = x0 * torch.sin(angles) + x1 * torch.cos(angles)
    return out


def rope_cat_layout(x, positions=None):
    """Wrong: torch.cat of the rotated evens and odds: the output is in rotate-half order, not interleaved."""
    L, d = x.shape[-2], x.shape[-1]
    t = torch.arange(L, device=x.device) if positions is None else positions
    omega = 10000.0 ** (-torch.arange(0, d, 2, device=x.device, dtype=x.dtype) / d)
    angles = t.to(x.dtype)[:, None] * omega
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.cat(
        [
            x0 * torch.cos(angles) - x1 * torch.sin(angles),
            x0 * torch.sin(angles) + x1 * torch.cos(angles),
        ],
        -1,
    )


def rope_sign_slip(x, positions=None):
    """Wrong: the second component is x1 cos - x0 sin (a sign slip: not a rotation)."""
    L, d = x.shape[-2], x.shape[-1]
    t = torch.arange(L, device=x.device) if positions is None else positions
    omega = 10000.0 ** (-torch.arange(0, d, 2, device=x.device, dtype=x.dtype) / d)
    angles = t.to(x.dtype)[:, None] * omega
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack(
        [
            x0 * torch.cos(angles) - x1 * torch.sin(angles),
            x1 * torch.cos(angles) - x0 * torch.sin(angles),
        ],
        -1,
    ).flatten(-2)


def rope_float32_angles(x, positions=None):
    """Wrong: builds omega and the angles in float32 whatever x's dtype (float64 loses precision)."""
    L, d = x.shape[-2], x.shape[-1]
    t = torch.arange(L, device=x.device) if positions is None else positions
    omega = 10000.0 ** (-torch.arange(0, d, 2, device=x.device).float() / d)
    angles = t.float()[:, None] * omega
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return (
        torch.stack(
            [
                x0 * torch.cos(angles) - x1 * torch.sin(angles),
                x0 * torch.sin(angles) + x1 * torch.cos(angles),
            ],
            -1,
        )
        .flatten(-2)
        .to(x.dtype)
    )


def rope_int_div_exponent(x, positions=None):
    """Wrong: integer division in the exponent, arange(0, d, 2) // d is 0: every omega is 1."""
    L, d = x.shape[-2], x.shape[-1]
    t = torch.arange(L, device=x.device) if positions is None else positions
    omega = 10000.0 ** (-(torch.arange(0, d, 2, device=x.device) // d)).to(x.dtype)
    angles = t.to(x.dtype)[:, None] * omega
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack(
        [
            x0 * torch.cos(angles) - x1 * torch.sin(angles),
            x0 * torch.sin(angles) + x1 * torch.cos(angles),
        ],
        -1,
    ).flatten(-2)


def rope_length_from_first_axis(x, positions=None):
    """Wrong: default positions arange(x.shape[0]) (the first axis, not the sequence axis -2)."""
    L, d = x.shape[0], x.shape[-1]
    t = torch.arange(L, device=x.device) if positions is None else positions
    omega = 10000.0 ** (-torch.arange(0, d, 2, device=x.device, dtype=x.dtype) / d)
    angles = t.to(x.dtype)[:, None] * omega
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack(
        [
            x0 * torch.cos(angles) - x1 * torch.sin(angles),
            x0 * torch.sin(angles) + x1 * torch.cos(angles),
        ],
        -1,
    ).flatten(-2)


def rope_inplace(x, positions=None):
    """Wrong: rotates x in place under no_grad and returns it (the caller's tensor changes)."""
    L, d = x.shape[-2], x.shape[-1]
    t = torch.arange(L, device=x.device) if positions is None else positions
    omega = 10000.0 ** (-torch.arange(0, d, 2, device=x.device, dtype=x.dtype) / d)
    angles = t.to(x.dtype)[:, None] * omega
    x0, x1 = x[..., 0::2].clone(), x[..., 1::2].clone()
    with torch.no_grad():
        x[..., 0::2] = x0 * torch.cos(angles) - x1 * torch.sin(angles)
        x[..., 1::2] = x0 * torch.sin(angles) + x1 * torch.cos(angles)
    return x


WRONG = {
    "sinusoidal_positional_encoding": [
        sin_int_div_exponent,
        sin_double_counted,
        sin_odd_exponent_d_minus_one,
        sin_odd_crash,
        sin_float64,
        sin_cat_halves,
        sin_positions_from_one,
    ],
    "LearnedPositionalEmbedding": [
        LPEOffByOneCheck,
        LPELengthOnlyCheck,
        LPEArangeSlip,
        LPEInPlace,
        LPEDetachedTable,
        LPEModuloWrap,
        LPESeqAxisFromBatch,
    ],
    "rotary_embedding": [
        rope_aliasing,
        rope_cat_layout,
        rope_sign_slip,
        rope_float32_angles,
        rope_int_div_exponent,
        rope_length_from_first_axis,
        rope_inplace,
    ],
}
RIGHT = {
    "sinusoidal_positional_encoding": sin_right,
    "LearnedPositionalEmbedding": LPERight,
    "rotary_embedding": rope_right,
}
RIGHT2 = {
    "sinusoidal_positional_encoding": sin_right2,
    "LearnedPositionalEmbedding": LPERight2,
    "rotary_embedding": rope_right2,
}
