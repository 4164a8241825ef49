"""Lesson 04 (positional encoding): held-out wrong and right implementations, from the exercise text only."""

import math

import torch
from torch import nn

# ---------------------------------------------------------------- sinusoidal_positional_encoding


def pe_slices(n_positions, d_model):
    """Right: omega from exp(-2k ln(10000) / d), sin into 0::2, cos into 1::2 (cut for odd d)."""
    pe = torch.zeros(n_positions, d_model)
    t = torch.arange(n_positions, dtype=torch.float32)[:, None]
    omega = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
    )
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)[:, : d_model // 2]
    return pe


def pe_columns_loop(n_positions, d_model):
    """Right: one column at a time, the pair index k = j // 2, pow in float64, then cast."""
    t = torch.arange(n_positions, dtype=torch.float64)
    cols = []
    for j in range(d_model):
        k = j // 2
        omega = 10000.0 ** (-2 * k / d_model)
        cols.append(torch.sin(t * omega) if j % 2 == 0 else torch.cos(t * omega))
    return torch.stack(cols, dim=1).to(torch.get_default_dtype())


def pe_sin_cos_halves(n_positions, d_model):
    """Wrong: all sines in the first half of the columns, all cosines in the second (concatenated)."""
    t = torch.arange(n_positions, dtype=torch.float32)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    pe = torch.cat([torch.sin(t * omega), torch.cos(t * omega)], dim=-1)
    return pe[:, :d_model]


def pe_positions_from_one(n_positions, d_model):
    """Wrong: positions t = 1 .. n_positions instead of 0 .. n_positions - 1."""
    pe = torch.zeros(n_positions, d_model)
    t = torch.arange(1, n_positions + 1, dtype=torch.float32)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)[:, : d_model // 2]
    return pe


def pe_odd_padded_exponent(n_positions, d_model):
    """Wrong: odd d_model is padded to d_model + 1 and the exponent uses the padded width."""
    d = d_model + d_model % 2
    pe = torch.zeros(n_positions, d)
    t = torch.arange(n_positions, dtype=torch.float32)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)
    return pe[:, :d_model]


def pe_float64(n_positions, d_model):
    """Wrong: built in float64 and returned as float64 (not the default dtype)."""
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    t = torch.arange(n_positions, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)[:, : d_model // 2]
    return pe


def pe_odd_crash(n_positions, d_model):
    """Wrong: cos of every pair frequency written into 1::2, which is one column short for odd d_model."""
    pe = torch.zeros(n_positions, d_model)
    t = torch.arange(n_positions, dtype=torch.float32)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)
    return pe


