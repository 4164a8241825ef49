"""Lesson 08 checks: shift_targets, lm_loss, next_token_probs, sample_next and KVCache.

Correct implementations written the way a student would pass; every catalogued mistake fails the
visible check with its sentence (the thorough run of each mutant is in test_check.py); further
wrong variants are caught; forbidden built-ins are refused; bad input gets a clear message; the
statistical check's tolerance is argued below (and in lesson08_sampling.py).
"""

from __future__ import annotations

import math

import pytest
import torch

from transformer_lab import check
from transformer_lab.check import lesson08, lesson08_sampling

# ---------------------------------------------------------------------------------------------
# Correct student implementations, written differently from the reference.


def good_shift(idx, pad_id=None):
    B, L = idx.shape
    last = torch.full((B, 1), -100, dtype=idx.dtype, device=idx.device)
    targets = torch.cat([idx[:, 1:], last], dim=1)
    if pad_id is not None:
        targets = torch.where(targets == pad_id, torch.full_like(targets, -100), targets)
    return targets


def good_lm_loss(logits, targets):
    log_p = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    counted = targets != -100
    picked = log_p[counted].gather(-1, targets[counted][:, None])
    return -picked.sum() / counted.sum()


def good_probs(logits, temperature=1.0, top_k=None, top_p=None):
    if temperature == 0 or top_k == 1:
        out = torch.zeros_like(logits)
        out[torch.arange(logits.shape[0]), logits.argmax(-1)] = 1.0
        return out
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = z.sort(dim=-1, descending=True).values[:, top_k - 1 : top_k]
        z = torch.where(z >= kth, z, torch.full_like(z, -math.inf))
    if (
        top_p is not None
    ):  # Hugging Face's way round: drop the least likely while they hold <= 1 - p
        ascending, order = torch.softmax(z, dim=-1).sort(dim=-1)
        dropped = ascending.cumsum(-1) <= 1 - top_p
        dropped[:, -1] = False
        smallest_kept = torch.where(dropped, math.inf, z.gather(-1, order)).min(-1, keepdim=True)
        z = torch.where(z >= smallest_kept.values, z, torch.full_like(z, -math.inf))
    z = z - z.max(dim=-1, keepdim=True).values
    e = z.exp()
    return e / e.sum(dim=-1, keepdim=True)


def good_sample(logits, temperature=1.0, top_k=None, generator=None):
    """Inverse-CDF sampling with torch.rand: other random numbers than torch.multinomial."""
    probs = good_probs(logits, temperature, top_k).double()
    u = torch.rand(
        probs.shape[0], 1, generator=generator, device=logits.device, dtype=torch.float64
    )
    cdf = probs.cumsum(-1)
    cdf[:, -1] = 1.0 + 1e-9  # rounding must not push a draw past the end
    ids = (u >= cdf).sum(-1)
    # probability-0 tokens have a flat cdf step, which u >= cdf skips over
    return ids.long()


def good_sample_multinomial(logits, temperature=1.0, top_k=None, generator=None):
    probs = good_probs(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1, generator=generator)[:, 0]


class GoodKVCache:
    def __init__(self):
        self.keys, self.values = [], []

    def __len__(self):
        return sum(k.shape[2] for k in self.keys)

    def append(self, k, v):
        self.keys.append(k)
        self.values.append(v)
        return torch.cat(self.keys, dim=2), torch.cat(self.values, dim=2)


def good_training_flops(model, batch_size, block_size, n_steps):
    n = sum(
        p.numel()
        for name, p in model.named_parameters()
        if name.split(".")[0] not in ("wte", "wpe")
    )
    return 6.0 * n * (batch_size * block_size * n_steps)  # a float is fine


GOOD = {
    "shift_targets": good_shift,
    "lm_loss": good_lm_loss,
    "next_token_probs": good_probs,
    "sample_next": good_sample,
    "KVCache": GoodKVCache,
    "training_flops": good_training_flops,
}


