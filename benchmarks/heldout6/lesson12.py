"""Lesson 12 (attention at scale): held-out wrong and right implementations, from the exercise text only."""

import functools
import math
import operator

import torch

# ---------------------------------------------------------------- online_softmax


def online_softmax_right(scores, block_size):
    """Right: running max and rescaled running sum over blocks, guard on m', then exp(s - m) / l."""
    L = scores.shape[-1]
    m = torch.full(scores.shape[:-1], float("-inf"), dtype=scores.dtype, device=scores.device)
    l = torch.zeros(scores.shape[:-1], dtype=scores.dtype, device=scores.device)
    for start in range(0, L, block_size):
        blk = scores[..., start : start + block_size]
        m_new = torch.maximum(m, blk.amax(-1))
        m_safe = torch.where(torch.isneginf(m_new), 0, m_new)
        l = l * torch.exp(m - m_safe) + torch.exp(blk - m_safe[..., None]).sum(-1)
        m = m_new
    m_safe = torch.where(torch.isneginf(m), 0, m)
    return torch.exp(scores - m_safe[..., None]) / l[..., None]


def online_softmax_right2(scores, block_size):
    """Right: split-K style: each block's own (max, sum) first, then merged into the row's max and sum."""
    stats = []
    for start in range(0, scores.shape[-1], block_size):
        blk = scores[..., start : start + block_size]
        b_max = blk.amax(dim=-1)
        b_safe = torch.where(torch.isneginf(b_max), torch.zeros_like(b_max), b_max)
        stats.append((b_max, b_safe, torch.exp(blk - b_safe.unsqueeze(-1)).sum(dim=-1)))
    m = stats[0][0]
    for b_max, _, _ in stats[1:]:
        m = torch.maximum(m, b_max)
    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    l = torch.zeros_like(m_safe)
    for b_max, _, b_sum in stats:
        l = l + b_sum * torch.exp(b_max - m_safe)
    return torch.exp(scores - m_safe.unsqueeze(-1)) / l.unsqueeze(-1)


def online_softmax_no_max(scores, block_size):
    """Wrong: no running max at all, exp(scores) summed block by block (overflows)."""
    l = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    for start in range(0, scores.shape[-1], block_size):
        l = l + torch.exp(scores[..., start : start + block_size]).sum(-1)
    return torch.exp(scores) / l[..., None]


def online_softmax_stale_max(scores, block_size):
    """Wrong: the new block's exponentials are taken against the max from before the block."""
    m = torch.full(scores.shape[:-1], float("-inf"), dtype=scores.dtype)
    l = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    for start in range(0, scores.shape[-1], block_size):
        blk = scores[..., start : start + block_size]
        m_new = torch.maximum(m, blk.amax(-1))
        m_safe = torch.where(torch.isneginf(m_new), 0, m_new)
        m_old = torch.where(torch.isneginf(m), 0, m)
        l = l * torch.exp(m - m_safe) + torch.exp(blk - m_old[..., None]).sum(-1)
        m = m_new
    m_safe = torch.where(torch.isneginf(m), 0, m)
    return torch.exp(scores - m_safe[..., None]) / l[..., None]


