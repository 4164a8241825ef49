"""Lesson 12: online softmax and tiled attention."""

import math

import torch


def _safe(m):
    return torch.where(torch.isneginf(m), torch.zeros_like(m), m)


def online_right(scores, block_size):
    """Correct."""
    shape = scores.shape[:-1]
    m = torch.full(shape, float("-inf"), dtype=scores.dtype)
    ell = torch.zeros(shape, dtype=scores.dtype)
    for s in range(0, scores.shape[-1], block_size):
        blk = scores[..., s : s + block_size]
        m_new = torch.maximum(m, blk.amax(-1))
        # exp(m - m'), 0 while m is -inf (was exp(0 - m') * 0: NaN for rows below -709, the
        # reference's own slip until the visible check gained its very-negative-scores case)
        ell = ell * torch.exp(m - _safe(m_new)) + torch.exp(blk - _safe(m_new)[..., None]).sum(-1)
        m = m_new
    return torch.exp(scores - _safe(m)[..., None]) / ell[..., None]


def online_max_per_block(scores, block_size):
    """Final pass uses each block's own max with the global sum (a running max taken per block)."""
    shape = scores.shape[:-1]
    m = torch.full(shape, float("-inf"), dtype=scores.dtype)
    ell = torch.zeros(shape, dtype=scores.dtype)
    outs = []
    for s in range(0, scores.shape[-1], block_size):
        blk = scores[..., s : s + block_size]
        m_new = torch.maximum(m, blk.amax(-1))
        # exp(m - m'), 0 while m is -inf (was exp(0 - m') * 0: NaN for rows below -709, the
        # reference's own slip until the visible check gained its very-negative-scores case)
        ell = ell * torch.exp(m - _safe(m_new)) + torch.exp(blk - _safe(m_new)[..., None]).sum(-1)
        m = m_new
    for s in range(0, scores.shape[-1], block_size):
        blk = scores[..., s : s + block_size]
        outs.append(torch.exp(blk - _safe(blk.amax(-1))[..., None]))
    return torch.cat(outs, -1) / ell[..., None]


def online_zero_init_max(scores, block_size):
    """Starts the running max at 0 instead of -inf (underflow for very negative rows)."""
    shape = scores.shape[:-1]
    m = torch.zeros(shape, dtype=scores.dtype)
    ell = torch.zeros(shape, dtype=scores.dtype)
    for s in range(0, scores.shape[-1], block_size):
        blk = scores[..., s : s + block_size]
        m_new = torch.maximum(m, blk.amax(-1))
        ell = ell * torch.exp(m - m_new) + torch.exp(blk - m_new[..., None]).sum(-1)
        m = m_new
    return torch.exp(scores - m[..., None]) / ell[..., None]


def online_no_neginf_guard_inf(scores, block_size):
    """No guard: a row of -inf entries gives NaN (exp(-inf + inf))."""
    shape = scores.shape[:-1]
    m = torch.full(shape, float("-inf"), dtype=scores.dtype)
    ell = torch.zeros(shape, dtype=scores.dtype)
    for s in range(0, scores.shape[-1], block_size):
        blk = scores[..., s : s + block_size]
        m_new = torch.maximum(m, blk.amax(-1))
        ell = ell * torch.exp(m - m_new) + torch.exp(blk - m_new[..., None]).sum(-1)
        m = m_new
    return torch.exp(scores - m[..., None]) / ell[..., None]


def online_off_by_one_blocks(scores, block_size):
    """Steps over range(0, L - 1, block_size) and misses the last entry when L - 1 is a block start."""
    shape = scores.shape[:-1]
    L = scores.shape[-1]
    m = torch.full(shape, float("-inf"), dtype=scores.dtype)
    ell = torch.zeros(shape, dtype=scores.dtype)
    for s in range(0, max(L - 1, 1), block_size):
        blk = scores[..., s : s + block_size]
        m_new = torch.maximum(m, blk.amax(-1))
        # exp(m - m'), 0 while m is -inf (was exp(0 - m') * 0: NaN for rows below -709, the
        # reference's own slip until the visible check gained its very-negative-scores case)
        ell = ell * torch.exp(m - _safe(m_new)) + torch.exp(blk - _safe(m_new)[..., None]).sum(-1)
        m = m_new
    return torch.exp(scores - _safe(m)[..., None]) / ell[..., None]


def online_float32_accumulate(scores, block_size):
    """Accumulates the running sum in float32 whatever the input dtype."""
    shape = scores.shape[:-1]
    m = torch.full(shape, float("-inf"), dtype=scores.dtype)
    ell = torch.zeros(shape, dtype=torch.float32)
    for s in range(0, scores.shape[-1], block_size):
        blk = scores[..., s : s + block_size]
        m_new = torch.maximum(m, blk.amax(-1))
        scale = torch.exp(_safe(m) - _safe(m_new)) * (~torch.isneginf(m))
        ell = ell * scale.float() + torch.exp(blk - _safe(m_new)[..., None]).sum(-1).float()
        m = m_new
    return torch.exp(scores - _safe(m)[..., None]) / ell[..., None].to(scores.dtype)


