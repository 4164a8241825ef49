"""Checks for lesson 10 — BART's noising functions: `text_infilling`, `sentence_permutation`,
`document_rotation`.

The noising functions are random, and a student draws random numbers in an order of their own,
so their output cannot be compared with the reference's token for token. These checks test
*properties* and *statistics* instead:

- structure, on every case (and, in the thorough run, on every device and for int64 and int32
  ids): the output is a tensor of the input's dtype on the input's device, and it is what the
  noising function promises (a rotation, an arrangement of the sentences, the input with spans
  folded into single masks);
- reproducibility: the same seeded generator gives the same output twice;
- statistics over many seeded calls: span lengths follow Poisson(λ) (0-length spans included),
  every order of the sentences and every start of the document comes out, about equally often.

Inputs are made of distinct token ids, so every output token has one place in the input and the
span behind each [MASK] can be measured exactly.

**False failures.** A correct implementation is a random sample, so a statistical test could
fail by chance. Every statistical test below is set so that the chance of failing a correct
implementation is under FALSE_FAILURE = 1e-7, and a check call runs at most 3 of them, so a
correct implementation fails a call with probability < 1e-6 (the argument sits next to each
test; tests/checks/test_lesson10.py recomputes the numbers). Each catalogued mistake misses its
band by a wide margin, and the seeds are fixed, so a mistake fails every time.

**Naming mistakes.** Each property failure carries a key ("adjacent masks", "no 0-length span",
...). When the student's function fails, every catalogued mistake is run through the same check;
the first one that fails with the same key is named.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from collections.abc import Callable

import torch

from .. import bart as _bart
from .drivers import Finding, TrialDriver
from .engine import Exercise, Mistake, available_devices

__all__ = ["document_rotation", "sentence_permutation", "text_infilling"]

# The chance that a correct implementation fails one statistical test is below this.
FALSE_FAILURE = 1e-7


class _Broken(Exception):
    """A property the noising function breaks: `key` names the kind, `message` says what."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key, self.message = key, message


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _direct(thunk: Callable, *_):
    """How a suite calls a function by default (the TrialDriver passes the student's `call`: the
    forbidden names switched off, and an exception fails the check saying which call raised)."""
    return thunk()


def _require_ids(out, tokens: torch.Tensor, label: str) -> list[int]:
    """The output must be a 1-D integer tensor with the input's dtype and device."""
    if not isinstance(out, torch.Tensor):
        raise _Broken(
            "type", f"{label} returned a {type(out).__name__}; return a 1-D tensor of token ids"
        )
    if out.dim() != 1:
        raise _Broken(
            "shape", f"{label} returned shape {tuple(out.shape)}; the result must be 1-D, (L',)"
        )
    if out.dtype != tokens.dtype:
        raise _Broken(
            "dtype",
            f"{label} returned dtype {out.dtype} but the input ids have dtype {tokens.dtype} "
            "(keep the input's dtype, e.g. build new pieces with tokens.new_tensor(...))",
        )
    if out.device.type != tokens.device.type:
        raise _Broken(
            "device",
            f"{label} returned a tensor on {out.device} but the input is on {tokens.device}",
        )
    return out.tolist()


def _id_settings(thorough: bool) -> list[tuple[torch.device, torch.dtype]]:
    """Where the structural cases run: CPU int64; thorough adds int32 and every accelerator."""
    if not thorough:
        return [(torch.device("cpu"), torch.long)]
    return [(d, dt) for d in available_devices() for dt in (torch.long, torch.int32)]


def _distinct_doc(seed: int, n: int, start: int = 10) -> torch.Tensor:
    """n distinct ids >= start in random order: each output token has one place in the input."""
    return torch.randperm(n, generator=_gen(seed)) + start


def _reproducible(call: Callable, label: str, draw: Callable[[torch.Generator], object]) -> int:
    """The same seed twice must give the same output (the randomness comes from `generator`)."""

    def once(seed: int):
        return call(lambda: draw(_gen(seed)), label)

    for seed in (11, 12):
        a, b = once(seed), once(seed)
        if not torch.equal(a, b):
            raise _Broken(
                "generator",
                f"{label} gave two different results for two generators with the same seed "
                f"({a.tolist()} and {b.tolist()}): draw every random number from `generator`",
            )
    return 4


# ----------------------------------------------------------------------------------------------
# Exact binomial bands (for counts of independent events).


def _log_binom_pmf(k: int, n: int, q: float) -> float:
    if q <= 0.0:
        return 0.0 if k == 0 else -math.inf
    if q >= 1.0:
        return 0.0 if k == n else -math.inf
    return (
        math.lgamma(n + 1)
        - math.lgamma(k + 1)
        - math.lgamma(n - k + 1)
        + k * math.log(q)
        + (n - k) * math.log1p(-q)
    )


