"""Lesson 12's reference module: the online softmax and tiled attention.

Both are exact: they equal torch.softmax, the course's scaled_dot_product_attention and PyTorch's
fused kernel (outputs and gradients) for causal, padding and fully masked rows, odd lengths, block
sizes from 1 to beyond the length, any batch dims, float32 and float64. And tiled attention's
peak memory, measured with torch.profiler, grows linearly in L where exact attention's grows as L².
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from transformer_lab import attention, efficient
from transformer_lab.masking import causal_mask

TOL = {torch.float64: dict(atol=1e-12, rtol=1e-10), torch.float32: dict(atol=2e-6, rtol=1e-5)}


def _qkv(batch, Lq, Lk, d_k, d_v, dtype=torch.float64, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, Lq, d_k, generator=g, dtype=torch.float64) * scale
    k = torch.randn(*batch, Lk, d_k, generator=g, dtype=torch.float64) * scale
    v = torch.randn(*batch, Lk, d_v, generator=g, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


# ---------------------------------------------------------------------------------------------
# online_softmax


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("block_size", [1, 2, 3, 7, 16, 17, 100])
def test_online_softmax_equals_torch_softmax(block_size, dtype):
    g = torch.Generator().manual_seed(block_size)
    scores = (torch.randn(2, 3, 17, generator=g, dtype=torch.float64) * 5).to(dtype)
    scores[0, 0, :9] = float("-inf")  # whole first blocks masked: the running max stays -inf
    scores[1, 2, 5] = float("-inf")
    torch.testing.assert_close(
        efficient.online_softmax(scores, block_size), torch.softmax(scores, -1), **TOL[dtype]
    )


def test_online_softmax_large_scores_and_gradients():
    g = torch.Generator().manual_seed(0)
    scores = (torch.randn(4, 33, generator=g, dtype=torch.float64) * 500).requires_grad_()
    mine = efficient.online_softmax(scores, 8)
    assert torch.isfinite(mine).all()  # exp(500) overflows; the running max keeps it finite
    theirs = torch.softmax(scores, -1)
    torch.testing.assert_close(mine, theirs, **TOL[torch.float64])
    cot = torch.randn(mine.shape, generator=g, dtype=torch.float64)
    (g_mine,) = torch.autograd.grad((mine * cot).sum(), scores)
    (g_theirs,) = torch.autograd.grad((theirs * cot).sum(), scores)
    torch.testing.assert_close(g_mine, g_theirs, **TOL[torch.float64])


def test_online_softmax_row_of_minus_inf_is_nan_like_torch():
    scores = torch.tensor([[float("-inf")] * 5, [0.0, 1.0, 2.0, 3.0, 4.0]])
    mine, theirs = efficient.online_softmax(scores, 2), torch.softmax(scores, -1)
    assert mine[0].isnan().all() and theirs[0].isnan().all()
    torch.testing.assert_close(mine[1], theirs[1])


@pytest.mark.parametrize(
    "scores,block_size,error,message",
    [
        (torch.randn(3, 4), 0, ValueError, "block_size must be a positive int"),
        (torch.randn(3, 4), 2.0, ValueError, "block_size must be a positive int"),
        (torch.arange(4), 2, TypeError, "floating point"),
        (torch.tensor(1.0), 2, ValueError, r"\(\.\.\., L\)"),
        ([1.0, 2.0], 2, TypeError, "torch.Tensor"),
    ],
)
def test_online_softmax_rejects_bad_input(scores, block_size, error, message):
    with pytest.raises(error, match=message):
        efficient.online_softmax(scores, block_size)


# ---------------------------------------------------------------------------------------------
# tiled_attention against the course's SDPA and PyTorch's fused kernel


def _masks(batch, Lq, Lk, g):
    padding = torch.ones(*batch, 1, Lk, dtype=torch.bool)
    padding[..., : Lk // 3] = False  # left padding: the first key blocks are all masked
    fully = torch.rand(*batch, Lq, Lk, generator=g) < 0.6
    fully[..., 1, :] = False  # one query sees no key at all
    return {
        "none": None,
        "causal": causal_mask(Lq)[:, :Lk] if Lq == Lk else torch.ones(Lq, Lk).tril().bool(),
        "left padding (..., 1, Lk)": padding,
        "fully masked row": fully,
        "key-broadcast (..., Lq, 1)": torch.rand(Lq, 1, generator=g) < 0.7,
    }


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("block_size", [1, 3, 8, 13, 64, 1000])
@pytest.mark.parametrize(
    "batch,Lq,Lk",
    [((), 13, 13), ((2,), 5, 37), ((2, 3), 16, 16), ((1, 2, 2), 9, 4)],
    ids=["no batch", "Lk odd", "heads", "three batch dims"],
)
def test_tiled_attention_equals_sdpa(batch, Lq, Lk, block_size, dtype):
    g = torch.Generator().manual_seed(Lq * Lk + block_size)
    q, k, v = _qkv(batch, Lq, Lk, 8, 5, dtype, seed=block_size)
    for name, mask in _masks(batch, Lq, Lk, g).items():
        expected, _ = attention.scaled_dot_product_attention(q, k, v, mask)
        got = efficient.tiled_attention(q, k, v, mask, block_size=block_size)
        torch.testing.assert_close(got, expected, **TOL[dtype], msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("block_size", [1, 5, 64])
def test_tiled_attention_equals_torch_fused_kernel_and_its_gradients(block_size):
    q, k, v = _qkv((2, 2), 11, 19, 16, 16, seed=3)
    mask = torch.rand(2, 1, 11, 19, generator=torch.Generator().manual_seed(1)) < 0.7
    mask[..., 0] = True  # PyTorch's kernel gives NaN on fully masked rows: keep one key
    for m in (None, mask, torch.ones(11, 19, dtype=torch.bool).tril()):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        fused = F.scaled_dot_product_attention(*leaves, attn_mask=m)
        cot = torch.randn(fused.shape, generator=torch.Generator().manual_seed(2), dtype=q.dtype)
        g_fused = torch.autograd.grad((fused * cot).sum(), leaves)
        mine_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        tiled = efficient.tiled_attention(*mine_leaves, m, block_size=block_size)
        g_tiled = torch.autograd.grad((tiled * cot).sum(), mine_leaves)
        torch.testing.assert_close(tiled, fused, **TOL[torch.float64])
        for a, b in zip(g_tiled, g_fused):
            torch.testing.assert_close(a, b, **TOL[torch.float64])


def test_fully_masked_rows_give_zeros_and_finite_gradients():
    q, k, v = _qkv((2,), 4, 10, 8, 3, seed=5)
    mask = torch.ones(2, 4, 10, dtype=torch.bool)
    mask[0, 2] = False
    mask[1, :, :7] = False  # first blocks of every row masked
    mask[1, 3] = False
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = efficient.tiled_attention(*leaves, mask, block_size=3)
    assert torch.equal(out[0, 2], torch.zeros(3, dtype=out.dtype))
    assert torch.equal(out[1, 3], torch.zeros(3, dtype=out.dtype))
    grads = torch.autograd.grad(out.square().sum(), leaves)
    ref_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ref, _ = attention.scaled_dot_product_attention(*ref_leaves, mask)
    ref_grads = torch.autograd.grad(ref.square().sum(), ref_leaves)
    for a, b in zip(grads, ref_grads):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, **TOL[torch.float64])


def test_large_logits_stay_finite():
    q, k, v = _qkv((2,), 20, 20, 64, 4, scale=12.0)  # scores of order 1000: exp overflows
    expected, _ = attention.scaled_dot_product_attention(q, k, v)
    got = efficient.tiled_attention(q, k, v, block_size=6)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, expected, **TOL[torch.float64])


def test_no_keys_gives_zeros_of_the_right_shape():
    q, k, v = _qkv((2,), 3, 0, 4, 5)
    out = efficient.tiled_attention(q, k, v, block_size=4)
    assert out.shape == (2, 3, 5) and torch.equal(out, torch.zeros(2, 3, 5, dtype=q.dtype))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_tiled_attention_on_cuda():
    q, k, v = (t.cuda() for t in _qkv((2, 2), 33, 70, 16, 8))
    mask = causal_mask(70, device="cuda")[:33]
    expected, _ = attention.scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(efficient.tiled_attention(q, k, v, mask, 16), expected)


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        (dict(block_size=0), ValueError, "block_size must be a positive int"),
        (dict(mask=torch.ones(4, 6)), TypeError, "bool"),
        (dict(mask=torch.ones(3, 6, dtype=torch.bool)), ValueError, "does not broadcast"),
        (dict(k=torch.randn(2, 6, 5)), ValueError, "same last dimension"),
    ],
)
def test_tiled_attention_rejects_bad_input(kwargs, error, message):
    q, k, v = _qkv((2,), 4, 6, 8, 3)
    args = dict(q=q, k=k, v=v) | kwargs
    with pytest.raises(error, match=message):
        efficient.tiled_attention(**args)


# ---------------------------------------------------------------------------------------------
# Memory, measured: the profiler's allocation events, not theory.


def test_peak_memory_measures_an_allocation():
    def allocate(n):
        x = torch.ones(n, n, dtype=torch.float64)  # 8·n² bytes, freed on return
        return float(x.sum())

    for n in (100, 400):
        assert 8 * n * n <= efficient.peak_memory(allocate, n) < 8 * n * n * 1.1 + 4096
    assert efficient.peak_memory(lambda: None) == 0


def _freed_then_kept():
    a = torch.ones(1000, 1000)  # 4,000,000 bytes, freed before the next allocation
    del a
    b = torch.ones(500, 1000)  # 2,000,000 bytes, the result
    return b


def test_peak_memory_is_the_peak_of_live_allocations_on_a_known_pattern():
    # Exactly known: 4 MB live at the peak (not 6 MB: the first tensor is gone before the second).
    assert efficient.peak_memory(_freed_then_kept) == 4_000_000
    assert efficient.peak_memory(lambda: torch.empty(250, 1000, dtype=torch.float64)) == 2_000_000
    existing = torch.ones(1000, 1000)
    assert efficient.peak_memory(lambda: existing.view(-1)) == 0  # what existed does not count
    events = efficient.memory_events(_freed_then_kept)
    assert [nbytes for nbytes, _ in events if abs(nbytes) >= 1_000_000] == [
        4_000_000,
        -4_000_000,
        2_000_000,
        -2_000_000,  # the result, dropped inside the measurement
    ]


def test_peak_memory_mutants_are_rejected():
    # Mutants of the measurement, on the same public events: each misses the known 4 MB peak.
    def summed_allocations(fn):  # every allocation added, the frees ignored
        return sum(nbytes for nbytes, _ in efficient.memory_events(fn) if nbytes > 0)

    def net_at_the_end(fn):  # what is left at the end, not the peak on the way
        return sum(nbytes for nbytes, _ in efficient.memory_events(fn))

    def largest_allocation(fn):  # one allocation, not the live total
        return max(nbytes for nbytes, _ in efficient.memory_events(fn))

    def two_live():
        a = torch.ones(1000, 1000)
        b = torch.ones(500, 1000)  # both live: 6 MB
        return a, b

    assert efficient.peak_memory(_freed_then_kept) == 4_000_000
    assert summed_allocations(_freed_then_kept) >= 6_000_000
    assert net_at_the_end(_freed_then_kept) < 1_000_000
    assert efficient.peak_memory(two_live) == 6_000_000
    assert largest_allocation(two_live) == 4_000_000


def test_peak_memory_uses_only_the_profilers_public_api():
    import inspect

    from transformer_lab import scaling

    for module in (efficient, scaling):
        source = inspect.getsource(module)
        assert "kineto_results" not in source and "torch._C" not in source, module.__name__


def test_peak_memory_passes_errors_on_and_restores_stderr(capfd):
    def broken():
        raise ValueError("inside")

    with pytest.raises(ValueError, match="inside"):
        efficient.peak_memory(broken)
    os.write(2, b"still here\n")
    assert "still here" in capfd.readouterr().err


def test_tiled_attention_peak_memory_grows_linearly_exact_quadratically():
    lengths = (512, 1024, 2048)
    tiled, exact = [], []
    with torch.no_grad():
        for L in lengths:
            q, k, v = _qkv((1,), L, L, 16, 16, dtype=torch.float32)
            tiled.append(efficient.peak_memory(efficient.tiled_attention, q, k, v, block_size=64))
            exact.append(efficient.peak_memory(attention.scaled_dot_product_attention, q, k, v))
    for i in range(len(lengths) - 1):
        # doubling L: ×2 for O(L) memory, ×4 for O(L²); generous margins around both
        assert 1.5 < tiled[i + 1] / tiled[i] < 2.8, (lengths, tiled)
        assert 3.2 < exact[i + 1] / exact[i] < 4.8, (lengths, exact)
    # at L = 2048 the full score matrix alone is 16 MiB in float32; the tiled pass is far below
    assert exact[-1] > 2 * 2048 * 2048 * 4 * 0.9
    assert tiled[-1] < exact[-1] / 10


# ---------------------------------------------------------------------------------------------
# flash_attention (FlashAttention's backward pass) and saved_tensor_bytes


@pytest.mark.parametrize("Lq,Lk,block_size", [(7, 11, 4), (9, 9, 1), (5, 13, 100), (1, 3, 2)])
def test_flash_attention_equals_sdpa_with_its_gradients(Lq, Lk, block_size):
    q, k, v = (t.requires_grad_() for t in _qkv((2, 3), Lq, Lk, 8, 5, scale=2.0))
    d_out = torch.randn(2, 3, Lq, 5, dtype=torch.float64)
    expected, _ = attention.scaled_dot_product_attention(q, k, v)
    got = efficient.flash_attention(q, k, v, block_size)
    assert torch.allclose(got, expected, **TOL[torch.float64])
    for a, b in zip(
        torch.autograd.grad(got, (q, k, v), d_out), torch.autograd.grad(expected, (q, k, v), d_out)
    ):
        assert torch.allclose(a, b, **TOL[torch.float64])


def test_flash_attention_passes_gradcheck():
    q, k, v = (t.requires_grad_() for t in _qkv((2,), 6, 10, 4, 3))
    assert torch.autograd.gradcheck(
        lambda a, b, c: efficient.flash_attention(a, b, c, 3), (q, k, v)
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"k": torch.zeros(2, 0, 4), "v": torch.zeros(2, 0, 4)},  # no keys
        {"k": torch.zeros(1, 5, 4), "v": torch.zeros(1, 5, 4)},  # a broadcast batch
    ],
)
def test_flash_attention_rejects_what_it_does_not_handle(kwargs):
    with pytest.raises(ValueError, match="same batch shape"):
        efficient.flash_attention(torch.zeros(2, 5, 4), **kwargs)


def test_saved_tensor_bytes_counts_each_saved_storage_once_and_not_the_inputs():
    x = torch.randn(1000, requires_grad=True)
    assert efficient.saved_tensor_bytes(lambda t: (t * t).sum(), x) == 0  # saves x only
    # exp saves its output y, y * y saves y twice: one storage of 1000 float32
    assert efficient.saved_tensor_bytes(lambda t: (t.exp() * t.exp().detach()).sum(), x) == 8000
    assert efficient.saved_tensor_bytes(lambda t: (t.exp() ** 2).sum(), x) == 4000


def _kept_per_query(fn, L, d=8):
    q, k, v = (torch.randn(1, L, d, requires_grad=True) for _ in range(3))
    return efficient.saved_tensor_bytes(fn, q, k, v) / L


def test_flash_attention_keeps_linear_memory_where_autograd_keeps_quadratic():
    """What is kept for the backward pass, per query, is constant in L for flash_attention and
    grows with L for exact attention and for autograd through the tiled loop (the mutants)."""

    def flash(q, k, v):
        return efficient.flash_attention(q, k, v, 16)

    def tiled(q, k, v):
        return efficient.tiled_attention(q, k, v, block_size=16)

    def exact(q, k, v):
        return attention.scaled_dot_product_attention(q, k, v)[0]

    assert _kept_per_query(flash, 256) == _kept_per_query(flash, 64) <= 8 * 4 + 4
    for mutant in (tiled, exact):
        assert _kept_per_query(mutant, 256) >= 3 * _kept_per_query(mutant, 64)  # L x4: ~4x
