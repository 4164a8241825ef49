"""Lesson 12 (attention at scale): held-out wrong and right implementations, from the exercise text."""

import math

import torch

NEG_INF = float("-inf")

# ---------------------------------------------------------------- online_softmax


def _guard(m):
    return torch.where(torch.isneginf(m), torch.zeros_like(m), m)


def osm_right(scores, block_size):
    """Right: a first pass for (m, ell), then exp(scores - m) / ell."""
    L = scores.shape[-1]
    m = torch.full(scores.shape[:-1], NEG_INF, dtype=scores.dtype, device=scores.device)
    ell = torch.zeros(scores.shape[:-1], dtype=scores.dtype, device=scores.device)
    for start in range(0, L, block_size):
        blk = scores[..., start : start + block_size]
        m_new = torch.maximum(m, blk.max(dim=-1).values)
        safe = _guard(m_new)
        ell = ell * torch.exp(m - safe) + torch.exp(blk - safe.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    return torch.exp(scores - _guard(m).unsqueeze(-1)) / ell.unsqueeze(-1)


def osm_right2(scores, block_size):
    """Right: torch.split into blocks, keepdim shapes throughout, a list for the output."""
    m = None
    ell = None
    for blk in torch.split(scores, block_size, dim=-1):
        bm = blk.amax(dim=-1, keepdim=True)
        new_m = bm if m is None else torch.maximum(m, bm)
        shift = torch.where(new_m == NEG_INF, torch.zeros_like(new_m), new_m)
        part = torch.exp(blk - shift).sum(dim=-1, keepdim=True)
        ell = part if ell is None else ell * torch.exp(m - shift) + part
        m = new_m
    shift = torch.where(m == NEG_INF, torch.zeros_like(m), m)
    out = [torch.exp(blk - shift) / ell for blk in torch.split(scores, block_size, dim=-1)]
    return torch.cat(out, dim=-1)


def osm_factor_flipped(scores, block_size):
    """Wrong: rescales the running sum by exp(m' - m) instead of exp(m - m')."""
    L = scores.shape[-1]
    m = torch.full(scores.shape[:-1], NEG_INF, dtype=scores.dtype, device=scores.device)
    ell = torch.zeros(scores.shape[:-1], dtype=scores.dtype, device=scores.device)
    for start in range(0, L, block_size):
        blk = scores[..., start : start + block_size]
        m_new = torch.maximum(m, blk.max(dim=-1).values)
        safe = _guard(m_new)
        factor = torch.where(torch.isneginf(m), torch.zeros_like(m), torch.exp(safe - m))
        ell = ell * factor + torch.exp(blk - safe.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    return torch.exp(scores - _guard(m).unsqueeze(-1)) / ell.unsqueeze(-1)


def osm_drops_partial_block(scores, block_size):
    """Wrong: loops over L // block_size full blocks, so a shorter last block is never read."""
    L = scores.shape[-1]
    m = torch.full(scores.shape[:-1], NEG_INF, dtype=scores.dtype, device=scores.device)
    ell = torch.zeros(scores.shape[:-1], dtype=scores.dtype, device=scores.device)
    for b in range(max(L // block_size, 1)):
        blk = scores[..., b * block_size : (b + 1) * block_size]
        m_new = torch.maximum(m, blk.max(dim=-1).values)
        safe = _guard(m_new)
        ell = ell * torch.exp(m - safe) + torch.exp(blk - safe.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    return torch.exp(scores - _guard(m).unsqueeze(-1)) / ell.unsqueeze(-1)


def osm_block_max_final(scores, block_size):
    """Wrong: the second pass subtracts each block's own max, not the final running max."""
    L = scores.shape[-1]
    m = torch.full(scores.shape[:-1], NEG_INF, dtype=scores.dtype, device=scores.device)
    ell = torch.zeros(scores.shape[:-1], dtype=scores.dtype, device=scores.device)
    for start in range(0, L, block_size):
        blk = scores[..., start : start + block_size]
        m_new = torch.maximum(m, blk.max(dim=-1).values)
        safe = _guard(m_new)
        ell = ell * torch.exp(m - safe) + torch.exp(blk - safe.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    out = []
    for start in range(0, L, block_size):
        blk = scores[..., start : start + block_size]
        bm = _guard(blk.max(dim=-1, keepdim=True).values)
        out.append(torch.exp(blk - bm) / ell.unsqueeze(-1))
    return torch.cat(out, dim=-1)


def osm_global_scalar_max(scores, block_size):
    """Wrong: blk.max() with no dim: one scalar max over the whole batch of rows per block."""
    L = scores.shape[-1]
    m = torch.tensor(NEG_INF, dtype=scores.dtype, device=scores.device)
    ell = torch.zeros(scores.shape[:-1], dtype=scores.dtype, device=scores.device)
    for start in range(0, L, block_size):
        blk = scores[..., start : start + block_size]
        m_new = torch.maximum(m, blk.max())
        safe = _guard(m_new)
        ell = ell * torch.exp(m - safe) + torch.exp(blk - safe).sum(dim=-1)
        m = m_new
    return torch.exp(scores - _guard(m)) / ell.unsqueeze(-1)


def osm_no_guard(scores, block_size):
    """Wrong: no -inf guard at all (exp(m - m') with m = m' = -inf)."""
    L = scores.shape[-1]
    m = torch.full(scores.shape[:-1], NEG_INF, dtype=scores.dtype, device=scores.device)
    ell = torch.zeros(scores.shape[:-1], dtype=scores.dtype, device=scores.device)
    for start in range(0, L, block_size):
        blk = scores[..., start : start + block_size]
        m_new = torch.maximum(m, blk.max(dim=-1).values)
        ell = ell * torch.exp(m - m_new) + torch.exp(blk - m_new.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    return torch.exp(scores - m.unsqueeze(-1)) / ell.unsqueeze(-1)


# ---------------------------------------------------------------- tiled_attention


def _mask_block(mask, j, block_size):
    if mask is None:
        return None
    if mask.shape[-1] == 1:
        return mask
    return mask[..., j : j + block_size]


def tiled_right(q, k, v, mask=None, block_size=64):
    """Right: matmul per block, running (m, ell, o), divide by 1 where ell = 0."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = ell = o = None
    for j in range(0, k.shape[-2], block_size):
        kb, vb = k[..., j : j + block_size, :], v[..., j : j + block_size, :]
        s = (q @ kb.transpose(-2, -1)) * scale
        mb = _mask_block(mask, j, block_size)
        if mb is not None:
            s = s.masked_fill(~mb, NEG_INF)
        blk_max = s.max(dim=-1).values
        m_new = blk_max if m is None else torch.maximum(m, blk_max)
        safe = _guard(m_new)
        p = torch.exp(s - safe.unsqueeze(-1))
        if m is None:
            ell, o = p.sum(-1), p @ vb
        else:
            alpha = torch.exp(m - safe)
            ell = ell * alpha + p.sum(-1)
            o = o * alpha.unsqueeze(-1) + p @ vb
        m = m_new
    denom = torch.where(ell == 0, torch.ones_like(ell), ell)
    return o / denom.unsqueeze(-1)


def tiled_right2(q, k, v, mask=None, block_size=64):
    """Right: einsum per block, keepdim running statistics initialised at -inf and 0."""
    d_k = q.size(-1)
    L_k = k.size(-2)
    m = ell = o = None
    j = 0
    while j < L_k:
        kb = k[..., j : j + block_size, :]
        vb = v[..., j : j + block_size, :]
        s = torch.einsum("...qd,...kd->...qk", q, kb) / d_k**0.5
        if mask is not None:
            mb = mask if mask.size(-1) == 1 else mask[..., j : j + block_size]
            s = torch.where(mb, s, torch.full_like(s, NEG_INF))
        if m is None:
            m = torch.full_like(s[..., :1], NEG_INF)
            ell = torch.zeros_like(s[..., :1])
            o = torch.zeros(*s.shape[:-1], v.size(-1), dtype=s.dtype, device=s.device)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - shift)
        corr = torch.exp(m - shift)
        ell = corr * ell + p.sum(-1, keepdim=True)
        o = corr * o + torch.einsum("...qk,...kd->...qd", p, vb)
        m = m_new
        j += block_size
    return o / ell.masked_fill(ell == 0, 1.0)


def tiled_sqrt_dv(q, k, v, mask=None, block_size=64):
    """Wrong: scores divided by sqrt(d_v) (v.shape[-1]) instead of sqrt(d_k)."""
    return tiled_right(q * math.sqrt(q.shape[-1]) / math.sqrt(v.shape[-1]), k, v, mask, block_size)


def tiled_mask_sliced_always(q, k, v, mask=None, block_size=64):
    """Wrong: slices mask[..., j:j + block_size] even when its last dimension is 1."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = ell = o = None
    for j in range(0, k.shape[-2], block_size):
        kb, vb = k[..., j : j + block_size, :], v[..., j : j + block_size, :]
        s = (q @ kb.transpose(-2, -1)) * scale
        if mask is not None:
            s = s.masked_fill(~mask[..., j : j + block_size], NEG_INF)
        blk_max = s.max(dim=-1).values
        m_new = blk_max if m is None else torch.maximum(m, blk_max)
        safe = _guard(m_new)
        p = torch.exp(s - safe.unsqueeze(-1))
        if m is None:
            ell, o = p.sum(-1), p @ vb
        else:
            alpha = torch.exp(m - safe)
            ell = ell * alpha + p.sum(-1)
            o = o * alpha.unsqueeze(-1) + p @ vb
        m = m_new
    return o / torch.where(ell == 0, torch.ones_like(ell), ell).unsqueeze(-1)


def tiled_dot_T(q, k, v, mask=None, block_size=64):
    """Wrong: kb.T (reverses every axis) instead of transposing the last two."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = ell = o = None
    for j in range(0, k.shape[-2], block_size):
        kb, vb = k[..., j : j + block_size, :], v[..., j : j + block_size, :]
        s = (q @ kb.T) * scale
        mb = _mask_block(mask, j, block_size)
        if mb is not None:
            s = s.masked_fill(~mb, NEG_INF)
        blk_max = s.max(dim=-1).values
        m_new = blk_max if m is None else torch.maximum(m, blk_max)
        safe = _guard(m_new)
        p = torch.exp(s - safe.unsqueeze(-1))
        if m is None:
            ell, o = p.sum(-1), p @ vb
        else:
            alpha = torch.exp(m - safe)
            ell = ell * alpha + p.sum(-1)
            o = o * alpha.unsqueeze(-1) + p @ vb
        m = m_new
    return o / torch.where(ell == 0, torch.ones_like(ell), ell).unsqueeze(-1)


def tiled_alpha_after_update(q, k, v, mask=None, block_size=64):
    """Wrong: m is overwritten before alpha = exp(m - m') is computed, so alpha is always 1."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = ell = o = None
    for j in range(0, k.shape[-2], block_size):
        kb, vb = k[..., j : j + block_size, :], v[..., j : j + block_size, :]
        s = (q @ kb.transpose(-2, -1)) * scale
        mb = _mask_block(mask, j, block_size)
        if mb is not None:
            s = s.masked_fill(~mb, NEG_INF)
        blk_max = s.max(dim=-1).values
        m = blk_max if m is None else torch.maximum(m, blk_max)
        safe = _guard(m)
        p = torch.exp(s - safe.unsqueeze(-1))
        alpha = torch.where(torch.isneginf(m), torch.zeros_like(m), torch.exp(m - safe))
        if ell is None:
            ell, o = p.sum(-1), p @ vb
        else:
            ell = ell * alpha + p.sum(-1)
            o = o * alpha.unsqueeze(-1) + p @ vb
    return o / torch.where(ell == 0, torch.ones_like(ell), ell).unsqueeze(-1)


def tiled_nan_guard_where(q, k, v, mask=None, block_size=64):
    """Wrong: divides with torch.where(ell > 0, o / ell, 0), whose 0/0 branch poisons the gradient."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = ell = o = None
    for j in range(0, k.shape[-2], block_size):
        kb, vb = k[..., j : j + block_size, :], v[..., j : j + block_size, :]
        s = (q @ kb.transpose(-2, -1)) * scale
        mb = _mask_block(mask, j, block_size)
        if mb is not None:
            s = s.masked_fill(~mb, NEG_INF)
        blk_max = s.max(dim=-1).values
        m_new = blk_max if m is None else torch.maximum(m, blk_max)
        safe = _guard(m_new)
        p = torch.exp(s - safe.unsqueeze(-1))
        if m is None:
            ell, o = p.sum(-1), p @ vb
        else:
            alpha = torch.exp(m - safe)
            ell = ell * alpha + p.sum(-1)
            o = o * alpha.unsqueeze(-1) + p @ vb
        m = m_new
    ell = ell.unsqueeze(-1)
    return torch.where(ell > 0, o / ell, torch.zeros_like(o))


# ---------------------------------------------------------------- kv_cache_bytes


def kvb_right(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Right: the product of the formula."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * n_kv * d_head * batch * length * dtype_bytes


def kvb_right2(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Right: per-token bytes first, math.prod for the rest, cast to int."""
    kv_dim = (n_kv_heads or n_heads) * d_head
    per_token = 2 * n_layers * kv_dim * dtype_bytes
    return int(math.prod([per_token, batch, length]))


def kvb_float(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: 2.0 * ... gives a float, not the int the text asks for."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2.0 * n_layers * n_kv * d_head * batch * length * dtype_bytes


def kvb_group_size(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: uses the group size n_heads // n_kv_heads as the number of cached heads."""
    n_kv = n_heads if n_kv_heads is None else n_heads // n_kv_heads
    return 2 * n_layers * n_kv * d_head * batch * length * dtype_bytes


def kvb_none_crash(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: multiplies n_kv_heads directly, so the default None raises a TypeError."""
    return 2 * n_layers * n_kv_heads * d_head * batch * length * dtype_bytes


def kvb_no_two(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: keys only, the factor 2 for the values is missing."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return n_layers * n_kv * d_head * batch * length * dtype_bytes


def kvb_gib(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: returns GiB (divided by 2**30), as the lecture prints it."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * n_kv * d_head * batch * length * dtype_bytes / 2**30


# ---------------------------------------------------------------- repeat_kv


def rkv_right(x, n_rep):
    """Right: insert an axis after the heads, expand, reshape."""
    B, h, L, d = x.shape
    return x[:, :, None].expand(B, h, n_rep, L, d).reshape(B, h * n_rep, L, d)


def rkv_right2(x, n_rep):
    """Right: torch.repeat_interleave on the head axis."""
    return torch.repeat_interleave(x, n_rep, dim=1)


def rkv_repeat(x, n_rep):
    """Wrong: x.repeat(1, n_rep, 1, 1) tiles the heads (0, 1, 0, 1, ...)."""
    return x.repeat(1, n_rep, 1, 1)


def rkv_cat(x, n_rep):
    """Wrong: torch.cat([x] * n_rep, dim=1), the heads tiled."""
    return torch.cat([x] * n_rep, dim=1)


def rkv_new_axis_in_front(x, n_rep):
    """Wrong: the repeat axis inserted before the heads (x[:, None]), which tiles them."""
    B, h, L, d = x.shape
    return x[:, None].expand(B, n_rep, h, L, d).reshape(B, h * n_rep, L, d)


def rkv_interleave_positions(x, n_rep):
    """Wrong: repeat_interleave on dim 2 (positions), then a reshape to the heads' shape."""
    B, h, L, d = x.shape
    return torch.repeat_interleave(x, n_rep, dim=2).reshape(B, h * n_rep, L, d)


def rkv_view(x, n_rep):
    """Wrong: .view after expand (RuntimeError: not contiguous)."""
    B, h, L, d = x.shape
    return x[:, :, None].expand(B, h, n_rep, L, d).view(B, h * n_rep, L, d)


# ---------------------------------------------------------------- positive_random_features


def prf_right(x, omega):
    """Right: matmul, the squared norm with keepdim, divide by sqrt(m)."""
    m = omega.shape[0]
    sq = (x * x).sum(dim=-1, keepdim=True)
    return torch.exp(x @ omega.T - sq / 2) / math.sqrt(m)


def prf_right2(x, omega):
    """Right: einsum and everything inside one exp (the 1/sqrt(m) as -log(m)/2)."""
    proj = torch.einsum("...d,md->...m", x, omega)
    half_sq = 0.5 * x.pow(2).sum(-1).unsqueeze(-1)
    return torch.exp(proj - half_sq - 0.5 * math.log(omega.size(0)))


def prf_transposed(x, omega):
    """Wrong: omega @ x.T, the output transposed (m, n)."""
    sq = (x * x).sum(dim=-1)
    return torch.exp(omega @ x.T - sq / 2) / math.sqrt(omega.shape[0])


def prf_no_keepdim(x, omega):
    """Wrong: the squared norm without keepdim broadcasts along the wrong axis."""
    sq = (x * x).sum(dim=-1)
    return torch.exp(x @ omega.T - sq / 2) / math.sqrt(omega.shape[0])


def prf_precedence(x, omega):
    """Wrong: exp(w.x) / exp(|x|^2) / 2, the halving outside the exponent."""
    sq = (x * x).sum(dim=-1, keepdim=True)
    return torch.exp(x @ omega.T) / torch.exp(sq) / 2 / math.sqrt(omega.shape[0])


def prf_norm_not_squared(x, omega):
    """Wrong: x.norm() / 2 (the norm, not its square)."""
    return torch.exp(x @ omega.T - x.norm(dim=-1, keepdim=True) / 2) / math.sqrt(omega.shape[0])


def prf_sqrt_d(x, omega):
    """Wrong: divides by sqrt(d) (omega.shape[1]) instead of sqrt(m)."""
    sq = (x * x).sum(dim=-1, keepdim=True)
    return torch.exp(x @ omega.T - sq / 2) / math.sqrt(omega.shape[1])


WRONG = {
    "online_softmax": [
        osm_factor_flipped,
        osm_drops_partial_block,
        osm_block_max_final,
        osm_global_scalar_max,
        osm_no_guard,
    ],
    "tiled_attention": [
        tiled_sqrt_dv,
        tiled_mask_sliced_always,
        tiled_dot_T,
        tiled_alpha_after_update,
        tiled_nan_guard_where,
    ],
    "kv_cache_bytes": [
        kvb_float,
        kvb_group_size,
        kvb_none_crash,
        kvb_no_two,
        kvb_gib,
    ],
    "repeat_kv": [
        rkv_repeat,
        rkv_cat,
        rkv_new_axis_in_front,
        rkv_interleave_positions,
        rkv_view,
    ],
    "positive_random_features": [
        prf_transposed,
        prf_no_keepdim,
        prf_precedence,
        prf_norm_not_squared,
        prf_sqrt_d,
    ],
}
RIGHT = {
    "online_softmax": osm_right,
    "tiled_attention": tiled_right,
    "kv_cache_bytes": kvb_right,
    "repeat_kv": rkv_right,
    "positive_random_features": prf_right,
}
RIGHT2 = {
    "online_softmax": osm_right2,
    "tiled_attention": tiled_right2,
    "kv_cache_bytes": kvb_right2,
    "repeat_kv": rkv_right2,
    "positive_random_features": prf_right2,
}