def online_softmax_drops_tail(scores, block_size):
    """Wrong: loops over range(L // block_size) blocks, so a last shorter block is never read."""
    m = torch.full(scores.shape[:-1], float("-inf"), dtype=scores.dtype)
    l = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    for b in range(scores.shape[-1] // block_size):
        blk = scores[..., b * block_size : (b + 1) * block_size]
        m_new = torch.maximum(m, blk.amax(-1))
        m_safe = torch.where(torch.isneginf(m_new), 0, m_new)
        l = l * torch.exp(m - m_safe) + torch.exp(blk - m_safe[..., None]).sum(-1)
        m = m_new
    m_safe = torch.where(torch.isneginf(m), 0, m)
    return torch.exp(scores - m_safe[..., None]) / l[..., None]


def online_softmax_block_max_not_running(scores, block_size):
    """Wrong: m is set to the current block's max (not the running maximum), so large earlier scores overflow."""
    m = torch.full(scores.shape[:-1], float("-inf"), dtype=scores.dtype)
    l = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    for start in range(0, scores.shape[-1], block_size):
        blk = scores[..., start : start + block_size]
        m_new = blk.amax(-1)
        m_safe = torch.where(torch.isneginf(m_new), 0, m_new)
        l = l * torch.exp(m - m_safe) + torch.exp(blk - m_safe[..., None]).sum(-1)
        m = m_new
    m_safe = torch.where(torch.isneginf(m), 0, m)
    return torch.exp(scores - m_safe[..., None]) / l[..., None]


def online_softmax_no_unsqueeze(scores, block_size):
    """Wrong: the (...)-shaped max is subtracted from the block without [..., None] (broadcasts wrongly)."""
    m = torch.full(scores.shape[:-1], float("-inf"), dtype=scores.dtype)
    l = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    for start in range(0, scores.shape[-1], block_size):
        blk = scores[..., start : start + block_size]
        m_new = torch.maximum(m, blk.amax(-1))
        m_safe = torch.where(torch.isneginf(m_new), 0, m_new)
        l = l * torch.exp(m - m_safe) + torch.exp(blk - m_safe).sum(-1)
        m = m_new
    m_safe = torch.where(torch.isneginf(m), 0, m)
    return torch.exp(scores - m_safe) / l


def online_softmax_guard_old_m(scores, block_size):
    """Wrong: the -inf guard is put on the old m instead of m' (NaN when a block is all -inf)."""
    m = torch.full(scores.shape[:-1], float("-inf"), dtype=scores.dtype)
    l = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    for start in range(0, scores.shape[-1], block_size):
        blk = scores[..., start : start + block_size]
        m_new = torch.maximum(m, blk.amax(-1))
        m_old = torch.where(torch.isneginf(m), 0, m)
        l = l * torch.exp(m_old - m_new) + torch.exp(blk - m_new[..., None]).sum(-1)
        m = m_new
    m_safe = torch.where(torch.isneginf(m), 0, m)
    return torch.exp(scores - m_safe[..., None]) / l[..., None]


# ---------------------------------------------------------------- tiled_attention


def _block_mask(mask, j, block_size):
    if mask is None:
        return None
    return mask if mask.shape[-1] == 1 else mask[..., j : j + block_size]


def tiled_attention_right(q, k, v, mask=None, block_size=64):
    """Right: FlashAttention's forward loop with running m, l, o; rows with no allowed key give 0."""
    d_k = q.shape[-1]
    m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros(q.shape[:-1], dtype=q.dtype, device=q.device)
    o = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    for j in range(0, k.shape[-2], block_size):
        kb, vb = k[..., j : j + block_size, :], v[..., j : j + block_size, :]
        s = q @ kb.transpose(-2, -1) / math.sqrt(d_k)
        mb = _block_mask(mask, j, block_size)
        if mb is not None:
            s = s.masked_fill(~mb, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1))
        m_safe = torch.where(torch.isneginf(m_new), 0, m_new)
        alpha = torch.exp(m - m_safe)
        p = torch.exp(s - m_safe[..., None])
        l = l * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ vb
        m = m_new
    return o / torch.where(l == 0, 1, l)[..., None]


def tiled_attention_right2(q, k, v, mask=None, block_size=64):
    """Right: q pre-scaled; each block normalised on its own, merged by log-sum-exp weights (split-K style)."""
    q = q * q.shape[-1] ** -0.5
    lse, out = None, None
    for j in range(0, k.shape[-2], block_size):
        s = torch.einsum("...qd,...kd->...qk", q, k[..., j : j + block_size, :])
        if mask is not None:
            mb = mask if mask.shape[-1] == 1 else mask[..., j : j + block_size]
            s = torch.where(mb, s, torch.tensor(float("-inf"), dtype=s.dtype, device=s.device))
        b_lse = torch.logsumexp(s, dim=-1)
        b_safe = torch.where(torch.isneginf(b_lse), 0, b_lse)
        b_out = torch.exp(s - b_safe[..., None]) @ v[..., j : j + block_size, :]
        if lse is None:
            lse, out = b_lse, b_out
            continue
        new = torch.logaddexp(lse, b_lse)
        new_safe = torch.where(torch.isneginf(new), 0, new)
        out = (
            out * torch.exp(lse - new_safe)[..., None]
            + b_out * torch.exp(b_lse - new_safe)[..., None]
        )
        lse = new
    return out


def tiled_attention_scale_dv(q, k, v, mask=None, block_size=64):
    """Wrong: the scores are divided by sqrt(d_v) (v.shape[-1]) instead of sqrt(d_k)."""
    return tiled_attention_right(
        q * math.sqrt(q.shape[-1]) / math.sqrt(v.shape[-1]), k, v, mask, block_size
    )