def tiled_right(q, k, v, mask=None, block_size=64):
    """Correct."""
    scale = 1 / math.sqrt(q.shape[-1])
    Lk = k.shape[-2]
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    m = torch.full((*batch, q.shape[-2], 1), float("-inf"), dtype=q.dtype)
    ell = torch.zeros_like(m)
    o = torch.zeros((*batch, q.shape[-2], v.shape[-1]), dtype=q.dtype)
    for j in range(0, Lk, block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) * scale
        if mask is not None:
            mb = mask[..., j : j + block_size] if mask.shape[-1] != 1 else mask
            s = s.masked_fill(~mb, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        alpha = torch.exp(_safe(m) - _safe(m_new)) * (~torch.isneginf(m))
        p = torch.exp(s - _safe(m_new))
        ell = ell * alpha + p.sum(-1, keepdim=True)
        o = o * alpha + p @ v[..., j : j + block_size, :]
        m = m_new
    return o / torch.where(ell == 0, torch.ones_like(ell), ell)


def tiled_mask_sliced_always(q, k, v, mask=None, block_size=64):
    """Slices the mask's last axis per block even when it has size 1 (broadcast masks lose columns)."""
    scale = 1 / math.sqrt(q.shape[-1])
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    m = torch.full((*batch, q.shape[-2], 1), float("-inf"), dtype=q.dtype)
    ell = torch.zeros_like(m)
    o = torch.zeros((*batch, q.shape[-2], v.shape[-1]), dtype=q.dtype)
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) * scale
        if mask is not None:
            s = s.masked_fill(~mask[..., j : j + block_size], float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        alpha = torch.exp(_safe(m) - _safe(m_new)) * (~torch.isneginf(m))
        p = torch.exp(s - _safe(m_new))
        ell = ell * alpha + p.sum(-1, keepdim=True)
        o = o * alpha + p @ v[..., j : j + block_size, :]
        m = m_new
    return o / torch.where(ell == 0, torch.ones_like(ell), ell)


def tiled_where_divide(q, k, v, mask=None, block_size=64):
    """torch.where(ell > 0, o / ell, 0): right values, NaN gradients for fully masked queries."""
    scale = 1 / math.sqrt(q.shape[-1])
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    m = torch.full((*batch, q.shape[-2], 1), float("-inf"), dtype=q.dtype)
    ell = torch.zeros_like(m)
    o = torch.zeros((*batch, q.shape[-2], v.shape[-1]), dtype=q.dtype)
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) * scale
        if mask is not None:
            mb = mask[..., j : j + block_size] if mask.shape[-1] != 1 else mask
            s = s.masked_fill(~mb, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        alpha = torch.exp(_safe(m) - _safe(m_new)) * (~torch.isneginf(m))
        p = torch.exp(s - _safe(m_new))
        ell = ell * alpha + p.sum(-1, keepdim=True)
        o = o * alpha + p @ v[..., j : j + block_size, :]
        m = m_new
    return torch.where(ell > 0, o / ell, torch.zeros_like(o))


def tiled_scale_dv(q, k, v, mask=None, block_size=64):
    """Scales by sqrt(d_v)."""
    return tiled_right(q * math.sqrt(q.shape[-1]) / math.sqrt(v.shape[-1]), k, v, mask, block_size)


def tiled_blocks_of_queries(q, k, v, mask=None, block_size=64):
    """Tiles the queries, each query block against ALL keys at once (not the keys)."""
    outs = []
    for i in range(0, q.shape[-2], block_size):
        qb = q[..., i : i + block_size, :]
        mb = None
        if mask is not None:
            mb = (
                mask[..., i : i + block_size, :]
                if mask.dim() >= 2 and mask.shape[-2] != 1
                else mask
            )
        outs.append(tiled_right(qb, k, v, mb, block_size=k.shape[-2] or 1))
    return torch.cat(outs, dim=-2)


def tiled_alpha_from_new_max(q, k, v, mask=None, block_size=64):
    """Rescales o by exp(m_new - m) (the inverse factor)."""
    scale = 1 / math.sqrt(q.shape[-1])
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    m = torch.full((*batch, q.shape[-2], 1), float("-inf"), dtype=q.dtype)
    ell = torch.zeros_like(m)
    o = torch.zeros((*batch, q.shape[-2], v.shape[-1]), dtype=q.dtype)
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) * scale
        if mask is not None:
            mb = mask[..., j : j + block_size] if mask.shape[-1] != 1 else mask
            s = s.masked_fill(~mb, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        alpha = torch.exp(_safe(m) - _safe(m_new)) * (~torch.isneginf(m))
        p = torch.exp(s - _safe(m_new))
        ell = ell * alpha + p.sum(-1, keepdim=True)
        o = (
            o / torch.where(alpha == 0, torch.ones_like(alpha), alpha) * (alpha != 0)
            + p @ v[..., j : j + block_size, :]
        )
        m = m_new
    return o / torch.where(ell == 0, torch.ones_like(ell), ell)


WRONG = {
    "online_softmax": [
        online_max_per_block,
        online_zero_init_max,
        online_no_neginf_guard_inf,
        online_off_by_one_blocks,
        online_float32_accumulate,
    ],
    "tiled_attention": [
        tiled_mask_sliced_always,
        tiled_where_divide,
        tiled_scale_dv,
        tiled_blocks_of_queries,
        tiled_alpha_from_new_max,
    ],
}
RIGHT = {"online_softmax": online_right, "tiled_attention": tiled_right}
