"""Lesson 12 (attention at scale): held-out wrong and right implementations, from the exercise text only."""

import math

import torch

# ---------------------------------------------------------------- online_softmax


def online_where(scores, block_size):
    """Right: running max and rescaled running sum per block, the -inf guard by torch.where."""
    L = scores.shape[-1]
    m = torch.full(scores.shape[:-1], -math.inf, dtype=scores.dtype, device=scores.device)
    l = torch.zeros(scores.shape[:-1], dtype=scores.dtype, device=scores.device)
    for start in range(0, L, block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        m_safe = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        l = l * torch.exp(m - m_safe) + torch.exp(block - m_safe.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    return torch.exp(scores - m_safe.unsqueeze(-1)) / l.unsqueeze(-1)


def online_split(scores, block_size):
    """Right: torch.split into blocks, max(...).values, the guard by nan_to_num(neginf=0)."""
    m = None
    for block in torch.split(scores, block_size, dim=-1):
        block_max = block.max(dim=-1, keepdim=True).values
        if m is None:
            m = torch.full_like(block_max, -math.inf)
            l = torch.zeros_like(block_max)
        m_new = torch.maximum(m, block_max)
        shift = m_new.nan_to_num(neginf=0.0)
        l = l * (m - shift).exp() + (block - shift).exp().sum(dim=-1, keepdim=True)
        m = m_new
    return (scores - m.nan_to_num(neginf=0.0)).exp() / l


def online_no_max(scores, block_size):
    """Wrong: no running max at all: the blocks' sums of exp(scores) are added up (overflows)."""
    l = torch.zeros(scores.shape[:-1], dtype=scores.dtype, device=scores.device)
    for start in range(0, scores.shape[-1], block_size):
        l = l + torch.exp(scores[..., start : start + block_size]).sum(-1)
    return torch.exp(scores) / l.unsqueeze(-1)


def online_no_rescale(scores, block_size):
    """Wrong: the running sum is not multiplied by exp(m - m') when the max grows."""
    m = torch.full(scores.shape[:-1], -math.inf, dtype=scores.dtype)
    l = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(-1))
        m_safe = torch.where(torch.isneginf(m_new), 0.0, m_new)
        l = l + torch.exp(block - m_safe[..., None]).sum(-1)
        m = m_new
    m_safe = torch.where(torch.isneginf(m), 0.0, m)
    return torch.exp(scores - m_safe[..., None]) / l[..., None]


def online_last_block_max(scores, block_size):
    """Wrong: m is set to each block's own max (not the running max); rescaling then overflows."""
    m = torch.full(scores.shape[:-1], -math.inf, dtype=scores.dtype)
    l = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]
        m_new = block.amax(-1)
        m_safe = torch.where(torch.isneginf(m_new), 0.0, m_new)
        l = l * torch.exp(m - m_safe) + torch.exp(block - m_safe[..., None]).sum(-1)
        m = m_new
    m_safe = torch.where(torch.isneginf(m), 0.0, m)
    return torch.exp(scores - m_safe[..., None]) / l[..., None]


def online_no_guard(scores, block_size):
    """Wrong: no -inf guard: a block of -inf so far gives exp(-inf + inf) = NaN."""
    m = torch.full(scores.shape[:-1], -math.inf, dtype=scores.dtype)
    l = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(-1))
        l = l * torch.exp(m - m_new) + torch.exp(block - m_new[..., None]).sum(-1)
        m = m_new
    return torch.exp(scores - m[..., None]) / l[..., None]


def online_drops_tail(scores, block_size):
    """Wrong: range(0, L - block_size + 1, block_size): a last, shorter block is never read."""
    L = scores.shape[-1]
    m = torch.full(scores.shape[:-1], -math.inf, dtype=scores.dtype)
    l = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    for start in range(0, max(L - block_size + 1, 1), block_size):
        block = scores[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(-1))
        m_safe = torch.where(torch.isneginf(m_new), 0.0, m_new)
        l = l * torch.exp(m - m_safe) + torch.exp(block - m_safe[..., None]).sum(-1)
        m = m_new
    m_safe = torch.where(torch.isneginf(m), 0.0, m)
    return torch.exp(scores - m_safe[..., None]) / l[..., None]


