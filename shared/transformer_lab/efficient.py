"""Lesson 12 — attention at scale: the online softmax and tiled (FlashAttention-style) attention.

Exact attention forms the (L_q, L_k) score matrix, so its memory grows as L². FlashAttention
(Dao et al., 2022) computes the *same* result block by block over the keys, keeping only three
running quantities per query: the running maximum m, the running sum l (`row_sum`) and the running output o.

The online softmax rests on one identity. For a row x split into blocks, keep
m = max of the scores seen so far and l = Σ exp(x_j − m) over them. A new block x_B gives

    m' = max(m, max(x_B))
    l' = l · exp(m − m') + Σ_{j ∈ B} exp(x_j − m')

(the old sum was measured against m; multiplying by exp(m − m') re-measures it against m'). After
the last block, softmax(x)_j = exp(x_j − m) / l. The same rescaling applies to the running output
of attention, o = Σ_j exp(s_j − m) v_j:

    o' = o · exp(m − m') + exp(s_B − m') v_B,        output = o / l at the end.

A query whose keys are all masked has m = −inf throughout; every exponential is then computed
against 0 instead (exp(−inf) = 0), l stays 0, and the output is defined as zeros, as in
`scaled_dot_product_attention`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile

import torch

from ._validate import (
    broadcast_shapes,
    require_bool_mask,
    require_min_ndim,
    require_qkv,
    require_tensor,
)


def _check_block_size(block_size) -> None:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")


def _finite(m: torch.Tensor) -> torch.Tensor:
    """The running max with −inf (no key seen yet, or all masked) replaced by 0."""
    return torch.where(torch.isneginf(m), torch.zeros_like(m), m)


def online_softmax(scores: torch.Tensor, block_size: int) -> torch.Tensor:
    """softmax over the last axis, computed block by block with a running max m and sum l.

    First pass, over blocks B of `block_size` entries of each row:

        m' = max(m, max_j∈B x_j),   l' = l · exp(m − m') + Σ_j∈B exp(x_j − m')     (m₀ = −inf, l₀ = 0)

    Second pass: softmax(x)_j = exp(x_j − m) / l. Equals ``torch.softmax(scores, -1)``, including
    entries of −inf (weight 0); a row of −inf only gives NaN, as torch.softmax does.

    Args:
        scores: (..., L), floating point.
        block_size: how many entries of a row are read at a time (any int ≥ 1).

    Returns:
        (..., L), each row summing to 1.
    """
    require_tensor("scores", scores)
    require_min_ndim("scores", scores, 1, "(..., L)")
    if not scores.is_floating_point():
        raise TypeError(f"scores must be floating point, got dtype {scores.dtype}")
    _check_block_size(block_size)
    L = scores.shape[-1]
    m = scores.new_full(scores.shape[:-1], float("-inf"))  # running max, (...)
    row_sum = scores.new_zeros(scores.shape[:-1])  # running sum of exp(x - m), (...)
    for start in range(0, L, block_size):
        x = scores[..., start : start + block_size]
        m_new = torch.maximum(m, x.amax(dim=-1))
        alpha = torch.exp(m - _finite(m_new))  # re-measures the old sum against m' (0 at first)
        row_sum = row_sum * alpha + torch.exp(x - _finite(m_new)[..., None]).sum(dim=-1)
        m = m_new
    return torch.exp(scores - _finite(m)[..., None]) / row_sum[..., None]


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    block_size: int = 64,
) -> torch.Tensor:
    """softmax(q kᵀ / √d_k) v over blocks of keys, never forming the (L_q, L_k) matrix.

    For each block B of `block_size` keys (and their values), with s = q k_Bᵀ / √d_k, masked
    scores set to −inf:

        m' = max(m, rowmax(s))
        p  = exp(s − m')                                  (L_q, |B|): one block at a time
        l' = l · exp(m − m') + rowsum(p)
        o' = o · exp(m − m') + p v_B

    and finally output = o / l (zeros where l = 0: a query with every key masked). Memory beyond
    the inputs and output is O(L_q · block_size), not O(L_q · L_k).

    Args:
        q: queries, (..., L_q, d_k)
        k: keys, (..., L_k, d_k)
        v: values, (..., L_k, d_v)
        mask: optional bool tensor broadcastable to (..., L_q, L_k); True means "may attend". A
            1-D key mask (L_k,) and a mask that broadcasts over the keys (last dimension 1) work.
        block_size: keys per block (any int ≥ 1; L_k need not be a multiple of it).

    Returns:
        output (..., L_q, d_v), equal to ``scaled_dot_product_attention(q, k, v, mask)[0]``.
    """
    require_qkv(q, k, v)
    _check_block_size(block_size)
    L_q, L_k = q.shape[-2], k.shape[-2]
    if mask is not None:
        batch = broadcast_shapes(q.shape[:-2], k.shape[:-2])
        require_bool_mask(mask, (*batch, L_q, L_k), "the scores q @ kᵀ of shape")
    running = _running_attention(q, k, v, mask, block_size)
    if running is None:  # no keys at all
        shape = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        return q.new_zeros((*shape, L_q, v.shape[-1]))
    o, _, row_sum = running
    # a query with every key masked has row_sum = 0 and o = 0: divide by 1 there, giving zeros
    safe_sum = torch.where(row_sum == 0, torch.ones_like(row_sum), row_sum)
    return o / safe_sum[..., None]


def _running_attention(q, k, v, mask, block_size):
    """The loop of `tiled_attention`: (o, m, l) after the last block of keys, or None without keys."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = row_sum = o = None
    for start in range(0, k.shape[-2], block_size):
        k_b = k[..., start : start + block_size, :]
        v_b = v[..., start : start + block_size, :]
        s = q @ k_b.transpose(-2, -1) * scale  # (..., L_q, |B|)
        if mask is not None:
            # the global key index: columns start .. start + |B| (a key-broadcast mask has 1)
            mask_b = (
                mask
                if mask.dim() == 0 or mask.shape[-1] == 1
                else mask[..., start : start + block_size]
            )
            s = s.masked_fill(~mask_b, float("-inf"))
        if m is None:  # before the first block: m = −inf, l = 0, o = 0
            m = s.new_full(s.shape[:-1], float("-inf"))
            row_sum = s.new_zeros(s.shape[:-1])
            o = s.new_zeros((*s.shape[:-1], v.shape[-1]))
        m_new = torch.maximum(m, s.amax(dim=-1))
        alpha = torch.exp(m - _finite(m_new))  # rescales what was summed against m (0 at first)
        p = torch.exp(s - _finite(m_new)[..., None])
        row_sum = row_sum * alpha + p.sum(dim=-1)
        o = o * alpha[..., None] + p @ v_b
        m = m_new
    return None if o is None else (o, m, row_sum)


