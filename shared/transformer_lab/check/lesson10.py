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

They are declared in three modules, imported in course order: this one (text_infilling), then
``lesson10_permutation`` (sentence_permutation) and ``lesson10_rotation`` (document_rotation).
What the three share (``Broken``, the suite run as a trial, the id settings, reproducibility,
exact binomial bands) is in ``lesson10_properties``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .. import bart as _bart
from .exercise import Exercise, Mistake
from .lesson10_properties import (
    Broken,
    direct,
    distinct_doc,
    gen,
    id_settings,
    reproducible,
    require_ids,
    suite_driver,
)

__all__ = ["text_infilling"]


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
            raise Broken(
                "foreign",
                f"{label}: the output holds {t}, which is neither an input token nor mask_id",
            )
    kept = [where[t] for t in out if t != mask_id]
    if any(a >= b for a, b in zip(kept, kept[1:])):
        raise Broken(
            "order",
            f"{label}: the kept tokens are not the input's tokens in their original order: "
            f"input {doc}, output {out}",
        )
    runs, prev, k, n_masks = [], -1, 0, 0  # (masks, removed tokens, first removed) per gap
    for t in [*out, None]:  # None: the end of the document closes the last gap
        if t == mask_id:
            n_masks += 1
            continue
        nxt = kept[k] if t is not None else len(doc)
        runs.append((n_masks, nxt - prev - 1, prev + 1))  # input tokens removed in between
        n_masks, prev = 0, nxt
        k += t is not None
    # one [MASK] per removed token everywhere (a 0-length span still one), or spans that share
    # a gap: then another gap holds one [MASK] for a run of several removed tokens
    per_token = all(n == max(gap, 1) for n, gap, _ in runs if n)
    spans = []
    for n_masks, gap, start in runs:
        if n_masks >= 2:
            where_ = f"{n_masks} [MASK]s stand side by side (for {gap} removed token(s))"
            raise Broken(
                "mask per token" if n_masks == gap and per_token else "adjacent",
                f"{label}: {where_} in {out}; spans never touch (a kept token separates two "
                "spans), so each run of removed tokens gets ONE [MASK]",
            )
        if n_masks:
            spans.append(gap)
        elif gap:
            raise Broken(
                "deleted",
                f"{label}: {gap} input token(s) (from position {start}) disappeared with no "
                f"[MASK] in their place: input {doc}, output {out}",
            )
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


# Structure cases: (L, p, lam, mask_id). The last visible one has more spans than gaps: 9 of its
# 12 tokens go in spans of mean 0.5 (about 18 spans, most of them empty) and the 3 kept tokens
# leave 4 gaps, so the extra spans must be folded into the others.
FOLD_CASE = (12, 0.75, 0.5, MASK)
_FOLD_HINT = (
    "; here more spans are drawn than the L - round(p * L) + 1 gaps can take: add the extra "
    "spans' lengths to the others, do not drop them"
)
_INFILL_CASES = [
    (40, 0.3, 3.0, MASK),
    (25, 0.5, 1.0, MASK),
    (12, 0.25, 3.0, MASK),
    (7, 0.0, 3.0, MASK),
    (33, 0.6, 2.0, 0),  # p * L = 19.8: round, not the floor, gives the number removed
    FOLD_CASE,
]
_INFILL_CASES_MORE = [  # added in the thorough run
    (60, 0.15, 5.0, 50264),
    (10, 0.9, 0.3, MASK),
    (1, 1.0, 3.0, 0),
    (0, 0.3, 3.0, MASK),
    (100, 0.3, 3.0, MASK),
    (5, 1.0, 1.0, MASK),
]


