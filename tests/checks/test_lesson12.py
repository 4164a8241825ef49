"""Lesson 12 checks: online_softmax, tiled_attention, kv_cache_bytes, repeat_kv and
positive_random_features.

Correct implementations written the way a student would (other routes than the reference) pass the
visible and thorough checks; every catalogued mistake is caught and named by the visible check
(test_engine_and_lessons01_02.py covers the thorough one for every lesson); the structural cases
(block by block; never the (L_q, L_k) matrix) catch the right numbers computed the wrong way and
let the legitimate variants through; forbidden built-ins are refused and restored afterwards.
All checks are deterministic (fixed inputs from the check's own generators).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from transformer_lab import check
from transformer_lab.check import ImplementThisYourself

NEG_INF = float("-inf")

# ---------------------------------------------------------------------------------------------
# Correct student implementations, each by another route than the reference.


def softmax_running(scores, block_size):
    """The textbook loop: running max and sum, the new max replaced by 0 while it is -inf (the
    old one is not: exp(-inf - m') is the 0 it should be, where exp(0 - m') would overflow for a
    row of very negative scores)."""
    m = torch.full(scores.shape[:-1], NEG_INF, dtype=scores.dtype, device=scores.device)
    l_run = torch.zeros_like(m)
    for x in torch.split(scores, block_size, dim=-1):
        m_new = torch.maximum(m, torch.max(x, dim=-1).values)
        shift = torch.where(m_new == NEG_INF, torch.zeros_like(m_new), m_new)
        l_run = l_run * torch.exp(m - shift) + torch.exp(x - shift.unsqueeze(-1)).sum(-1)
        m = m_new
    shift = torch.where(m == NEG_INF, torch.zeros_like(m), m)
    return torch.exp(scores - shift.unsqueeze(-1)) / l_run.unsqueeze(-1)


def softmax_block_statistics(scores, block_size):
    """Every block's max and sum first, then combined: blocks in parallel, no whole-row reduction."""
    L = scores.shape[-1]
    pad = (-L) % block_size
    x = F.pad(scores, (0, pad), value=NEG_INF)
    x = x.reshape(*scores.shape[:-1], -1, block_size)  # (..., n_blocks, block)
    block_max = x.amax(-1)
    safe_block = torch.where(torch.isinf(block_max), torch.zeros_like(block_max), block_max)
    block_sum = torch.exp(x - safe_block[..., None]).sum(-1)
    m = block_max.amax(-1, keepdim=True)
    safe_m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    total = (block_sum * torch.exp(safe_block - safe_m)).sum(-1, keepdim=True)
    return torch.exp(scores - safe_m) / total


def tiled_queries_and_keys(q, k, v, mask=None, block_size=64):
    """Tiles the queries too (as the GPU kernel does), scores by a broadcast product, masks with
    torch.where, and guards the -inf max with a finite stand-in."""
    scale = 1 / math.sqrt(q.shape[-1])
    Lq, Lk = q.shape[-2], k.shape[-2]
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if mask is not None:
        batch = torch.broadcast_shapes(batch, mask.shape[:-2])
        mask = mask.expand(*batch, Lq, Lk)
    rows = []
    for i in range(0, Lq, block_size):
        qi = q[..., i : i + block_size, :]
        m = torch.full((*batch, qi.shape[-2], 1), NEG_INF, dtype=q.dtype, device=q.device)
        s_sum = torch.zeros_like(m)
        acc = torch.zeros((*batch, qi.shape[-2], v.shape[-1]), dtype=q.dtype, device=q.device)
        for j in range(0, Lk, block_size):
            kj, vj = k[..., j : j + block_size, :], v[..., j : j + block_size, :]
            s = (qi[..., :, None, :] * kj[..., None, :, :]).sum(-1) * scale
            if mask is not None:
                s = torch.where(mask[..., i : i + block_size, j : j + block_size], s, NEG_INF)
            m_new = torch.maximum(m, s.max(-1, keepdim=True).values)
            m_ok = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            m_old = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
            alpha = torch.exp(m_old - m_ok)
            p = torch.exp(s - m_ok)
            s_sum = alpha * s_sum + p.sum(-1, keepdim=True)
            acc = alpha * acc + p @ vj
            m = m_new
        rows.append(acc / s_sum.clamp_min(torch.finfo(q.dtype).tiny))  # all masked: 0 / tiny
    return torch.cat(rows, dim=-2)


