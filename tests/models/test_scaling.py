"""Tests for transformer_lab.scaling: sparse masks, Linformer, Performer, KV-cache memory, GQA.

Each property check is also run on a deliberately broken variant ("mutant") to show it catches it.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch

from transformer_lab import efficient, scaling
from transformer_lab.attention import scaled_dot_product_attention
from transformer_lab.encoder_decoder import Parts
from transformer_lab.gpt import GPT, GPTConfig
from transformer_lab.masking import causal_mask
from transformer_lab.multihead import MultiHeadAttention
from transformer_lab.scaling import (
    GroupedQueryAttention,
    LinformerSelfAttention,
    PerformerSelfAttention,
    bigbird_attention,
    bigbird_mask,
    cache_nbytes,
    kv_cache_bytes,
    linformer_attention,
    performer_attention,
    pooling_projection,
    sliding_window_mask,
)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


# -- sparse masks ------------------------------------------------------------------------------


def _window_properties_hold(mask_fn) -> bool:
    n, w = 12, 2
    m = mask_fn(n, w)
    i = torch.arange(n)
    expected_per_row = (
        torch.minimum(i, torch.tensor(w)) + torch.minimum(n - 1 - i, torch.tensor(w)) + 1
    )
    return (
        m.dtype == torch.bool
        and m.shape == (n, n)
        and bool(m.diagonal().all())
        and torch.equal(m, m.T)
        and torch.equal(m.sum(1), expected_per_row)
        and not bool(m[0, w + 1])
    )


def test_sliding_window_mask_is_a_symmetric_band_of_width_2w_plus_1():
    assert _window_properties_hold(sliding_window_mask)
    # mutant: an off-by-one band (|i - j| < w) is caught
    assert not _window_properties_hold(
        lambda n, w: (torch.arange(n)[:, None] - torch.arange(n)).abs() < w
    )
    causal = sliding_window_mask(10, 3, causal=True)
    assert torch.equal(causal, sliding_window_mask(10, 3) & causal_mask(10))


def test_sliding_window_mask_follows_the_attention_mask_convention():
    # True = may attend: row i's output is the softmax over keys i-w..i+w only
    torch.manual_seed(0)
    n, w, d = 9, 2, 4
    q, k, v = (torch.randn(n, d, dtype=torch.float64) for _ in range(3))
    out, weights = scaled_dot_product_attention(q, k, v, sliding_window_mask(n, w))
    for i in range(n):
        lo, hi = max(0, i - w), min(n, i + w + 1)
        ref, _ = scaled_dot_product_attention(q[i : i + 1], k[lo:hi], v[lo:hi])
        torch.testing.assert_close(out[i : i + 1], ref)
        assert weights[i, :lo].sum() == 0 and weights[i, hi:].sum() == 0


def _bigbird_properties_hold(mask_fn) -> bool:
    n, w, g, r = 64, 2, 3, 2
    m = mask_fn(n, w, g, r, 0)
    band = sliding_window_mask(n, w)
    kept_per_row = m.sum(1)
    return (
        bool(m[:g].all())  # global tokens attend to everything
        and bool(m[:, :g].all())  # and everything attends to them
        and bool((m | ~band).all())  # the local band is kept
        and bool((m & ~band)[g:, g:].sum(1).le(r).all())  # at most r random keys per row
        and bool((m & ~band)[g:, g:].any())  # some random links exist
        and int(kept_per_row[g:].max()) <= 2 * w + 1 + g + r  # linear in n, not n
    )


def test_bigbird_mask_has_local_global_and_random_parts():
    assert _bigbird_properties_hold(lambda n, w, g, r, s: bigbird_mask(n, w, g, r, seed=s))

    def no_global_columns(n, w, g, r, s):  # mutant: global rows only
        m = bigbird_mask(n, w, 0, r, seed=s)
        m[:g] = True
        return m

    assert not _bigbird_properties_hold(no_global_columns)
    assert not _bigbird_properties_hold(lambda n, w, g, r, s: bigbird_mask(n, w, g, 0, seed=s))
    # the same seed gives the same mask, another seed another one
    assert torch.equal(bigbird_mask(64, seed=3), bigbird_mask(64, seed=3))
    assert not torch.equal(bigbird_mask(64, seed=3), bigbird_mask(64, seed=4))


@pytest.mark.parametrize(
    "window, n_global, n_random",
    [(3, 2, 2), (0, 0, 5), (5, 0, 0), (2, 1, 7), (60, 3, 3), (7, 2, 4), (1, 0, 0)],
)
def test_bigbird_attention_equals_masked_attention(window, n_global, n_random):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 50, 8, dtype=torch.float64) for _ in range(3))
    mask = bigbird_mask(50, window, n_global, n_random, seed=1)
    expected, _ = scaled_dot_product_attention(q, k, v, mask)
    got = bigbird_attention(q, k, v, window, n_global, n_random, seed=1)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-10)


def test_bigbird_attention_counts_a_key_once(monkeypatch):
    # mutant: keep repeated random keys (a key listed twice gets twice the weight) -> caught
    torch.manual_seed(0)
    q, k, v = (torch.randn(40, 8, dtype=torch.float64) for _ in range(3))
    expected, _ = scaled_dot_product_attention(q, k, v, bigbird_mask(40, 1, 1, 6, seed=2))
    original = scaling._random_links

    def with_repeats(n, window, n_global, n_random, seed, device=None):
        rnd, _ = original(n, window, n_global, n_random, seed, device)
        return rnd, torch.ones_like(rnd, dtype=torch.bool)

    monkeypatch.setattr(scaling, "_random_links", with_repeats)
    got = bigbird_attention(q, k, v, 1, 1, 6, seed=2)
    assert not torch.allclose(got, expected)


def test_sparse_bad_input():
    with pytest.raises(ValueError, match="window"):
        sliding_window_mask(5, -1)
    with pytest.raises(ValueError, match="n_global"):
        bigbird_mask(4, n_global=5)
    with pytest.raises(ValueError, match="same length"):
        bigbird_attention(torch.randn(5, 4), torch.randn(6, 4), torch.randn(6, 4))


# -- Linformer ---------------------------------------------------------------------------------


def _smooth_qkv(n=512, d=32, seed=0):
    # token vectors that change smoothly along the sequence, plus noise (lecture 12's example)
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0, 1, n)[:, None]
    freqs = torch.randn(1, d, generator=g) * 6
    x = torch.cat([torch.sin(t * freqs[:, : d // 2] * 3), torch.cos(t * freqs[:, d // 2 :] * 3)], 1)
    x = x + 0.1 * torch.randn(n, d, generator=g)
    w_q, w_k, w_v = (torch.randn(d, d, generator=g) / math.sqrt(d) for _ in range(3))
    return x @ w_q, x @ w_k, x @ w_v


def _linformer_errors(attention) -> list[float]:
    q, k, v = _smooth_qkv()
    exact, _ = scaled_dot_product_attention(q, k, v)
    errors = []
    for proj in (4, 16, 64, 512):
        e = pooling_projection(512, proj)
        errors.append(_rel(attention(q, k, v, e, e), exact))
    return errors


def test_linformer_error_decreases_with_k_and_vanishes_at_k_equal_n():
    errors = _linformer_errors(linformer_attention)
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 1e-5  # E = identity: exact
    assert errors[1] < 0.2  # the smooth sequence is close to low rank

    def values_not_projected(q, k, v, e, f):  # mutant: E K but raw V rows (wrong positions)
        return scaled_dot_product_attention(q, e @ k, v[: e.shape[0]])[0]

    bad = _linformer_errors(values_not_projected)
    assert bad[1] > 2 * errors[1]


def test_pooling_projection_rows_average_consecutive_blocks():
    e = pooling_projection(10, 3)
    assert e.shape == (3, 10)
    torch.testing.assert_close(e.sum(1), torch.ones(3))
    assert torch.equal((e > 0).sum(0), torch.ones(10, dtype=torch.long))  # each position once
    assert torch.equal(pooling_projection(4, 4), torch.eye(4))
    with pytest.raises(ValueError, match="k <= n"):
        pooling_projection(4, 5)


def test_linformer_shapes_and_module():
    q, k, v = torch.randn(2, 3, 7, 4), torch.randn(2, 3, 20, 4), torch.randn(2, 3, 20, 5)
    e = torch.randn(6, 20)
    assert linformer_attention(q, k, v, e, e).shape == (2, 3, 7, 5)
    with pytest.raises(ValueError, match=r"\(k, 20\)"):
        linformer_attention(q, k, v, torch.randn(6, 19), e)
    layer = LinformerSelfAttention(d_model=16, n_heads=2, max_len=32, proj_len=8)
    assert layer(torch.randn(3, 20, 16)).shape == (3, 20, 16)
    with pytest.raises(ValueError, match="max_len"):
        layer(torch.randn(1, 33, 16))


# -- Performer ---------------------------------------------------------------------------------


def _performer_errors(attention, features=(8, 64, 512, 4096), repeats=4) -> list[float]:
    g = torch.Generator().manual_seed(0)
    n, d = 256, 16
    q, k = (torch.randn(n, d, generator=g, dtype=torch.float64) * 0.5 for _ in range(2))
    v = torch.randn(n, d, generator=g, dtype=torch.float64)
    exact, _ = scaled_dot_product_attention(q, k, v)
    errors = []
    for m in features:
        runs = [
            _rel(attention(q, k, v, m, generator=torch.Generator().manual_seed(s)), exact)
            for s in range(repeats)
        ]
        errors.append(sum(runs) / repeats)
    return errors


def test_performer_error_decreases_with_the_number_of_features():
    errors = _performer_errors(performer_attention)
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 0.05
    # about 1/sqrt(m): 512 times more features, roughly 20 times smaller error
    assert errors[0] / errors[-1] > 8

    def no_norm_term(q, k, v, m, generator=None):  # mutant: φ(x) = exp(w·x) (biased estimate)
        w = torch.randn(m, q.shape[-1], generator=generator, dtype=q.dtype)
        s = q.shape[-1] ** -0.25
        phi_q, phi_k = torch.exp((q * s) @ w.T), torch.exp((k * s) @ w.T)
        return (phi_q @ (phi_k.T @ v)) / (phi_q @ phi_k.sum(0)[:, None])

    assert _performer_errors(no_norm_term, features=(4096,))[0] > 5 * errors[-1]


def _looks_gaussian(w: torch.Tensor) -> bool:
    # rows ~ N(0, I): mean 0, covariance I (20,000 rows: the sampling error is about 0.01)
    cov = w.T @ w / len(w)
    return bool(w.mean(0).abs().max() < 0.05) and bool(
        (cov - torch.eye(w.shape[1])).abs().max() < 0.06
    )


def test_random_features_are_gaussian_and_orthogonal_in_blocks():
    g = torch.Generator().manual_seed(0)
    w = scaling.random_features(20_000, 4, generator=g)
    assert w.shape == (20_000, 4) and _looks_gaussian(w)
    block = w[:4] / w[:4].norm(dim=1, keepdim=True)
    torch.testing.assert_close(block @ block.T, torch.eye(4), atol=1e-5, rtol=0)
    assert _looks_gaussian(scaling.random_features(20_000, 4, orthogonal=False, generator=g))

    def qr_without_sign_fix(m, d, generator):  # mutant: QR's sign convention biases the rows
        blocks = [
            torch.linalg.qr(torch.randn(d, d, generator=generator))[0].T for _ in range(-(-m // d))
        ]
        return torch.cat(blocks)[:m] * torch.randn(m, d, generator=generator).norm(
            dim=1, keepdim=True
        )

    assert not _looks_gaussian(qr_without_sign_fix(20_000, 4, g))


def test_performer_features_are_positive_and_unbiased():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 4, generator=g) * 0.5, torch.randn(1, 4, generator=g) * 0.5
    w = torch.randn(200_000, 4, generator=g)
    phi_q = performer_features_unshifted(q, w)
    phi_k = performer_features_unshifted(k, w)
    assert (phi_q > 0).all()
    estimate = (phi_q @ phi_k.T).item()
    assert estimate == pytest.approx(math.exp((q @ k.T).item()), rel=0.02)


def performer_features_unshifted(x, w):
    # undo the stability shift of performer_features to compare with exp(q·k) itself
    shifted = scaling.performer_features(x, w, is_query=True)
    exponent = x @ w.T - (x * x).sum(-1, keepdim=True) / 2
    return shifted * torch.exp(exponent.amax(-1, keepdim=True))


def test_performer_shapes_and_module():
    q, k, v = torch.randn(2, 3, 7, 4), torch.randn(2, 3, 20, 4), torch.randn(2, 3, 20, 5)
    assert performer_attention(q, k, v, 16).shape == (2, 3, 7, 5)
    with pytest.raises(ValueError, match="w must be"):
        performer_attention(q, k, v, w=torch.randn(16, 5))
    layer = PerformerSelfAttention(d_model=16, n_heads=2, n_features=32)
    assert layer(torch.randn(3, 20, 16)).shape == (3, 20, 16)
    # large scores do not overflow: the stabiliser keeps everything finite
    big = torch.randn(1, 64, 8) * 30
    assert torch.isfinite(performer_attention(big, big, torch.randn(1, 64, 8), 32)).all()


# -- the KV cache's memory ---------------------------------------------------------------------


def test_kv_cache_bytes_formula():
    # GPT-2 small: 12 layers, 12 heads of 64, 1024 tokens, float16 -> 36 MiB per sequence
    assert kv_cache_bytes(12, 12, 64, 1, 1024, 2) == 2 * 12 * 12 * 64 * 1024 * 2 == 37_748_736
    assert kv_cache_bytes(12, 12, 64, 1, 1024, 2, n_kv_heads=1) * 12 == kv_cache_bytes(
        12, 12, 64, 1, 1024, 2
    )
    with pytest.raises(ValueError, match="n_kv_heads"):
        kv_cache_bytes(1, 4, 8, 1, 1, 2, n_kv_heads=8)
    with pytest.raises(ValueError, match="length"):
        kv_cache_bytes(1, 4, 8, 1, -1, 2)


def _filled_cache(model: GPT, batch: int, length: int) -> list:
    idx = torch.randint(
        0, model.vocab_size, (batch, length), generator=torch.Generator().manual_seed(0)
    )
    cache = model.new_cache()
    with torch.no_grad():
        model(idx[:, : length - 3], cache=cache)
        for t in range(length - 3, length):  # then token by token, as generate does
            model(idx[:, t : t + 1], cache=cache)
    return cache


def _storage_bytes(cache) -> int:
    # measured independently of cache_nbytes: the bytes of the tensors' storages
    return sum(t.untyped_storage().nbytes() for layer in cache for t in (layer.k, layer.v))


@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kv_cache_bytes_matches_a_real_gpt_cache(n_kv_heads, dtype):
    parts = None
    if n_kv_heads is not None:
        parts = Parts(attention=functools.partial(GroupedQueryAttention, n_kv_heads=n_kv_heads))
    model = GPT(GPTConfig(50, 64, d_model=32, n_heads=4, n_layers=3), parts=parts).to(dtype).eval()
    batch, length = 2, 21
    cache = _filled_cache(model, batch, length)
    measured = _storage_bytes(cache)
    assert cache_nbytes(cache) == measured
    bytes_per = torch.tensor([], dtype=dtype).element_size()
    predicted = kv_cache_bytes(3, 4, 8, batch, length, bytes_per, n_kv_heads=n_kv_heads)
    assert predicted == measured

    def without_factor_two(*args, **kwargs):  # mutant: forgets that V is cached as well as K
        return kv_cache_bytes(*args, **kwargs) // 2

    assert without_factor_two(3, 4, 8, batch, length, bytes_per, n_kv_heads=n_kv_heads) != measured


# -- grouped-query attention -------------------------------------------------------------------


class _MultiQueryAlways(GroupedQueryAttention):
    """Mutant: ignores n_kv_heads and shares one K/V head (takes head 0's slice)."""

    def forward(self, x, context=None, mask=None, need_weights=False, cache=None):
        context = x if context is None else context
        from transformer_lab.multihead import merge_heads, split_heads

        q = split_heads(self.w_q(x), self.n_heads)
        k = split_heads(self.w_k(context), self.n_kv_heads)[:, :1].expand(-1, self.n_heads, -1, -1)
        v = split_heads(self.w_v(context), self.n_kv_heads)[:, :1].expand(-1, self.n_heads, -1, -1)
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(merge_heads(out))


def _equals_mha(cls, mask=None) -> bool:
    torch.manual_seed(0)
    mha = MultiHeadAttention(24, 4).double()
    gqa = cls(24, 4, n_kv_heads=4).double()
    gqa.load_state_dict(mha.state_dict())  # same parameter names and shapes
    x, c = torch.randn(2, 5, 24, dtype=torch.float64), torch.randn(2, 7, 24, dtype=torch.float64)
    return torch.allclose(gqa(x, mask=mask), mha(x, mask=mask)) and torch.allclose(
        gqa(x, context=c), mha(x, context=c)
    )


def test_gqa_equals_multi_head_attention_when_n_kv_heads_equals_n_heads():
    assert _equals_mha(GroupedQueryAttention)
    assert _equals_mha(GroupedQueryAttention, mask=causal_mask(5))
    assert not _equals_mha(_MultiQueryAlways)


def _grouping_correct(repeat) -> bool:
    # GQA with 2 K/V heads for 4 query heads = MHA whose K/V heads 0,1 are K/V head 0 and 2,3 are 1
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(16, 4, n_kv_heads=2).double()
    mha = MultiHeadAttention(16, 4).double()
    state = dict(gqa.state_dict())
    for name in ("w_k", "w_v"):
        w, b = state[f"{name}.weight"].view(2, 4, 16), state[f"{name}.bias"].view(2, 4)
        state[f"{name}.weight"] = repeat(w, 2).reshape(16, 16)
        state[f"{name}.bias"] = repeat(b, 2).reshape(16)
    mha.load_state_dict(state)
    x = torch.randn(3, 6, 16, dtype=torch.float64)
    return torch.allclose(gqa(x), mha(x))


def test_gqa_query_head_i_reads_kv_head_i_over_group():
    assert _grouping_correct(lambda t, g: t.repeat_interleave(g, dim=0))
    # mutant: heads 0,1,2,3 -> K/V 0,1,0,1 (repeat instead of repeat_interleave)
    assert not _grouping_correct(lambda t, g: t.repeat(g, *([1] * (t.dim() - 1))))


def test_gqa_in_a_gpt_generates_like_mha_and_its_cache_shrinks():
    torch.manual_seed(0)
    ref = GPT(GPTConfig(50, 64, d_model=32, n_heads=4, n_layers=2)).eval()
    same = GPT(GPTConfig(50, 64, 32, 4, 2), parts=Parts(attention=GroupedQueryAttention)).eval()
    same.load_state_dict(ref.state_dict())
    idx = torch.randint(0, 50, (2, 10))
    torch.testing.assert_close(same(idx), ref(idx))
    out_ref = ref.generate(idx, 5, top_k=1)
    torch.testing.assert_close(same.generate(idx, 5, top_k=1), out_ref)
    mqa = GPT(
        GPTConfig(50, 64, 32, 4, 2),
        parts=Parts(attention=functools.partial(GroupedQueryAttention, n_kv_heads=1)),
    )
    assert _storage_bytes(_filled_cache(ref, 2, 20)) == 4 * _storage_bytes(
        _filled_cache(mqa.eval(), 2, 20)
    )
    # cached decoding equals full recomputation with shared K/V heads
    gqa = GPT(
        GPTConfig(50, 64, 32, 4, 2),
        parts=Parts(attention=functools.partial(GroupedQueryAttention, n_kv_heads=2)),
    ).eval()
    full = gqa(idx)
    cache = gqa.new_cache()
    steps = [gqa(idx[:, :6], cache=cache)] + [
        gqa(idx[:, t : t + 1], cache=cache) for t in range(6, 10)
    ]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-4)