@functools.cache
def binomial_band(n: int, q: float, alpha: float) -> tuple[int, int]:
    """The widest (lo, hi) with P(X < lo) <= alpha/2 and P(X > hi) <= alpha/2, X ~ Bin(n, q)."""
    pmf = [math.exp(_log_binom_pmf(k, n, q)) for k in range(n + 1)]
    lo, below = 0, 0.0
    while lo <= n and below + pmf[lo] <= alpha / 2:
        below += pmf[lo]
        lo += 1
    hi, above = n, 0.0
    while hi >= 0 and above + pmf[hi] <= alpha / 2:
        above += pmf[hi]
        hi -= 1
    return lo, hi


def _uniform_cells(counts: Counter, cells: list, n: int, what: str, label: str, zero_key, key):
    """Every cell of a uniform distribution must come out, within its exact binomial band.

    Each of the k cells is Binomial(n, 1/k); with a band of level FALSE_FAILURE / k per cell, a
    union bound puts the chance that a correct implementation fails under FALSE_FAILURE.
    """
    k = len(cells)
    lo, hi = binomial_band(n, 1.0 / k, FALSE_FAILURE / k)
    table = ", ".join(f"{c}: {counts.get(c, 0)}" for c in cells)
    for cell in cells:
        if counts.get(cell, 0) == 0:
            raise _Broken(
                zero_key(cell),
                f"{label}: over {n} seeded calls {what} {cell} never came out, though each of "
                f"the {k} should come out about {n / k:.0f} times ({table})",
            )
    for cell in cells:
        if not lo <= counts.get(cell, 0) <= hi:
            raise _Broken(
                key,
                f"{label}: over {n} seeded calls the {k} possible {what}s are not equally "
                f"likely: each should come out {lo}..{hi} times, got {table}",
            )


_FORM_KEYS = ("type", "shape", "dtype", "device")  # a result of the wrong form names no mistake


def _suite_trial(suite: Callable) -> Callable:
    """The TrialDriver trial of a whole suite (its one case is `thorough`): the number of calls it
    made, or a Finding tagged with the property broken. A catalogued mistake whose own run of the
    suite breaks the same property first is named."""

    def trial(impl: Callable, thorough: bool, _setting, call: Callable):
        cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        # generator=None cases draw from the global generator: leave it as it was
        with torch.random.fork_rng(devices=cuda):
            try:
                return suite(impl, thorough, call)
            except _Broken as broken:
                return Finding(broken.message, tag=broken.key, evidence=broken.key)

    return trial


def _whole_suite(thorough: bool) -> list[bool]:
    return [thorough]


def _nameable(student_key: str, _mistake_key: str) -> bool:
    return student_key not in _FORM_KEYS


def _suite_driver(suite: Callable, covered: str) -> TrialDriver:
    return TrialDriver(_whole_suite, _suite_trial(suite), covered=covered, matches=_nameable)


# ==============================================================================================
# Exercise 1 — text_infilling(tokens, mask_id, p=0.3, lam=3.0, generator=None)

MASK = 3  # the mask id of most cases; documents use ids >= 10


def _spans_behind_masks(doc: list[int], out: list[int], mask_id: int, label: str) -> list[int]:
    """The length of the span behind each [MASK] of `out` (doc has distinct ids).

    Kept tokens must be the input's tokens in their order; every run of removed tokens must sit
    where exactly one [MASK] stands; a [MASK] between two neighbouring kept tokens is a 0-length
    span.
    """
    where = {t: i for i, t in enumerate(doc)}
    for t in out:
        if t != mask_id and t not in where:
            raise _Broken(
                "foreign",
                f"{label}: the output holds {t}, which is neither an input token nor mask_id",
            )
    kept = [where[t] for t in out if t != mask_id]
    if any(a >= b for a, b in zip(kept, kept[1:])):
        raise _Broken(
            "order",
            f"{label}: the kept tokens are not the input's tokens in their original order: "
            f"input {doc}, output {out}",
        )
    spans, prev, k, n_masks = [], -1, 0, 0
    for t in [*out, None]:  # None: the end of the document closes the last gap
        if t == mask_id:
            n_masks += 1
            continue
        nxt = kept[k] if t is not None else len(doc)
        gap = nxt - prev - 1  # input tokens removed between two kept tokens
        if n_masks >= 2:
            where_ = f"{n_masks} [MASK]s stand side by side (for {gap} removed token(s))"
            raise _Broken(
                "mask per token" if n_masks == gap else "adjacent",
                f"{label}: {where_} in {out}; spans never touch (a kept token separates two "
                "spans), so each run of removed tokens gets ONE [MASK]",
            )
        if n_masks:
            spans.append(gap)
        elif gap:
            raise _Broken(
                "deleted",
                f"{label}: {gap} input token(s) (from position {prev + 1}) disappeared with no "
                f"[MASK] in their place: input {doc}, output {out}",
            )
        n_masks, prev = 0, nxt
        k += t is not None
    return spans


def _poisson_pmf(k: int, lam: float) -> float:
    return math.exp(-lam + k * math.log(lam) - math.lgamma(k + 1))