def online_first_axis(scores, block_size):
    """Wrong: the blocks are sliced as scores[start:start + block_size] (the first axis)."""
    m = torch.full(scores.shape[:-1], -math.inf, dtype=scores.dtype)
    l = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    for start in range(0, scores.shape[-1], block_size):
        block = scores[start : start + block_size]
        m_new = torch.maximum(m, block.amax(-1))
        m_safe = torch.where(torch.isneginf(m_new), 0.0, m_new)
        l = l * torch.exp(m - m_safe) + torch.exp(block - m_safe[..., None]).sum(-1)
        m = m_new
    m_safe = torch.where(torch.isneginf(m), 0.0, m)
    return torch.exp(scores - m_safe[..., None]) / l[..., None]


def online_per_block_normalised(scores, block_size):
    """Wrong: each block exponentiated against the final max but divided by its own block sum."""
    m = torch.full(scores.shape[:-1], -math.inf, dtype=scores.dtype)
    for start in range(0, scores.shape[-1], block_size):
        m = torch.maximum(m, scores[..., start : start + block_size].amax(-1))
    m_safe = torch.where(torch.isneginf(m), 0.0, m)
    out = []
    for start in range(0, scores.shape[-1], block_size):
        e = torch.exp(scores[..., start : start + block_size] - m_safe[..., None])
        out.append(e / e.sum(-1, keepdim=True))
    return torch.cat(out, dim=-1)


# ---------------------------------------------------------------- tiled_attention


def _mask_block(mask, j, block_size):
    if mask is None:
        return None
    if mask.shape[-1] == 1:
        return mask
    return mask[..., j : j + block_size]


def tiled_where(q, k, v, mask=None, block_size=64):
    """Right: the loop of the text, guard by torch.where, divide by 1 where l = 0."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    L_k = k.shape[-2]
    m = l = o = None
    for j in range(0, L_k, block_size):
        kb, vb = k[..., j : j + block_size, :], v[..., j : j + block_size, :]
        s = q @ kb.transpose(-2, -1) * scale
        mb = _mask_block(mask, j, block_size)
        if mb is not None:
            s = s.masked_fill(~mb, -math.inf)
        if m is None:
            m = torch.full(s.shape[:-1], -math.inf, dtype=s.dtype, device=s.device)
            l = torch.zeros(s.shape[:-1], dtype=s.dtype, device=s.device)
            o = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=s.dtype, device=s.device)
        m_new = torch.maximum(m, s.amax(dim=-1))
        m_safe = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        alpha = torch.exp(m - m_safe)
        p = torch.exp(s - m_safe.unsqueeze(-1))
        l = l * alpha + p.sum(dim=-1)
        o = o * alpha.unsqueeze(-1) + p @ vb
        m = m_new
    l_safe = torch.where(l == 0, torch.ones_like(l), l)
    return o / l_safe.unsqueeze(-1)


def tiled_einsum(q, k, v, mask=None, block_size=64):
    """Right: einsum scores, torch.where masking, nan_to_num guard, l clamped by masked_fill."""
    d_k = q.shape[-1]
    state = None
    for j in range(0, k.shape[-2], block_size):
        s = torch.einsum("...qd,...kd->...qk", q, k[..., j : j + block_size, :]) / d_k**0.5
        if mask is not None:
            keep = mask if mask.shape[-1] == 1 else mask[..., j : j + block_size]
            s = torch.where(keep, s, torch.tensor(-math.inf, dtype=s.dtype, device=s.device))
        block_max = s.max(dim=-1, keepdim=True).values
        if state is None:
            m = torch.full_like(block_max, -math.inf)
            l = torch.zeros_like(block_max)
            o = 0.0
            state = True
        m_new = torch.maximum(m, block_max)
        shift = m_new.nan_to_num(neginf=0.0)
        factor = (m - shift).exp()
        p = (s - shift).exp()
        l = factor * l + p.sum(dim=-1, keepdim=True)
        o = factor * o + torch.einsum("...qk,...kd->...qd", p, v[..., j : j + block_size, :])
        m = m_new
    return o / l.masked_fill(l == 0, 1.0)


def tiled_no_scale(q, k, v, mask=None, block_size=64):
    """Wrong: the scores are not divided by sqrt(d_k)."""
    return tiled_where(q * math.sqrt(q.shape[-1]), k, v, mask, block_size)


def tiled_scale_dv(q, k, v, mask=None, block_size=64):
    """Wrong: scaled by 1/sqrt(v.shape[-1]) (d_v) instead of 1/sqrt(d_k)."""
    return tiled_where(q * math.sqrt(q.shape[-1] / v.shape[-1]), k, v, mask, block_size)


def tiled_output_not_rescaled(q, k, v, mask=None, block_size=64):
    """Wrong: o' = o + P_B V_B: only the running sum gets the factor exp(m - m')."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = l = o = None
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) * scale
        mb = _mask_block(mask, j, block_size)
        if mb is not None:
            s = s.masked_fill(~mb, -math.inf)
        if m is None:
            m = torch.full(s.shape[:-1], -math.inf, dtype=s.dtype)
            l = torch.zeros(s.shape[:-1], dtype=s.dtype)
            o = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=s.dtype)
        m_new = torch.maximum(m, s.amax(-1))
        m_safe = torch.where(torch.isneginf(m_new), 0.0, m_new)
        alpha = torch.exp(m - m_safe)
        p = torch.exp(s - m_safe[..., None])
        l = l * alpha + p.sum(-1)
        o = o + p @ v[..., j : j + block_size, :]
        m = m_new
    return o / torch.where(l == 0, 1.0, l)[..., None]