def pe_log10(n_positions, d_model):
    """Wrong: math.log10 where the natural log belongs in exp(-2k log(10000) / d)."""
    pe = torch.zeros(n_positions, d_model)
    t = torch.arange(n_positions, dtype=torch.float32)[:, None]
    omega = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log10(10000.0) / d_model)
    )
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)[:, : d_model // 2]
    return pe


def pe_column_index_exponent(n_positions, d_model):
    """Wrong: omega uses the column index j (10000^(-j/d)), so a pair's two columns differ."""
    t = torch.arange(n_positions, dtype=torch.float32)[:, None]
    j = torch.arange(d_model, dtype=torch.float32)
    angles = t * 10000.0 ** (-j / d_model)
    pe = torch.empty(n_positions, d_model)
    pe[:, 0::2] = torch.sin(angles[:, 0::2])
    pe[:, 1::2] = torch.cos(angles[:, 1::2])
    return pe


def pe_normalised_positions(n_positions, d_model):
    """Wrong: positions scaled to t / n_positions before the angles."""
    pe = torch.zeros(n_positions, d_model)
    t = torch.arange(n_positions, dtype=torch.float32)[:, None] / n_positions
    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)[:, : d_model // 2]
    return pe


# ---------------------------------------------------------------- LearnedPositionalEmbedding


class _LPEBase(nn.Module):
    def __init__(self, n_positions, d_model):
        super().__init__()
        self.n_positions = n_positions
        self.embedding = nn.Embedding(n_positions, d_model)


class LPEArange(_LPEBase):
    """Right: a range check, arange(offset, offset + L) on x's device, the table lookup added."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError(
                f"positions {offset}..{offset + L - 1} go beyond the table of {self.n_positions} rows"
            )
        positions = torch.arange(offset, offset + L, device=x.device)
        return x + self.embedding(positions).to(x.dtype)


class LPESlice(_LPEBase):
    """Right: slice the weight rows [offset, offset + L) and broadcast over the batch."""

    def forward(self, x, offset=0):
        L = x.size(-2)
        end = offset + L
        if end > self.embedding.num_embeddings:
            raise ValueError(
                f"sequence needs {end} positions, the table has {self.embedding.num_embeddings}"
            )
        rows = self.embedding.weight[offset:end]
        return x + rows.unsqueeze(0).to(dtype=x.dtype)


class LPENoRangeCheck(_LPEBase):
    """Wrong: no explicit check, nn.Embedding raises an IndexError instead of a ValueError."""

    def forward(self, x, offset=0):
        positions = torch.arange(offset, offset + x.shape[1], device=x.device)
        return x + self.embedding(positions)


class LPEOffByOneCheck(_LPEBase):
    """Wrong: raises when offset + L >= n_positions, rejecting a sequence that exactly fills the table."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L >= self.n_positions:
            raise ValueError("sequence too long for the table")
        return x + self.embedding(torch.arange(offset, offset + L, device=x.device))


class LPECheckIgnoresOffset(_LPEBase):
    """Wrong: the range check tests only L > n_positions, forgetting the offset."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if L > self.n_positions:
            raise ValueError("sequence too long for the table")
        return x + self.embedding(torch.arange(offset, offset + L, device=x.device))


class LPESliceTruncates(_LPEBase):
    """Wrong: slices weight[offset:offset + L] with no check; past the end the slice is short."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        return x + self.embedding.weight[offset : offset + L]


class LPEBatchAxisPositions(_LPEBase):
    """Wrong: the number of positions is read from x.shape[0] (the batch) instead of x.shape[1]."""

    def forward(self, x, offset=0):
        n = x.shape[0]
        if offset + n > self.n_positions:
            raise ValueError("sequence too long for the table")
        return x + self.embedding(torch.arange(offset, offset + n, device=x.device))


class LPEInPlace(_LPEBase):
    """Wrong: adds the positions into the caller's x in place (x += ...)."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError("sequence too long for the table")
        x += self.embedding(torch.arange(offset, offset + L, device=x.device))
        return x


class LPETableDtype(_LPEBase):
    """Wrong: casts x to the table's dtype, so the result has the table's dtype, not x's."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if offset + L > self.n_positions:
            raise ValueError("sequence too long for the table")
        pos = self.embedding(torch.arange(offset, offset + L, device=x.device))
        return x.to(pos.dtype) + pos


class LPEOffsetWrapped(_LPEBase):
    """Wrong: positions taken modulo n_positions, so a shifted sequence wraps round the table."""

    def forward(self, x, offset=0):
        L = x.shape[1]
        if L > self.n_positions:
            raise ValueError("sequence too long for the table")
        positions = torch.arange(offset, offset + L, device=x.device) % self.n_positions
        return x + self.embedding(positions)


# ---------------------------------------------------------------- rotary_embedding


def _angles(L, d, positions, device, dtype):
    if positions is None:
        positions = torch.arange(L, device=device)
    omega = 10000.0 ** (-torch.arange(0, d, 2, device=device, dtype=dtype) / d)
    return positions.to(device=device, dtype=dtype)[:, None] * omega


def rope_stack(x, positions=None):
    """Right: even/odd slices, the rotation formula, stack on a new last axis and flatten."""
    theta = _angles(x.shape[-2], x.shape[-1], positions, x.device, x.dtype)
    cos, sin = torch.cos(theta), torch.sin(theta)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def rope_interleaved_tables(x, positions=None):
    """Right: cos and sin repeated per pair, a rotate-pairs helper (-x1, x0), out = x cos + rot(x) sin."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    k = torch.arange(d // 2, device=x.device, dtype=x.dtype)
    omega = torch.exp(-2.0 * k / d * math.log(10000.0))
    theta = torch.outer(positions.to(x.dtype), omega).repeat_interleave(2, dim=-1)  # (L, d)
    rotated = torch.empty_like(x)
    rotated[..., 0::2] = -x[..., 1::2]
    rotated[..., 1::2] = x[..., 0::2]
    return x * torch.cos(theta) + rotated * torch.sin(theta)


def rope_negative_angle(x, positions=None):
    """Wrong: rotates by -theta (the sine terms with the opposite signs)."""
    theta = _angles(x.shape[-2], x.shape[-1], positions, x.device, x.dtype)
    cos, sin = torch.cos(theta), torch.sin(theta)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos + x1 * sin, -x0 * sin + x1 * cos], dim=-1).flatten(-2)


def rope_cat_halves(x, positions=None):
    """Wrong: the rotated pairs are concatenated as [all x0' | all x1'] instead of interleaved back."""
    theta = _angles(x.shape[-2], x.shape[-1], positions, x.device, x.dtype)
    cos, sin = torch.cos(theta), torch.sin(theta)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)


def rope_positions_ignored(x, positions=None):
    """Wrong: always uses 0 .. L-1, the positions argument is ignored."""
    theta = _angles(x.shape[-2], x.shape[-1], None, x.device, x.dtype)
    cos, sin = torch.cos(theta), torch.sin(theta)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def rope_exponent_k_over_d(x, positions=None):
    """Wrong: omega_k = 10000^(-k/d) (the pair index without the factor 2)."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    omega = 10000.0 ** (-torch.arange(d // 2, device=x.device, dtype=x.dtype) / d)
    theta = positions.to(x.dtype)[:, None] * omega
    cos, sin = torch.cos(theta), torch.sin(theta)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def rope_float32(x, positions=None):
    """Wrong: computes in x.float() and returns float32 whatever x's dtype."""
    x = x.float()
    theta = _angles(x.shape[-2], x.shape[-1], positions, x.device, torch.float32)
    cos, sin = torch.cos(theta), torch.sin(theta)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def rope_length_from_first_axis(x, positions=None):
    """Wrong: L read as x.shape[0], so a batched x gets positions 0 .. B-1."""
    L, d = x.shape[0], x.shape[-1]
    theta = _angles(L, d, positions, x.device, x.dtype)
    cos, sin = torch.cos(theta), torch.sin(theta)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def rope_sign_typo(x, positions=None):
    """Wrong: second component x1 cos - x0 sin (a sign typo: not a rotation)."""
    theta = _angles(x.shape[-2], x.shape[-1], positions, x.device, x.dtype)
    cos, sin = torch.cos(theta), torch.sin(theta)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x1 * cos - x0 * sin], dim=-1).flatten(-2)