def _infilling_suite(fn: Callable, thorough: bool, call: Callable = direct) -> int:
    def run(label: str, *args, **kwargs):
        return call(lambda: fn(*args, **kwargs), label)

    n_calls = 0
    # 1. structure on hand-picked cases
    cases = _INFILL_CASES + (_INFILL_CASES_MORE if thorough else [])
    n_seeds = 8 if thorough else 3
    for device, dtype in id_settings(thorough):
        for L, p, lam, mask_id in cases:
            for seed in range(n_seeds):
                doc = distinct_doc(100 + seed, L).to(device=device, dtype=dtype)
                label = f"text_infilling(tokens of length {L}, mask_id={mask_id}, p={p}, lam={lam})"
                out = run(label, doc, mask_id, p=p, lam=lam, generator=gen(seed))
                out_list = require_ids(out, doc, label)
                spans = _spans_behind_masks(doc.tolist(), out_list, mask_id, label)
                n_calls += 1
                if abs(sum(spans) - p * L) > 0.5 + 1e-9:
                    fold = (L, p, lam, mask_id) == FOLD_CASE  # its own key: names no mistake
                    raise Broken(
                        "extra spans" if fold else "count",
                        f"{label}: {sum(spans)} tokens were removed, but p * L = {p * L:g}: "
                        f"remove round(p * L) = {round(p * L)} tokens in all"
                        + (_FOLD_HINT if fold else "")
                        + f" (input {doc.tolist()}, output {out_list})",
                    )
                if round(p * L) == 0 and doc.numel() and out.data_ptr() == doc.data_ptr():
                    raise Broken(
                        "not a copy",
                        f"{label}: nothing is to be removed, and the tensor returned is the input "
                        "itself (or a view of it): return a copy, tokens.clone(), so that changing "
                        "the noised document cannot change the clean one",
                    )
                if round(p * L) == 0 and out_list != doc.tolist():
                    raise Broken(
                        "p0",
                        f"{label}: nothing is to be removed (round(p * L) = 0), so no span is "
                        f"drawn and the output is the input; got {out_list}",
                    )
    # 2. reproducibility, and the global generator (None) works too
    doc = distinct_doc(7, 40)
    label = "text_infilling(tokens of length 40, mask_id=3, p=0.3, lam=3.0)"
    n_calls += reproducible(call, label, lambda g: fn(doc, MASK, p=0.3, lam=3.0, generator=g))
    require_ids(run(label + " with generator=None", doc, MASK, p=0.3, lam=3.0), doc, label)
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
            doc = distinct_doc(seed, L)
            out = run(label, doc, MASK, p=p, lam=lam, generator=gen(seed))
            out_list = require_ids(out, doc, label)
            spans = _spans_behind_masks(doc.tolist(), out_list, MASK, label)
            n_calls += 1
            if sum(spans) != n_masked:
                raise Broken(
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
            raise Broken(
                "no zeros",
                f"text_infilling: {where} no span had length 0, but Poisson({lam}) gives length 0 "
                f"with probability e^-{lam} = {math.exp(-lam):.3f}: span lengths {shown}",
            )
        for o, e in zip(hist, expected):
            lo, hi = span_band(e)
            if not lo <= o <= hi:
                raise Broken(
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
            raise Broken(
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
    tokens,
    mask_id,
    lengths,
    generator,
    gaps=None,
    one_mask_per_token=False,
    no_mask=False,
    with_replacement=False,
):
    """Put each span in its own gap between kept tokens (gaps: candidate gap indices); with
    `with_replacement`, gaps drawn independently, so that two spans may share one."""
    n_kept = len(tokens) - sum(lengths)
    candidates = list(range(n_kept + 1)) if gaps is None else gaps(n_kept)
    while len(lengths) > len(candidates):  # more spans than gaps: fold the extra ones in
        extra = lengths.pop()
        lengths[-1] += extra
    if with_replacement:
        pick = torch.randint(len(candidates), (len(lengths),), generator=generator).tolist()
    else:
        pick = torch.randperm(len(candidates), generator=generator)[: len(lengths)].tolist()
    at: dict[int, list[int]] = {}
    for g, length in zip(sorted(candidates[i] for i in pick), lengths):
        at.setdefault(g, []).append(length)
    out, i, toks = [], 0, tokens.tolist()
    for g in range(n_kept + 1):
        for length in at.get(g, []):
            if not no_mask:
                out += [mask_id] * (max(length, 1) if one_mask_per_token else 1)
            i += length
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


def _infill_shared_gaps(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Each span's gap drawn with replacement (torch.randint): two spans may share a gap."""
    lengths = _poisson_lengths(round(p * len(tokens)), lam, generator)
    return _place_spans(tokens, mask_id, lengths, generator, with_replacement=True)


def _infill_fixed_dtype(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    """Rebuilds the result with torch.tensor(list): int64 whatever the input's dtype."""
    lengths = _poisson_lengths(round(p * len(tokens)), lam, generator)
    out = _place_spans(tokens, mask_id, lengths, generator)
    return torch.tensor(out.tolist(), dtype=torch.long, device=tokens.device)


def _infill_returns_input(tokens, mask_id, p=0.3, lam=3.0, generator=None):
    if round(p * len(tokens)) == 0:
        return tokens  # the input itself, not a copy
    lengths = _poisson_lengths(round(p * len(tokens)), lam, generator)
    return _place_spans(tokens, mask_id, lengths, generator)


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
            "gaps-shared",
            "two spans were put in the same gap (the gaps drawn with replacement, e.g. "
            "torch.randint), so their [MASK]s stand side by side: each span takes a gap of its "
            "own, distinct ones, torch.randperm(n_gaps, generator=generator)[:n_spans].",
            _infill_shared_gaps,
        ),
        Mistake(
            "global-rng",
            "the random numbers do not come from the `generator` argument (the global "
            "generator, Python's random or NumPy was used): pass generator=generator to "
            "torch.poisson / torch.randperm / torch.rand so a seed reproduces the noise.",
            _infill_global_rng,
        ),
        Mistake(
            "fixed-dtype",
            "the result is rebuilt with a fixed dtype (torch.tensor(list) gives int64): keep the "
            "input's dtype, tokens.new_tensor(list) or torch.cat of slices of tokens.",
            _infill_fixed_dtype,
        ),
        Mistake(
            "returns-input",
            "with nothing to remove (round(p * L) = 0) you returned the input tensor itself: "
            "return a copy, tokens.clone(), as the task asks.",
            _infill_returns_input,
        ),
    ],
    driver=suite_driver(_infilling_suite, "structure, reproducibility and span statistics"),
    doc="text_infilling(tokens, mask_id, p=0.3, lam=3.0, generator=None) -> (L',)",
)