@pytest.mark.parametrize("name", sorted(GOOD))
@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_correct_implementations_pass(name, thorough, capsys):
    assert getattr(check, name)(GOOD[name], thorough=thorough) is None
    assert f"✓ {name}" in capsys.readouterr().out


def test_multinomial_sampler_passes_too():
    assert check.sample_next(good_sample_multinomial, thorough=True) is None


def test_good_implementations_are_saved(tmp_path):
    for name, impl in GOOD.items():
        getattr(check, name)(impl)
    saved = (tmp_path / "pkg" / "transformer_lab_student" / "gpt.py").read_text()
    for source_name in (
        "def good_shift",
        "def good_lm_loss",
        "def good_probs",
        "class GoodKVCache",
        "def good_training_flops",
    ):
        assert source_name in saved


# ---------------------------------------------------------------------------------------------
# Every catalogued mistake is named by the *visible* check already (students see the hint before
# grading); test_check.py runs each through the thorough check as well.

CATALOGUE = [
    (name, m.key)
    for name in (
        "shift_targets",
        "lm_loss",
        "next_token_probs",
        "sample_next",
        "KVCache",
        "training_flops",
    )
    for m in check.EXERCISES[name].mistakes
]
VISIBLE_MISSES: set[tuple[str, str]] = set()  # every catalogued mistake shows in the visible check


@pytest.mark.parametrize("name,key", CATALOGUE, ids=[f"{n}-{k}" for n, k in CATALOGUE])
def test_catalogued_mistake_is_named(name, key):
    mistake = check.EXERCISES[name].mistake(key)
    thorough = (name, key) in VISIBLE_MISSES
    with pytest.raises(check.CheckFailed) as info:
        getattr(check, name)(mistake.impl, thorough=thorough)
    assert f"Likely mistake: {mistake.sentence}" in str(info.value)


@pytest.mark.parametrize("key", ["log-of-softmax", "log-of-softmax-inf"])
def test_log_of_softmax_fails_the_visible_check(key):
    # The task states that log(softmax) underflows for large logits: a visible case has them.
    # Either way a student writes it (masked by multiplying: NaN; kept positions only: inf).
    mistake = check.EXERCISES["lm_loss"].mistake(key)
    with pytest.raises(check.CheckFailed, match="logits of size ~1000") as info:
        check.lm_loss(mistake.impl)
    assert info.value.mistake == mistake.sentence


# ---------------------------------------------------------------------------------------------
# sample_next: the statistics.


def test_hoeffding_tolerance_and_false_failure_rate():
    """t solves 2 exp(-2 N t²) = 2.8e-11; a thorough run compares at most 432 frequencies."""
    t = lesson08_sampling._sample_tolerance()
    assert 0.02 < t < 0.03
    assert 2 * math.exp(-2 * lesson08_sampling._N_SAMPLES * t**2) == pytest.approx(
        2.8e-11, rel=1e-6
    )
    specs = lesson08_sampling._sample_specs(thorough=True)
    n_freqs = sum(len(rows) for kind, rows, *_ in specs if kind == "sampled") * 4  # 4 settings
    assert n_freqs <= 432
    assert n_freqs * 2.8e-11 < 1e-6


@pytest.mark.parametrize("key", ["argmax", "no-temperature", "softmax-twice"])
def test_frequency_mistakes_are_far_from_the_truth(key):
    """Each frequency mutant moves some probability by > 2t + margin in a visible case, so it
    fails whatever its draws (its own frequencies are within t of its distribution)."""
    from transformer_lab.gpt import next_token_probs

    impl = check.EXERCISES["sample_next"].mistake(key).impl
    t = lesson08_sampling._sample_tolerance()
    worst = 0.0
    for kind, rows, temperature, top_k in lesson08_sampling._sample_specs(thorough=False):
        if kind != "sampled":
            continue
        row = torch.tensor(rows, dtype=torch.float64)
        p = next_token_probs(row[None], temperature, top_k)[0]
        draws = impl(row.expand(200_000, -1), temperature, top_k, torch.Generator())
        q = torch.bincount(draws, minlength=len(rows)).double() / len(draws)
        worst = max(worst, (q - p).abs().max().item())
    assert worst > 2 * t + 0.03