def infilling_span_histogram(n_masked: int, lam: float) -> list[float]:
    """Expected number of spans of length 0, 1, ..., n_masked in one document (exact).

    The spec's process: draw k ~ Poisson(lam) until the spans cover n_masked tokens, the last one
    cut to fit. u[s] = the expected number of draws made while s tokens are covered; a draw k
    from s is a full span when s + k < n_masked, else the last span, of length n_masked - s.
    """
    pmf = [_poisson_pmf(k, lam) for k in range(n_masked + 1)]
    p0 = pmf[0]
    u = [0.0] * n_masked
    for s in range(n_masked):
        arrivals = 1.0 if s == 0 else sum(u[j] * pmf[s - j] for j in range(s))
        u[s] = arrivals / (1.0 - p0)  # each arrival repeats on 0-length draws
    hist = [0.0] * (n_masked + 1)
    for s in range(n_masked):
        for k in range(n_masked - s):
            hist[k] += u[s] * pmf[k]
        rest = n_masked - s
        hist[rest] += u[s] * max(0.0, 1.0 - sum(pmf[:rest]))
    return hist


# Statistics configurations: (L, p, lam, number of documents). p * L is an integer in all.
_INFILL_STATS = [(200, 0.3, 3.0, 30), (30, 0.3, 3.0, 130), (50, 0.4, 1.5, 40)]
_INFILL_STATS_THOROUGH = [
    (200, 0.3, 3.0, 80),
    (30, 0.3, 3.0, 200),
    (50, 0.4, 1.5, 100),
    (100, 0.3, 6.0, 60),
]
SPAN_BAND_SIGMAS = 6.0
SPAN_OVERDISPERSION = 1.5


def span_band(expected: float) -> tuple[float, float]:
    """Acceptance band for the number of spans of one length, summed over the documents.

    The count is a sum over D >= 30 independent documents of one document's count, whose
    variance is at most 1.4 times its mean. Most lengths are under-dispersed (the spans must add
    up to round(p * L)); 0-length spans come in bursts: after each non-empty draw, a Geometric
    run of empty ones, so var/mean ~ 1/(1 - e^-lam) + a little = 1.37 at lam = 1.5 (measured
    over 3,000 documents for every configuration here; re-measured by
    tests/checks/test_lesson10.py). With sigma^2 = 1.5 * mean, the band mean +- (6 sigma + 3)
    leaves a normal tail of 2e-9 per band (the + 3 covers the skew of small counts); at most 32
    bands give < 1e-7 per check call.
    """
    half = SPAN_BAND_SIGMAS * math.sqrt(SPAN_OVERDISPERSION * expected) + 3.0
    return expected - half, expected + half


def _infill_bins(n_masked_lams: list[tuple[int, float, int]]) -> list[float]:
    """Expected histogram over all documents of one lam: bins 0..6 and '7 or more'."""
    total = [0.0] * 8
    for n_masked, lam, n_docs in n_masked_lams:
        for k, h in enumerate(infilling_span_histogram(n_masked, lam)):
            total[min(k, 7)] += n_docs * h
    return total


