"""Checks for lesson 09 — BERT: `bert_mask_tokens`, `wordpiece_tokenize`, `mean_pool`.

`bert_mask_tokens` is random and its contract does not fix the order of the random draws, so its
output cannot be compared with the reference's token for token. Its check tests what the
contract does fix, on tens of thousands of tokens:

- exact properties: shapes, dtype, device; the caller's `tokens` untouched; labels are the
  original token or -100; special ids never chosen; positions not chosen unchanged; every id in
  [0, vocab_size); the same seed gives the same corruption, another seed another one;
- statistics: the chosen fraction is p, and of the chosen 80% are [MASK], 10% a random token and
  10% unchanged (a random draw lands on [MASK] or on the original token with probability 1/V
  each, which the expected shares include); the random tokens are uniform on [0, vocab_size).

Each proportion must lie within Z_SIGMAS = 6.5 binomial standard deviations of its expectation;
the mean of the random ids within a Hoeffding bound of confidence 1 - 1e-9; two seeds must give
two corruptions (identical ones have probability (p² + (1-p)²)^N, N >= 2000 eligible positions).
tests/checks/test_lesson09.py computes the exact binomial tails: a correct implementation fails
the thorough check (on up to three devices) with probability below 1e-6. The mistakes that only
statistics can catch miss their statistic by more than 20 standard deviations.

A catalogued mistake is named by its *profile*: the fractions above (chosen, [MASK], unchanged,
labels that are not the original, changed positions that were not chosen, chosen specials) and
the flags (in place, reproducible). The student's profile is compared with each mistake's
profile on the same tokens; fractions agree when within 6 standard deviations of each other.

Lesson 09's checks span three modules, imported in course order: this one (bert_mask_tokens),
then ``lesson09_wordpiece`` (wordpiece_tokenize: every word, exact pieces) and
``lesson09_pooling`` (mean_pool: forward and gradients, like any function of tensors).
"""

from __future__ import annotations

import math

import torch

from .. import bert as _bert
from .answer_drivers import Finding, TrialDriver
from .devices import devices
from .exercise import Exercise, Mistake

__all__ = ["bert_mask_tokens"]

IGNORE = -100
Z_SIGMAS = 6.5  # pass/fail tolerance of each statistic, in standard deviations
MIN_FOR_STATISTICS = 2000  # fewer eligible positions: exact properties only
HOEFFDING_DELTA = 1e-9  # false-failure bound of the random-id mean test
Z_MATCH = 6.0  # two profiles "agree" on a fraction within this many standard deviations

# ==============================================================================================
# Exercise 1 — bert_mask_tokens(tokens, mask_id, vocab_size, p=0.15, generator=None,
#                               special_ids=None) -> (inputs, labels)


def _eligible(tokens, special_ids):
    if special_ids is None:
        return torch.ones_like(tokens, dtype=torch.bool)
    special = torch.as_tensor(list(special_ids), dtype=tokens.dtype, device=tokens.device)
    return ~torch.isin(tokens, special)


def _corrupt(tokens, mask_id, chosen, to_mask, to_random, random_ids):
    inputs = tokens.clone()
    inputs[to_mask] = mask_id
    inputs[to_random] = random_ids[to_random]
    return inputs, torch.where(chosen, tokens, torch.full_like(tokens, IGNORE))