def test_sample_check_does_not_depend_on_or_change_the_global_seed():
    torch.manual_seed(7)
    a = torch.rand(3)
    check.sample_next(good_sample)
    torch.manual_seed(7)
    assert torch.equal(torch.rand(3), a)


def _biased(logits, temperature=1.0, top_k=None, generator=None):
    """Mixes 10% uniform noise into the distribution: subtle, not catalogued."""
    probs = good_probs(logits, temperature, top_k)
    probs = 0.9 * probs + 0.1 * (probs > 0) / (probs > 0).sum(-1, keepdim=True)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def _float_ids(logits, temperature=1.0, top_k=None, generator=None):
    return good_sample(logits, temperature, top_k, generator).float()


def _seed_inside(logits, temperature=1.0, top_k=None, generator=None):
    g = torch.Generator(device=logits.device).manual_seed(0)  # ignores the caller's generator
    return good_sample(logits, temperature, top_k, g)


def _greedy_sampled(logits, temperature=1.0, top_k=None, generator=None):
    """Samples even at temperature 0 (with a tiny temperature instead)."""
    return good_sample_multinomial(logits, max(temperature, 0.5), top_k, generator)


@pytest.mark.parametrize(
    "wrong,message",
    [
        (_biased, "frequency"),
        (_float_ids, "dtype"),
        (_greedy_sampled, "argmax"),
    ],
    ids=["biased", "float-ids", "greedy-sampled"],
)
def test_other_wrong_samplers_are_caught(wrong, message):
    with pytest.raises(check.CheckFailed, match=message):
        check.sample_next(wrong, thorough=True)


def test_a_sampler_with_its_own_seed_is_caught_by_its_repeated_draws():
    """A fixed internal seed is reproducible, but two calls with one generator draw the same
    tokens: the generator's state must move on (heldout3's sample_reseed_global found it)."""
    with pytest.raises(check.CheckFailed, match="two calls with one generator drew the same"):
        check.sample_next(_seed_inside)


# ---------------------------------------------------------------------------------------------
# Other mutants beyond the catalogues.


def _shift_int32(idx, pad_id=None):
    return good_shift(idx, pad_id).int()


def _shift_in_place(idx, pad_id=None):
    idx[:, :-1] = idx[:, 1:].clone()
    idx[:, -1] = -100
    if pad_id is not None:
        idx[idx == pad_id] = -100
    return idx


@pytest.mark.parametrize(
    "wrong,message",
    [(_shift_int32, "dtype"), (_shift_in_place, "in place")],
    ids=["int32", "in-place"],
)
def test_other_wrong_shifts_are_caught(wrong, message):
    with pytest.raises(check.CheckFailed, match=message):
        check.shift_targets(wrong, thorough=True)


def _lm_detached(logits, targets):
    return good_lm_loss(logits.detach(), targets)


def _lm_vector(logits, targets):
    return good_lm_loss(logits, targets).reshape(1)


def _lm_mean_of_probs(logits, targets):
    counted = targets != -100
    p = torch.softmax(logits, -1)[counted].gather(-1, targets[counted][:, None])
    return -torch.log(p.mean())


@pytest.mark.parametrize(
    "wrong,message",
    [(_lm_detached, "no gradient"), (_lm_vector, "shape"), (_lm_mean_of_probs, "differs")],
    ids=["detached", "shape-1", "log-of-mean"],
)
def test_other_wrong_losses_are_caught(wrong, message):
    with pytest.raises(check.CheckFailed, match=message):
        check.lm_loss(wrong, thorough=True)


def _probs_log(logits, temperature=1.0, top_k=None):
    return torch.log(good_probs(logits, temperature, top_k))