def _infilling_suite(fn: Callable, thorough: bool, call: Callable = _direct) -> int:
    def run(label: str, *args, **kwargs):
        return call(lambda: fn(*args, **kwargs), label)

    n_calls = 0
    # 1. structure on hand-picked cases: (L, p, lam, mask_id)
    cases = [(40, 0.3, 3.0, MASK), (25, 0.5, 1.0, MASK), (12, 0.25, 3.0, MASK), (7, 0.0, 3.0, MASK)]
    if thorough:
        cases += [
            (60, 0.15, 5.0, 50264),
            (10, 0.9, 0.3, MASK),
            (1, 1.0, 3.0, 0),
            (0, 0.3, 3.0, MASK),
            (33, 0.6, 2.0, 0),
            (100, 0.3, 3.0, MASK),
            (5, 1.0, 1.0, MASK),
        ]
    n_seeds = 8 if thorough else 3
    for device, dtype in _id_settings(thorough):
        for L, p, lam, mask_id in cases:
            for seed in range(n_seeds):
                doc = _distinct_doc(100 + seed, L).to(device=device, dtype=dtype)
                label = f"text_infilling(tokens of length {L}, mask_id={mask_id}, p={p}, lam={lam})"
                out = run(label, doc, mask_id, p=p, lam=lam, generator=_gen(seed))
                out_list = _require_ids(out, doc, label)
                spans = _spans_behind_masks(doc.tolist(), out_list, mask_id, label)
                n_calls += 1
                if abs(sum(spans) - p * L) > 0.5 + 1e-9:
                    raise _Broken(
                        "count",
                        f"{label}: {sum(spans)} tokens were removed, but p * L = {p * L:g}: "
                        f"remove round(p * L) = {round(p * L)} tokens in all (input {doc.tolist()}, "
                        f"output {out_list})",
                    )
                if round(p * L) == 0 and out_list != doc.tolist():
                    raise _Broken(
                        "p0",
                        f"{label}: nothing is to be removed (round(p * L) = 0), so no span is "
                        f"drawn and the output is the input; got {out_list}",
                    )
    # 2. reproducibility, and the global generator (None) works too
    doc = _distinct_doc(7, 40)
    label = "text_infilling(tokens of length 40, mask_id=3, p=0.3, lam=3.0)"
    n_calls += _reproducible(call, label, lambda g: fn(doc, MASK, p=0.3, lam=3.0, generator=g))
    _require_ids(run(label + " with generator=None", doc, MASK, p=0.3, lam=3.0), doc, label)
    # 3. statistics: the span lengths, and spans at both ends of the document
    configs = _INFILL_STATS_THOROUGH if thorough else _INFILL_STATS
    observed: dict[float, list[int]] = {}
    groups: dict[float, list] = {}
    first = last = 0
    for c, (L, p, lam, n_docs) in enumerate(configs):
        label = f"text_infilling(tokens of length {L}, mask_id=3, p={p}, lam={lam})"
        n_masked = round(p * L)
        groups.setdefault(lam, []).append((n_masked, lam, n_docs))
        hist = observed.setdefault(lam, [0] * 8)
        for d in range(n_docs):
            seed = 10_000 * (c + 1) + d
            doc = _distinct_doc(seed, L)
            out = run(label, doc, MASK, p=p, lam=lam, generator=_gen(seed))
            out_list = _require_ids(out, doc, label)
            spans = _spans_behind_masks(doc.tolist(), out_list, MASK, label)
            n_calls += 1
            if sum(spans) != n_masked:
                raise _Broken(
                    "count", f"{label}: {sum(spans)} tokens were removed, expected {n_masked}"
                )
            for k in spans:
                hist[min(k, 7)] += 1
            if L == 30:  # short documents: each end is masked in about 1 document of 6
                first += out_list[0] == MASK
                last += out_list[-1] == MASK
    for lam, hist in observed.items():
        expected = _infill_bins(groups[lam])
        shown = ", ".join(
            f"{'7+' if k == 7 else k}: {o} (~{e:.0f})"
            for k, (o, e) in enumerate(zip(hist, expected))
        )
        n_docs = sum(g[2] for g in groups[lam])
        where = f"over {n_docs} seeded documents with lam={lam}"
        if hist[0] == 0 and expected[0] >= 15:
            raise _Broken(
                "no zeros",
                f"text_infilling: {where} no span had length 0, but Poisson({lam}) gives length 0 "
                f"with probability e^-{lam} = {math.exp(-lam):.3f}: span lengths {shown}",
            )
        for o, e in zip(hist, expected):
            lo, hi = span_band(e)
            if not lo <= o <= hi:
                raise _Broken(
                    "poisson",
                    f"text_infilling: {where} the span lengths do not follow Poisson({lam}) "
                    f"(drawn until they cover round(p * L) tokens, the last one cut to fit): "
                    f"length: count (~expected) {shown}",
                )
    # Each end of a 30-token document is masked with probability q = E[spans] / 22 = 0.159 (the
    # spans take distinct gaps among the 22, uniformly), independently across documents: a
    # correct implementation never masks it in 130 documents with probability 0.841^130 < 2e-10.
    for end, count in (("first", first), ("last", last)):
        if count == 0:
            raise _Broken(
                "edge",
                f"text_infilling: over many seeded documents of 30 tokens the {end} token was "
                f"never masked (expected in about 1 document of 6): a span may start at the very "
                f"beginning and end at the very end of the document",
            )
    return n_calls


# ---------------------------------------------------------------------------------------------
# Catalogued mistakes (each has the reference's signature).


def _poisson_lengths(n_masked: int, lam: float, generator) -> list[int]:
    lengths: list[int] = []
    while sum(lengths) < n_masked:
        k = int(torch.poisson(torch.tensor([float(lam)]), generator=generator).item())
        lengths.append(min(k, n_masked - sum(lengths)))
    return lengths


def _place_spans(
    tokens, mask_id, lengths, generator, gaps=None, one_mask_per_token=False, no_mask=False
):
    """Put each span in its own gap between kept tokens (gaps: candidate gap indices)."""
    n_kept = len(tokens) - sum(lengths)
    candidates = list(range(n_kept + 1)) if gaps is None else gaps(n_kept)
    while len(lengths) > len(candidates):  # more spans than gaps: fold the extra ones in
        extra = lengths.pop()
        lengths[-1] += extra
    pick = torch.randperm(len(candidates), generator=generator)[: len(lengths)].tolist()
    at = dict(zip(sorted(candidates[i] for i in pick), lengths))
    out, i, toks = [], 0, tokens.tolist()
    for g in range(n_kept + 1):
        if g in at:
            if not no_mask:
                out += [mask_id] * (max(at[g], 1) if one_mask_per_token else 1)
            i += at[g]
        if g < n_kept:
            out.append(toks[i])
            i += 1
    return tokens.new_tensor(out)