def tiled_plain(q, k, v, mask=None, block_size=64):
    """The loop over key blocks with Tensor methods, the max detached (it cancels); a mask that
    broadcasts over the keys is expanded to L_k columns first, so every block can slice it."""
    d = q.shape[-1]
    if mask is not None:
        mask = mask.expand(*mask.shape[:-1], k.shape[-2])
    m = l_run = out = None
    for j in range(0, k.shape[-2], block_size):
        s = q.matmul(k[..., j : j + block_size, :].mT) / d**0.5
        if mask is not None:
            s = s.masked_fill(mask[..., j : j + block_size].logical_not(), NEG_INF)
        blk = s.amax(-1).detach()
        if m is None:
            m = torch.full_like(blk, NEG_INF)
            l_run = torch.zeros_like(blk)
            out = s.new_zeros(*s.shape[:-1], v.shape[-1])
        m_new = torch.maximum(m, blk)
        m_safe = m_new.nan_to_num(neginf=0.0)
        alpha = (m.nan_to_num(neginf=0.0) - m_safe).exp()
        p = (s - m_safe[..., None]).exp()
        l_run = l_run * alpha + p.sum(-1)
        out = out * alpha[..., None] + p @ v[..., j : j + block_size, :]
        m = m_new
    return out / torch.where(l_run == 0, 1.0, l_run)[..., None]


