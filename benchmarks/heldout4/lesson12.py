"""Lesson 12 (attention at scale): held-out wrong and right implementations, from the exercise text only."""

import math

import torch

NEG_INF = float("-inf")


# ---------------------------------------------------------------- online_softmax


def online_softmax_right(scores, block_size):
    """Right: running m and l over blocks, guard only m', then exp(scores - m) / l."""
    m = torch.full(scores.shape[:-1], NEG_INF, dtype=scores.dtype, device=scores.device)
    l = torch.zeros_like(m)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.max(dim=-1).values)
        ref = torch.where(torch.isneginf(m_new), 0, m_new)
        l = l * torch.exp(m - ref) + torch.exp(block - ref.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    ref = torch.where(torch.isneginf(m), 0, m)
    return torch.exp(scores - ref.unsqueeze(-1)) / l.unsqueeze(-1)


def online_softmax_right_split(scores, block_size):
    """Right: torch.split into blocks, amax per block, masked_fill guard, keepdim throughout."""
    m = scores.new_full(scores.shape[:-1] + (1,), NEG_INF)
    l = scores.new_zeros(scores.shape[:-1] + (1,))
    for block in torch.split(scores, block_size, dim=-1):
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))
        safe = m_new.masked_fill(m_new == NEG_INF, 0.0)
        l = l * (m - safe).exp() + (block - safe).exp().sum(dim=-1, keepdim=True)
        m = m_new
    return (scores - m.masked_fill(m == NEG_INF, 0.0)).exp() / l


def online_softmax_no_max(scores, block_size):
    """Wrong: no running max at all: l accumulates exp(x) and the result is exp(x) / l."""
    l = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    for start in range(0, scores.shape[-1], block_size):
        l = l + torch.exp(scores[..., start : start + block_size]).sum(dim=-1)
    return torch.exp(scores) / l.unsqueeze(-1)


