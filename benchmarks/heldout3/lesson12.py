"""Lesson 12 (attention at scale): held-out wrong and right implementations, from the exercise text."""

import math

import torch

# ---------------------------------------------------------------- online_softmax


def _guard(m):
    return torch.where(torch.isneginf(m), torch.zeros_like(m), m)


def online_right(scores, block_size):
    """Right: running m and ell over slices, guard on m', then one normalisation pass."""
    L = scores.shape[-1]
    m = torch.full(scores.shape[:-1], float("-inf"), dtype=scores.dtype, device=scores.device)
    ell = torch.zeros_like(m)
    for start in range(0, L, block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        safe = _guard(m_new)
        ell = ell * torch.exp(m - safe) + torch.exp(block - safe[..., None]).sum(-1)
        m = m_new
    return torch.exp(scores - _guard(m)[..., None]) / ell[..., None]


def online_right2(scores, block_size):
    """Right: keeps each block's exponentials and max, rescales them all at the end."""
    parts, maxes = [], []
    m = None
    ell = None
    for block in torch.split(scores, block_size, dim=-1):
        bm = block.max(dim=-1, keepdim=True).values
        m_new = bm if m is None else torch.maximum(m, bm)
        safe = m_new.masked_fill(torch.isneginf(m_new), 0.0)
        e = torch.exp(block - safe)
        ell = (
            e.sum(-1, keepdim=True) if ell is None else ell * torch.exp(m - safe) + e.sum(-1, True)
        )
        parts.append(e)
        maxes.append(m_new)
        m = m_new
    final = m.masked_fill(torch.isneginf(m), 0.0)
    return torch.cat([e * torch.exp(s - final) for e, s in zip(parts, maxes)], dim=-1) / ell


def online_sign_flipped(scores, block_size):
    """Rescales the running sum by exp(m' - m) instead of exp(m - m')."""
    L = scores.shape[-1]
    m = torch.full(scores.shape[:-1], float("-inf"), dtype=scores.dtype, device=scores.device)
    ell = torch.zeros_like(m)
    for start in range(0, L, block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        safe = _guard(m_new)
        factor = torch.where(torch.isneginf(m), torch.zeros_like(m), torch.exp(safe - m))
        ell = ell * factor + torch.exp(block - safe[..., None]).sum(-1)
        m = m_new
    return torch.exp(scores - _guard(m)[..., None]) / ell[..., None]


def online_block_max_only(scores, block_size):
    """Keeps m as the current block's max, not the running max (exact, but overflows)."""
    L = scores.shape[-1]
    m = torch.full(scores.shape[:-1], float("-inf"), dtype=scores.dtype, device=scores.device)
    ell = torch.zeros_like(m)
    for start in range(0, L, block_size):
        block = scores[..., start : start + block_size]
        m_new = block.amax(dim=-1)
        safe = _guard(m_new)
        ell = ell * torch.exp(_guard(m) - safe) + torch.exp(block - safe[..., None]).sum(-1)
        m = m_new
    return torch.exp(scores - _guard(m)[..., None]) / ell[..., None]


def online_misses_tail(scores, block_size):
    """Loops over range(L // block_size) blocks: a last, shorter block is never read."""
    L = scores.shape[-1]
    m = torch.full(scores.shape[:-1], float("-inf"), dtype=scores.dtype, device=scores.device)
    ell = torch.zeros_like(m)
    for b in range(max(L // block_size, 1)):
        block = scores[..., b * block_size : (b + 1) * block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        safe = _guard(m_new)
        ell = ell * torch.exp(m - safe) + torch.exp(block - safe[..., None]).sum(-1)
        m = m_new
    return torch.exp(scores - _guard(m)[..., None]) / ell[..., None]


def online_float32_state(scores, block_size):
    """Creates m and ell with torch.full / torch.zeros without a dtype (float32 for float64 input)."""
    L = scores.shape[-1]
    m = torch.full(scores.shape[:-1], float("-inf"), device=scores.device)
    ell = torch.zeros(scores.shape[:-1], device=scores.device)
    for start in range(0, L, block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1).to(m.dtype))
        safe = _guard(m_new)
        ell = ell * torch.exp(m - safe) + torch.exp(block - safe[..., None]).sum(-1).to(ell.dtype)
        m = m_new
    return (torch.exp(scores - _guard(m)[..., None]) / ell[..., None]).to(scores.dtype)


def online_one_pass(scores, block_size):
    """One pass: writes each block's output at once with the running m and ell reached so far."""
    L = scores.shape[-1]
    m = torch.full(scores.shape[:-1], float("-inf"), dtype=scores.dtype, device=scores.device)
    ell = torch.zeros_like(m)
    out = []
    for start in range(0, L, block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        safe = _guard(m_new)
        ell = ell * torch.exp(m - safe) + torch.exp(block - safe[..., None]).sum(-1)
        m = m_new
        out.append(torch.exp(block - safe[..., None]) / ell[..., None])
    return torch.cat(out, dim=-1)


# ---------------------------------------------------------------- tiled_attention


def _mask_block(mask, j, block_size):
    return mask if mask.shape[-1] == 1 else mask[..., j : j + block_size]


def tiled_right(q, k, v, mask=None, block_size=64):
    """Right: matmul per block, masked_fill, guards on m and on ell."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = ell = o = None
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) * scale
        if mask is not None:
            s = s.masked_fill(~_mask_block(mask, j, block_size), float("-inf"))
        if m is None:
            m = torch.full(s.shape[:-1], float("-inf"), dtype=s.dtype, device=s.device)
            ell = torch.zeros_like(m)
            o = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=s.dtype, device=s.device)
        m_new = torch.maximum(m, s.amax(-1))
        safe = _guard(m_new)
        p = torch.exp(s - safe[..., None])
        alpha = torch.exp(m - safe)
        ell = ell * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ v[..., j : j + block_size, :]
        m = m_new
    ell = torch.where(ell == 0, torch.ones_like(ell), ell)
    return o / ell[..., None]


def tiled_right2(q, k, v, mask=None, block_size=64):
    """Right: einsum, an additive -inf bias per block, keepdim state, ell + (ell == 0)."""
    d_k = q.shape[-1]
    m = ell = acc = None
    for j in range(0, k.shape[-2], block_size):
        kb, vb = k[..., j : j + block_size, :], v[..., j : j + block_size, :]
        s = torch.einsum("...qd,...kd->...qk", q, kb) / math.sqrt(d_k)
        if mask is not None:
            mb = mask[..., j : j + block_size] if mask.shape[-1] != 1 else mask
            s = s + torch.zeros_like(s).masked_fill(~mb, float("-inf"))
        bm = s.max(-1, keepdim=True).values
        if m is None:
            m_new = bm
            safe = m_new.masked_fill(torch.isneginf(m_new), 0.0)
            p = torch.exp(s - safe)
            ell = p.sum(-1, keepdim=True)
            acc = torch.einsum("...qk,...kd->...qd", p, vb)
        else:
            m_new = torch.maximum(m, bm)
            safe = m_new.masked_fill(torch.isneginf(m_new), 0.0)
            p = torch.exp(s - safe)
            scale = torch.exp(m - safe)
            ell = ell * scale + p.sum(-1, keepdim=True)
            acc = acc * scale + torch.einsum("...qk,...kd->...qd", p, vb)
        m = m_new
    return acc / (ell + (ell == 0).to(ell.dtype))


def tiled_mask_dim1(q, k, v, mask=None, block_size=64):
    """Slices the mask's columns as mask[:, j:j + block_size] (dimension 1, not the last one)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = ell = o = None
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) * scale
        if mask is not None:
            mb = mask[j : j + block_size] if mask.dim() == 1 else mask[:, j : j + block_size]
            s = s.masked_fill(~mb, float("-inf"))
        if m is None:
            m = torch.full(s.shape[:-1], float("-inf"), dtype=s.dtype, device=s.device)
            ell = torch.zeros_like(m)
            o = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=s.dtype, device=s.device)
        m_new = torch.maximum(m, s.amax(-1))
        safe = _guard(m_new)
        p = torch.exp(s - safe[..., None])
        alpha = torch.exp(m - safe)
        ell = ell * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ v[..., j : j + block_size, :]
        m = m_new
    ell = torch.where(ell == 0, torch.ones_like(ell), ell)
    return o / ell[..., None]


def tiled_always_slice_mask(q, k, v, mask=None, block_size=64):
    """Always slices mask[..., j:j + block_size], even when its last dimension is 1."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = ell = o = None
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) * scale
        if mask is not None:
            s = s.masked_fill(~mask[..., j : j + block_size], float("-inf"))
        if m is None:
            m = torch.full(s.shape[:-1], float("-inf"), dtype=s.dtype, device=s.device)
            ell = torch.zeros_like(m)
            o = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=s.dtype, device=s.device)
        m_new = torch.maximum(m, s.amax(-1))
        safe = _guard(m_new)
        p = torch.exp(s - safe[..., None])
        alpha = torch.exp(m - safe)
        ell = ell * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ v[..., j : j + block_size, :]
        m = m_new
    ell = torch.where(ell == 0, torch.ones_like(ell), ell)
    return o / ell[..., None]


def tiled_sqrt_dv(q, k, v, mask=None, block_size=64):
    """Scales the scores by sqrt(v.shape[-1]) (d_v) instead of sqrt(d_k)."""
    scale = 1.0 / math.sqrt(v.shape[-1])
    m = ell = o = None
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) * scale
        if mask is not None:
            s = s.masked_fill(~_mask_block(mask, j, block_size), float("-inf"))
        if m is None:
            m = torch.full(s.shape[:-1], float("-inf"), dtype=s.dtype, device=s.device)
            ell = torch.zeros_like(m)
            o = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=s.dtype, device=s.device)
        m_new = torch.maximum(m, s.amax(-1))
        safe = _guard(m_new)
        p = torch.exp(s - safe[..., None])
        alpha = torch.exp(m - safe)
        ell = ell * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ v[..., j : j + block_size, :]
        m = m_new
    ell = torch.where(ell == 0, torch.ones_like(ell), ell)
    return o / ell[..., None]


def tiled_where_divide(q, k, v, mask=None, block_size=64):
    """Ends with torch.where(ell > 0, o / ell, 0): right values, NaN gradients for a masked row."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = ell = o = None
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) * scale
        if mask is not None:
            s = s.masked_fill(~_mask_block(mask, j, block_size), float("-inf"))
        if m is None:
            m = torch.full(s.shape[:-1], float("-inf"), dtype=s.dtype, device=s.device)
            ell = torch.zeros_like(m)
            o = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=s.dtype, device=s.device)
        m_new = torch.maximum(m, s.amax(-1))
        safe = _guard(m_new)
        p = torch.exp(s - safe[..., None])
        alpha = torch.exp(m - safe)
        ell = ell * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ v[..., j : j + block_size, :]
        m = m_new
    return torch.where(ell[..., None] > 0, o / ell[..., None], torch.zeros_like(o))


def tiled_dot_T(q, k, v, mask=None, block_size=64):
    """Transposes each key block with .T, which reverses every axis of a batched tensor."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = ell = o = None
    for j in range(0, k.shape[-2], block_size):
        kb = k[..., j : j + block_size, :]
        s = q @ kb.T * scale
        if mask is not None:
            s = s.masked_fill(~_mask_block(mask, j, block_size), float("-inf"))
        if m is None:
            m = torch.full(s.shape[:-1], float("-inf"), dtype=s.dtype, device=s.device)
            ell = torch.zeros_like(m)
            o = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=s.dtype, device=s.device)
        m_new = torch.maximum(m, s.amax(-1))
        safe = _guard(m_new)
        p = torch.exp(s - safe[..., None])
        alpha = torch.exp(m - safe)
        ell = ell * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ v[..., j : j + block_size, :]
        m = m_new
    ell = torch.where(ell == 0, torch.ones_like(ell), ell)
    return o / ell[..., None]


# ---------------------------------------------------------------- kv_cache_bytes


def kv_right(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Right: the formula with n_kv defaulting to n_heads."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * n_kv * d_head * batch * length * dtype_bytes


def kv_right2(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Right: per-token bytes of one layer, then math.prod over the rest."""
    per_token_layer = 2 * (n_kv_heads or n_heads) * d_head * dtype_bytes
    return int(math.prod([per_token_layer, n_layers, batch, length]))


def kv_group_count(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Uses the group size n_heads // n_kv_heads where the number of K/V heads belongs."""
    n_kv = n_heads if n_kv_heads is None else n_heads // n_kv_heads
    return 2 * n_layers * n_kv * d_head * batch * length * dtype_bytes


def kv_ignores_n_kv(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Ignores n_kv_heads and always caches n_heads heads."""
    return 2 * n_layers * n_heads * d_head * batch * length * dtype_bytes


def kv_both_heads(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Multiplies by n_heads and by n_kv_heads both."""
    n_kv = 1 if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * n_heads * n_kv * d_head * batch * length * dtype_bytes


def kv_gib(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Returns GiB (divides by 2**30) because that is what gets printed."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * n_kv * d_head * batch * length * dtype_bytes / 2**30


def kv_keys_only(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Counts the keys only (no factor 2 for the values)."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return n_layers * n_kv * d_head * batch * length * dtype_bytes


# ---------------------------------------------------------------- repeat_kv


def repeat_right(x, n_rep):
    """Right: a new axis after the heads, expand, reshape."""
    B, h, L, d = x.shape
    return x[:, :, None].expand(B, h, n_rep, L, d).reshape(B, h * n_rep, L, d)


def repeat_right2(x, n_rep):
    """Right: torch.repeat_interleave along the head axis."""
    return torch.repeat_interleave(x, n_rep, dim=1)


def repeat_new_axis_first(x, n_rep):
    """Puts the new axis before the heads: x[:, None].expand(...) tiles the heads."""
    B, h, L, d = x.shape
    return x[:, None].expand(B, n_rep, h, L, d).reshape(B, h * n_rep, L, d)


def repeat_cat(x, n_rep):
    """torch.cat([x] * n_rep, dim=1): the heads come out tiled."""
    return torch.cat([x] * n_rep, dim=1)


def repeat_modulo(x, n_rep):
    """Builds head i from x[:, i % h_kv] instead of x[:, i // n_rep]."""
    h = x.shape[1]
    return torch.stack([x[:, i % h] for i in range(h * n_rep)], dim=1)


def repeat_axis_after_positions(x, n_rep):
    """Adds the repeat axis after the positions, then reshapes: positions and heads mix."""
    B, h, L, d = x.shape
    return x[:, :, :, None].expand(B, h, L, n_rep, d).reshape(B, h * n_rep, L, d)


def repeat_n_rep_as_heads(x, n_rep):
    """Reads n_rep as the number of query heads and repeats n_rep // h_kv times."""
    return torch.repeat_interleave(x, max(n_rep // x.shape[1], 1), dim=1)


# ---------------------------------------------------------------- positive_random_features


def prf_right(x, omega):
    """Right: one exp of the projection minus half the squared norm, over sqrt(m)."""
    proj = x @ omega.transpose(0, 1)
    half_sq = (x * x).sum(-1, keepdim=True) / 2
    return torch.exp(proj - half_sq) / math.sqrt(omega.shape[0])


def prf_right2(x, omega):
    """Right: einsum, the 1/sqrt(m) folded into the exponent as -log(m)/2."""
    m = omega.shape[0]
    proj = torch.einsum("...d,md->...m", x, omega)
    sq = torch.linalg.vector_norm(x, dim=-1, keepdim=True) ** 2
    return torch.exp(proj - 0.5 * sq - 0.5 * math.log(m))


def prf_no_transpose(x, omega):
    """x @ omega, without transposing omega (m, d)."""
    half_sq = (x * x).sum(-1, keepdim=True) / 2
    return torch.exp(x @ omega - half_sq) / math.sqrt(omega.shape[0])


def prf_no_keepdim(x, omega):
    """Takes |x|^2 without keepdim, so (..., m) minus (...) broadcasts along the wrong axis."""
    half_sq = (x * x).sum(-1) / 2
    return torch.exp(x @ omega.T - half_sq) / math.sqrt(omega.shape[0])


def prf_norm_over_rows(x, omega):
    """Sums the squares over dim=1 (the feature axis of a 2-D x only, not of a batched one)."""
    half_sq = (x * x).sum(dim=1, keepdim=True) / 2
    return torch.exp(x @ omega.T - half_sq) / math.sqrt(omega.shape[0])


def prf_subtract_outside(x, omega):
    """Operator slip: exp(omega . x) / sqrt(m) - |x|^2 / 2, the norm term outside the exp."""
    half_sq = (x * x).sum(-1, keepdim=True) / 2
    return torch.exp(x @ omega.T) / math.sqrt(omega.shape[0]) - half_sq


def prf_two_exps(x, omega):
    """exp(omega . x) * exp(-|x|^2 / 2): two exponentials, the first can overflow."""
    half_sq = (x * x).sum(-1, keepdim=True) / 2
    return torch.exp(x @ omega.T) * torch.exp(-half_sq) / math.sqrt(omega.shape[0])


WRONG = {
    "online_softmax": [
        online_sign_flipped,
        online_block_max_only,
        online_misses_tail,
        online_float32_state,
        online_one_pass,
    ],
    "tiled_attention": [
        tiled_mask_dim1,
        tiled_always_slice_mask,
        tiled_sqrt_dv,
        tiled_where_divide,
        tiled_dot_T,
    ],
    "kv_cache_bytes": [
        kv_group_count,
        kv_ignores_n_kv,
        kv_both_heads,
        kv_gib,
        kv_keys_only,
    ],
    "repeat_kv": [
        repeat_new_axis_first,
        repeat_cat,
        repeat_modulo,
        repeat_axis_after_positions,
        repeat_n_rep_as_heads,
    ],
    "positive_random_features": [
        prf_no_transpose,
        prf_no_keepdim,
        prf_norm_over_rows,
        prf_subtract_outside,
        prf_two_exps,
    ],
}

RIGHT = {
    "online_softmax": online_right,
    "tiled_attention": tiled_right,
    "kv_cache_bytes": kv_right,
    "repeat_kv": repeat_right,
    "positive_random_features": prf_right,
}

RIGHT2 = {
    "online_softmax": online_right2,
    "tiled_attention": tiled_right2,
    "kv_cache_bytes": kv_right2,
    "repeat_kv": repeat_right2,
    "positive_random_features": prf_right2,
}