def tiled_local_mask(q, k, v, mask=None, block_size=64):
    """Wrong: every block is masked with mask[..., :block_size], the block-local key index."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = l = o = None
    for j in range(0, k.shape[-2], block_size):
        kb = k[..., j : j + block_size, :]
        s = q @ kb.transpose(-2, -1) * scale
        if mask is not None:
            mb = mask if mask.shape[-1] == 1 else mask[..., : kb.shape[-2]]
            s = s.masked_fill(~mb, -math.inf)
        if m is None:
            m = torch.full(s.shape[:-1], -math.inf, dtype=s.dtype)
            l = torch.zeros(s.shape[:-1], dtype=s.dtype)
            o = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=s.dtype)
        m_new = torch.maximum(m, s.amax(-1))
        m_safe = torch.where(torch.isneginf(m_new), 0.0, m_new)
        alpha = torch.exp(m - m_safe)
        p = torch.exp(s - m_safe[..., None])
        l = l * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ v[..., j : j + block_size, :]
        m = m_new
    return o / torch.where(l == 0, 1.0, l)[..., None]


def tiled_mask_inverted(q, k, v, mask=None, block_size=64):
    """Wrong: True in the mask is read as "masked out" (nn.MultiheadAttention's convention)."""
    return tiled_where(q, k, v, None if mask is None else ~mask, block_size)


def tiled_large_negative(q, k, v, mask=None, block_size=64):
    """Wrong: masked scores filled with -1e9, no guard: a fully masked query averages all values."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = l = o = None
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) * scale
        mb = _mask_block(mask, j, block_size)
        if mb is not None:
            s = s.masked_fill(~mb, -1e9)
        if m is None:
            m = torch.full(s.shape[:-1], -math.inf, dtype=s.dtype)
            l = torch.zeros(s.shape[:-1], dtype=s.dtype)
            o = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=s.dtype)
        m_new = torch.maximum(m, s.amax(-1))
        alpha = torch.exp(m - m_new)
        p = torch.exp(s - m_new[..., None])
        l = l * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ v[..., j : j + block_size, :]
        m = m_new
    return o / l[..., None]


def tiled_where_division(q, k, v, mask=None, block_size=64):
    """Wrong: the end is torch.where(l > 0, o / l, 0): right values, NaN in the gradient."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = l = o = None
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) * scale
        mb = _mask_block(mask, j, block_size)
        if mb is not None:
            s = s.masked_fill(~mb, -math.inf)
        if m is None:
            m = torch.full(s.shape[:-1], -math.inf, dtype=s.dtype)
            l = torch.zeros(s.shape[:-1], dtype=s.dtype)
            o = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=s.dtype)
        m_new = torch.maximum(m, s.amax(-1))
        m_safe = torch.where(torch.isneginf(m_new), 0.0, m_new)
        alpha = torch.exp(m - m_safe)
        p = torch.exp(s - m_safe[..., None])
        l = l * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ v[..., j : j + block_size, :]
        m = m_new
    return torch.where(l[..., None] > 0, o / l[..., None], 0.0)