def online_softmax_factor_flipped(scores, block_size):
    """Wrong: the rescaling factor is exp(m' - m), the reciprocal of exp(m - m')."""
    m = torch.full(scores.shape[:-1], NEG_INF, dtype=scores.dtype)
    l = torch.zeros_like(m)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.max(dim=-1).values)
        ref = torch.where(torch.isneginf(m_new), 0, m_new)
        old = torch.where(torch.isneginf(m), 0, m)
        l = l * torch.exp(ref - old) + torch.exp(block - ref.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    ref = torch.where(torch.isneginf(m), 0, m)
    return torch.exp(scores - ref.unsqueeze(-1)) / l.unsqueeze(-1)


def online_softmax_block_max_only(scores, block_size):
    """Wrong: m' = max of the new block alone (the running max is forgotten); overflows later."""
    m = torch.full(scores.shape[:-1], NEG_INF, dtype=scores.dtype)
    l = torch.zeros_like(m)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]
        m_new = block.max(dim=-1).values
        ref = torch.where(torch.isneginf(m_new), 0, m_new)
        l = l * torch.exp(m - ref) + torch.exp(block - ref.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    ref = torch.where(torch.isneginf(m), 0, m)
    return torch.exp(scores - ref.unsqueeze(-1)) / l.unsqueeze(-1)


def online_softmax_drops_tail(scores, block_size):
    """Wrong: loops over full blocks only, so the last, shorter block never enters l."""
    L = scores.shape[-1]
    m = torch.full(scores.shape[:-1], NEG_INF, dtype=scores.dtype)
    l = torch.zeros_like(m)
    for start in range(0, max(L - block_size + 1, 1), block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.max(dim=-1).values)
        ref = torch.where(torch.isneginf(m_new), 0, m_new)
        l = l * torch.exp(m - ref) + torch.exp(block - ref.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    ref = torch.where(torch.isneginf(m), 0, m)
    return torch.exp(scores - ref.unsqueeze(-1)) / l.unsqueeze(-1)


def online_softmax_no_guard(scores, block_size):
    """Wrong: no -inf guard: exp(m - m') is exp(-inf + inf) = NaN for all--inf blocks."""
    m = torch.full(scores.shape[:-1], NEG_INF, dtype=scores.dtype)
    l = torch.zeros_like(m)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.max(dim=-1).values)
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    return torch.exp(scores - m.unsqueeze(-1)) / l.unsqueeze(-1)


def online_softmax_global_max(scores, block_size):
    """Wrong: the max is taken over the whole row first; only the sum is done block by block."""
    m = scores.max(dim=-1, keepdim=True).values
    m = torch.where(torch.isneginf(m), 0, m)
    l = torch.zeros_like(m)
    for start in range(0, scores.shape[-1], block_size):
        l = l + torch.exp(scores[..., start : start + block_size] - m).sum(dim=-1, keepdim=True)
    return torch.exp(scores - m) / l


def online_softmax_stale_max(scores, block_size):
    """Wrong: the block's exponentials use m from before the block, then l is rescaled anyway."""
    m = torch.full(scores.shape[:-1], NEG_INF, dtype=scores.dtype)
    l = torch.zeros_like(m)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.max(dim=-1).values)
        old = torch.where(torch.isneginf(m), 0, m)
        ref = torch.where(torch.isneginf(m_new), 0, m_new)
        l = l * torch.exp(m - ref) + torch.exp(block - old.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    ref = torch.where(torch.isneginf(m), 0, m)
    return torch.exp(scores - ref.unsqueeze(-1)) / l.unsqueeze(-1)


# ---------------------------------------------------------------- tiled_attention


def _block_mask(mask, start, size):
    if mask is None:
        return None
    if mask.shape[-1] == 1:
        return mask
    return mask[..., start : start + size]


def tiled_attention_right(q, k, v, mask=None, block_size=64):
    """Right: the loop of the text, global mask columns, guard on m', divide by 1 where l = 0."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = l = o = None
    for start in range(0, k.shape[-2], block_size):
        kb, vb = k[..., start : start + block_size, :], v[..., start : start + block_size, :]
        s = q @ kb.transpose(-2, -1) * scale
        mb = _block_mask(mask, start, kb.shape[-2])
        if mb is not None:
            s = s.masked_fill(~mb, NEG_INF)
        if m is None:
            m = torch.full(s.shape[:-1], NEG_INF, dtype=s.dtype, device=s.device)
            l = torch.zeros_like(m)
            o = torch.zeros(s.shape[:-1] + (v.shape[-1],), dtype=s.dtype, device=s.device)
        m_new = torch.maximum(m, s.max(dim=-1).values)
        ref = torch.where(torch.isneginf(m_new), 0, m_new)
        p = torch.exp(s - ref.unsqueeze(-1))
        factor = torch.exp(m - ref)
        l = l * factor + p.sum(dim=-1)
        o = o * factor.unsqueeze(-1) + p @ vb
        m = m_new
    if m is None:
        shape = torch.broadcast_shapes(q.shape[:-2], v.shape[:-2])
        return q.new_zeros(shape + (q.shape[-2], v.shape[-1]))
    return o / torch.where(l == 0, torch.ones_like(l), l).unsqueeze(-1)


def tiled_attention_right_einsum(q, k, v, mask=None, block_size=64):
    """Right: torch.split over keys, einsum, keepdim state, l clamped at 1 (l is 0 or >= 1)."""
    q = q / math.sqrt(q.shape[-1])
    if mask is not None and mask.dim() == 1:
        mask = mask.view(1, -1)
    out_state = None
    start = 0
    for kb, vb in zip(torch.split(k, block_size, dim=-2), torch.split(v, block_size, dim=-2)):
        n = kb.shape[-2]
        s = torch.einsum("...qd,...kd->...qk", q, kb)
        if mask is not None:
            allowed = mask if mask.shape[-1] == 1 else mask[..., start : start + n]
            s = torch.where(allowed, s, torch.full_like(s, NEG_INF))
        start += n
        if out_state is None:
            m = s.new_full(s.shape[:-1] + (1,), NEG_INF)
            l = s.new_zeros(s.shape[:-1] + (1,))
            o = s.new_zeros(s.shape[:-1] + (v.shape[-1],))
        else:
            m, l, o = out_state
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        safe = m_new.masked_fill(torch.isneginf(m_new), 0.0)
        p = (s - safe).exp()
        alpha = (m - safe).exp()
        out_state = (
            m_new,
            alpha * l + p.sum(-1, keepdim=True),
            alpha * o + torch.einsum("...qk,...kd->...qd", p, vb),
        )
    if out_state is None:
        shape = torch.broadcast_shapes(q.shape[:-2], v.shape[:-2])
        return q.new_zeros(shape + (q.shape[-2], v.shape[-1]))
    _, l, o = out_state
    return o / l.clamp(min=1.0)


def _tiled(
    q,
    k,
    v,
    mask,
    block_size,
    *,
    scale=None,
    rescale_o=True,
    rescale_l=True,
    stale=False,
    local_mask=False,
    fill=NEG_INF,
    guard_zero=True,
    where_div=False,
    invert=False,
    drop_tail=False,
    slice_always=False,
):
    """A configurable tiled loop; each wrong version turns one thing off."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    m = l = o = None
    L_k = k.shape[-2]
    stop = max(L_k - block_size + 1, 1) if drop_tail else L_k
    for start in range(0, stop, block_size):
        kb, vb = k[..., start : start + block_size, :], v[..., start : start + block_size, :]
        s = q @ kb.transpose(-2, -1) * scale
        if mask is not None:
            if slice_always:
                mb = mask[..., start : start + block_size]
            elif local_mask:
                mb = mask if mask.shape[-1] == 1 else mask[..., : kb.shape[-2]]
            else:
                mb = _block_mask(mask, start, kb.shape[-2])
            s = s.masked_fill(mb if invert else ~mb, fill)
        if m is None:
            m = torch.full(s.shape[:-1], NEG_INF, dtype=s.dtype)
            l = torch.zeros_like(m)
            o = torch.zeros(s.shape[:-1] + (v.shape[-1],), dtype=s.dtype)
        m_new = torch.maximum(m, s.max(dim=-1).values)
        ref = torch.where(torch.isneginf(m_new), 0, m_new)
        old = torch.where(torch.isneginf(m), 0, m)
        p = torch.exp(s - (old if stale else ref).unsqueeze(-1))
        factor = torch.exp(m - ref)
        l = (l * factor if rescale_l else l) + p.sum(dim=-1)
        o = (o * factor.unsqueeze(-1) if rescale_o else o) + p @ vb
        m = m_new
    if where_div:
        return torch.where(l.unsqueeze(-1) > 0, o / l.unsqueeze(-1), torch.zeros_like(o))
    if guard_zero:
        return o / torch.where(l == 0, torch.ones_like(l), l).unsqueeze(-1)
    return o / l.unsqueeze(-1)


def tiled_no_scale(q, k, v, mask=None, block_size=64):
    """Wrong: the scores are q k^T, not divided by sqrt(d_k)."""
    return _tiled(q, k, v, mask, block_size, scale=1.0)


def tiled_scale_dv(q, k, v, mask=None, block_size=64):
    """Wrong: the scores are divided by sqrt(d_v) (v's last size) instead of sqrt(d_k)."""
    return _tiled(q, k, v, mask, block_size, scale=1.0 / math.sqrt(v.shape[-1]))


def tiled_o_not_rescaled(q, k, v, mask=None, block_size=64):
    """Wrong: l is rescaled by exp(m - m') but the running output o is not."""
    return _tiled(q, k, v, mask, block_size, rescale_o=False)


def tiled_stale_p(q, k, v, mask=None, block_size=64):
    """Wrong: the block's p = exp(s - m) uses the max from before the block."""
    return _tiled(q, k, v, mask, block_size, stale=True)


def tiled_local_mask(q, k, v, mask=None, block_size=64):
    """Wrong: every block takes the mask's first |B| columns (block-local key index)."""
    return _tiled(q, k, v, mask, block_size, local_mask=True)


def tiled_inverted_mask(q, k, v, mask=None, block_size=64):
    """Wrong: masked_fill(mask, -inf): True is read as 'blocked' instead of 'may attend'."""
    return _tiled(q, k, v, mask, block_size, invert=True)


def tiled_finite_fill(q, k, v, mask=None, block_size=64):
    """Wrong: masked scores filled with -1e9; a fully masked query averages all values."""
    return _tiled(q, k, v, mask, block_size, fill=-1e9)


def tiled_where_division(q, k, v, mask=None, block_size=64):
    """Wrong: torch.where(l > 0, o / l, 0): right values, NaN gradient for fully masked queries."""
    return _tiled(q, k, v, mask, block_size, where_div=True)


def tiled_drops_tail(q, k, v, mask=None, block_size=64):
    """Wrong: loops over whole blocks only; the last L_k % block_size keys are never read."""
    return _tiled(q, k, v, mask, block_size, drop_tail=True)


def tiled_slices_broadcast_mask(q, k, v, mask=None, block_size=64):
    """Wrong: slices the mask's last dim per block even when it is 1 (broadcast over keys)."""
    return _tiled(q, k, v, mask, block_size, slice_always=True)


# ---------------------------------------------------------------- kv_cache_bytes


def kv_cache_bytes_right(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Right: 2 * layers * kv heads * d_head * batch * length * bytes."""
    kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * kv * d_head * batch * length * dtype_bytes


def kv_cache_bytes_right_prod(
    n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None
):
    """Right: per-token bytes first, math.prod, int()."""
    heads = n_kv_heads if n_kv_heads is not None else n_heads
    per_token = 2 * n_layers * heads * d_head * dtype_bytes  # K and V, every layer
    return int(math.prod([per_token, batch, length]))


def kv_cache_no_factor_2(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: only K is counted (the factor 2 for K and V is missing)."""
    kv = n_heads if n_kv_heads is None else n_kv_heads
    return n_layers * kv * d_head * batch * length * dtype_bytes


def kv_cache_ignores_kv(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: n_kv_heads ignored, the query heads are always counted."""
    return 2 * n_layers * n_heads * d_head * batch * length * dtype_bytes


def kv_cache_group_size(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: counts n_heads // n_kv_heads (the group size) as the number of cached heads."""
    kv = n_heads if n_kv_heads is None else n_heads // n_kv_heads
    return 2 * n_layers * kv * d_head * batch * length * dtype_bytes


def kv_cache_d_model(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: each K/V head stores d_model = n_heads * d_head numbers per token."""
    kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * kv * (n_heads * d_head) * batch * length * dtype_bytes


def kv_cache_no_batch(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: the cache of one sequence; the batch is forgotten."""
    kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * kv * d_head * length * dtype_bytes


def kv_cache_gib(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: converted to GiB (/ 2**30) before returning."""
    kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * kv * d_head * batch * length * dtype_bytes / 2**30


def kv_cache_bits(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: multiplies by 8 bits per byte: the size in bits."""
    kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * kv * d_head * batch * length * dtype_bytes * 8


# ---------------------------------------------------------------- repeat_kv


def repeat_kv_right(x, n_rep):
    """Right: repeat_interleave along the head axis."""
    return x.repeat_interleave(n_rep, dim=1)


def repeat_kv_right_expand(x, n_rep):
    """Right: a new axis after the heads, expand, reshape."""
    B, h, L, d = x.shape
    return x[:, :, None].expand(B, h, n_rep, L, d).reshape(B, h * n_rep, L, d)


def repeat_kv_tiled(x, n_rep):
    """Wrong: x.repeat(1, n_rep, 1, 1): heads tiled, head i reads i mod h_kv."""
    return x.repeat(1, n_rep, 1, 1)


def repeat_kv_wrong_divisor(x, n_rep):
    """Wrong: index i // h_kv instead of i // n_rep."""
    h = x.shape[1]
    return x[:, torch.arange(h * n_rep, device=x.device) // h]


def repeat_kv_new_axis_front(x, n_rep):
    """Wrong: the new axis is put before the heads, so the expand/reshape tiles them."""
    B, h, L, d = x.shape
    return x[:, None].expand(B, n_rep, h, L, d).reshape(B, h * n_rep, L, d)


def repeat_kv_positions(x, n_rep):
    """Wrong: repeat_interleave on dim 2 (positions); reshaped so the shape looks right."""
    B, h, L, d = x.shape
    return x.repeat_interleave(n_rep, dim=2).reshape(B, h * n_rep, L, d)


def repeat_kv_last_dim(x, n_rep):
    """Wrong: repeat_interleave on the last dim, each head's vectors stretched, then reshaped."""
    B, h, L, d = x.shape
    return x.repeat_interleave(n_rep, dim=-1).reshape(B, h * n_rep, L, d)


def repeat_kv_detached(x, n_rep):
    """Wrong: built from x.detach(): no gradient flows back to the K/V heads."""
    return x.detach().repeat_interleave(n_rep, dim=1)


# ---------------------------------------------------------------- positive_random_features


def prf_right(x, omega):
    """Right: exp(x omega^T - |x|^2 / 2) / sqrt(m)."""
    return torch.exp(x @ omega.T - (x * x).sum(dim=-1, keepdim=True) / 2) / math.sqrt(
        omega.shape[0]
    )


def prf_right_einsum(x, omega):
    """Right: einsum for the projections, the 1/sqrt(m) folded into the exponent."""
    proj = torch.einsum("...d,md->...m", x, omega)
    half_sq = 0.5 * torch.einsum("...d,...d->...", x, x).unsqueeze(-1)
    return torch.exp(proj - half_sq - 0.5 * math.log(omega.shape[0]))


def prf_no_keepdim(x, omega):
    """Wrong: |x|^2 summed without keepdim: broadcasts against the m axis when n == m."""
    return torch.exp(x @ omega.T - (x * x).sum(dim=-1) / 2) / math.sqrt(omega.shape[0])


def prf_mean_square(x, omega):
    """Wrong: |x|^2 computed as the mean of the squares, not their sum."""
    return torch.exp(x @ omega.T - (x * x).mean(dim=-1, keepdim=True) / 2) / math.sqrt(
        omega.shape[0]
    )


def prf_quarter_scale(x, omega):
    """Wrong: x first scaled by d^(-1/4) (the Performer attention's habit), not asked here."""
    x = x * x.shape[-1] ** -0.25
    return torch.exp(x @ omega.T - (x * x).sum(dim=-1, keepdim=True) / 2) / math.sqrt(
        omega.shape[0]
    )


def prf_norm_not_squared(x, omega):
    """Wrong: |x| / 2 in the exponent, the norm not squared."""
    return torch.exp(x @ omega.T - x.norm(dim=-1, keepdim=True) / 2) / math.sqrt(omega.shape[0])


def prf_divide_m(x, omega):
    """Wrong: divided by m instead of sqrt(m)."""
    return torch.exp(x @ omega.T - (x * x).sum(dim=-1, keepdim=True) / 2) / omega.shape[0]


def prf_sqrt_d(x, omega):
    """Wrong: divided by sqrt(d) (omega.shape[1]) instead of sqrt(m)."""
    return torch.exp(x @ omega.T - (x * x).sum(dim=-1, keepdim=True) / 2) / math.sqrt(
        omega.shape[1]
    )


def prf_plus_half(x, omega):
    """Wrong: + |x|^2 / 2 (sign flipped, from E[exp(w.x)] = exp(|x|^2 / 2))."""
    return torch.exp(x @ omega.T + (x * x).sum(dim=-1, keepdim=True) / 2) / math.sqrt(
        omega.shape[0]
    )


WRONG = {
    "online_softmax": [
        online_softmax_no_max,
        online_softmax_factor_flipped,
        online_softmax_block_max_only,
        online_softmax_drops_tail,
        online_softmax_no_guard,
        online_softmax_global_max,
        online_softmax_stale_max,
    ],
    "tiled_attention": [
        tiled_no_scale,
        tiled_scale_dv,
        tiled_o_not_rescaled,
        tiled_stale_p,
        tiled_local_mask,
        tiled_inverted_mask,
        tiled_finite_fill,
        tiled_where_division,
        tiled_drops_tail,
        tiled_slices_broadcast_mask,
    ],
    "kv_cache_bytes": [
        kv_cache_no_factor_2,
        kv_cache_ignores_kv,
        kv_cache_group_size,
        kv_cache_d_model,
        kv_cache_no_batch,
        kv_cache_gib,
        kv_cache_bits,
    ],
    "repeat_kv": [
        repeat_kv_tiled,
        repeat_kv_wrong_divisor,
        repeat_kv_new_axis_front,
        repeat_kv_positions,
        repeat_kv_last_dim,
        repeat_kv_detached,
    ],
    "positive_random_features": [
        prf_no_keepdim,
        prf_mean_square,
        prf_quarter_scale,
        prf_norm_not_squared,
        prf_divide_m,
        prf_sqrt_d,
        prf_plus_half,
    ],
}
RIGHT = {
    "online_softmax": online_softmax_right,
    "tiled_attention": tiled_attention_right,
    "kv_cache_bytes": kv_cache_bytes_right,
    "repeat_kv": repeat_kv_right,
    "positive_random_features": prf_right,
}
RIGHT2 = {
    "online_softmax": online_softmax_right_split,
    "tiled_attention": tiled_attention_right_einsum,
    "kv_cache_bytes": kv_cache_bytes_right_prod,
    "repeat_kv": repeat_kv_right_expand,
    "positive_random_features": prf_right_einsum,
}