def tiled_attention_slices_keepdim_mask(q, k, v, mask=None, block_size=64):
    """Wrong: always slices mask[..., j:j+bs], also a mask whose last dim is 1 (empty after block 0)."""
    d_k = q.shape[-1]
    m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    l = torch.zeros(q.shape[:-1], dtype=q.dtype)
    o = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for j in range(0, k.shape[-2], block_size):
        kb, vb = k[..., j : j + block_size, :], v[..., j : j + block_size, :]
        s = q @ kb.transpose(-2, -1) / math.sqrt(d_k)
        if mask is not None:
            s = s.masked_fill(~mask[..., j : j + block_size], float("-inf"))
        m_new = torch.maximum(m, s.amax(-1))
        m_safe = torch.where(torch.isneginf(m_new), 0, m_new)
        alpha = torch.exp(m - m_safe)
        p = torch.exp(s - m_safe[..., None])
        l = l * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ vb
        m = m_new
    return o / torch.where(l == 0, 1, l)[..., None]


def tiled_attention_large_negative(q, k, v, mask=None, block_size=64):
    """Wrong: masked scores filled with -1e9, so a query with every key masked averages all values."""
    d_k = q.shape[-1]
    m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    l = torch.zeros(q.shape[:-1], dtype=q.dtype)
    o = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for j in range(0, k.shape[-2], block_size):
        kb, vb = k[..., j : j + block_size, :], v[..., j : j + block_size, :]
        s = q @ kb.transpose(-2, -1) / math.sqrt(d_k)
        mb = _block_mask(mask, j, block_size)
        if mb is not None:
            s = s.masked_fill(~mb, -1e9)
        m_new = torch.maximum(m, s.amax(-1))
        alpha = torch.exp(m - m_new)
        p = torch.exp(s - m_new[..., None])
        l = l * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ vb
        m = m_new
    return o / l[..., None]


def tiled_attention_nan_rows(q, k, v, mask=None, block_size=64):
    """Wrong: o / l without a guard, so a query with every key masked gives NaN (not 0)."""
    d_k = q.shape[-1]
    m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    l = torch.zeros(q.shape[:-1], dtype=q.dtype)
    o = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for j in range(0, k.shape[-2], block_size):
        kb, vb = k[..., j : j + block_size, :], v[..., j : j + block_size, :]
        s = q @ kb.transpose(-2, -1) / math.sqrt(d_k)
        mb = _block_mask(mask, j, block_size)
        if mb is not None:
            s = s.masked_fill(~mb, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1))
        m_safe = torch.where(torch.isneginf(m_new), 0, m_new)
        alpha = torch.exp(m - m_safe)
        p = torch.exp(s - m_safe[..., None])
        l = l * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ vb
        m = m_new
    return o / l[..., None]


def tiled_attention_mask_inverted(q, k, v, mask=None, block_size=64):
    """Wrong: masked_fill(mask, -inf): True is read as "hide", though True means "may attend"."""
    return tiled_attention_right(q, k, v, None if mask is None else ~mask, block_size)


def tiled_attention_alpha_after_update(q, k, v, mask=None, block_size=64):
    """Wrong: m is overwritten before the rescaling factor is computed, so alpha is always 1."""
    d_k = q.shape[-1]
    m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    l = torch.zeros(q.shape[:-1], dtype=q.dtype)
    o = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for j in range(0, k.shape[-2], block_size):
        kb, vb = k[..., j : j + block_size, :], v[..., j : j + block_size, :]
        s = q @ kb.transpose(-2, -1) / math.sqrt(d_k)
        mb = _block_mask(mask, j, block_size)
        if mb is not None:
            s = s.masked_fill(~mb, float("-inf"))
        m = torch.maximum(m, s.amax(-1))
        m_safe = torch.where(torch.isneginf(m), 0, m)
        alpha = torch.exp(torch.where(torch.isneginf(m), 0, m) - m_safe)
        p = torch.exp(s - m_safe[..., None])
        l = l * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ vb
    return o / torch.where(l == 0, 1, l)[..., None]