def tiled_slices_keepdim_mask(q, k, v, mask=None, block_size=64):
    """Wrong: the mask's last axis is always sliced per block, even when it has size 1."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = l = o = None
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) * scale
        if mask is not None:
            s = s.masked_fill(~mask[..., j : j + block_size], -math.inf)
        if m is None:
            m = torch.full(s.shape[:-1], -math.inf, dtype=s.dtype)
            l = torch.zeros(s.shape[:-1], dtype=s.dtype)
            o = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=s.dtype)
        m_new = torch.maximum(m, s.amax(-1))
        m_safe = torch.where(torch.isneginf(m_new), 0.0, m_new)
        alpha = torch.exp(m - m_safe)
        p = torch.exp(s - m_safe[..., None])
        l = l * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ v[..., j : j + block_size, :]
        m = m_new
    return o / torch.where(l == 0, 1.0, l)[..., None]


def tiled_full_scores(q, k, v, mask=None, block_size=64):
    """Wrong: the whole (L_q, L_k) score matrix is computed first, then read block by block."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    m = torch.full(scores.shape[:-1], -math.inf, dtype=scores.dtype)
    l = torch.zeros(scores.shape[:-1], dtype=scores.dtype)
    o = torch.zeros(*scores.shape[:-1], v.shape[-1], dtype=scores.dtype)
    for j in range(0, k.shape[-2], block_size):
        s = scores[..., j : j + block_size]
        m_new = torch.maximum(m, s.amax(-1))
        m_safe = torch.where(torch.isneginf(m_new), 0.0, m_new)
        alpha = torch.exp(m - m_safe)
        p = torch.exp(s - m_safe[..., None])
        l = l * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ v[..., j : j + block_size, :]
        m = m_new
    return o / torch.where(l == 0, 1.0, l)[..., None]


def tiled_alpha_after_update(q, k, v, mask=None, block_size=64):
    """Wrong: m is overwritten with m' before exp(m - m') is computed (the factor is always 1)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = l = o = None
    for j in range(0, k.shape[-2], block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) * scale
        mb = _mask_block(mask, j, block_size)
        if mb is not None:
            s = s.masked_fill(~mb, -math.inf)
        if m is None:
            m = torch.full(s.shape[:-1], -math.inf, dtype=s.dtype)
            l = torch.zeros(s.shape[:-1], dtype=s.dtype)
            o = torch.zeros(*s.shape[:-1], v.shape[-1], dtype=s.dtype)
        m = torch.maximum(m, s.amax(-1))
        m_safe = torch.where(torch.isneginf(m), 0.0, m)
        alpha = torch.exp(m_safe - m_safe)
        p = torch.exp(s - m_safe[..., None])
        l = l * alpha + p.sum(-1)
        o = o * alpha[..., None] + p @ v[..., j : j + block_size, :]
    return o / torch.where(l == 0, 1.0, l)[..., None]


# ---------------------------------------------------------------- kv_cache_bytes


def kv_plain(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Right: 2 * layers * n_kv * d_head * batch * length * bytes, n_kv = n_heads when None."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * n_kv * d_head * batch * length * dtype_bytes


def kv_per_token(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Right: bytes per token per layer for K and V, math.prod over the rest, cast to int."""
    kv_heads = n_kv_heads or n_heads
    per_token_layer = 2 * kv_heads * d_head * dtype_bytes  # one K and one V vector per head
    return int(math.prod([per_token_layer, n_layers, batch, length]))


