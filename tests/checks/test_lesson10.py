"""Lesson 10 checks: text_infilling, sentence_permutation, document_rotation.

The checks are statistical, so besides the usual (correct implementations pass, catalogued
mistakes are named, further wrong variants fail, forbidden helpers are refused, bad input gets a
clear message) this file backs the false-failure argument: the bands' tail probabilities are
recomputed, the over-dispersion bound used for the span-length bands is re-measured, and correct
implementations drawing *other* random streams pass.
"""

from __future__ import annotations

import itertools
import math
import re

import pytest
import torch

import transformer_lab
from transformer_lab import bart, check
from transformer_lab.check import (
    lesson10,
    lesson10_permutation,
    lesson10_properties,
    lesson10_rotation,
)

# ---------------------------------------------------------------------------------------------
# Correct student implementations, written two ways each.


def infilling_gaps(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Spans drawn one by one, placed in random gaps between kept tokens (the lecture's way)."""
    n_mask = round(p * len(tokens))
    if n_mask == 0:
        return tokens.clone()
    lengths = []
    while sum(lengths) < n_mask:
        k = int(torch.poisson(torch.tensor([float(lam)]), generator=generator))
        lengths.append(min(k, n_mask - sum(lengths)))
    n_kept = len(tokens) - n_mask
    while len(lengths) > n_kept + 1:
        extra = lengths.pop()
        lengths[-1] += extra
    gaps = torch.randperm(n_kept + 1, generator=generator)[: len(lengths)].sort().values.tolist()
    span_at = dict(zip(gaps, lengths))
    out, i, toks = [], 0, tokens.tolist()
    for g in range(n_kept + 1):
        if g in span_at:
            out.append(mask_id)
            i += span_at[g]
        if g < n_kept:
            out.append(toks[i])
            i += 1
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


def infilling_cumsum(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """fairseq's way: many lengths at once, cut at the first cumulative sum >= n_mask; the spans
    are then laid out left to right with a random number of kept tokens before each."""
    n = len(tokens)
    n_mask = round(p * n)
    if n_mask == 0:
        return tokens.clone()
    draws = torch.poisson(torch.full((4 * n_mask + 8,), float(lam)), generator=generator).long()
    while draws.sum() < n_mask:  # very unlikely; draw more
        more = torch.poisson(torch.full((4 * n_mask + 8,), float(lam)), generator=generator)
        draws = torch.cat([draws, more.long()])
    csum = draws.cumsum(0)
    m = int((csum < n_mask).sum()) + 1
    lengths = draws[:m].clone()
    lengths[-1] -= csum[m - 1] - n_mask
    lengths = lengths.tolist()
    n_kept = n - n_mask
    while len(lengths) > n_kept + 1:
        extra = lengths.pop()
        lengths[-1] += extra
    lengths = [lengths[i] for i in torch.randperm(len(lengths), generator=generator).tolist()]
    chosen = torch.zeros(n_kept + 1, dtype=torch.bool)
    chosen[torch.randperm(n_kept + 1, generator=generator)[: len(lengths)]] = True
    pieces, i, s = [], 0, 0
    for g in range(n_kept + 1):
        if chosen[g]:
            pieces.append(tokens.new_full((1,), mask_id))
            i += lengths[s]
            s += 1
        if g < n_kept:
            pieces.append(tokens[i : i + 1])
            i += 1
    return torch.cat(pieces)


def _sentences(tokens, eos_id):
    """The token lists of the whole sentences, and the tail after the last eos."""
    sentences, current = [], []
    for t in tokens.tolist():
        current.append(t)
        if t == eos_id:
            sentences.append(current)
            current = []
    return sentences, current


def permutation_lists(tokens, eos_id, generator=None):
    sentences, current = _sentences(tokens, eos_id)
    order = torch.randperm(len(sentences), generator=generator).tolist()
    out = [t for i in order for t in sentences[i]] + current
    return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)


def permutation_tensors(tokens, eos_id, generator=None):
    ends = (tokens == eos_id).nonzero().flatten().tolist()
    starts = [0] + [e + 1 for e in ends]
    sentences = [tokens[s : e + 1] for s, e in zip(starts, ends)]
    rest = tokens[starts[-1] :]
    order = torch.randperm(len(sentences), generator=generator)
    return torch.cat([sentences[i] for i in order] + [rest])


def permutation_fisher_yates(tokens, eos_id, generator=None):
    """Fisher-Yates by hand: position i (from the end) swaps with a j in 0..i, drawn uniformly."""
    sentences, current = _sentences(tokens, eos_id)
    for i in range(len(sentences) - 1, 0, -1):
        j = int(torch.randint(i + 1, (), generator=generator))
        sentences[i], sentences[j] = sentences[j], sentences[i]
    return tokens.new_tensor([t for s in sentences for t in s] + current)


def permutation_biased_swap(tokens, eos_id, generator=None):
    """The textbook biased shuffle: position i swaps with *any* j in 0..n-1. Its n^n equally
    likely paths do not split evenly over the n! orders: for 3 sentences 4/27 to 5/27 instead of
    1/6, for 4 sentences 8/256 to 15/256 instead of 1/24."""
    sentences, current = _sentences(tokens, eos_id)
    n = len(sentences)
    for i in range(n):
        j = int(torch.randint(n, (), generator=generator))
        sentences[i], sentences[j] = sentences[j], sentences[i]
    return tokens.new_tensor([t for s in sentences for t in s] + current)


def rotation_roll(tokens, generator=None):
    if len(tokens) == 0:
        return tokens.clone()
    k = int(torch.randint(len(tokens), (1,), generator=generator))
    return torch.roll(tokens, -k)


def rotation_index(tokens, generator=None):
    L = len(tokens)
    k = int(torch.randint(0, max(L, 1), (), generator=generator))
    index = (torch.arange(L, device=tokens.device) + k) % max(L, 1)
    return tokens[index]


GOOD = [
    ("text_infilling", infilling_gaps),
    ("text_infilling", infilling_cumsum),
    ("sentence_permutation", permutation_lists),
    ("sentence_permutation", permutation_tensors),
    ("sentence_permutation", permutation_fisher_yates),
    ("document_rotation", rotation_roll),
    ("document_rotation", rotation_index),
]


@pytest.mark.parametrize("name,impl", GOOD, ids=[f.__name__ for _, f in GOOD])
@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_correct_implementations_pass(name, impl, thorough, capsys):
    assert getattr(check, name)(impl, thorough=thorough) is None
    assert f"✓ {name}" in capsys.readouterr().out


SUITES = {
    "text_infilling": lesson10._infilling_suite,
    "sentence_permutation": lesson10_permutation._permutation_suite,
    "document_rotation": lesson10_rotation._rotation_suite,
}


@pytest.mark.parametrize("name", sorted(SUITES))
def test_the_reference_passes_every_property(name):
    """(The check itself refuses the reference object, so run its suite directly.)"""
    assert SUITES[name](getattr(bart, name), True) > 100


def _reseeded(fn, offset):
    """fn drawing a different random stream: a correct implementation the check never saw."""

    def wrapped(*args, generator=None, **kwargs):
        g = None
        if generator is not None:
            g = torch.Generator().manual_seed(generator.initial_seed() * 7919 + offset)
        return fn(*args, generator=g, **kwargs)

    return wrapped


@pytest.mark.parametrize("name", sorted(SUITES))
def test_correct_implementations_with_other_random_streams_pass(name):
    """8 more samples of a correct implementation per check: none fails (false failures)."""
    for offset in range(1, 9):
        SUITES[name](_reseeded(getattr(bart, name), offset), True)


def test_passing_function_is_saved_into_the_students_package(tmp_path):
    check.document_rotation(rotation_roll)
    saved = (tmp_path / "pkg" / "transformer_lab_student" / "bart.py").read_text()
    assert "def rotation_roll" in saved and "document_rotation = rotation_roll" in saved


# ---------------------------------------------------------------------------------------------
# The catalogue: already named by the thorough check (tests/checks/test_engine_and_lessons01_02.py); the visible check
# names each one too, so the student sees the sentence before grading.

CATALOGUE = [
    (name, m.key)
    for name in ("text_infilling", "sentence_permutation", "document_rotation")
    for m in check.EXERCISES[name].mistakes
]


@pytest.mark.parametrize("name,key", CATALOGUE, ids=[f"{n}-{k}" for n, k in CATALOGUE])
def test_visible_check_names_each_catalogued_mistake(name, key):
    mistake = check.EXERCISES[name].mistake(key)
    # The global-generator mistakes draw from torch's global generator, which the check seeds
    # before its reproducibility test: whatever earlier tests left there does not matter.
    with pytest.raises(check.CheckFailed) as info:
        getattr(check, name)(mistake.impl)
    assert f"Likely mistake: {mistake.sentence}" in str(info.value)


@pytest.mark.parametrize("name", ["text_infilling", "sentence_permutation", "document_rotation"])
def test_the_global_generator_message_does_not_depend_on_earlier_draws(name):
    """Code that ignores `generator` draws from the global generator, and the message quotes two of
    its results. On a GPU the thorough check's earlier cases run on more devices, so such code has
    drawn more before the reproducibility test than on the CPU alone; the check seeds the global
    generator there, so the message is the same (tests/checks/fixtures/check_messages.json, made
    on the CPU, holds on a GPU too). Two other states before the check stand in for the devices."""
    mistake = check.EXERCISES[name].mistake("global-rng")
    messages = set()
    for seed in (0, 1):
        torch.manual_seed(seed)
        with pytest.raises(check.CheckFailed) as info:
            getattr(check, name)(mistake.impl)
        messages.add(str(info.value))
    assert len(messages) == 1, messages


def _broken_property(name, impl):
    """The property impl breaks first in the thorough suite (the tag of its finding), or None."""
    trial = check.EXERCISES[name].driver.trial
    try:
        finding = trial(impl, True, None, lambda thunk, *_: thunk())
    except Exception:
        return None
    return getattr(finding, "tag", None)


def test_each_mistake_breaks_its_own_property():
    """Distinct keys: a student's failure is matched to one mistake only."""
    for name in SUITES:
        keys = [_broken_property(name, m.impl) for m in check.EXERCISES[name].mistakes]
        assert None not in keys and len(set(keys)) == len(keys), (name, keys)


# ---------------------------------------------------------------------------------------------
# Wrong implementations beyond the catalogue: rejected, and not given a wrong name.


def _fails(name, impl, match, thorough=True):
    with pytest.raises(check.CheckFailed, match=match) as info:
        getattr(check, name)(impl, thorough=thorough)
    return str(info.value)


def test_touching_spans_are_rejected_but_not_called_one_mask_per_token():
    def touching(tokens, mask_id, p=0.3, lam=3.0, generator=None):
        """The first round(p * L) tokens removed as two touching spans, one mask each."""
        n_mask = round(p * len(tokens))
        if n_mask < 2:
            return tokens.clone()
        return torch.cat([tokens.new_tensor([mask_id, mask_id]), tokens[n_mask:]])

    message = _fails("text_infilling", touching, "side by side")
    assert "own [MASK]" not in message


def test_infilling_that_reorders_or_invents_tokens_fails():
    def shuffled(tokens, mask_id, p=0.3, lam=3.0, generator=None):
        out = infilling_gaps(tokens, mask_id, p, lam, generator)
        return out.flip(0)

    def invented(tokens, mask_id, p=0.3, lam=3.0, generator=None):
        out = infilling_gaps(tokens, mask_id, p, lam, generator)
        return out.masked_fill(out == mask_id, 99_999)

    _fails("text_infilling", shuffled, "original order")
    _fails("text_infilling", invented, "neither an input token nor mask_id")


def test_infilling_that_masks_when_p_is_zero_fails():
    def always_a_mask(tokens, mask_id, p=0.3, lam=3.0, generator=None):
        if round(p * len(tokens)) == 0:
            return torch.cat([tokens, tokens.new_tensor([mask_id])])
        return infilling_gaps(tokens, mask_id, p, lam, generator)

    _fails("text_infilling", always_a_mask, "no span is drawn")


def test_infilling_with_geometric_lengths_fails_the_poisson_test():
    def geometric(tokens, mask_id, p=0.3, lam=3.0, generator=None):
        """Lengths with the right mean lam but geometric, not Poisson (variance lam + lam^2)."""
        n_mask = round(p * len(tokens))
        if n_mask == 0:
            return tokens.clone()
        lengths, q = [], 1 / (1 + lam)
        while sum(lengths) < n_mask:
            u = float(torch.rand((), generator=generator))
            k = int(math.log(1 - u) / math.log(1 - q)) if q < 1 else 0
            lengths.append(min(k, n_mask - sum(lengths)))
        n_kept = len(tokens) - n_mask
        while len(lengths) > n_kept + 1:
            extra = lengths.pop()
            lengths[-1] += extra
        gaps = torch.randperm(n_kept + 1, generator=generator)[: len(lengths)].sort().values
        return _walk_gaps(tokens, mask_id, n_kept, gaps.tolist(), lengths)

    _fails("text_infilling", geometric, "do not follow Poisson", thorough=False)


# More spans than gaps (a short document, a large p, a small lam): two ways to get it wrong.


def _poisson_spans(n_mask, lam, generator):
    lengths = []
    while sum(lengths) < n_mask:
        k = int(torch.poisson(torch.tensor([float(lam)]), generator=generator))
        lengths.append(min(k, n_mask - sum(lengths)))
    return lengths


def _walk_gaps(tokens, mask_id, n_kept, gaps, lengths):
    span_at, out, i, toks = dict(zip(gaps, lengths)), [], 0, tokens.tolist()
    for g in range(n_kept + 1):
        if g in span_at:
            out.append(mask_id)
            i += span_at[g]
        if g < n_kept:
            out.append(toks[i])
            i += 1
    return tokens.new_tensor(out)


def infilling_gaps_by_multinomial(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Gaps sampled without replacement by torch.multinomial, and no fold: with more spans than
    gaps, multinomial raises."""
    n_mask = round(p * len(tokens))
    if n_mask == 0:
        return tokens.clone()
    lengths = _poisson_spans(n_mask, lam, generator)
    n_kept = len(tokens) - n_mask
    picked = torch.multinomial(torch.ones(n_kept + 1), len(lengths), generator=generator)
    return _walk_gaps(tokens, mask_id, n_kept, picked.sort().values.tolist(), lengths)


def infilling_drops_extra_spans(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """With more spans than gaps the extra spans are dropped, and their tokens stay."""
    n_mask = round(p * len(tokens))
    if n_mask == 0:
        return tokens.clone()
    lengths = _poisson_spans(n_mask, lam, generator)
    lengths = lengths[: len(tokens) - n_mask + 1]  # one span per gap, the rest dropped
    n_kept = len(tokens) - sum(lengths)
    gaps = torch.randperm(n_kept + 1, generator=generator)[: len(lengths)].sort().values
    return _walk_gaps(tokens, mask_id, n_kept, gaps.tolist(), lengths)


@pytest.mark.parametrize(
    "impl,match",
    [
        (infilling_gaps_by_multinomial, "raised RuntimeError"),
        (infilling_drops_extra_spans, "4 tokens were removed, but p \\* L = 9.*do not drop them"),
    ],
    ids=["raises", "drops"],
)
def test_more_spans_than_gaps_is_a_visible_case(impl, match, monkeypatch):
    message = _fails("text_infilling", impl, match, thorough=False)
    assert "text_infilling(tokens of length 12, mask_id=3, p=0.75, lam=0.5)" in message
    assert "Likely mistake" not in message  # no catalogued mistake drops or refuses spans
    # No other visible document has more spans than gaps: without this one, the mutant passes.
    others = [case for case in lesson10._INFILL_CASES if case != lesson10.FOLD_CASE]
    assert len(others) == len(lesson10._INFILL_CASES) - 1
    monkeypatch.setattr(lesson10, "_INFILL_CASES", others)
    assert check.text_infilling(impl) is None


def test_int64_only_output_fails_on_int32_ids_with_a_clear_message():
    def always_long(tokens, mask_id, p=0.3, lam=3.0, generator=None):
        return infilling_gaps(tokens, mask_id, p, lam, generator).long()

    # the stated rule "the input's dtype" is visible too (issue 25): int32 ids in both checks
    for thorough in (False, True):
        _fails(
            "text_infilling",
            always_long,
            "dtype torch.int64 but the input ids have dtype",
            thorough,
        )


def test_list_output_and_wrong_signature_get_clear_messages():
    def returns_list(tokens, generator=None):
        return rotation_roll(tokens, generator).tolist()

    def no_generator(tokens):
        return tokens.clone()

    _fails("document_rotation", returns_list, "returned a list", thorough=False)
    _fails("document_rotation", no_generator, "raised TypeError", thorough=False)


def test_permutation_that_loses_the_tail_fails():
    def drops_tail(tokens, eos_id, generator=None):
        out = permutation_lists(tokens, eos_id, generator)
        n_rest = len(tokens) - (
            int((tokens == eos_id).nonzero().max()) + 1 if (tokens == eos_id).any() else 0
        )
        return out[: len(out) - n_rest]

    _fails("sentence_permutation", drops_tail, "the unfinished last sentence .* is missing")


def test_biased_swap_shuffle_fails_the_uniformity_test():
    def always_swap_first_two(tokens, eos_id, generator=None):
        """Shuffles, but the first sentence is never first (5 of 6 orders for 3 sentences)."""
        sentences, current = [], []
        for t in tokens.tolist():
            current.append(t)
            if t == eos_id:
                sentences.append(current)
                current = []
        order = torch.randperm(len(sentences), generator=generator).tolist()
        if order and order[0] == 0 and len(order) > 1:
            order[0], order[1] = order[1], order[0]
        return tokens.new_tensor([t for i in order for t in sentences[i]] + current)

    _fails("sentence_permutation", always_swap_first_two, "never came out", thorough=False)


def _biased_swap_order_probabilities(n: int) -> list[float]:
    """The exact distribution of permutation_biased_swap's orders: its n^n paths enumerated."""
    counts = dict.fromkeys(itertools.permutations(range(n)), 0)
    for js in itertools.product(range(n), repeat=n):
        order = list(range(n))
        for i, j in enumerate(js):
            order[i], order[j] = order[j], order[i]
        counts[tuple(order)] += 1
    return [c / n**n for c in counts.values()]


def test_biased_swap_shuffle_lies_inside_every_per_order_band():
    """Why the chi-square test is needed: the visible check's per-order bands hold this shuffle's
    counts for 3 sentences (its expected counts 44.4..55.6 over 300 draws lie inside the band)."""
    probs = _biased_swap_order_probabilities(3)
    assert sorted({round(27 * p) for p in probs}) == [4, 5]
    lo, hi = lesson10_properties.binomial_band(300, 1 / 6, lesson10_properties.FALSE_FAILURE / 6)
    assert all(lo < 300 * p < hi for p in probs)
    assert check.sentence_permutation(permutation_biased_swap) is None  # visible: not caught


@pytest.mark.parametrize("offset", [0, 1, 2])
def test_biased_swap_shuffle_fails_the_chi_square_test(offset):
    """The thorough check catches it, with its own seeds and with two other random streams."""
    impl = permutation_biased_swap if offset == 0 else _reseeded(permutation_biased_swap, offset)
    message = _fails("sentence_permutation", impl, "chi-square")
    assert "Likely mistake" not in message  # not a catalogued mistake: no wrong name
    stat = float(re.search(r"chi-square ([0-9.]+)", message).group(1))
    assert stat > 1.5 * lesson10_properties.chi_square_threshold(23, 1e-7), message


def test_chi_square_threshold_and_the_biased_shuffles_margin():
    """The threshold (df = 23, level 1e-7) and the biased shuffle's expected statistic over the
    thorough check's 6000 draws of 4 sentences: its noncentrality 6000 · 24 Σ (p − 1/24)² ≈ 179
    on top of the 23 a fair shuffle averages, about 2.6 times the threshold."""
    sf = lesson10_properties.chi_square_sf
    # even df: the closed form P(X > x) = e^(-x/2) Σ_{i < df/2} (x/2)^i / i!
    for df in (2, 4, 10, 24):
        for x in (0.3, 5.0, 23.0, 80.0, 150.0):
            exact = math.exp(-x / 2) * sum((x / 2) ** i / math.factorial(i) for i in range(df // 2))
            assert math.isclose(sf(x, df), exact, rel_tol=1e-9, abs_tol=1e-300), (df, x)
    # odd df = 1: P(X > x) = erfc(sqrt(x / 2))
    for x in (0.3, 5.0, 30.0):
        assert math.isclose(sf(x, 1), math.erfc(math.sqrt(x / 2)), rel_tol=1e-9)
    threshold = lesson10_properties.chi_square_threshold(23, lesson10_properties.FALSE_FAILURE)
    assert math.isclose(sf(threshold, 23), lesson10_properties.FALSE_FAILURE, rel_tol=1e-6)
    assert 76.8 < threshold < 77.0
    probs = _biased_swap_order_probabilities(4)
    assert min(probs) == 8 / 256 and max(probs) == 15 / 256
    noncentrality = 6000 * 24 * sum((p - 1 / 24) ** 2 for p in probs)
    assert 178 < noncentrality < 180
    # its statistic's spread is about sqrt(2 (df + 2 noncentrality)) ≈ 27: the threshold lies
    # 4.7 of them below the mean (the noncentral tail below it is about 1e-8)
    mean, sd = 23 + noncentrality, math.sqrt(2 * (23 + 2 * noncentrality))
    assert (mean - threshold) / sd > 4.5


def test_rotation_that_reverses_fails():
    def reversed_rotation(tokens, generator=None):
        return rotation_roll(tokens, generator).flip(0)

    _fails("document_rotation", reversed_rotation, "not a rotation")


def test_forbidden_reference_is_refused():
    def via_module(tokens, generator=None):
        return bart.document_rotation(tokens, generator)

    def via_package(tokens, mask_id, p=0.3, lam=3.0, generator=None):
        return transformer_lab.text_infilling(tokens, mask_id, p, lam, generator)

    with pytest.raises(check.ImplementThisYourself, match="implement this yourself"):
        check.document_rotation(via_module)
    with pytest.raises(check.ImplementThisYourself, match="implement this yourself"):
        check.text_infilling(via_package)
    with pytest.raises(check.ImplementThisYourself):
        check.sentence_permutation(bart.sentence_permutation)
    assert bart.document_rotation is not None and callable(transformer_lab.text_infilling)
    assert "forbidden" not in bart.text_infilling.__name__  # restored


def test_none_non_callable_and_unfinished_exercise_get_clear_messages():
    with pytest.raises(check.CheckFailed, match="pass your implementation"):
        check.text_infilling(None)
    with pytest.raises(check.CheckFailed, match="raised TypeError: 'int' object is not callable"):
        check.document_rotation(5)

    def unfinished(tokens, eos_id, generator=None):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        check.sentence_permutation(unfinished)


def test_check_does_not_touch_the_global_seed():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check.document_rotation(rotation_roll)
    assert torch.equal(torch.rand(3), expected)


# ---------------------------------------------------------------------------------------------
# The false-failure argument, recomputed.


def test_binomial_bands_leave_less_than_their_level_outside():
    for n, k in [(300, 6), (600, 6), (6000, 24), (1600, 4), (1750, 7)]:
        alpha = lesson10_properties.FALSE_FAILURE / k
        lo, hi = lesson10_properties.binomial_band(n, 1 / k, alpha)
        pmf = [math.exp(lesson10_properties._log_binom_pmf(x, n, 1 / k)) for x in range(n + 1)]
        outside = sum(pmf[:lo]) + sum(pmf[hi + 1 :])
        assert outside <= alpha
        assert k * outside < lesson10_properties.FALSE_FAILURE  # union bound over the k cells
        assert lo > 0  # "never came out" lies outside the band too


def test_rotation_mistakes_miss_the_band_by_far():
    """k drawn from 0..L gives k = 0 probability 2/(L+1): far outside the band, so a student's
    version of that slip (another random stream) fails too, not only our seeded mutant."""
    for L, n in [(4, 1600), (7, 1750)]:
        lo, hi = lesson10_properties.binomial_band(n, 1 / L, lesson10_properties.FALSE_FAILURE / L)
        q = 2 / (L + 1)
        assert n * q - hi > 4.5 * math.sqrt(n * q * (1 - q))


def test_span_length_bands_have_tiny_normal_tails():
    worst = 0.0
    for configs in (lesson10._INFILL_STATS, lesson10._INFILL_STATS_THOROUGH):
        n_bands = 0
        for lam in {c[2] for c in configs}:
            groups = [(round(p * L), lam, d) for L, p, lam_, d in configs if lam_ == lam]
            for e in lesson10._infill_bins(groups):
                lo, hi = lesson10.span_band(e)
                sigma = math.sqrt(lesson10.SPAN_OVERDISPERSION * e)
                z = (hi - e) / sigma if sigma else math.inf
                worst = max(worst, math.erfc(z / math.sqrt(2)))  # two-sided normal tail
                n_bands += 1
        assert n_bands * worst < lesson10_properties.FALSE_FAILURE
        assert all(d >= 30 for *_, d in configs)


def test_span_histogram_is_exact_for_the_reference():
    """Sum over lengths: E[spans] * mean = n_masked exactly; and the reference's empirical
    per-document counts match, with variance at most 1.4 times the mean (the bands assume 1.5)."""
    for n, p, lam in [(30, 0.3, 3.0), (50, 0.4, 1.5), (100, 0.3, 6.0)]:
        n_masked = round(p * n)
        hist = lesson10.infilling_span_histogram(n_masked, lam)
        assert math.isclose(sum(k * h for k, h in enumerate(hist)), n_masked, rel_tol=1e-9)
        expected = [0.0] * 8
        for k, h in enumerate(hist):
            expected[min(k, 7)] += h
        rows = []
        for d in range(600):
            g = torch.Generator().manual_seed(d)
            doc = torch.randperm(n, generator=g) + 10
            out = bart.text_infilling(doc, 3, p, lam, generator=g)
            spans = lesson10._spans_behind_masks(doc.tolist(), out.tolist(), 3, "x")
            row = [0] * 8
            for k in spans:
                row[min(k, 7)] += 1
            rows.append(row)
        t = torch.tensor(rows, dtype=torch.float64)
        for b in range(8):
            mean, var = t[:, b].mean().item(), t[:, b].var().item()
            se = math.sqrt(var / len(rows)) + 1e-3
            assert abs(mean - expected[b]) < 5 * se, (n, lam, b, mean, expected[b])
            if expected[b] > 0.05:
                assert var <= 1.5 * mean, (n, lam, b, var / mean)


def test_edge_masking_bound():
    n_masked, n_kept = 9, 21
    e_spans = sum(lesson10.infilling_span_histogram(n_masked, 3.0))
    q = e_spans / (n_kept + 1)
    assert q > 0.15
    docs = [d for L, _, _, d in lesson10._INFILL_STATS if L == 30][0]
    assert 2 * (1 - q) ** docs < 1e-9


def test_empty_document_is_a_visible_case():
    # "An empty document comes back empty": drawing k from randint(0, 0) raises.
    def unguarded(tokens, generator=None):
        k = int(torch.randint(len(tokens), (1,), generator=generator))
        return torch.roll(tokens, -k)

    assert unguarded(torch.arange(5), torch.Generator().manual_seed(0)).shape == (5,)
    _fails("document_rotation", unguarded, r"tokens=\[\]", thorough=False)