def rope_inplace(x, positions=None):
    """Wrong: writes the rotated pairs back into x in place (x[..., 0::2] = ...), changing the input."""
    theta = _angles(x.shape[-2], x.shape[-1], positions, x.device, x.dtype)
    cos, sin = torch.cos(theta), torch.sin(theta)
    x0, x1 = x[..., 0::2].clone(), x[..., 1::2].clone()
    with torch.no_grad():
        x[..., 0::2] = x0 * cos - x1 * sin
        x[..., 1::2] = x0 * sin + x1 * cos
    return x


WRONG = {
    "sinusoidal_positional_encoding": [
        pe_sin_cos_halves,
        pe_positions_from_one,
        pe_odd_padded_exponent,
        pe_float64,
        pe_odd_crash,
        pe_log10,
        pe_column_index_exponent,
        pe_normalised_positions,
    ],
    "LearnedPositionalEmbedding": [
        LPENoRangeCheck,
        LPEOffByOneCheck,
        LPECheckIgnoresOffset,
        LPESliceTruncates,
        LPEBatchAxisPositions,
        LPEInPlace,
        LPETableDtype,
        LPEOffsetWrapped,
    ],
    "rotary_embedding": [
        rope_negative_angle,
        rope_cat_halves,
        rope_positions_ignored,
        rope_exponent_k_over_d,
        rope_float32,
        rope_length_from_first_axis,
        rope_sign_typo,
        rope_inplace,
    ],
}

RIGHT = {
    "sinusoidal_positional_encoding": pe_slices,
    "LearnedPositionalEmbedding": LPEArange,
    "rotary_embedding": rope_stack,
}

RIGHT2 = {
    "sinusoidal_positional_encoding": pe_columns_loop,
    "LearnedPositionalEmbedding": LPESlice,
    "rotary_embedding": rope_interleaved_tables,
}