def _probs_top_k_ignores_large_k(logits, temperature=1.0, top_k=None):
    if top_k is not None:
        top_k = min(top_k, logits.shape[-1] - 1)  # never keeps everything
    return good_probs(logits, temperature, top_k)


@pytest.mark.parametrize(
    "wrong,message",
    [(_probs_log, "inf|differs"), (_probs_top_k_ignores_large_k, "differs")],
    ids=["log-probs", "k-capped"],
)
def test_other_wrong_probs_are_caught(wrong, message):
    with pytest.raises(check.CheckFailed, match=message):
        check.next_token_probs(wrong, thorough=True)


class _KVDetached(GoodKVCache):
    def append(self, k, v):
        k_all, v_all = super().append(k, v)
        return k_all.detach(), v_all.detach()


class _KVNoLen(GoodKVCache):
    __len__ = None


class _KVLenFloat(GoodKVCache):
    def __len__(self):  # noqa: PLE0303 (deliberately wrong)
        return float(super().__len__())


class _KVNotesOnlyFirst(GoodKVCache):
    """Keeps the first chunk and the latest one (drops the middle)."""

    def append(self, k, v):
        if len(self.keys) >= 2:
            self.keys.pop(1)
            self.values.pop(1)
        return super().append(k, v)


@pytest.mark.parametrize(
    "wrong,message",
    [
        (_KVDetached, "gradient"),
        (_KVNoLen, "len"),
        (_KVLenFloat, "len"),
        (_KVNotesOnlyFirst, "shape|len"),
    ],
    ids=["detached", "no-len", "len-float", "drops-middle"],
)
def test_other_wrong_caches_are_caught(wrong, message):
    with pytest.raises(check.CheckFailed, match=message):
        check.KVCache(wrong, thorough=True)


def test_kv_check_runs_the_cache_inside_a_gpt(monkeypatch):
    """A cache that passes the unit steps but breaks in the model is still caught."""

    class _ShiftsAfterFive(GoodKVCache):
        def append(self, k, v):
            k_all, v_all = super().append(k, v)
            if len(self) > 8:  # only the model part caches more than 8 positions
                v_all = v_all * 1.5
            return k_all, v_all

    with pytest.raises(check.CheckFailed, match="GPT"):
        check.KVCache(_ShiftsAfterFive)


# ---------------------------------------------------------------------------------------------
# Forbidden built-ins and the reference.


def test_lm_loss_may_not_call_cross_entropy():
    import torch.nn.functional as F

    def via_ce(logits, targets):
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    def via_module(logits, targets):
        return torch.nn.CrossEntropyLoss()(logits.flatten(0, 1), targets.flatten())

    def via_nll(logits, targets):
        return F.nll_loss(torch.log_softmax(logits, -1).flatten(0, 1), targets.flatten())

    for cheat in (via_ce, via_module, via_nll):
        with pytest.raises(check.ImplementThisYourself):
            check.lm_loss(cheat)
    assert F.cross_entropy.__name__ == "cross_entropy"  # restored


def test_references_are_refused():
    import transformer_lab
    from transformer_lab import gpt

    def via_gpt_sample(logits, temperature=1.0, top_k=None, generator=None):
        return gpt.sample_next(logits, temperature, top_k, generator)

    def via_ref_probs(logits, temperature=1.0, top_k=None, generator=None):
        probs = gpt.next_token_probs(logits, temperature, top_k)
        return torch.multinomial(probs, 1, generator=generator)[:, 0]

    def via_package_shift(idx, pad_id=None):
        return transformer_lab.shift_targets(idx, pad_id)

    class Wrapper:
        def __init__(self):
            self.inner = transformer_lab.KVCache()

        def __len__(self):
            return len(self.inner)

        def append(self, k, v):
            return self.inner.append(k, v)

    with pytest.raises(check.ImplementThisYourself):
        check.sample_next(via_gpt_sample)
    with pytest.raises(check.ImplementThisYourself):
        check.sample_next(via_ref_probs)
    with pytest.raises(check.ImplementThisYourself):
        check.shift_targets(via_package_shift)
    with pytest.raises(check.ImplementThisYourself):
        check.KVCache(Wrapper)
    for name in GOOD:
        reference = check.EXERCISES[name].reference
        with pytest.raises(check.ImplementThisYourself):
            getattr(check, name)(reference)