def _ref_mask(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """The reference's algorithm, for building the mistakes (the reference itself is switched
    off while a student's function runs, and the mistakes run then too)."""
    u1, u2, r = _bert.mask_draws(tokens, vocab_size, generator)
    chosen = (u1 < p) & _eligible(tokens, special_ids)
    to_mask = chosen & (u2 < 0.8)
    to_random = chosen & (u2 >= 0.8) & (u2 < 0.9)
    return _corrupt(tokens, mask_id, chosen, to_mask, to_random, r)


def _mask_all_masked(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    u1, _, _ = _bert.mask_draws(tokens, vocab_size, generator)
    chosen = (u1 < p) & _eligible(tokens, special_ids)
    inputs = tokens.masked_fill(chosen, mask_id)
    return inputs, torch.where(chosen, tokens, torch.full_like(tokens, IGNORE))


def _mask_labels_everywhere(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    inputs, _ = _ref_mask(tokens, mask_id, vocab_size, p, generator, special_ids)
    return inputs, tokens.clone()


def _mask_labels_are_inputs(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    inputs, labels = _ref_mask(tokens, mask_id, vocab_size, p, generator, special_ids)
    return inputs, torch.where(labels != IGNORE, inputs, labels)


def _mask_10_10_80(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    u1, u2, r = _bert.mask_draws(tokens, vocab_size, generator)
    chosen = (u1 < p) & _eligible(tokens, special_ids)
    return _corrupt(tokens, mask_id, chosen, chosen & (u2 < 0.1), chosen & (u2 >= 0.9), r)


def _mask_p_on_the_80(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Splits every position 80/10/10 first and applies p to the [MASK] group only."""
    u1, u2, _ = _bert.mask_draws(tokens, vocab_size, generator)
    chosen = (u2 < 0.8) & (u1 < p) & _eligible(tokens, special_ids)
    inputs = tokens.masked_fill(chosen, mask_id)
    return inputs, torch.where(chosen, tokens, torch.full_like(tokens, IGNORE))


def _mask_specials_chosen(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    return _ref_mask(tokens, mask_id, vocab_size, p, generator, special_ids=None)


def _mask_generator_ignored(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    return _ref_mask(tokens, mask_id, vocab_size, p, None, special_ids)


def _mask_in_place(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    inputs, labels = _ref_mask(tokens, mask_id, vocab_size, p, generator, special_ids)
    tokens.copy_(inputs)
    return tokens, labels


def _mask_split_everywhere(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """The 80/10/10 replacement is applied to every (non-special) position, chosen or not."""
    u1, u2, r = _bert.mask_draws(tokens, vocab_size, generator)
    eligible = _eligible(tokens, special_ids)
    chosen = (u1 < p) & eligible
    to_mask = chosen & (u2 < 0.8)
    to_random = eligible & (u2 >= 0.8) & (u2 < 0.9)
    return _corrupt(tokens, mask_id, chosen, to_mask, to_random, r)


def _mask_fixed_count(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Chooses exactly round(p · eligible) positions (a random permutation), not each position
    with probability p: the count never varies."""
    u1, u2, r = _bert.mask_draws(tokens, vocab_size, generator)
    eligible = _eligible(tokens, special_ids)
    n = round(p * int(eligible.sum()))
    order = torch.where(eligible, u1, torch.full_like(u1, 2.0)).flatten().argsort()
    chosen = torch.zeros(tokens.numel(), dtype=torch.bool, device=tokens.device)
    chosen[order[:n]] = True
    chosen = chosen.reshape(tokens.shape)
    return _corrupt(
        tokens, mask_id, chosen, chosen & (u2 < 0.8), chosen & (u2 >= 0.8) & (u2 < 0.9), r
    )


def _mask_randint_high(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Random ids from torch.randint(0, vocab_size - 1): the last id is never drawn."""
    u1, u2, r = _bert.mask_draws(tokens, vocab_size - 1, generator)
    chosen = (u1 < p) & _eligible(tokens, special_ids)
    to_mask = chosen & (u2 < 0.8)
    to_random = chosen & (u2 >= 0.8) & (u2 < 0.9)
    return _corrupt(tokens, mask_id, chosen, to_mask, to_random, r)


def _mask_p_ignored(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    return _ref_mask(tokens, mask_id, vocab_size, 0.15, generator, special_ids)


def _mask_random_from_one(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Random ids from torch.randint(1, vocab_size): id 0 is never drawn."""
    u1, u2, r = _bert.mask_draws(tokens, vocab_size - 1, generator)
    chosen = (u1 < p) & _eligible(tokens, special_ids)
    to_mask = chosen & (u2 < 0.8)
    to_random = chosen & (u2 >= 0.8) & (u2 < 0.9)
    return _corrupt(tokens, mask_id, chosen, to_mask, to_random, r + 1)


def _mask_random_of_rest(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Of the 20% not masked, only a tenth get a random token (2% of the chosen, not 10%)."""
    u1, u2, r = _bert.mask_draws(tokens, vocab_size, generator)
    chosen = (u1 < p) & _eligible(tokens, special_ids)
    to_mask = chosen & (u2 < 0.8)
    to_random = chosen & (u2 >= 0.8) & (u2 < 0.82)
    return _corrupt(tokens, mask_id, chosen, to_mask, to_random, r)


def _mask_labels_zero(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """The positions not chosen get label 0 (tokens * chosen), not -100."""
    inputs, labels = _ref_mask(tokens, mask_id, vocab_size, p, generator, special_ids)
    return inputs, torch.where(labels != IGNORE, labels, torch.zeros_like(labels))


def _mask_int64_inputs(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """inputs built from int64 random ids (torch.randint's default dtype): int32 tokens give
    int64 inputs."""
    inputs, labels = _ref_mask(tokens, mask_id, vocab_size, p, generator, special_ids)
    return inputs.long(), labels


def _mask_fixed_mask_id(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """BERT's own [MASK] id, 103, written whatever mask_id is."""
    u1, u2, r = _bert.mask_draws(tokens, vocab_size, generator)
    chosen = (u1 < p) & _eligible(tokens, special_ids)
    to_mask = chosen & (u2 < 0.8)
    to_random = chosen & (u2 >= 0.8) & (u2 < 0.9)
    return _corrupt(tokens, 103, chosen, to_mask, to_random, r)


def _mask_split_scaled_by_p(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """The 80/10/10 thresholds multiplied by p (u < 0.8 * p): most chosen stay unchanged."""
    u1, u2, r = _bert.mask_draws(tokens, vocab_size, generator)
    chosen = (u1 < p) & _eligible(tokens, special_ids)
    to_mask = chosen & (u2 < 0.8 * p)
    to_random = chosen & (u2 >= 0.8 * p) & (u2 < 0.9 * p)
    return _corrupt(tokens, mask_id, chosen, to_mask, to_random, r)


def _mask_choice_inverted(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Chooses the positions whose draw is above p (a fraction 1 - p of them)."""
    u1, u2, r = _bert.mask_draws(tokens, vocab_size, generator)
    chosen = (u1 > p) & _eligible(tokens, special_ids)
    to_mask = chosen & (u2 < 0.8)
    to_random = chosen & (u2 >= 0.8) & (u2 < 0.9)
    return _corrupt(tokens, mask_id, chosen, to_mask, to_random, r)


def _mask_int64_labels(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """labels built with torch.full(shape, -100), int64 whatever the dtype of tokens."""
    inputs, labels = _ref_mask(tokens, mask_id, vocab_size, p, generator, special_ids)
    return inputs, labels.long()


def _mask_random_not_special(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Random ids drawn above the special ids, from [len(special_ids), vocab_size)."""
    low = 0 if special_ids is None else len(special_ids)
    u1, u2, r = _bert.mask_draws(tokens, vocab_size - low, generator)
    chosen = (u1 < p) & _eligible(tokens, special_ids)
    to_mask = chosen & (u2 < 0.8)
    to_random = chosen & (u2 >= 0.8) & (u2 < 0.9)
    return _corrupt(tokens, mask_id, chosen, to_mask, to_random, r + low)


def _mask_labels_inverted(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """The labels hold the token where a position was NOT chosen, -100 where it was."""
    inputs, labels = _ref_mask(tokens, mask_id, vocab_size, p, generator, special_ids)
    return inputs, torch.where(labels != IGNORE, torch.full_like(labels, IGNORE), tokens)


# The cases: shape, vocabulary size, [MASK] id, special ids (None: every position may be chosen),
# p (None: use the default 0.15), token dtype, whether a generator is passed.
_VISIBLE_MASK_SPECS = [
    dict(shape=(256, 320), V=1000, mask_id=3, specials=(0, 1, 2, 3), p=None),
    dict(shape=(64, 512), V=50, mask_id=49, specials=None, p=0.3, dtype=torch.int32),
]
_THOROUGH_MASK_SPECS = [
    dict(shape=(40, 1000), V=30522, mask_id=103, specials=(0, 100, 101, 102, 103), p=0.15),
    dict(shape=(16, 32, 128), V=7, mask_id=0, specials=(0, 1), p=0.5),
    dict(shape=(50_000,), V=200, mask_id=4, specials=None, p=0.05),
    dict(shape=(64, 256), V=500, mask_id=2, specials=(0, 1, 2), p=0.15, dtype=torch.int32),
    dict(shape=(8, 64), V=100, mask_id=3, specials=(0, 1, 2, 3), p=0.0),
    dict(shape=(8, 64), V=100, mask_id=3, specials=(0, 1, 2, 3), p=1.0),
    dict(shape=(1, 1), V=10, mask_id=3, specials=None, p=0.15),
    dict(shape=(4, 50), V=100, mask_id=3, specials=(0, 1, 2, 3), p=0.15, no_generator=True),
]


# The stated range [0, vocab_size), visible too: a small vocabulary, so that every id is drawn as
# a random token about 140 times (one never drawn betrays torch.randint's exclusive high).
# The second: the special ids are random tokens like any other (only never *chosen*).
_RANGE_MASK_SPECS = [
    dict(shape=(64, 256), V=8, mask_id=1, specials=None, p=0.5),
    dict(shape=(64, 256), V=8, mask_id=3, specials=(0, 1, 2, 3), p=0.5),
]
MIN_EXPECTED_DRAWS = 30  # an id expected this often is never missed by chance (p < e^-30)


def mask_specs(thorough: bool) -> list[dict]:
    """The cases of the bert_mask_tokens check (exported for the tests)."""
    return _VISIBLE_MASK_SPECS + (_THOROUGH_MASK_SPECS if thorough else []) + _RANGE_MASK_SPECS


def make_mask_tokens(spec: dict, seed: int) -> torch.Tensor:
    """Token ids for a case: never mask_id; with specials, rows look like
    [CLS] w w ... [SEP] [PAD] ... ([CLS] = specials[1], [SEP] = specials[2], [PAD] = specials[0])."""
    g = torch.Generator().manual_seed(seed)
    V, shape, specials = spec["V"], spec["shape"], spec["specials"]
    excluded = set(specials or ()) | {spec["mask_id"]}
    allowed = torch.tensor([i for i in range(V) if i not in excluded])
    tokens = allowed[torch.randint(len(allowed), shape, generator=g)]
    if specials is not None and len(specials) >= 3:
        rows = tokens.reshape(-1, shape[-1])
        L = shape[-1]
        lengths = torch.randint(max(2, L // 2), L + 1, (rows.shape[0],), generator=g)
        pad, cls, sep = specials[0], specials[1], specials[2]
        rows[:, 0] = cls
        rows[torch.arange(L)[None, :] >= lengths[:, None]] = pad
        rows[torch.arange(rows.shape[0]), lengths - 1] = sep
    elif specials is not None:  # a few special ids sprinkled in
        sprinkle = torch.rand(shape, generator=g) < 0.1
        tokens[sprinkle] = specials[-1]
    return tokens.to(spec.get("dtype", torch.long))


def _spec_label(spec: dict, device) -> str:
    p = "default p" if spec["p"] is None else f"p={spec['p']}"
    sp = "special_ids=None" if spec["specials"] is None else f"special_ids={spec['specials']}"
    gen = ", generator=None" if spec.get("no_generator") else ""
    dtype = str(spec.get("dtype", torch.long)).replace("torch.", "")
    return (
        f"tokens {tuple(spec['shape'])} ({dtype}, {device.type}), mask_id={spec['mask_id']}, "
        f"vocab_size={spec['V']}, {p}, {sp}{gen}"
    )


def _call_mask(fn, tokens, spec, seed):
    kwargs = {}
    if spec["p"] is not None:
        kwargs["p"] = spec["p"]
    if not spec.get("no_generator"):
        kwargs["generator"] = torch.Generator(device=tokens.device).manual_seed(seed)
    if spec["specials"] is not None:
        kwargs["special_ids"] = list(spec["specials"])
    return fn(tokens, spec["mask_id"], spec["V"], **kwargs)


def _as_pair(out, tokens) -> tuple[torch.Tensor, torch.Tensor] | str:
    """The (inputs, labels) pair, or a sentence saying what is wrong with the result's form."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        return f"the result should be a tuple (inputs, labels) but is {type(out).__name__}" + (
            f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""
        )
    for name, t in zip(("inputs", "labels"), out):
        if not isinstance(t, torch.Tensor):
            return f"{name} should be a tensor but is a {type(t).__name__}"
        if tuple(t.shape) != tuple(tokens.shape):
            return f"{name} has shape {tuple(t.shape)} but tokens has {tuple(tokens.shape)}"
        if t.dtype != tokens.dtype:
            return f"{name} has dtype {t.dtype} but should have the dtype of tokens, {tokens.dtype}"
        if t.device.type != tokens.device.type:
            return f"{name} is on {t.device} but tokens is on {tokens.device}"
    return tuple(out)


def _profile(fn, tokens, spec, seed, call=None, label=None) -> dict:
    """Run fn three times (seed, the same seed again, another seed) and measure everything.

    call: when given, each call runs as call(thunk, "your function", label) (the TrialDriver's: for
    the student, built-ins switched off and an exception fails the check naming the case)."""

    def call_mask(s, t):
        if call is None:
            return _call_mask(fn, t, spec, s)
        return call(lambda: _call_mask(fn, t, spec, s), "your function", label)

    work = tokens.clone()
    with torch.random.fork_rng(devices=[]):  # the check leaves the global seed alone
        first = call_mask(seed, work)
        pair = _as_pair(first, tokens)
        if isinstance(pair, str):
            return {"form": pair}
        inputs, labels = (t.detach().clone() for t in pair)
        in_place = not torch.equal(work, tokens)
        again = _as_pair(call_mask(seed, tokens.clone()), tokens)
        other = _as_pair(call_mask(seed + 1, tokens.clone()), tokens)
    V, mask_id = spec["V"], spec["mask_id"]
    eligible = _eligible(tokens, spec["specials"])
    chosen = labels != IGNORE
    fixed_count = _fixed_count(
        [pair, other],
        eligible,
        spec,
        lambda s: _as_pair(call_mask(s, tokens.clone()), tokens),
        seed,
    )
    n_elig, n_special = int(eligible.sum()), int((~eligible).sum())
    n_chosen = int(chosen.sum())
    unchosen = ~chosen & eligible
    masked = chosen & (inputs == mask_id)
    kept = chosen & (inputs == tokens) & ~masked
    randomised = chosen & ~masked & ~kept
    same = isinstance(again, tuple) and all(torch.equal(a, b) for a, b in zip(again, pair))
    differs = isinstance(other, tuple) and not all(torch.equal(a, b) for a, b in zip(other, pair))
    return {
        "form": None,
        "inputs": inputs,
        "labels": labels,
        "in_place": in_place,
        "reproducible": same,
        "seed_matters": differs,
        "n_elig": n_elig,
        "n_special": n_special,
        "n_chosen": n_chosen,
        "n_unchosen": int(unchosen.sum()),
        "chosen_elig": int((chosen & eligible).sum()),
        "chosen_special": int((chosen & ~eligible).sum()),
        "label_bad": int((labels[chosen] != tokens[chosen]).sum()),
        "label_range_bad": int(((labels != IGNORE) & ((labels < 0) | (labels >= V))).sum()),
        "unchosen_changed": int((inputs[unchosen] != tokens[unchosen]).sum()),
        "out_of_range": int(((inputs < 0) | (inputs >= V)).sum()),
        "n_masked": int(masked.sum()),
        "n_kept": int(kept.sum()),
        "n_random": int(randomised.sum()),
        "random_ids": inputs[randomised].double().cpu(),
        "random_orig": tokens[randomised].double().cpu(),
        "never_drawn": _never_drawn(inputs[randomised], tokens[randomised], V, mask_id),
        "fixed_count": fixed_count,
    }


def _fixed_count(pairs, eligible, spec, draw, seed) -> bool:
    """Whether the number of chosen positions is exactly p · n, rounded either way, in four calls
    with different seeds: independent choices with probability p give a binomial count, which
    lands on one of the two integers next to p · n with probability about 0.05 when n ≥ 2000
    (MIN_FOR_STATISTICS), so four times with probability below 1e-5. The third and fourth calls
    are made only when the first two land there."""
    p = 0.15 if spec["p"] is None else spec["p"]
    n = int(eligible.sum())
    if not 0 < p < 1 or n < MIN_FOR_STATISTICS:
        return False
    near = {math.floor(p * n), math.ceil(p * n)}

    def hits(pair) -> bool:
        return isinstance(pair, tuple) and int(((pair[1] != IGNORE) & eligible).sum()) in near

    with torch.random.fork_rng(devices=[]):
        return all(hits(pair) for pair in pairs) and all(hits(draw(seed + k)) for k in (2, 3))


def _never_drawn(random_ids, originals, V: int, mask_id: int) -> tuple[int, ...]:
    """The ids in [0, V) other than mask_id that no random replacement hit though a uniform
    draw (never the original token) would hit each at least MIN_EXPECTED_DRAWS times."""
    if V <= 2 or not len(random_ids):
        return ()
    ids = torch.arange(V, device=originals.device)
    expected = (originals[:, None] != ids).sum(0).double() / (V - 2)
    drawn = torch.bincount(random_ids.long().clamp(0, V - 1).cpu(), minlength=V)[:V]
    missing = (expected.cpu() >= MIN_EXPECTED_DRAWS) & (drawn == 0) & (ids.cpu() != mask_id)
    return tuple(missing.nonzero().flatten().tolist())


def _binomial_problem(count, n, prob, what) -> str | None:
    """None when count is within Z_SIGMAS binomial standard deviations of n·prob."""
    if n == 0:
        return None
    mean, sd = n * prob, math.sqrt(n * prob * (1 - prob))
    if abs(count - mean) <= Z_SIGMAS * sd + 1e-9:
        return None
    return (
        f"{what} is {count / n:.2%} ({count:,d} of {n:,d}); expected {prob:.2%} "
        f"(± {Z_SIGMAS * sd / n:.2%}, i.e. {Z_SIGMAS} standard deviations)"
    )


def mask_problem(prof: dict, tokens: torch.Tensor, spec: dict, p: float) -> str | None:
    """The first way the profile breaks the contract, as a sentence; None when it keeps it."""
    if prof["form"]:
        return prof["form"]
    V, mask_id = spec["V"], spec["mask_id"]
    if prof["in_place"]:
        return "the tokens you were given were modified (in place); they must stay as they were"
    if prof["label_range_bad"] or prof["label_bad"]:
        return (
            f"at {prof['label_bad']:,d} of {prof['n_chosen']:,d} chosen positions (labels != -100) "
            "the label is not the original token"
        )
    if prof["chosen_special"]:
        return (
            f"{prof['chosen_special']:,d} positions holding a special id {spec['specials']} were "
            "chosen (their labels are not -100)"
        )
    if prof["unchosen_changed"]:
        return (
            f"{prof['unchosen_changed']:,d} of {prof['n_unchosen']:,d} positions that were not "
            "chosen (label -100) have a different token in inputs"
        )
    if prof["out_of_range"]:
        return f"{prof['out_of_range']:,d} ids in inputs are outside [0, vocab_size={V})"
    if not spec.get("no_generator"):
        if not prof["reproducible"]:
            return "two calls with generators seeded alike gave different results"
        if prof["n_elig"] >= MIN_FOR_STATISTICS and 0 < p < 1 and not prof["seed_matters"]:
            return "generators with different seeds gave the same result"
    if p in (0.0, 1.0) and prof["chosen_elig"] != p * prof["n_elig"]:
        return (
            f"with p={p:g}, {prof['chosen_elig']:,d} of {prof['n_elig']:,d} eligible positions "
            f"were chosen; expected {int(p * prof['n_elig']):,d}"
        )
    if prof["n_elig"] < MIN_FOR_STATISTICS:
        return None
    problem = _binomial_problem(
        prof["chosen_elig"], prof["n_elig"], p, "the fraction of chosen positions"
    )
    if problem:
        return problem
    n = prof["n_chosen"]
    if n == 0:
        return None
    shares = (  # a random draw lands on [MASK] or on the original token with probability 1/V
        ("n_masked", 0.8 + 0.1 / V, "the share of [MASK] among the chosen positions"),
        ("n_kept", 0.1 + 0.1 / V, "the share of unchanged tokens among the chosen positions"),
        ("n_random", 0.1 * (1 - 2 / V), "the share of random tokens among the chosen positions"),
    )
    for key, prob, what in shares:
        problem = _binomial_problem(prof[key], n, prob, what)
        if problem:
            return problem
    if prof["fixed_count"]:
        return (
            f"{prof['chosen_elig']:,d} of {prof['n_elig']:,d} eligible positions were chosen, "
            f"exactly p · {prof['n_elig']:,d} rounded, and so in four calls with different "
            "seeds: each position is chosen independently with probability p, so the count "
            "varies from call to call"
        )
    if prof["never_drawn"]:
        return (
            f"no random replacement was ever id {list(prof['never_drawn'])}, though a uniform "
            f"draw from [0, vocab_size={V}) gives each id about {prof['n_random'] // (V - 2)} "
            "times here"
        )
    r, orig = prof["random_ids"], prof["random_orig"]
    if len(r) >= 100:
        # Draws uniform on [0, V) given that they are neither mask_id nor the original token.
        # Hoeffding: the mean of n draws in [0, V-1] strays more than (V-1)·sqrt(ln(2/δ)/(2n))
        # from its expectation with probability below δ = 1e-9.
        expected = ((V * (V - 1) / 2 - mask_id - orig) / (V - 2)).mean().item()
        slack = (V - 1) * math.sqrt(math.log(2 / HOEFFDING_DELTA) / (2 * len(r)))
        if abs(r.mean().item() - expected) > slack:
            return (
                f"the random tokens average {r.mean().item():.2f}; draws uniform on "
                f"[0, vocab_size={V}) would average {expected:.2f} (± {slack:.2f})"
            )
    return None


def _fractions(prof: dict) -> dict[str, tuple[int, int]]:
    """(count, n) pairs that describe a profile, for comparing profiles."""
    return {
        "chosen": (prof["chosen_elig"], prof["n_elig"]),
        "special": (prof["chosen_special"], prof["n_special"]),
        "label_bad": (prof["label_bad"], prof["n_chosen"]),
        "unchosen_changed": (prof["unchosen_changed"], prof["n_unchosen"]),
        "masked": (prof["n_masked"], prof["n_chosen"]),
        "kept": (prof["n_kept"], prof["n_chosen"]),
    }


def profiles_agree(a: dict, b: dict) -> bool:
    """True when two profiles could come from the same (random) implementation."""
    if a["form"] or b["form"]:  # the same wrong form (a dtype, a shape) agrees
        return a["form"] == b["form"]
    for flag in ("in_place", "reproducible", "never_drawn", "fixed_count"):
        if a[flag] != b[flag]:
            return False
    fa, fb = _fractions(a), _fractions(b)
    for key in fa:
        (ca, na), (cb, nb) = fa[key], fb[key]
        if (na == 0) != (nb == 0):
            return False
        if na == 0:
            continue
        if na < 50 or nb < 50:  # too few to compare
            continue
        diff = abs(ca / na - cb / nb)
        if diff > Z_MATCH * math.sqrt(0.25 / na + 0.25 / nb):
            return False
    return True


def _mask_cases(thorough: bool) -> list[tuple[int, dict]]:
    return list(enumerate(mask_specs(thorough)))


def _mask_trial(impl, case: tuple[int, dict], device, call) -> Finding | None:
    """One case on one device: the profile of impl, and the first way it breaks the contract
    (its evidence, the profile, names the mistake whose profile agrees)."""
    i, spec = case
    tokens = make_mask_tokens(spec, seed=5000 + i).to(device)
    label = _spec_label(spec, device)
    prof = _profile(impl, tokens, spec, 6000 + i, call, label)
    problem = mask_problem(prof, tokens, spec, 0.15 if spec["p"] is None else spec["p"])
    return Finding(problem, label, evidence=prof) if problem else None


def _mask_covered(thorough: bool) -> str:
    where = ", ".join(d.type for d in devices(thorough))
    return f"exact properties and the 15% / 80-10-10 statistics on {where}"


bert_mask_tokens = Exercise(
    name="bert_mask_tokens",
    lesson="09",
    module="bert",
    reference=_bert.bert_mask_tokens,
    forbidden=(
        "transformer_lab.bert.bert_mask_tokens",
        "transformer_lab.bert_mask_tokens",
        "transformer_lab.bart.bert_mask_tokens",
    ),
    mistakes=[
        Mistake(
            "all-masked",
            "every chosen position becomes [MASK]: only 80% of them should; 10% get a random "
            "token and 10% keep their own.",
            _mask_all_masked,
        ),
        Mistake(
            "labels-everywhere",
            "labels are set at every position: put the original token at the chosen positions "
            "only and -100 everywhere else, so that the loss ignores the rest.",
            _mask_labels_everywhere,
        ),
        Mistake(
            "labels-are-inputs",
            "the labels hold the corrupted inputs: they must hold the original tokens (what "
            "the model has to recover), e.g. torch.where(chosen, tokens, -100).",
            _mask_labels_are_inputs,
        ),
        Mistake(
            "split-10-10-80",
            "the split is the wrong way round (10% [MASK], 10% random, 80% unchanged): of the "
            "chosen positions 80% become [MASK], 10% a random token, 10% stay unchanged.",
            _mask_10_10_80,
        ),
        Mistake(
            "p-on-the-80",
            "p is applied to the [MASK] group instead of to the selection: first choose each "
            "position with probability p, then split the chosen ones 80/10/10.",
            _mask_p_on_the_80,
        ),
        Mistake(
            "specials-chosen",
            "special tokens were chosen: a position holding an id in special_ids ([CLS], "
            "[SEP], [PAD], ...) must never be chosen.",
            _mask_specials_chosen,
        ),
        Mistake(
            "generator-ignored",
            "the generator is ignored: pass generator=generator to every torch.rand / "
            "torch.randint call, so that the same seed gives the same corruption.",
            _mask_generator_ignored,
        ),
        Mistake(
            "in-place",
            "tokens was changed in place: work on a copy (inputs = tokens.clone()) and leave "
            "the caller's tensor alone.",
            _mask_in_place,
        ),
        Mistake(
            "split-everywhere",
            "the 80/10/10 replacement is applied to positions that were not chosen too: a "
            "position that is not chosen keeps its token.",
            _mask_split_everywhere,
        ),
        Mistake(
            "p-ignored",
            "p is ignored: choose each position with probability p (the argument), not always "
            "0.15.",
            _mask_p_ignored,
        ),
        Mistake(
            "fixed-count",
            "exactly round(p · n) positions are chosen every time (a random permutation): "
            "choose each position independently with probability p (torch.rand(...) < p), so "
            "that the number chosen varies as in BERT.",
            _mask_fixed_count,
        ),
        Mistake(
            "randint-high",
            "the last id, vocab_size - 1, is never drawn as a random token: torch.randint's "
            "high is exclusive, so draw with torch.randint(0, vocab_size, ...), not vocab_size - 1.",
            _mask_randint_high,
        ),
        Mistake(
            "random-from-one",
            "id 0 is never drawn as a random token: it is a token like any other, so draw from "
            "the whole range, torch.randint(0, vocab_size, ...).",
            _mask_random_from_one,
        ),
        Mistake(
            "random-of-rest",
            "too few chosen positions get a random token: of the chosen, 10% (not 10% of the "
            "remaining 20%) get one; split them with one uniform u, u < 0.8 [MASK], "
            "0.8 <= u < 0.9 random, the rest unchanged.",
            _mask_random_of_rest,
        ),
        Mistake(
            "labels-zero",
            "the positions that were not chosen get label 0, a real token id: give them -100, "
            "which the loss ignores (torch.where(chosen, tokens, -100)).",
            _mask_labels_zero,
        ),
        Mistake(
            "int64-inputs",
            "inputs comes back as int64 for int32 tokens (torch.randint makes int64 unless "
            "told, and torch.where promotes to it): draw the random ids with dtype=tokens.dtype, "
            "so inputs keeps the dtype of tokens.",
            _mask_int64_inputs,
        ),
        Mistake(
            "fixed-mask-id",
            "the [MASK] written is a fixed id (BERT's 103): write the mask_id argument, which "
            "depends on the tokenizer.",
            _mask_fixed_mask_id,
        ),
        Mistake(
            "split-scaled-by-p",
            "the 80/10/10 thresholds are multiplied by p (u < 0.8 * p), so most chosen "
            "positions stay unchanged: p only decides which positions are chosen; split the "
            "chosen ones with a second uniform u, u < 0.8 [MASK], 0.8 <= u < 0.9 random.",
            _mask_split_scaled_by_p,
        ),
        Mistake(
            "choice-inverted",
            "the positions chosen are those whose draw is above p, a fraction 1 - p of them: "
            "choose a position when its draw is below p, torch.rand(...) < p.",
            _mask_choice_inverted,
        ),
        Mistake(
            "int64-labels",
            "labels comes back as int64 for int32 tokens (torch.full(shape, -100) makes int64 "
            "unless told): build it with the dtype of tokens, e.g. torch.full_like(tokens, -100) "
            "or torch.where(chosen, tokens, -100).",
            _mask_int64_labels,
        ),
        Mistake(
            "random-not-special",
            "the special ids are never drawn as random tokens: they are never chosen for "
            "masking, but a random replacement is uniform over the whole vocabulary, "
            "torch.randint(0, vocab_size, ...), specials included.",
            _mask_random_not_special,
        ),
        Mistake(
            "labels-inverted",
            "the labels are inverted: the original token belongs at the chosen positions and "
            "-100 at the others, torch.where(chosen, tokens, -100), not the other way round.",
            _mask_labels_inverted,
        ),
    ],
    driver=TrialDriver(
        _mask_cases,
        _mask_trial,
        covered=_mask_covered,
        matches=profiles_agree,
        settings=devices,
    ),
    doc="bert_mask_tokens(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None) -> (inputs, labels): exact properties and statistics",
)
