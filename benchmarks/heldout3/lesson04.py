"""Lesson 04 (positional encoding): held-out wrong and right implementations, from the exercise
text only."""

import math

import torch
from torch import nn

# ---------------------------------------------------------------- sinusoidal_positional_encoding


def pe_vectorised(n_positions, d_model):
    """Right: one frequency per pair, even columns sin, odd columns cos (sliced to fit)."""
    t = torch.arange(n_positions, dtype=torch.get_default_dtype())[:, None]
    k = torch.arange(0, d_model, 2, dtype=torch.get_default_dtype())  # 2k
    omega = torch.exp(-math.log(10000.0) * k / d_model)
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)[:, : d_model // 2]
    return pe


def pe_loops(n_positions, d_model):
    """Right: two Python loops over positions and columns with math.sin and math.cos."""
    rows = []
    for t in range(n_positions):
        row = []
        for i in range(d_model):
            omega = 10000 ** (-2 * (i // 2) / d_model)
            row.append(math.sin(t * omega) if i % 2 == 0 else math.cos(t * omega))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.get_default_dtype()).reshape(n_positions, d_model)


def pe_sin_then_cos_halves(n_positions, d_model):
    """Concatenates all the sines then all the cosines instead of interleaving them."""
    t = torch.arange(n_positions).float()[:, None]
    omega = 10000 ** (-torch.arange(0, d_model, 2).float() / d_model)
    return torch.cat([torch.sin(t * omega), torch.cos(t * omega)], dim=-1)[:, :d_model]


def pe_column_exponent(n_positions, d_model):
    """Uses the column index i in the exponent (10000^(-i/d)), so a pair's columns differ."""
    t = torch.arange(n_positions).float()[:, None]
    i = torch.arange(d_model).float()
    angles = t * 10000 ** (-i / d_model)
    pe = torch.empty(n_positions, d_model)
    pe[:, 0::2] = torch.sin(angles[:, 0::2])
    pe[:, 1::2] = torch.cos(angles[:, 1::2])
    return pe


def pe_odd_crash(n_positions, d_model):
    """Assigns all the cosines into pe[:, 1::2], which has one column too few for odd d_model."""
    t = torch.arange(n_positions).float().unsqueeze(1)
    omega = torch.pow(10000.0, -torch.arange(0, d_model, 2).float() / d_model)
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)
    return pe


def pe_float64(n_positions, d_model):
    """Builds the table in float64 (math-precise) and returns it so, not in the default dtype."""
    t = torch.arange(n_positions, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)[:, : d_model // 2]
    return pe


def pe_transposed_loops(n_positions, d_model):
    """Loops build one list per feature column, so the table comes out (d_model, n_positions)."""
    cols = []
    for i in range(d_model):
        omega = 10000 ** (-2 * (i // 2) / d_model)
        f = math.sin if i % 2 == 0 else math.cos
        cols.append([f(t * omega) for t in range(n_positions)])
    return torch.tensor(cols)


def pe_positions_from_one(n_positions, d_model):
    """Counts positions 1 .. n_positions instead of 0 .. n_positions - 1."""
    t = torch.arange(1, n_positions + 1).float()[:, None]
    omega = 10000 ** (-torch.arange(0, d_model, 2).float() / d_model)
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)[:, : d_model // 2]
    return pe


# ---------------------------------------------------------------- LearnedPositionalEmbedding


class _LearnedBase(nn.Module):
    """The given __init__ of the exercise."""

    def __init__(self, n_positions, d_model):
        super().__init__()
        self.n_positions = n_positions
        self.embedding = nn.Embedding(n_positions, d_model)


class LearnedArangeLookup(_LearnedBase):
    """Right: arange of the positions on x's device, the embedding looked up and added."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError(
                f"positions {offset}..{offset + L - 1} go past the table's {self.n_positions} rows"
            )
        positions = torch.arange(offset, offset + L, device=x.device)
        return x + self.embedding(positions).to(x.dtype)


class LearnedSliceWeight(_LearnedBase):
    """Right: a slice of the weight matrix, unsqueezed to broadcast over the batch."""

    def forward(self, x, offset=0):
        end = offset + x.size(-2)
        if end > self.n_positions:
            raise ValueError(f"the table has {self.n_positions} rows, position {end - 1} asked")
        rows = self.embedding.weight[offset:end]
        return x + rows.unsqueeze(0).type_as(x)


class LearnedRejectsExactFit(_LearnedBase):
    """Raises when offset + L >= n_positions: a sequence that exactly fills the table fails."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L >= self.n_positions:
            raise ValueError("sequence too long for the position table")
        return x + self.embedding(torch.arange(offset, offset + L, device=x.device))


class LearnedChecksLengthOnly(_LearnedBase):
    """Checks L > n_positions but forgets the offset in the ValueError test."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if L > self.n_positions:
            raise ValueError("sequence too long for the position table")
        return x + self.embedding(torch.arange(offset, offset + L, device=x.device))


class LearnedSliceNoCheck(_LearnedBase):
    """Slices the weight with no check: past the end the slice is short and the add fails."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        return x + self.embedding.weight[offset : offset + L]


class LearnedInPlaceAdd(_LearnedBase):
    """Adds in place with x += ..., changing the caller's tensor."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError("sequence too long for the position table")
        x += self.embedding(torch.arange(offset, offset + L, device=x.device))
        return x


class LearnedAssert(_LearnedBase):
    """Guards the length with an assert (AssertionError) instead of a ValueError."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        assert offset + L <= self.n_positions, "sequence too long for the position table"
        return x + self.embedding(torch.arange(offset, offset + L, device=x.device))


class LearnedArangeToL(_LearnedBase):
    """Positions as torch.arange(offset, L): the end is L, not offset + L."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError("sequence too long for the position table")
        return x + self.embedding(torch.arange(offset, L, device=x.device))


# ---------------------------------------------------------------- rotary_embedding


def _omega(d, device, dtype):
    return 10000.0 ** (-torch.arange(0, d, 2, device=device, dtype=dtype) / d)


def rope_stack_interleave(x, positions=None):
    """Right: even and odd features rotated, re-interleaved with stack(-1).flatten(-2)."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    angles = positions.to(x.dtype)[:, None] * _omega(d, x.device, x.dtype)  # (L, d/2)
    cos, sin = torch.cos(angles), torch.sin(angles)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def rope_complex(x, positions=None):
    """Right: pairs as complex numbers, multiplied by e^{i theta}."""
    L, d = x.shape[-2], x.shape[-1]
    pos = torch.arange(L, device=x.device) if positions is None else positions.to(x.device)
    inv_freq = torch.exp(
        torch.arange(0, d, 2, device=x.device, dtype=torch.float64) * (-math.log(10000.0) / d)
    )
    theta = torch.outer(pos.to(torch.float64), inv_freq)
    rot = torch.polar(torch.ones_like(theta), theta)
    xc = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(xc * rot).reshape(x.shape).to(x.dtype)


def rope_in_place(x, positions=None):
    """Writes the rotated even features into x in place, then uses them for the odd ones."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    angles = positions.to(x.dtype)[:, None] * _omega(d, x.device, x.dtype)
    cos, sin = torch.cos(angles), torch.sin(angles)
    out = x
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out


def rope_cat_halves(x, positions=None):
    """Rotates the pairs right but returns torch.cat([even, odd]): features de-interleaved."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    angles = positions.to(x.dtype)[:, None] * _omega(d, x.device, x.dtype)
    cos, sin = torch.cos(angles), torch.sin(angles)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)


def rope_positions_from_batch(x, positions=None):
    """Default positions from x.shape[0] (the batch axis) instead of the length axis."""
    d = x.shape[-1]
    if positions is None:
        positions = torch.arange(x.shape[0], device=x.device)
    angles = positions.to(x.dtype)[:, None] * _omega(d, x.device, x.dtype)
    cos, sin = torch.cos(angles), torch.sin(angles)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def rope_double_two(x, positions=None):
    """Frequencies 10000^(-2 * (2k) / d): the step-2 arange multiplied by 2 once more."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    two_k = torch.arange(0, d, 2, device=x.device, dtype=x.dtype)
    omega = 10000.0 ** (-2 * two_k / d)
    angles = positions.to(x.dtype)[:, None] * omega
    cos, sin = torch.cos(angles), torch.sin(angles)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def rope_float32_angles(x, positions=None):
    """Builds the angles in float32 (.float()) and never casts them to x's dtype."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    omega = 10000 ** (-torch.arange(0, d, 2, device=x.device).float() / d)
    angles = positions.float()[:, None] * omega
    cos, sin = torch.cos(angles), torch.sin(angles)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def rope_sign_slip(x, positions=None):
    """Sign slip in the first row of the matrix: x0 cos + x1 sin (not a rotation)."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    angles = positions.to(x.dtype)[:, None] * _omega(d, x.device, x.dtype)
    cos, sin = torch.cos(angles), torch.sin(angles)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos + x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


WRONG = {
    "sinusoidal_positional_encoding": [
        pe_sin_then_cos_halves,
        pe_column_exponent,
        pe_odd_crash,
        pe_float64,
        pe_transposed_loops,
        pe_positions_from_one,
    ],
    "LearnedPositionalEmbedding": [
        LearnedRejectsExactFit,
        LearnedChecksLengthOnly,
        LearnedSliceNoCheck,
        LearnedInPlaceAdd,
        LearnedAssert,
        LearnedArangeToL,
    ],
    "rotary_embedding": [
        rope_in_place,
        rope_cat_halves,
        rope_positions_from_batch,
        rope_double_two,
        rope_float32_angles,
        rope_sign_slip,
    ],
}
RIGHT = {
    "sinusoidal_positional_encoding": pe_vectorised,
    "LearnedPositionalEmbedding": LearnedArangeLookup,
    "rotary_embedding": rope_stack_interleave,
}
RIGHT2 = {
    "sinusoidal_positional_encoding": pe_loops,
    "LearnedPositionalEmbedding": LearnedSliceWeight,
    "rotary_embedding": rope_complex,
}