def test_kv_cache_may_not_subclass_the_reference():
    from transformer_lab.multihead import KVCache

    class Mine(KVCache):
        pass

    Mine.__module__ = "__main__"
    with pytest.raises(check.ImplementThisYourself, match="subclasses"):
        check.KVCache(Mine)


def test_sample_next_may_use_the_students_own_next_token_probs(capsys):
    assert check.sample_next(good_sample_multinomial) is None
    assert "implement this yourself" not in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# Bad input to the check and to the reference function the lesson adds.


def test_missing_implementation_gets_a_clear_message():
    for name in GOOD:
        with pytest.raises(check.CheckFailed, match=f"check.{name}\\({name}\\)"):
            getattr(check, name)(None)


def test_not_implemented_propagates():
    def todo(logits, temperature=1.0, top_k=None):
        raise NotImplementedError

    with pytest.raises(NotImplementedError):
        check.next_token_probs(todo)


def test_crashing_student_code_is_reported_with_the_case():
    def crash(logits, temperature=1.0, top_k=None, generator=None):
        raise ValueError("boom")

    with pytest.raises(check.CheckFailed, match="(?s)raised ValueError: boom.*case"):
        check.sample_next(crash)

    class Crash:
        def __len__(self):
            return 0

        def append(self, k, v):
            raise RuntimeError("no room")

    with pytest.raises(check.CheckFailed, match="(?s)append.*raised RuntimeError: no room"):
        check.KVCache(Crash)


def test_next_token_probs_reference_validates_its_input():
    from transformer_lab.gpt import next_token_probs

    with pytest.raises(ValueError, match=r"\(B, V\)"):
        next_token_probs(torch.randn(2, 3, 4))
    with pytest.raises(TypeError, match="floating point"):
        next_token_probs(torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="temperature"):
        next_token_probs(torch.randn(2, 3), temperature=-1.0)
    with pytest.raises(ValueError, match="top_k"):
        next_token_probs(torch.randn(2, 3), top_k=0)


def test_next_token_probs_is_the_distribution_sample_next_draws_from():
    from transformer_lab.gpt import next_token_probs, sample_next

    logits = torch.tensor([[1.0, 0.2, -0.3, 2.0, 0.0]]).expand(50_000, -1)
    probs = next_token_probs(logits[:1], 0.8, 3)[0]
    draws = sample_next(logits, 0.8, 3, torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=5).double() / len(draws)
    assert (freq - probs.double()).abs().max() < 0.02
    assert probs[[2, 4]].eq(0).all() and probs.sum().item() == pytest.approx(1.0)


def test_next_token_probs_reference_matches_hugging_face_warpers():
    """The reference is checked against an independent implementation: transformers' logits
    warpers (temperature, then top-k keeping ties), followed by a softmax."""
    warpers = pytest.importorskip("transformers.generation.logits_process")
    from transformer_lab.gpt import next_token_probs

    g = torch.Generator().manual_seed(0)
    z = 3 * torch.randn(5, 10, generator=g, dtype=torch.float64)
    z[0, :4] = torch.tensor([2.0, 1.0, 1.0, 1.0])  # ties at the 2nd/3rd largest
    for T, k in [(0.7, 3), (1.5, 2), (1.0, None), (2.0, 10), (0.5, 12), (1.0, 9)]:
        scores = warpers.TemperatureLogitsWarper(T)(None, z.clone())
        if k is not None:
            scores = warpers.TopKLogitsWarper(k)(None, scores)
        torch.testing.assert_close(next_token_probs(z, T, k), torch.softmax(scores, -1))