def _infill_one_mask_per_token(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    lengths = _poisson_lengths(round(p * len(tokens)), lam, generator)
    return _place_spans(tokens, mask_id, lengths, generator, one_mask_per_token=True)


def _infill_deletes(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    lengths = _poisson_lengths(round(p * len(tokens)), lam, generator)
    return _place_spans(tokens, mask_id, lengths, generator, no_mask=True)


def _infill_no_zero_spans(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    n_masked, lengths = round(p * len(tokens)), []
    while sum(lengths) < n_masked:
        k = int(torch.poisson(torch.tensor([float(lam)]), generator=generator).item())
        lengths.append(min(max(k, 1), n_masked - sum(lengths)))  # 0 clamped to 1
    return _place_spans(tokens, mask_id, lengths, generator)


def _infill_lam_fixed(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    lengths = _poisson_lengths(round(p * len(tokens)), 3.0, generator)
    return _place_spans(tokens, mask_id, lengths, generator)


def _infill_p_per_token(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Each token starts a span with probability p (the rate applied per token, not in total)."""
    out, i, toks = [], 0, tokens.tolist()
    while i < len(toks):
        if torch.rand(1, generator=generator).item() < p:
            k = int(torch.poisson(torch.tensor([float(lam)]), generator=generator).item())
            out.append(mask_id)
            i += k
            if i < len(toks):
                out.append(toks[i])  # a kept token after each span: spans never touch
                i += 1
        else:
            out.append(toks[i])
            i += 1
    return tokens.new_tensor(out)


def _infill_interior_only(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    lengths = _poisson_lengths(round(p * len(tokens)), lam, generator)
    interior = lambda n_kept: list(range(1, n_kept)) or [0]  # noqa: E731
    return _place_spans(tokens, mask_id, lengths, generator, gaps=interior)


def _infill_global_rng(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    lengths = _poisson_lengths(round(p * len(tokens)), lam, None)  # the generator is ignored
    return _place_spans(tokens, mask_id, lengths, None)


text_infilling = Exercise(
    name="text_infilling",
    lesson="10",
    module="bart",
    reference=_bart.text_infilling,
    forbidden=(
        "transformer_lab.bart.text_infilling",
        "transformer_lab.text_infilling",
    ),
    mistakes=[
        Mistake(
            "mask-per-token",
            "each removed token got its own [MASK]: text infilling replaces a whole span by "
            "ONE [MASK], so the model must also work out how many tokens are missing.",
            _infill_one_mask_per_token,
        ),
        Mistake(
            "deleted",
            "the spans are deleted without a [MASK] in their place (that is token deletion): "
            "each span, even an empty one, leaves exactly one [MASK].",
            _infill_deletes,
        ),
        Mistake(
            "no-zero-spans",
            "there are no 0-length spans: Poisson(λ) gives k = 0 with probability e^-λ, and "
            "such a span inserts a [MASK] without removing anything (do not clamp or redraw "
            "k = 0).",
            _infill_no_zero_spans,
        ),
        Mistake(
            "lam-fixed",
            "the span lengths do not use the `lam` argument: draw them from Poisson(lam) "
            "(torch.poisson of a tensor filled with lam), not from a fixed mean of 3.",
            _infill_lam_fixed,
        ),
        Mistake(
            "p-per-token",
            "p is the fraction of the document's tokens to remove in total (round(p * L)), "
            "not the chance that a span starts at each token: draw span lengths until they "
            "cover exactly round(p * L) tokens, cutting the last one short.",
            _infill_p_per_token,
        ),
        Mistake(
            "interior-only",
            "spans are never placed at the very start or the very end: the n_kept kept "
            "tokens leave n_kept + 1 gaps, both ends included, and each is equally likely.",
            _infill_interior_only,
        ),
        Mistake(
            "global-rng",
            "the random numbers do not come from the `generator` argument (the global "
            "generator, Python's random or NumPy was used): pass generator=generator to "
            "torch.poisson / torch.randperm / torch.rand so a seed reproduces the noise.",
            _infill_global_rng,
        ),
    ],
    driver=_suite_driver(_infilling_suite, "structure, reproducibility and span statistics"),
    doc="text_infilling(tokens, mask_id, p=0.3, lam=3.0, generator=None) -> (L',)",
)


# ==============================================================================================
# Exercise 2 — sentence_permutation(tokens, eos_id, generator=None)

EOS = 2


def _sentence_doc(seed: int, n_sentences: int, rest: int, eos_id: int = EOS) -> torch.Tensor:
    """n_sentences sentences of 1-4 distinct ids then eos_id, followed by `rest` ids (no eos)."""
    g = _gen(seed)
    n_content = 4 * n_sentences + rest
    ids = [t for t in (torch.randperm(n_content + 1, generator=g) + 10).tolist() if t != eos_id]
    parts, i = [], 0
    for _ in range(n_sentences):
        length = int(torch.randint(1, 5, (), generator=g))
        parts += [*ids[i : i + length], eos_id]
        i += length
    parts += ids[i : i + rest]
    return torch.tensor(parts)


def _pieces(tokens: list[int], eos_id: int, before: bool = False) -> list[tuple[int, ...]]:
    """Sentences ending with eos_id (or, with before=True, pieces cut just before each eos_id)."""
    pieces, cur = [], []
    for t in tokens:
        if before and t == eos_id and cur:
            pieces.append(tuple(cur))
            cur = []
        cur.append(t)
        if not before and t == eos_id:
            pieces.append(tuple(cur))
            cur = []
    if cur:
        pieces.append(tuple(cur))
    return pieces


def _is_arrangement(out: list[int], pieces: list[tuple[int, ...]]) -> bool:
    """Is `out` the concatenation of `pieces` in some order (each exactly once)?"""
    left = Counter(pieces)
    i = 0
    while i < len(out):
        for piece in left:
            if left[piece] and tuple(out[i : i + len(piece)]) == piece:
                left[piece] -= 1
                i += len(piece)
                break
        else:
            return False
    return not +left


def _permutation_structure(doc: list[int], out: list[int], eos_id: int, label: str) -> tuple:
    """The input sentences' order in `out` (as indices), or a _Broken saying what is wrong."""
    sentences = _pieces(doc, eos_id)
    has_rest = bool(doc) and doc[-1] != eos_id
    rest = sentences.pop() if has_rest else ()
    if len(out) != len(doc):
        raise _Broken(
            "length",
            f"{label}: the output has {len(out)} tokens, the input {len(doc)}: a permutation "
            "keeps every token",
        )
    body, tail = out[: len(out) - len(rest)], tuple(out[len(out) - len(rest) :])
    if tail == rest and _is_arrangement(body, sentences):
        order, i = [], 0
        for s in _pieces(body, eos_id):
            order.append(sentences.index(s))
            i += len(s)
        return tuple(order)
    if Counter(out) != Counter(doc):
        raise _Broken(
            "multiset", f"{label}: tokens were lost, added or duplicated: input {doc}, output {out}"
        )
    if _is_arrangement(out, sentences + ([rest] if rest else [])):
        raise _Broken(
            "tail",
            f"{label}: the unfinished last sentence {list(rest)} (no {eos_id} at its end) moved: "
            f"it stays at the end, only whole sentences are shuffled. Input {doc}, output {out}",
        )
    if _is_arrangement(out, _pieces(doc, eos_id, before=True)):
        raise _Broken(
            "boundary",
            f"{label}: the document was cut just *before* each {eos_id}, so the boundary token "
            f"travels with the next sentence: a sentence ends with its {eos_id}. Input {doc}, "
            f"output {out}",
        )
    raise _Broken(
        "not sentences",
        f"{label}: the output is not the input's sentences in another order (each sentence, "
        f"ending with {eos_id}, kept whole): input {doc}, output {out}",
    )


def _permutation_suite(fn: Callable, thorough: bool, call: Callable = _direct) -> int:
    def run(label: str, *args, **kwargs):
        return call(lambda: fn(*args, **kwargs), label)

    n_calls = 0
    cases = [(4, 0, EOS), (3, 2, EOS), (1, 0, EOS), (0, 5, EOS), (5, 1, EOS)]
    if thorough:
        cases += [(0, 0, EOS), (6, 3, 17), (2, 0, 0), (8, 1, EOS)]
    n_seeds = 8 if thorough else 3
    for device, dtype in _id_settings(thorough):
        for n_sent, rest, eos_id in cases:
            for seed in range(n_seeds):
                doc = _sentence_doc(200 + seed, n_sent, rest, eos_id).to(device=device, dtype=dtype)
                label = f"sentence_permutation(tokens={doc.tolist()}, eos_id={eos_id})"
                out = run(label, doc, eos_id, generator=_gen(seed))
                out_list = _require_ids(out, doc, label)
                _permutation_structure(doc.tolist(), out_list, eos_id, label)
                n_calls += 1
    if thorough:  # a document of boundary tokens only: every sentence is a lone eos
        doc = torch.tensor([EOS, EOS, EOS])
        label = f"sentence_permutation(tokens={doc.tolist()}, eos_id={EOS})"
        out = _require_ids(run(label, doc, EOS, generator=_gen(0)), doc, label)
        if out != doc.tolist():
            raise _Broken("length", f"{label}: got {out}, expected {doc.tolist()}")
    doc = _sentence_doc(5, 5, 2)
    label = f"sentence_permutation(tokens={doc.tolist()}, eos_id={EOS})"
    n_calls += _reproducible(call, label, lambda g: fn(doc, EOS, generator=g))
    _require_ids(run(label + " with generator=None", doc, EOS), doc, label)
    # statistics: every order of n sentences equally likely
    stats = [(3, 0, 300)] if not thorough else [(3, 1, 600), (4, 0, 960)]
    for n_sent, rest, n_draws in stats:
        doc = _sentence_doc(77 + n_sent, n_sent, rest)
        label = f"sentence_permutation(tokens={doc.tolist()}, eos_id={EOS})"
        counts: Counter = Counter()
        for s in range(n_draws):
            out = run(label, doc, EOS, generator=_gen(50_000 + s))
            counts[
                _permutation_structure(doc.tolist(), _require_ids(out, doc, label), EOS, label)
            ] += 1
            n_calls += 1
        orders = list(itertools.permutations(range(n_sent)))
        _uniform_cells(
            counts,
            orders,
            n_draws,
            "sentence order",
            label,
            zero_key=lambda cell: "unreachable",
            key="uniform",
        )
    return n_calls


def _perm_tokens(tokens, eos_id, generator=None):
    return tokens[torch.randperm(len(tokens), generator=generator).to(tokens.device)]


def _perm_tail_too(tokens, eos_id, generator=None):
    pieces = [tokens.new_tensor(p) for p in _pieces(tokens.tolist(), eos_id)]
    order = torch.randperm(len(pieces), generator=generator).tolist()
    return torch.cat([pieces[i] for i in order]) if pieces else tokens.clone()


def _perm_cut_before(tokens, eos_id, generator=None):
    pieces = [tokens.new_tensor(p) for p in _pieces(tokens.tolist(), eos_id, before=True)]
    order = torch.randperm(len(pieces), generator=generator).tolist()
    return torch.cat([pieces[i] for i in order]) if pieces else tokens.clone()


def _perm_sattolo(tokens, eos_id, generator=None):
    """Sattolo's off-by-one Fisher-Yates (j < i): only cyclic orders, never the original."""
    sentences = _pieces(tokens.tolist(), eos_id)
    rest = sentences.pop() if tokens.numel() and tokens[-1] != eos_id else ()
    for i in range(len(sentences) - 1, 0, -1):
        j = int(torch.randint(i, (), generator=generator))
        sentences[i], sentences[j] = sentences[j], sentences[i]
    return tokens.new_tensor([t for s in [*sentences, rest] for t in s])


def _perm_global_rng(tokens, eos_id, generator=None):
    sentences = _pieces(tokens.tolist(), eos_id)
    rest = sentences.pop() if tokens.numel() and tokens[-1] != eos_id else ()
    order = torch.randperm(len(sentences)).tolist()  # the generator is ignored
    return tokens.new_tensor([t for i in order for t in sentences[i]] + list(rest))


sentence_permutation = Exercise(
    name="sentence_permutation",
    lesson="10",
    module="bart",
    reference=_bart.sentence_permutation,
    forbidden=(
        "transformer_lab.bart.sentence_permutation",
        "transformer_lab.sentence_permutation",
        "transformer_lab.bart._split_sentences",
    ),
    mistakes=[
        Mistake(
            "tokens-shuffled",
            "the tokens were shuffled, not the sentences: split the document into sentences "
            "(each ending with eos_id) and shuffle those, keeping each sentence whole.",
            _perm_tokens,
        ),
        Mistake(
            "tail-shuffled",
            "the unfinished last sentence (the tokens after the last eos_id) was shuffled in "
            "with the others: it has no boundary, so it stays at the end.",
            _perm_tail_too,
        ),
        Mistake(
            "cut-before-eos",
            "the document was cut before each eos_id, so a boundary token travels with the "
            "next sentence: cut just after each eos_id (a sentence ends with its boundary).",
            _perm_cut_before,
        ),
        Mistake(
            "cyclic-orders",
            "some orders never come out (e.g. a Fisher-Yates shuffle with j < i only gives "
            "cyclic orders and never the original): every one of the n! orders must be "
            "equally likely; torch.randperm(n, generator=generator) gives that.",
            _perm_sattolo,
        ),
        Mistake(
            "global-rng",
            "the random numbers do not come from the `generator` argument: pass "
            "generator=generator to torch.randperm so a seed reproduces the shuffle.",
            _perm_global_rng,
        ),
    ],
    driver=_suite_driver(
        _permutation_suite, "structure, reproducibility and the distribution of orders"
    ),
    doc="sentence_permutation(tokens, eos_id, generator=None) -> (L,)",
)


# ==============================================================================================
# Exercise 3 — document_rotation(tokens, generator=None)


def _rotation_offset(doc: list[int], out: list[int], label: str) -> int:
    """k such that out == doc[k:] + doc[:k] (doc has distinct ids), or a _Broken."""
    if len(out) != len(doc):
        raise _Broken(
            "length",
            f"{label}: the output has {len(out)} tokens, the input {len(doc)}: a rotation keeps "
            f"every token (input {doc}, output {out})",
        )
    if not doc:
        return 0
    k = doc.index(out[0]) if out[0] in doc else -1
    if k < 0 or out != doc[k:] + doc[:k]:
        raise _Broken(
            "not rotation",
            f"{label}: the output is not a rotation tokens[k:] + tokens[:k] of the input: input "
            f"{doc}, output {out}",
        )
    return k


def _rotation_suite(fn: Callable, thorough: bool, call: Callable = _direct) -> int:
    def run(label: str, *args, **kwargs):
        return call(lambda: fn(*args, **kwargs), label)

    n_calls = 0
    lengths = [5, 8, 1, 2, 0] + ([3, 17, 64] if thorough else [])  # 0: an empty document
    n_seeds = 8 if thorough else 3
    for device, dtype in _id_settings(thorough):
        for L in lengths:
            for seed in range(n_seeds):
                doc = _distinct_doc(300 + seed, L).to(device=device, dtype=dtype)
                label = f"document_rotation(tokens={doc.tolist()})"
                out = run(label, doc, generator=_gen(seed))
                _rotation_offset(doc.tolist(), _require_ids(out, doc, label), label)
                n_calls += 1
    doc = _distinct_doc(9, 12)
    label = f"document_rotation(tokens={doc.tolist()})"
    n_calls += _reproducible(call, label, lambda g: fn(doc, generator=g))
    _require_ids(run(label + " with generator=None", doc), doc, label)
    outs = {tuple(run(label, doc, generator=_gen(s)).tolist()) for s in range(20)}
    n_calls += 20
    if len(outs) == 1:  # 20 seeds, 12 starts: all equal with chance 12^-19
        raise _Broken(
            "constant",
            f"{label}: 20 different seeds all gave the same result {list(outs.pop())}: the start "
            "must be drawn at random, k uniform in 0 .. L-1",
        )
    # k from 0..L (a common slip) makes k = 0 twice as likely: at L = 4 and 1600 draws it comes
    # out ~640 times, 7 of its standard deviations above the band (tests/checks/test_lesson10.py)
    stats = [(4, 1600)] if not thorough else [(4, 1600), (7, 1750)]
    for L, n_draws in stats:
        doc = _distinct_doc(40 + L, L)
        label = f"document_rotation(tokens={doc.tolist()})"
        counts: Counter = Counter()
        for s in range(n_draws):
            out = run(label, doc, generator=_gen(60_000 + s))
            counts[_rotation_offset(doc.tolist(), _require_ids(out, doc, label), label)] += 1
            n_calls += 1
        _uniform_cells(
            counts,
            list(range(L)),
            n_draws,
            "start k =",
            label,
            zero_key=lambda k: "start 0" if k == 0 else "unreachable",
            key="uniform",
        )
    return n_calls


def _rot_never_zero(tokens, generator=None):
    if len(tokens) < 2:
        return tokens.clone()
    k = int(torch.randint(1, len(tokens), (), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def _rot_fixed(tokens, generator=None):
    k = len(tokens) // 2
    return torch.cat([tokens[k:], tokens[:k]])


def _rot_k_up_to_L(tokens, generator=None):
    k = int(torch.randint(len(tokens) + 1, (), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def _rot_drops_a_token(tokens, generator=None):
    if len(tokens) == 0:
        return tokens.clone()
    k = int(torch.randint(len(tokens), (), generator=generator))
    return torch.cat([tokens[k + 1 :], tokens[:k]]) if k + 1 < len(tokens) else tokens[:k].clone()


def _rot_global_rng(tokens, generator=None):
    k = int(torch.randint(max(len(tokens), 1), ()))  # the generator is ignored
    return torch.cat([tokens[k:], tokens[:k]])


document_rotation = Exercise(
    name="document_rotation",
    lesson="10",
    module="bart",
    reference=_bart.document_rotation,
    forbidden=("transformer_lab.bart.document_rotation", "transformer_lab.document_rotation"),
    mistakes=[
        Mistake(
            "never-zero",
            "the document never keeps its own start (k = 0 never comes out): draw k uniformly "
            "from 0 .. L-1, torch.randint(L, ...), so the original order is one of the L "
            "rotations.",
            _rot_never_zero,
        ),
        Mistake(
            "fixed",
            "every call gives the same rotation: the start k must be drawn at random from "
            "`generator`, a new k for each document.",
            _rot_fixed,
        ),
        Mistake(
            "k-up-to-L",
            "k is drawn from 0 .. L (L + 1 values), and k = L gives the same rotation as "
            "k = 0, which then comes out twice as often: draw k from 0 .. L-1.",
            _rot_k_up_to_L,
        ),
        Mistake(
            "drops-token",
            "a token is lost at the seam: the rotation is tokens[k:] followed by tokens[:k], "
            "every token exactly once.",
            _rot_drops_a_token,
        ),
        Mistake(
            "global-rng",
            "the random numbers do not come from the `generator` argument: pass "
            "generator=generator to torch.randint so a seed reproduces the rotation.",
            _rot_global_rng,
        ),
    ],
    driver=_suite_driver(
        _rotation_suite, "structure, reproducibility and the distribution of starts"
    ),
    doc="document_rotation(tokens, generator=None) -> (L,)",
)