def tiled_attention_dot_T(q, k, v, mask=None, block_size=64):
    """Wrong: kb.T for the key transpose, which reverses every axis of a batched (3-D/4-D) block."""
    d_k = q.shape[-1]
    m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    l = torch.zeros(q.shape[:-1], dtype=q.dtype)
    o = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for j in range(0, k.shape[-2], block_size):
        kb, vb = k[..., j : j + block_size, :], v[..., j : j + block_size, :]
        s = q @ kb.T
        mb = _block_mask(mask, j, block_size)
        s = s / math.sqrt(d_k)
        if mb is not None:
            s = s.masked_fill(~mb, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1))
        m_safe = torch.where(torch.isneginf(m_new), 0, m_new)
        alpha = torch.exp(m - m_safe)
        p = torch.exp(s - m_safe[..., None])
        l = l * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ vb
        m = m_new
    return o / torch.where(l == 0, 1, l)[..., None]


# ---------------------------------------------------------------- kv_cache_bytes


def kv_cache_bytes_right(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Right: 2 * layers * kv heads * d_head * batch * length * bytes, kv heads = n_heads when None."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * n_kv * d_head * batch * length * dtype_bytes


def kv_cache_bytes_right2(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Right: bytes per token (K and V of every layer) times the tokens, via functools.reduce, cast to int."""
    per_token = functools.reduce(
        operator.mul,
        (n_layers, n_heads if n_kv_heads is None else n_kv_heads, d_head, dtype_bytes),
        2,
    )
    tokens = batch * length
    return int(per_token) * int(tokens)


def kv_cache_bytes_ignores_kv(
    n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None
):
    """Wrong: the n_kv_heads argument is ignored, every query head is cached."""
    return 2 * n_layers * n_heads * d_head * batch * length * dtype_bytes


def kv_cache_bytes_group_size(
    n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None
):
    """Wrong: uses the group size n_heads // n_kv_heads as the number of cached heads."""
    n_kv = n_heads if n_kv_heads is None else n_heads // n_kv_heads
    return 2 * n_layers * n_kv * d_head * batch * length * dtype_bytes


def kv_cache_bytes_float(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: goes through GB and back, returning a float instead of the int the text asks for."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    gb = 2 * n_layers * n_kv * d_head * batch * length * dtype_bytes / 1e9
    return gb * 1e9


def kv_cache_bytes_past_only(
    n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None
):
    """Wrong: caches length - 1 "past" tokens instead of length tokens."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * n_kv * d_head * batch * (length - 1) * dtype_bytes


def kv_cache_bytes_bits(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: multiplies by 8 as if the result were asked in bits."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * n_kv * d_head * batch * length * dtype_bytes * 8


def kv_cache_bytes_d_model(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: each K/V head counted with d_model = n_heads * d_head numbers."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * n_kv * n_heads * d_head * batch * length * dtype_bytes


# ---------------------------------------------------------------- repeat_kv


def repeat_kv_right(x, n_rep):
    """Right: x[:, :, None].expand(...) then reshape."""
    B, h, L, d = x.shape
    return x[:, :, None].expand(B, h, n_rep, L, d).reshape(B, h * n_rep, L, d)


def repeat_kv_right2(x, n_rep):
    """Right: index the head axis with arange(h * n_rep) // n_rep (integer division on a tensor)."""
    idx = torch.div(torch.arange(x.shape[1] * n_rep, device=x.device), n_rep, rounding_mode="floor")
    return x.index_select(1, idx)


def repeat_kv_tiled(x, n_rep):
    """Wrong: x.repeat(1, n_rep, 1, 1) tiles the heads (0 1 0 1) instead of repeating each (0 0 1 1)."""
    return x.repeat(1, n_rep, 1, 1)


def repeat_kv_view(x, n_rep):
    """Wrong: .view after expand (the expanded tensor cannot be viewed; needs reshape)."""
    B, h, L, d = x.shape
    return x[:, :, None].expand(B, h, n_rep, L, d).view(B, h * n_rep, L, d)


def repeat_kv_none_first(x, n_rep):
    """Wrong: the new axis put before the heads (x[:, None]), which after reshape tiles the heads."""
    B, h, L, d = x.shape
    return x[:, None].expand(B, n_rep, h, L, d).reshape(B, h * n_rep, L, d)


def repeat_kv_no_dim(x, n_rep):
    """Wrong: torch.repeat_interleave without dim= flattens and repeats every number, then reshape."""
    B, h, L, d = x.shape
    return torch.repeat_interleave(x, n_rep).reshape(B, h * n_rep, L, d)


def repeat_kv_positions(x, n_rep):
    """Wrong: repeat_interleave on dim 2 (the positions), reshaped into the head axis."""
    B, h, L, d = x.shape
    return x.repeat_interleave(n_rep, dim=2).reshape(B, h * n_rep, L, d)


# ---------------------------------------------------------------- positive_random_features


def positive_random_features_right(x, omega):
    """Right: exp(x @ omega.T - |x|^2 / 2) / sqrt(m)."""
    m = omega.shape[0]
    return torch.exp(x @ omega.T - (x**2).sum(-1, keepdim=True) / 2) / math.sqrt(m)


def positive_random_features_right2(x, omega):
    """Right: einsum, with the 1/sqrt(m) folded into the exponent as -log(m)/2."""
    proj = torch.einsum("...d,md->...m", x, omega)
    half_sq = 0.5 * torch.linalg.vector_norm(x, dim=-1, keepdim=True) ** 2
    return torch.exp(proj - half_sq - 0.5 * math.log(omega.shape[0]))


def prf_no_keepdim(x, omega):
    """Wrong: |x|^2 summed without keepdim, so it broadcasts along the m features."""
    return torch.exp(x @ omega.T - (x**2).sum(-1) / 2) / math.sqrt(omega.shape[0])


def prf_mean_square(x, omega):
    """Wrong: mean of the squares over d instead of the sum (|x|^2 / d)."""
    return torch.exp(x @ omega.T - (x**2).mean(-1, keepdim=True) / 2) / math.sqrt(omega.shape[0])


def prf_sqrt_d(x, omega):
    """Wrong: divides by sqrt(omega.shape[1]) (d) instead of sqrt(m)."""
    return torch.exp(x @ omega.T - (x**2).sum(-1, keepdim=True) / 2) / math.sqrt(omega.shape[1])


def prf_untransposed(x, omega):
    """Wrong: x @ omega instead of x @ omega.T (runs only when m == d, then uses omega's columns)."""
    return torch.exp(x @ omega - (x**2).sum(-1, keepdim=True) / 2) / math.sqrt(omega.shape[0])


def prf_omega_norm(x, omega):
    """Wrong: subtracts |omega_i|^2 / 2 instead of |x|^2 / 2."""
    return torch.exp(x @ omega.T - (omega**2).sum(-1) / 2) / math.sqrt(omega.shape[0])


def prf_scale_in_exp(x, omega):
    """Wrong: the 1/sqrt(m) put on the projection inside the exponential."""
    m = omega.shape[0]
    return torch.exp(x @ omega.T / math.sqrt(m) - (x**2).sum(-1, keepdim=True) / 2)


WRONG = {
    "online_softmax": [
        online_softmax_no_max,
        online_softmax_stale_max,
        online_softmax_drops_tail,
        online_softmax_block_max_not_running,
        online_softmax_no_unsqueeze,
        online_softmax_guard_old_m,
    ],
    "tiled_attention": [
        tiled_attention_scale_dv,
        tiled_attention_slices_keepdim_mask,
        tiled_attention_large_negative,
        tiled_attention_nan_rows,
        tiled_attention_mask_inverted,
        tiled_attention_alpha_after_update,
        tiled_attention_dot_T,
    ],
    "kv_cache_bytes": [
        kv_cache_bytes_ignores_kv,
        kv_cache_bytes_group_size,
        kv_cache_bytes_float,
        kv_cache_bytes_past_only,
        kv_cache_bytes_bits,
        kv_cache_bytes_d_model,
    ],
    "repeat_kv": [
        repeat_kv_tiled,
        repeat_kv_view,
        repeat_kv_none_first,
        repeat_kv_no_dim,
        repeat_kv_positions,
    ],
    "positive_random_features": [
        prf_no_keepdim,
        prf_mean_square,
        prf_sqrt_d,
        prf_untransposed,
        prf_omega_norm,
        prf_scale_in_exp,
    ],
}

RIGHT = {
    "online_softmax": online_softmax_right,
    "tiled_attention": tiled_attention_right,
    "kv_cache_bytes": kv_cache_bytes_right,
    "repeat_kv": repeat_kv_right,
    "positive_random_features": positive_random_features_right,
}

RIGHT2 = {
    "online_softmax": online_softmax_right2,
    "tiled_attention": tiled_attention_right2,
    "kv_cache_bytes": kv_cache_bytes_right2,
    "repeat_kv": repeat_kv_right2,
    "positive_random_features": positive_random_features_right2,
}