def test_top_p_matches_hugging_face_where_the_nucleus_has_no_tie():
    """The reference's top-p against an independent implementation: transformers' warpers in
    their own order (temperature, top-k, top-p), then a softmax, on logits without ties."""
    warpers = pytest.importorskip("transformers.generation.logits_process")
    from transformer_lab.gpt import next_token_probs

    g = torch.Generator().manual_seed(1)
    z = 3 * torch.randn(6, 40, generator=g, dtype=torch.float64)
    settings = [(1.0, None, 0.9), (0.7, None, 0.5), (1.5, 10, 0.8), (2.0, 30, 0.3), (0.5, 5, 0.99)]
    for T, k, p in settings:
        scores = warpers.TemperatureLogitsWarper(T)(None, z.clone())
        if k is not None:
            scores = warpers.TopKLogitsWarper(k)(None, scores)
        scores = warpers.TopPLogitsWarper(p)(None, scores)
        ours = next_token_probs(z, T, k, p)
        torch.testing.assert_close(ours, torch.softmax(scores, -1))
        assert ((ours > 0).sum(-1) > 1).any()  # not only one-token nuclei


def test_top_p_differs_from_hugging_face_only_on_ties_which_it_keeps():
    """With tokens tied with the nucleus's last one, Hugging Face keeps one of them (whichever
    its sort puts first); the course keeps them all, as its top-k does. The mutant that keeps
    exactly one is Hugging Face's rule, and the visible check names it."""
    warpers = pytest.importorskip("transformers.generation.logits_process")
    from transformer_lab.check.lesson08_nucleus import _TIED_NUCLEUS
    from transformer_lab.gpt import next_token_probs

    z = torch.tensor(_TIED_NUCLEUS, dtype=torch.float64)
    ours = next_token_probs(z, 1.0, None, 0.5)
    theirs = torch.softmax(warpers.TopPLogitsWarper(0.5)(None, z.clone()), -1)
    assert (ours > 0).sum(-1).tolist() == [4, 3]  # 2.0 and its three tied 1.0s; the three 0.5s
    assert (theirs > 0).sum(-1).tolist() == [2, 2]  # one tied token each
    mistake = check.EXERCISES["next_token_probs"].mistake("p-ties-dropped")
    with pytest.raises(check.CheckFailed, match="ties with the nucleus") as info:
        check.next_token_probs(mistake.impl)
    assert info.value.mistake == mistake.sentence


@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_top_p_cases_keep_p_away_from_every_running_total(thorough):
    """No case may hinge on float rounding: p lies at least 0.005 from the probability held by
    the tokens before each token (so a student summing another way keeps the same set)."""
    from transformer_lab.check import lesson08_nucleus

    for case in lesson08_nucleus.top_p_cases(thorough):
        kw = case.make(torch.Generator().manual_seed(0))
        if kw["temperature"] == 0 or kw["top_p"] == 1:
            continue
        z = kw["logits"] / kw["temperature"]
        if kw["top_k"] is not None:
            z = z.masked_fill(~lesson08_nucleus.keep_top_k(z, kw["top_k"]), -math.inf)
        probs = torch.softmax(z.sort(dim=-1, descending=True).values, dim=-1)
        mass_before = probs.cumsum(-1) - probs
        assert (mass_before - kw["top_p"]).abs().min() > 0.005, case.label


def test_top_p_keeps_the_crossing_token_and_renormalises():
    from transformer_lab.gpt import next_token_probs

    z = torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64).log()
    # 0.5 + 0.3 reach 0.7 and 0.79; 0.81 needs the third token (p exactly 0.8 is left to rounding)
    assert (next_token_probs(z, top_p=0.7) > 0).tolist() == [[True, True, False, False]]
    assert (next_token_probs(z, top_p=0.79) > 0).tolist() == [[True, True, False, False]]
    assert (next_token_probs(z, top_p=0.81) > 0).tolist() == [[True, True, True, False]]
    torch.testing.assert_close(
        next_token_probs(z, top_p=0.4), torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    )
    torch.testing.assert_close(next_token_probs(z, top_p=1.0), next_token_probs(z))
    kept = next_token_probs(z, top_p=0.81)
    torch.testing.assert_close(kept[0, :3], torch.tensor([0.5, 0.3, 0.15]).double() / 0.95)