class _FlashAttention(torch.autograd.Function):
    """Tiled attention whose backward pass recomputes the scores block by block (FlashAttention).

    Forward keeps, besides q, k, v and the output O, one number per query: the log-sum-exp
    L = m + log l of its scores. Backward rebuilds each block of probabilities from it,
    P_B = exp(q k_Bᵀ / √d − L), and with D = rowsum(dO ∘ O):

        dV_B = P_Bᵀ dO,   dS_B = P_B ∘ (dO V_Bᵀ − D),   dQ += dS_B K_B / √d,   dK_B = dS_Bᵀ Q / √d
    """

    @staticmethod
    def forward(ctx, q, k, v, block_size):
        o, m, row_sum = _running_attention(q, k, v, None, block_size)
        out = o / row_sum[..., None]
        lse = m + torch.log(row_sum)  # all that is kept of the (L_q, L_k) softmax: L_q numbers
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.block_size = block_size
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        scale = 1.0 / math.sqrt(q.shape[-1])
        D = (d_out * out).sum(-1, keepdim=True)  # Σ_j P_ij dP_ij, one number per query
        dq, dk, dv = torch.zeros_like(q), [], []
        for start in range(0, k.shape[-2], ctx.block_size):
            k_b = k[..., start : start + ctx.block_size, :]
            v_b = v[..., start : start + ctx.block_size, :]
            p = torch.exp(q @ k_b.transpose(-2, -1) * scale - lse[..., None])  # recomputed
            dv.append(p.transpose(-2, -1) @ d_out)
            ds = p * (d_out @ v_b.transpose(-2, -1) - D)
            dq = dq + ds @ k_b * scale
            dk.append(ds.transpose(-2, -1) @ q * scale)
        return dq, torch.cat(dk, -2), torch.cat(dv, -2), None


def flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 64
) -> torch.Tensor:
    """`tiled_attention` without a mask, with FlashAttention's backward pass.

    Autograd through `tiled_attention`'s loop would save every block's probabilities for the
    backward pass: O(L_q · L_k) memory again, only spread over blocks. This version saves q, k, v,
    the output and one log-sum-exp per query, O(L · d), and recomputes each block of scores in
    the backward pass (see `_FlashAttention`): more arithmetic, far less memory kept between the
    forward and the backward pass, which is where training spends its memory.

    Args:
        q (..., L_q, d_k), k (..., L_k, d_k), v (..., L_k, d_v), with the same batch shape; L_k ≥ 1.
        block_size: keys per block (any int ≥ 1).
    Returns:
        (..., L_q, d_v), equal to ``scaled_dot_product_attention(q, k, v)[0]``, gradients included.
    """
    require_qkv(q, k, v)
    _check_block_size(block_size)
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2] or k.shape[-2] == 0:
        raise ValueError(
            "flash_attention needs q, k and v with the same batch shape and at least one key, "
            f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    return _FlashAttention.apply(q, k, v, block_size)


def saved_tensor_bytes(fn, *args, **kwargs) -> int:
    """Bytes autograd keeps for the backward pass of fn(*args, **kwargs), beyond its inputs.

    Measured with `torch.autograd.graph.saved_tensors_hooks`, which sees every tensor an
    operation saves for its backward pass: each storage is counted once, and storages shared with
    a tensor argument (they exist anyway) are not counted. Deterministic, on any device.
    """
    inputs = {
        t.untyped_storage().data_ptr()
        for t in (*args, *kwargs.values())
        if isinstance(t, torch.Tensor)
    }
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in inputs:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = fn(*args, **kwargs)  # kept alive until counted: its graph holds what was saved
    total = sum(saved.values())
    del result
    return total


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (the profiler's C++ side logs its start and stop there, which a
    notebook would show); Python's own sys.stderr is untouched."""
    try:
        saved = os.dup(2)
    except OSError:  # no file descriptor 2 at all
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


# The allocator's device types that are CPU memory (as torch.autograd.profiler counts them).
_CPU_MEMORY = {
    int(torch.autograd.DeviceType.CPU),
    int(torch.autograd.DeviceType.MKLDNN),
    int(torch.autograd.DeviceType.IDEEP),
}


def memory_events(fn, *args, **kwargs) -> list[tuple[int, int]]:
    """Every allocation and free of PyTorch's CPU allocator during fn(*args, **kwargs), in time order.

    Returns [(bytes, device type), ...]: bytes > 0 an allocation, < 0 a free; the device type as
    `int(torch.autograd.DeviceType.X)`. Recorded by torch.profiler with ``profile_memory=True`` and
    read from its public Chrome trace export (``export_chrome_trace``: one "[memory]" event per
    allocation or free, with its "Bytes" and "Device Type"). fn's own exceptions pass through.
    """
    from torch.profiler import ProfilerActivity, profile  # imported on first use

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_stderr():
        prof.start()
    try:
        fn(*args, **kwargs)
    finally:
        with _quiet_stderr():
            prof.stop()
    with tempfile.TemporaryDirectory(prefix="peak-memory-") as folder:
        path = os.path.join(folder, "trace.json")
        with _quiet_stderr():
            prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as file:
            trace = json.load(file)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    memory = sorted(
        (e["ts"], e["args"].get("Ev Idx", 0), e["args"]["Bytes"], e["args"]["Device Type"])
        for e in events
        if e.get("name") == "[memory]" and "Bytes" in e.get("args", {})
    )
    return [(int(nbytes), int(device)) for _, _, nbytes, device in memory]


def peak_memory(fn, *args, **kwargs) -> int:
    """Bytes allocated at the peak of fn(*args, **kwargs), beyond what was allocated before it.

    Measured, not computed: torch.profiler records every CPU allocation and free
    (``profile_memory=True``, see `memory_events`); the running sum of those events, in time
    order, peaks here. Tensors that fn returns count (they were allocated during the call);
    tensors that existed before it (inputs, weights) do not. An accelerator's allocations are not
    CPU memory and are not counted.
    """
    current = peak = 0
    for nbytes, device in memory_events(fn, *args, **kwargs):
        if device not in _CPU_MEMORY:
            continue
        current += nbytes
        peak = max(peak, current)
    return peak