def test_gqa_bad_input():
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        GroupedQueryAttention(24, 4, n_kv_heads=3)
    with pytest.raises(ValueError, match="d_model"):
        GroupedQueryAttention(24, 4)(torch.randn(1, 3, 16))


# -- measuring -------------------------------------------------------------------------------


def _two_temporaries():
    a = torch.ones(1000, 1000)  # 4 MB
    del a
    return torch.ones(500, 1000)  # 2 MB, the output


def test_peak_memory_bytes_is_the_peak_of_live_allocations_not_their_sum():
    assert scaling.peak_memory_bytes(lambda: torch.empty(1000, 1000)) == 4_000_000
    assert scaling.peak_memory_bytes(_two_temporaries) == 4_000_000

    existing = torch.ones(1000, 1000)
    assert scaling.peak_memory_bytes(lambda: existing.view(-1)) == 0  # inputs do not count

    def summed_allocations(fn):  # mutant: adds every allocation and ignores the frees
        return sum(nbytes for nbytes, _ in efficient.memory_events(fn) if nbytes > 0)

    assert summed_allocations(_two_temporaries) != 4_000_000


def test_measured_memory_is_quadratic_for_exact_and_linear_for_cheaper_attention():
    def peak(fn, n):
        q, k, v = (torch.randn(1, 1, n, 16) for _ in range(3))
        with torch.no_grad():
            return scaling.peak_memory_bytes(lambda: fn(q, k, v))

    def growth(fn):
        return peak(fn, 2048) / peak(fn, 1024)

    exact = growth(lambda q, k, v: scaled_dot_product_attention(q, k, v)[0])
    assert 3.5 < exact < 4.5  # twice the length, four times the memory
    w = torch.randn(32, 16)
    e = torch.randn(32, 2048)
    for fn in (
        lambda q, k, v: performer_attention(q, k, v, w=w),
        lambda q, k, v: linformer_attention(q, k, v, e[:, : k.shape[-2]], e[:, : k.shape[-2]]),
        lambda q, k, v: bigbird_attention(q, k, v, 8, 1, 2),
    ):
        assert growth(fn) < 2.5


def test_crossover_is_where_the_method_stays_below():
    ns = [1, 2, 4, 8, 16]
    assert scaling.crossover(ns, [1, 2, 4, 8, 16], [2, 2, 3, 4, 5]) == 4
    assert scaling.crossover(ns, [1, 2, 4, 8, 16], [0, 3, 5, 9, 17]) is None
    assert scaling.crossover(ns, [1, 2, 4, 8, 16], [0, 3, 3, 9, 15]) == 16  # must stay below
    with pytest.raises(ValueError, match="same length"):
        scaling.crossover(ns, [1], [1])


def test_wall_time_is_a_median_of_the_timed_calls():
    calls = []
    assert scaling.wall_time(lambda: calls.append(1), repeats=5, warmup=2) >= 0
    assert len(calls) == 7
    ticks = iter([0, 1, 0, 10, 0, 2])  # a fake clock: the calls take 1, 10 and 2 seconds
    assert scaling.wall_time(lambda: None, repeats=3, warmup=0, clock=lambda: next(ticks)) == 2
    with pytest.raises(ValueError, match="repeats"):
        scaling.wall_time(lambda: None, repeats=0)