def test_top_p_in_half_precision_and_through_generate():
    from transformer_lab.gpt import GPT, GPTConfig, next_token_probs, sample_next

    z = torch.tensor([[3.0, 2.0, 0.0, -1.0, -4.0]])
    for dtype in (torch.float16, torch.bfloat16):
        probs = next_token_probs(z.to(dtype), top_p=0.9)
        assert probs.dtype == dtype
        assert (probs > 0).tolist() == (next_token_probs(z, top_p=0.9) > 0).tolist()
    draws = sample_next(z.expand(2000, -1), generator=torch.Generator().manual_seed(0), top_p=0.7)
    assert set(draws.tolist()) <= {0, 1}  # 0.71 of the mass: the two largest
    model = GPT(GPTConfig(vocab_size=11, n_positions=16, d_model=8, n_heads=2, n_layers=1))
    start = torch.zeros(1, 1, dtype=torch.long)
    out, logits = model.generate(start, 6, top_p=0.3, return_logits=True)
    for t in range(6):
        allowed = next_token_probs(logits[:, t], top_p=0.3)[0] > 0
        assert allowed[out[0, t + 1]]


def test_top_p_reference_rejects_bad_values():
    from transformer_lab.gpt import next_token_probs

    for bad in (0, 0.0, -0.1, 1.5, True, "0.9", float("nan")):
        with pytest.raises(ValueError, match="top_p"):
            next_token_probs(torch.randn(2, 3), top_p=bad)