def cache_bytes_by_product(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
    """K and V as two tensors of shape (layers, batch, kv heads, length, d_head), counted."""
    kv = n_heads if n_kv_heads is None else n_kv_heads
    return 2 * math.prod((n_layers, batch, kv, length, d_head)) * dtype_bytes


def repeat_kv_expand(x, n_rep):
    """A new axis after the heads, expanded n_rep times, then merged (Hugging Face Llama's way)."""
    B, h_kv, L, d = x.shape
    return x[:, :, None].expand(B, h_kv, n_rep, L, d).reshape(B, h_kv * n_rep, L, d)


def repeat_kv_by_index(x, n_rep):
    """Gathers head i // n_rep for every output head i."""
    return x[:, torch.arange(x.shape[1] * n_rep) // n_rep]


def features_by_einsum(x, omega):
    exponent = torch.einsum("...d,md->...m", x, omega) - 0.5 * x.pow(2).sum(-1, keepdim=True)
    return exponent.exp() / omega.shape[0] ** 0.5


GOOD = [
    ("online_softmax", softmax_running),
    ("online_softmax", softmax_block_statistics),
    ("tiled_attention", tiled_queries_and_keys),
    ("tiled_attention", tiled_plain),
    ("kv_cache_bytes", cache_bytes_by_product),
    ("repeat_kv", repeat_kv_expand),
    ("repeat_kv", repeat_kv_by_index),
    ("positive_random_features", features_by_einsum),
]
NAMES = list(dict.fromkeys(name for name, _ in GOOD))
COVERED = {  # what each passing line says it covered, beyond the comparison
    "online_softmax": "block by block",
    "tiled_attention": "never the (L_q, L_k)",
    "kv_cache_bytes": "GPT-3, Llama-2-70B",
    "repeat_kv": "forward and gradients",
    "positive_random_features": "φ(q)·φ(k) ≈ exp(q·k)",
}


@pytest.mark.parametrize("name,impl", GOOD, ids=[f.__name__ for _, f in GOOD])
@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_correct_implementations_pass(name, impl, thorough, capsys):
    assert getattr(check, name)(impl, thorough=thorough) is None
    out = capsys.readouterr().out
    assert f"✓ {name}" in out
    assert COVERED[name] in out


def test_passing_parts_are_saved_into_the_students_package(tmp_path):
    check.online_softmax(softmax_running)
    check.tiled_attention(tiled_plain)
    saved = (tmp_path / "pkg" / "transformer_lab_student" / "efficient.py").read_text()
    assert "def softmax_running" in saved and "online_softmax = softmax_running" in saved
    assert "def tiled_plain" in saved and "tiled_attention = tiled_plain" in saved


def test_checks_do_not_touch_the_global_seed():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check.online_softmax(softmax_running)
    check.tiled_attention(tiled_plain)
    assert torch.equal(torch.rand(3), expected)


def test_visible_checks_return_within_a_second():
    import time

    for name, impl in dict(GOOD).items():  # the last implementation of each exercise
        start = time.perf_counter()
        getattr(check, name)(impl)
        assert time.perf_counter() - start < 1.0, name


# ---------------------------------------------------------------------------------------------
# The catalogue: every mistake is named by the visible check already.

CATALOGUE = [(name, m.key) for name in NAMES for m in check.EXERCISES[name].mistakes]


@pytest.mark.parametrize("name,key", CATALOGUE, ids=[f"{n}-{k}" for n, k in CATALOGUE])
def test_visible_check_names_each_mistake(name, key):
    mistake = check.EXERCISES[name].mistake(key)
    with pytest.raises(check.CheckFailed) as info:
        getattr(check, name)(mistake.impl)
    assert info.value.mistake == mistake.sentence
    assert info.value.exercise == name


def test_the_brief_s_mistakes_are_catalogued():
    softmax = {m.key for m in check.EXERCISES["online_softmax"].mistakes}
    tiled = {m.key for m in check.EXERCISES["tiled_attention"].mistakes}
    assert {"no-max", "sum-not-rescaled"} <= softmax
    assert {
        "output-not-rescaled",
        "stale-max",
        "no-final-normalisation",
        "mask-block-local",
        "full-matrix",
    } <= tiled


def test_no_max_overflows_where_the_reference_does_not():
    mistake = check.EXERCISES["online_softmax"].mistake("no-max")
    with pytest.raises(check.CheckFailed) as info:
        check.online_softmax(mistake.impl)
    assert "large scores" in info.value.case and "NaN" in info.value.problem


def test_block_local_mask_lets_queries_see_the_future():
    mistake = check.EXERCISES["tiled_attention"].mistake("mask-block-local")
    with pytest.raises(check.CheckFailed) as info:
        check.tiled_attention(mistake.impl)
    assert "causal mask" in info.value.case


def tiled_slicing_every_mask(q, k, v, mask=None, block_size=64):
    """Right for (..., L_q, L_k) masks, but slices the mask's last dimension per block even when
    it is 1 (broadcast over the keys): the second block gets an empty slice and crashes."""
    return tiled_plain_unexpanded(q, k, v, mask, block_size)


def _tiled_running(q, k, v, mask, block_size):
    """A student's tiled loop by hand, without expanding the mask: the unnormalised output and
    the running sum l (the two ways to finish below differ only in the last division)."""
    d = q.shape[-1]
    m = l_run = out = None
    for j in range(0, k.shape[-2], block_size):
        s = q.matmul(k[..., j : j + block_size, :].mT) / d**0.5
        if mask is not None:
            s = s.masked_fill(mask[..., j : j + block_size].logical_not(), NEG_INF)
        if m is None:
            m = torch.full_like(s.amax(-1), NEG_INF)
            l_run = torch.zeros_like(m)
            out = s.new_zeros(*s.shape[:-1], v.shape[-1])
        m_new = torch.maximum(m, s.amax(-1))
        m_safe = m_new.nan_to_num(neginf=0.0)
        alpha = (m.nan_to_num(neginf=0.0) - m_safe).exp()
        p = (s - m_safe[..., None]).exp()
        l_run = l_run * alpha + p.sum(-1)
        out = out * alpha[..., None] + p @ v[..., j : j + block_size, :]
        m = m_new
    return out, l_run


def tiled_plain_unexpanded(q, k, v, mask, block_size):
    out, l_run = _tiled_running(q, k, v, mask, block_size)
    return out / torch.where(l_run == 0, 1.0, l_run)[..., None]


def test_a_mask_broadcast_over_the_keys_is_a_visible_case():
    """The contract's mask is anything broadcastable to (..., L_q, L_k): a last dimension of 1
    too. Slicing it per block crashes from the second block on; the visible check says so."""
    with pytest.raises(check.CheckFailed) as info:
        check.tiled_attention(tiled_slicing_every_mask)
    assert "(6, 1) broadcast over the keys" in info.value.case
    assert "raised RuntimeError" in info.value.problem


@pytest.mark.parametrize(
    "shape", [(11,), (5, 1), (2, 1, 5, 1), (1, 2, 1, 1), ()], ids=lambda s: str(s)
)
def test_the_reference_takes_every_broadcastable_mask(shape):
    from transformer_lab.attention import scaled_dot_product_attention
    from transformer_lab.efficient import tiled_attention

    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 2, 5, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 2, 11, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 2, 11, 4, generator=g, dtype=torch.float64)
    mask = torch.rand(shape, generator=g) < 0.6
    expected = scaled_dot_product_attention(q, k, v, mask)[0]
    for block_size in (1, 4, 64):
        got = tiled_attention(q, k, v, mask, block_size=block_size)
        assert torch.allclose(got, expected, atol=1e-12), (shape, block_size)
        assert torch.allclose(tiled_plain(q, k, v, mask, block_size), expected, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# The structural cases: right numbers, computed the way the exercise rules out.


def tiled_ignoring_block_size(q, k, v, mask=None, block_size=64):
    return tiled_plain(q, k, v, mask, block_size=64)


def tiled_scores_all_at_once(q, k, v, mask=None, block_size=64):
    """Exact attention written with exp: correct output, but the (L_q, L_k) matrix in full."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, NEG_INF)
    m = s.amax(-1, keepdim=True)
    e = torch.exp(s - torch.where(torch.isinf(m), torch.zeros_like(m), m))
    total = e.sum(-1, keepdim=True)
    return (e / torch.where(total == 0, torch.ones_like(total), total)) @ v


def softmax_whole_row_in_pieces(scores, block_size):
    """Loops over blocks for the exponentials, but takes the max of the whole row first."""
    m = scores.max(dim=-1, keepdim=True).values
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    blocks = [torch.exp(x - m) for x in scores.split(block_size, -1)]
    e = torch.cat(blocks, -1)
    return e / e.sum(-1, keepdim=True)


@pytest.mark.parametrize("impl", [tiled_scores_all_at_once, tiled_ignoring_block_size])
def test_forming_the_full_matrix_is_caught(impl):
    with pytest.raises(check.CheckFailed) as info:
        check.tiled_attention(impl)
    assert "never the (L_q, L_k) = (256, 256) matrix" in info.value.problem
    assert info.value.mistake == check.EXERCISES["tiled_attention"].mistake("full-matrix").sentence


def test_reducing_a_whole_row_is_caught():
    with pytest.raises(check.CheckFailed) as info:
        check.online_softmax(softmax_whole_row_in_pieces)
    assert "reduces a whole row of 64 scores at once" in info.value.problem
    assert "max over a tensor of shape (3, 64)" in info.value.problem


def test_the_watch_sees_tensor_methods_operators_and_factories():
    from transformer_lab.check.lesson12 import _Watch

    x = torch.randn(4, 10, dtype=torch.float64)
    with _Watch(row=10) as watch:
        (x @ x.T).sum(-1)
        torch.zeros(50, 50)
        x.max(dim=1)
        torch.max(x, torch.zeros_like(x))  # elementwise: not a reduction
        x[:, :5].amax(-1)
    assert tuple(watch.largest.shape) == (50, 50)
    assert watch.row_reductions == ["max over a tensor of shape (4, 10)"]


# ---------------------------------------------------------------------------------------------
# Forbidden built-ins.


def softmax_with_torch(scores, block_size):
    return torch.softmax(scores, -1)


def softmax_with_method(scores, block_size):
    return scores.softmax(-1)


def softmax_with_log_softmax(scores, block_size):
    return F.log_softmax(scores, dim=-1).exp()


def tiled_with_torch_sdpa(q, k, v, mask=None, block_size=64):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def tiled_with_softmax_per_row(q, k, v, mask=None, block_size=64):
    s = q @ k.mT / math.sqrt(q.shape[-1])
    return torch.nn.functional.softmax(s, -1) @ v


def tiled_with_the_reference(q, k, v, mask=None, block_size=64):
    from transformer_lab import efficient

    return efficient.tiled_attention(q, k, v, mask, block_size)


@pytest.mark.parametrize(
    "name,impl",
    [
        ("online_softmax", softmax_with_torch),
        ("online_softmax", softmax_with_method),
        ("online_softmax", softmax_with_log_softmax),
        ("tiled_attention", tiled_with_torch_sdpa),
        ("tiled_attention", tiled_with_softmax_per_row),
        ("tiled_attention", tiled_with_the_reference),
    ],
)
def test_forbidden_built_ins_are_refused_and_restored(name, impl):
    with pytest.raises(ImplementThisYourself, match="implement this yourself"):
        getattr(check, name)(impl)
    x = torch.randn(2, 5)
    assert torch.allclose(x.softmax(-1), torch.softmax(x, -1))  # switched back on
    assert torch.allclose(F.log_softmax(x, -1).exp(), F.softmax(x, -1))


def test_the_reference_itself_is_refused():
    from transformer_lab import efficient

    with pytest.raises(ImplementThisYourself):
        check.online_softmax(efficient.online_softmax)
    with pytest.raises(ImplementThisYourself):
        check.tiled_attention(efficient.tiled_attention)


def tiled_where_divides_by_zero(q, k, v, mask=None, block_size=64):
    """Right outputs, but torch.where(l > 0, o / l, 0) still computes 0/0 in the branch it drops,
    and the NaN comes back through the gradient."""
    out, l_run = _tiled_running(q, k, v, mask, block_size)
    return torch.where(l_run[..., None] > 0, out / l_run[..., None], torch.zeros_like(out))


def test_nan_gradients_of_fully_masked_rows_are_caught():
    with pytest.raises(check.CheckFailed) as info:
        check.tiled_attention(tiled_where_divides_by_zero)
    assert "the gradient with respect to" in info.value.problem and "NaN" in info.value.problem
    assert "every key masked" in info.value.case


def test_an_exception_in_the_student_code_fails_with_its_message():
    def broken(q, k, v, mask=None, block_size=64):
        raise ValueError("my own bug")

    with pytest.raises(check.CheckFailed, match="raised ValueError: my own bug"):
        check.tiled_attention(broken)


# ---------------------------------------------------------------------------------------------
# Exercises 3-5: kv_cache_bytes, repeat_kv, positive_random_features.


def test_the_brief_s_scale_mistakes_are_catalogued():
    keys = {name: {m.key for m in check.EXERCISES[name].mistakes} for name in NAMES}
    assert {"no-factor-2", "query-heads", "gib", "gb", "no-layers"} <= keys["kv_cache_bytes"]
    assert {"tiled", "length-axis"} <= keys["repeat_kv"]
    assert {"no-norm", "no-sqrt-m"} <= keys["positive_random_features"]


def test_the_kv_cache_numbers_of_the_lecture():
    """GPT-3 175B in float16: a batch of 32 is 288 GiB = 309 GB, less than 350 GB of weights;
    the cache passes the weights from 37 full-length sequences on (issue 25, error 1)."""
    from transformer_lab.scaling import kv_cache_bytes

    weights = 175e9 * 2
    at_32 = kv_cache_bytes(96, 96, 128, 32, 2048, 2)
    assert at_32 / 2**30 == 288 and round(at_32 / 1e9) == 309 and at_32 < weights
    per_sequence = kv_cache_bytes(96, 96, 128, 1, 2048, 2)
    assert next(b for b in range(1, 100) if b * per_sequence > weights) == 37
    cases = check.EXERCISES["kv_cache_bytes"].driver.cases(False)
    assert [c.args[3] for c in cases[:2]] == [32, 37]  # both sides of error 1 are visible cases


def test_a_cache_size_in_the_wrong_unit_is_shown_in_both_units():
    with pytest.raises(check.CheckFailed) as info:
        check.kv_cache_bytes(check.EXERCISES["kv_cache_bytes"].mistake("gb").impl)
    assert "309.24 GB = 288.00 GiB" in info.value.problem


@pytest.mark.parametrize("shape,n_rep", [((2, 3, 4, 5), 2), ((1, 1, 3, 2), 4), ((2, 4, 1, 3), 1)])
def test_repeat_kv_is_hugging_face_s_and_repeat_interleave(shape, n_rep):
    from transformers.models.llama.modeling_llama import repeat_kv as hf_repeat_kv

    from transformer_lab.scaling import repeat_kv

    x = torch.randn(*shape)
    assert torch.equal(repeat_kv(x, n_rep), hf_repeat_kv(x, n_rep))
    assert torch.equal(repeat_kv(x, n_rep), torch.repeat_interleave(x, n_rep, dim=1))


@pytest.mark.parametrize("x,n_rep", [(torch.zeros(2, 3, 4), 2), (torch.zeros(1, 2, 3, 4), 0)])
def test_repeat_kv_rejects_bad_input(x, n_rep):
    from transformer_lab.scaling import repeat_kv

    with pytest.raises(ValueError):
        repeat_kv(x, n_rep)


def test_positive_random_features_estimate_the_softmax_kernel():
    from transformer_lab.scaling import performer_features, positive_random_features

    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(5, 4, generator=g, dtype=torch.float64) * 0.3 for _ in range(2))
    omega = torch.randn(50_000, 4, generator=g, dtype=torch.float64)
    phi_q, phi_k = positive_random_features(q, omega), positive_random_features(k, omega)
    assert (phi_q > 0).all()
    estimate = (phi_q * phi_k).sum(-1)
    assert torch.allclose(estimate, torch.exp((q * k).sum(-1)), rtol=0.03)  # σ ≈ 0.8 %
    shifted = performer_features(q, omega, is_query=True)  # the same up to a factor per row
    ratio = phi_q / shifted
    assert torch.allclose(ratio, ratio[:, :1].expand_as(ratio))
    with pytest.raises(ValueError, match="omega"):
        positive_random_features(q, omega[:, :3])


def test_the_scale_references_are_refused():
    from transformer_lab import scaling

    for name in ("kv_cache_bytes", "repeat_kv", "positive_random_features"):
        with pytest.raises(ImplementThisYourself):
            getattr(check, name)(getattr(scaling, name))