def kv_no_two(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: only the keys are counted (no factor 2 for the values)."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return n_layers * n_kv * d_head * batch * length * dtype_bytes


def kv_query_heads(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: n_kv_heads is ignored; every query head is counted."""
    return 2 * n_layers * n_heads * d_head * batch * length * dtype_bytes


def kv_gib(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: returns GiB (bytes / 2**30) instead of bytes."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * n_kv * d_head * batch * length * dtype_bytes / 2**30


def kv_d_model(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: each K/V head is counted with d_model = n_heads * d_head numbers."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * n_kv * (n_heads * d_head) * batch * length * dtype_bytes


def kv_group_size(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: the group size n_heads // n_kv_heads is used as the number of cached heads."""
    n_kv = n_heads if n_kv_heads is None else n_heads // n_kv_heads
    return 2 * n_layers * n_kv * d_head * batch * length * dtype_bytes


def kv_qkv(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: factor 3 (queries, keys and values cached) instead of 2."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return 3 * n_layers * n_kv * d_head * batch * length * dtype_bytes


def kv_gb_float(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: returns GB (bytes / 1e9) instead of bytes."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * n_kv * d_head * batch * length * dtype_bytes / 1e9


def kv_bits(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """Wrong: multiplies by 8 * dtype_bytes (bits), not bytes."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * n_layers * n_kv * d_head * batch * length * dtype_bytes * 8


# ---------------------------------------------------------------- repeat_kv


def repeat_interleave_heads(x, n_rep):
    """Right: torch.repeat_interleave along the head axis."""
    return torch.repeat_interleave(x, n_rep, dim=1)


def repeat_expand(x, n_rep):
    """Right: x[:, :, None].expand(...).reshape(...), Llama's way."""
    B, h, L, d = x.shape
    return x[:, :, None, :, :].expand(B, h, n_rep, L, d).reshape(B, h * n_rep, L, d)


def repeat_tiled(x, n_rep):
    """Wrong: x.repeat(1, n_rep, 1, 1): heads tiled 0 1 0 1, not 0 0 1 1."""
    return x.repeat(1, n_rep, 1, 1)


def repeat_expand_wrong_axis(x, n_rep):
    """Wrong: the new axis is put before the heads (x[:, None]): tiled again, via expand."""
    B, h, L, d = x.shape
    return x[:, None].expand(B, n_rep, h, L, d).reshape(B, n_rep * h, L, d)


def repeat_positions(x, n_rep):
    """Wrong: repeat_interleave along dim 2 (the positions), then a reshape to the asked shape."""
    B, h, L, d = x.shape
    return x.repeat_interleave(n_rep, dim=2).reshape(B, h * n_rep, L, d)


def repeat_last_dim(x, n_rep):
    """Wrong: repeat_interleave on the last axis, then viewed as (B, h * n_rep, L, d)."""
    B, h, L, d = x.shape
    return x.repeat_interleave(n_rep, dim=-1).reshape(B, h * n_rep, L, d)


def repeat_batch(x, n_rep):
    """Wrong: repeat_interleave along dim 0 (the batch) reshaped into heads."""
    B, h, L, d = x.shape
    return x.repeat_interleave(n_rep, dim=0).reshape(B, h * n_rep, L, d)


def repeat_detached(x, n_rep):
    """Wrong: the output is filled head by head into a new tensor with .data: no gradient flows."""
    B, h, L, d = x.shape
    out = x.new_empty(B, h * n_rep, L, d)
    for i in range(h * n_rep):
        out[:, i] = x.data[:, i // n_rep]
    return out


def repeat_modulo(x, n_rep):
    """Wrong: head i reads x[:, i % h_kv] (a modulo where the text has i // n_rep)."""
    h = x.shape[1]
    return torch.stack([x[:, i % h] for i in range(h * n_rep)], dim=1)


# ---------------------------------------------------------------- positive_random_features


def prf_matmul(x, omega):
    """Right: exp(x omega^T - |x|^2 / 2) / sqrt(m)."""
    m = omega.shape[0]
    sq = (x**2).sum(dim=-1, keepdim=True)
    return torch.exp(x @ omega.T - sq / 2) / math.sqrt(m)


def prf_einsum(x, omega):
    """Right: einsum projection, the norm by torch.linalg.vector_norm, log sqrt(m) inside exp."""
    proj = torch.einsum("...d,md->...m", x, omega)
    half_sq = 0.5 * torch.linalg.vector_norm(x, dim=-1, keepdim=True) ** 2
    return torch.exp(proj - half_sq - 0.5 * math.log(omega.shape[0]))


def prf_no_norm(x, omega):
    """Wrong: the -|x|^2/2 term is missing."""
    return torch.exp(x @ omega.T) / math.sqrt(omega.shape[0])


def prf_full_square(x, omega):
    """Wrong: |x|^2 subtracted whole, not halved."""
    sq = (x**2).sum(-1, keepdim=True)
    return torch.exp(x @ omega.T - sq) / math.sqrt(omega.shape[0])


def prf_norm_not_squared(x, omega):
    """Wrong: |x| / 2 where |x|^2 / 2 belongs (x.norm() not squared)."""
    return torch.exp(x @ omega.T - x.norm(dim=-1, keepdim=True) / 2) / math.sqrt(omega.shape[0])


def prf_divide_m(x, omega):
    """Wrong: divided by m, not sqrt(m)."""
    sq = (x**2).sum(-1, keepdim=True)
    return torch.exp(x @ omega.T - sq / 2) / omega.shape[0]


def prf_sqrt_d(x, omega):
    """Wrong: divided by sqrt(d) (x's last axis) instead of sqrt(m)."""
    sq = (x**2).sum(-1, keepdim=True)
    return torch.exp(x @ omega.T - sq / 2) / math.sqrt(x.shape[-1])


def prf_omega_norm(x, omega):
    """Wrong: subtracts |omega_i|^2 / 2 (the direction's norm) instead of |x|^2 / 2."""
    sq = (omega**2).sum(-1)
    return torch.exp(x @ omega.T - sq / 2) / math.sqrt(omega.shape[0])


def prf_mean_square(x, omega):
    """Wrong: the squared norm taken as x.pow(2).mean(-1) (a mean over d, not a sum)."""
    sq = x.pow(2).mean(-1, keepdim=True)
    return torch.exp(x @ omega.T - sq / 2) / math.sqrt(omega.shape[0])


WRONG = {
    "online_softmax": [
        online_no_max,
        online_no_rescale,
        online_last_block_max,
        online_no_guard,
        online_drops_tail,
        online_first_axis,
        online_per_block_normalised,
    ],
    "tiled_attention": [
        tiled_no_scale,
        tiled_scale_dv,
        tiled_output_not_rescaled,
        tiled_local_mask,
        tiled_mask_inverted,
        tiled_large_negative,
        tiled_where_division,
        tiled_slices_keepdim_mask,
        tiled_full_scores,
        tiled_alpha_after_update,
    ],
    "kv_cache_bytes": [
        kv_no_two,
        kv_query_heads,
        kv_gib,
        kv_d_model,
        kv_group_size,
        kv_qkv,
        kv_gb_float,
        kv_bits,
    ],
    "repeat_kv": [
        repeat_tiled,
        repeat_expand_wrong_axis,
        repeat_positions,
        repeat_last_dim,
        repeat_batch,
        repeat_detached,
        repeat_modulo,
    ],
    "positive_random_features": [
        prf_no_norm,
        prf_full_square,
        prf_norm_not_squared,
        prf_divide_m,
        prf_sqrt_d,
        prf_omega_norm,
        prf_mean_square,
    ],
}

RIGHT = {
    "online_softmax": online_where,
    "tiled_attention": tiled_where,
    "kv_cache_bytes": kv_plain,
    "repeat_kv": repeat_interleave_heads,
    "positive_random_features": prf_matmul,
}

RIGHT2 = {
    "online_softmax": online_split,
    "tiled_attention": tiled_einsum,
    "kv_cache_bytes": kv_per_token,
    "repeat_kv": repeat_expand,
    "positive_random_features": prf_einsum,
}