def _probs_top_k_unguarded(logits, temperature=1.0, top_k=None):
    """Breaks only the rule 'k >= V keeps everything': torch.topk raises for k > V."""
    if temperature == 0 or top_k == 1:
        return good_probs(logits, temperature, top_k)
    z = logits / temperature
    if top_k is not None:
        kth = torch.topk(z, top_k, dim=-1).values[:, -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    return torch.softmax(z, dim=-1)


def test_top_k_above_the_vocabulary_is_a_visible_case():
    assert _probs_top_k_unguarded(torch.randn(2, 6), 0.9, 3).shape == (2, 6)  # fine for k < V
    with pytest.raises(check.CheckFailed, match="top_k=12"):
        check.next_token_probs(_probs_top_k_unguarded)


# ---------------------------------------------------------------------------------------------
# The practice question: one letter, each wrong one named with the numbers that refute it.


@pytest.mark.parametrize("answer", ["C", "c", " (C) "])
def test_practice_transformers_right_answers_pass(answer, capsys):
    assert check.practice_transformers(answer) is None
    assert check.practice_transformers(answer, thorough=True) is None
    assert "C is right" in capsys.readouterr().out


@pytest.mark.parametrize(
    "answer,key",
    [("A", "attention-dearer-than-ffn"), ("b", "heads-cost-more"), ("(D)", "scales-easily")],
)
def test_practice_transformers_wrong_letters_are_explained(answer, key):
    with pytest.raises(check.CheckFailed) as info:
        check.practice_transformers(answer)
    assert key in {m.key for m in lesson08._practice_mistakes().values()}
    assert info.value.mistake == next(
        m.sentence for m in lesson08._practice_mistakes().values() if m.key == key
    )


def test_practice_transformers_numbers_are_the_cost_formulas():
    one, eight = lesson08._multiply_adds(512, 128, 1), lesson08._multiply_adds(512, 128, 8)
    assert one == eight == {"attention": 4 * 512**2 + 2 * 128 * 512, "ffn": 8 * 512**2}
    assert one["attention"] < one["ffn"]  # (A) is false at L = 128 ...
    long = lesson08._multiply_adds(512, 2048)
    assert long["attention"] > long["ffn"]  # ... and true once L > 2 d_model


@pytest.mark.parametrize(
    "answer,message",
    [(None, "replace the"), (3, "a letter in quotes"), ("E", "made of the letters A, B, C, D")],
)
def test_practice_transformers_bad_answers_get_clear_messages(answer, message):
    with pytest.raises(check.CheckFailed, match=message):
        check.practice_transformers(answer)


def test_practice_transformers_released_answer_is_not_written_yet():
    with pytest.raises(check.NotWrittenYet, match="`practice_transformers` is not written yet"):
        check.practice_transformers(...)


# ---------------------------------------------------------------------------------------------
# training_flops: 6·N·D, checked against PyTorch's own FLOP counter.


def test_six_flops_per_weight_and_token_is_what_pytorch_counts():
    """torch.utils.flop_counter counts the matrix products of one real training step. Every weight
    matrix costs exactly 6 FLOPs per token (2 forward, 4 backward): the linear layers' products
    (mm, addmm) are 6 × their weights × tokens, the tied W_e included as the output layer; the
    attention scores (bmm, in the explicit model) are the 12·n_layers·L²·d per window that 6·N·D
    leaves out. N's biases and LayerNorm weights are not matrix products."""
    from torch.utils.flop_counter import FlopCounterMode

    from transformer_lab.add_norm import set_explicit
    from transformer_lab.gpt import GPT, GPTConfig, shift_targets, training_flops

    torch.manual_seed(0)
    V, L, d, n_layers, B = 37, 16, 24, 2, 4
    cfg = GPTConfig(vocab_size=V, n_positions=L, d_model=d, n_heads=3, n_layers=n_layers)
    model = set_explicit(GPT(cfg), True)
    x = torch.randint(0, V, (B, L))
    with FlopCounterMode(display=False) as counter:
        model.loss(x, shift_targets(x)).backward()
    counts = {str(op).split(".")[-1]: n for op, n in counter.get_flop_counts()["Global"].items()}
    matrices = sum(
        p.numel() for name, p in model.named_parameters() if p.ndim == 2 and name != "wpe.weight"
    )
    assert counts["mm"] + counts["addmm"] == 6 * matrices * B * L
    assert counts["bmm"] == 12 * n_layers * L * L * d * B
    estimate = training_flops(model, B, L, 1)
    assert estimate == 6 * model.num_parameters(exclude_embeddings=True) * B * L
    assert 0.7 < estimate / counter.get_total_flops() < 1.0


def test_training_flops_reference_rejects_bad_input():
    from transformer_lab.gpt import GPT, GPTConfig, training_flops

    model = GPT(GPTConfig(vocab_size=10, n_positions=8, d_model=8, n_heads=2, n_layers=1))
    for args, match in [
        ((0, 8, 1), "batch_size"),
        ((2, 8.0, 1), "block_size"),
        ((2, 8, -3), "n_steps"),
        ((2, True, 1), "block_size"),
        ((2, 9, 1), "n_positions=8"),
    ]:
        with pytest.raises(ValueError, match=match):
            training_flops(model, *args)


def test_a_tied_gpt_keeps_its_tie_across_the_judges_wire():
    """Grading runs the student's training_flops in a child process: the model travels as a
    pickle whose tensors are sent once each, so wte.weight and lm_head.weight stay one tensor
    there too (sent twice, the student's count would include the output layer)."""
    from transformer_lab.gpt import GPT, GPTConfig
    from transformer_lab_grader.verify_wire import pack_request, unpack_request

    model = GPT(GPTConfig(vocab_size=10, n_positions=8, d_model=8, n_heads=2, n_layers=1))
    there = unpack_request(pack_request(((model, 2), {})))[0][0]
    assert there.lm_head.weight is there.wte.weight
    assert sum(p.numel() for p in there.parameters()) == model.num_parameters()
    torch.testing.assert_close(there.wte.weight, model.wte.weight)
