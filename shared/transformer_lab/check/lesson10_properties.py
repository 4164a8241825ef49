"""What lesson 10's three checks share: a broken property, the suite that looks for them run as
one trial, the settings ids are checked under, reproducibility, and exact binomial bands.

Each noising check (``lesson10``: text_infilling, ``lesson10_permutation``: sentence_permutation,
``lesson10_rotation``: document_rotation) is a *suite*: a function ``suite(fn, thorough, call)``
that calls ``fn`` many times, returns the number of calls and raises ``Broken(key, message)`` at
the first property ``fn`` breaks. ``suite_driver`` turns a suite into the exercise's
``TrialDriver``: the student's ``Broken`` becomes the failure, and the first catalogued mistake
whose own run breaks a property with the same key is named (a result of the wrong form, such as
a list or the wrong dtype, names no mistake).

**False failures.** A correct implementation is a random sample, so a statistical test could
fail by chance. Every statistical test is set so that the chance of failing a correct
implementation is under FALSE_FAILURE = 1e-7, and a check call runs at most 3 of them, so a
correct implementation fails a call with probability < 1e-6 (tests/checks/test_lesson10.py
recomputes the numbers).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable

import torch

from .answer_drivers import Finding, TrialDriver
from .devices import available_devices

__all__ = [
    "FALSE_FAILURE",
    "Broken",
    "binomial_band",
    "chi_square_sf",
    "chi_square_threshold",
    "direct",
    "distinct_doc",
    "gen",
    "id_settings",
    "reproducible",
    "require_ids",
    "suite_driver",
    "uniform_cells",
    "uniform_fit",
]

# The chance that a correct implementation fails one statistical test is below this.
FALSE_FAILURE = 1e-7


class Broken(Exception):
    """A property the noising function breaks: `key` names the kind, `message` says what."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key, self.message = key, message


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def direct(thunk: Callable, *_):
    """How a suite calls a function by default (the TrialDriver passes the student's `call`: the
    forbidden names switched off, and an exception fails the check saying which call raised)."""
    return thunk()


def require_ids(out, tokens: torch.Tensor, label: str) -> list[int]:
    """The output must be a 1-D integer tensor with the input's dtype and device."""
    if not isinstance(out, torch.Tensor):
        raise Broken(
            "type", f"{label} returned a {type(out).__name__}; return a 1-D tensor of token ids"
        )
    if out.dim() != 1:
        raise Broken(
            "shape", f"{label} returned shape {tuple(out.shape)}; the result must be 1-D, (L',)"
        )
    if out.dtype != tokens.dtype:
        raise Broken(
            "dtype",
            f"{label} returned dtype {out.dtype} but the input ids have dtype {tokens.dtype} "
            "(keep the input's dtype, e.g. build new pieces with tokens.new_tensor(...))",
        )
    if out.device.type != tokens.device.type:
        raise Broken(
            "device",
            f"{label} returned a tensor on {out.device} but the input is on {tokens.device}",
        )
    return out.tolist()


def id_settings(thorough: bool) -> list[tuple[torch.device, torch.dtype]]:
    """Where the structural cases run: CPU int64 and int32 (the stated rule "the input's dtype",
    visible too); thorough on every accelerator as well."""
    if not thorough:
        return [(torch.device("cpu"), torch.long), (torch.device("cpu"), torch.int32)]
    return [(d, dt) for d in available_devices() for dt in (torch.long, torch.int32)]


def distinct_doc(seed: int, n: int, start: int = 10) -> torch.Tensor:
    """n distinct ids >= start in random order: each output token has one place in the input."""
    return torch.randperm(n, generator=gen(seed)) + start


def _cuda_devices() -> list[int]:
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


# Six seeds: code that draws from a source the check cannot seed (Python's `random`, numpy) gives
# the same result twice by chance, 1 in L for a rotation of L tokens; with two seeds a browser walk
# once saw the visible check pass such code (1 in ~144), with six it is 1 in ~3 million.
REPRODUCIBLE_SEEDS = (11, 12, 13, 14, 15, 16)


def reproducible(call: Callable, label: str, draw: Callable[[torch.Generator], object]) -> int:
    """The same seed twice must give the same output (the randomness comes from `generator`).

    Code that draws from the global generator instead gives two different results, which the
    message quotes. The global generator is seeded once before the draws (and put back after), so
    the quoted results are the same whatever ran before: on a GPU the thorough check's earlier
    cases run on more devices, and such code draws more from it there than on the CPU alone.
    """

    def once(seed: int):
        return call(lambda: draw(gen(seed)), label)

    with torch.random.fork_rng(devices=_cuda_devices()):
        torch.manual_seed(0)
        for seed in REPRODUCIBLE_SEEDS:
            a, b = once(seed), once(seed)
            if not torch.equal(a, b):
                raise Broken(
                    "generator",
                    f"{label} gave two different results for two generators with the same seed "
                    f"({a.tolist()} and {b.tolist()}): draw every random number from `generator`",
                )
    return 2 * len(REPRODUCIBLE_SEEDS)


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


def uniform_cells(counts: Counter, cells: list, n: int, what: str, label: str, zero_key, key):
    """Every cell of a uniform distribution must come out, within its exact binomial band.
    `key` names a failure: a str, or key(lo, hi) of the band (to tell which way it failed).

    Each of the k cells is Binomial(n, 1/k); with a band of level FALSE_FAILURE / k per cell, a
    union bound puts the chance that a correct implementation fails under FALSE_FAILURE.
    """
    k = len(cells)
    lo, hi = binomial_band(n, 1.0 / k, FALSE_FAILURE / k)
    table = ", ".join(f"{c}: {counts.get(c, 0)}" for c in cells)
    for cell in cells:
        if counts.get(cell, 0) == 0:
            raise Broken(
                zero_key(cell),
                f"{label}: over {n} seeded calls {what} {cell} never came out, though each of "
                f"the {k} should come out about {n / k:.0f} times ({table})",
            )
    for cell in cells:
        if not lo <= counts.get(cell, 0) <= hi:
            raise Broken(
                key(lo, hi) if callable(key) else key,
                f"{label}: over {n} seeded calls the {k} possible {what}s are not equally "
                f"likely: each should come out {lo}..{hi} times, got {table}",
            )


# ----------------------------------------------------------------------------------------------
# A goodness-of-fit test over all cells at once (Pearson's chi-square), in plain `math`.
#
# Per-cell bands miss a distribution whose cells are all a little off: the textbook biased
# shuffle (swap position i with any j in 0..n-1) gives 3 sentences' orders probabilities 4/27 to
# 5/27 instead of 1/6, inside every band. Summed over all cells the deviations add up.


def chi_square_sf(x: float, df: int) -> float:
    """P(X > x) for X ~ chi-square with `df` degrees of freedom (SciPy's; imported here, so that
    importing the checks does not pay for scipy.stats)."""
    from scipy.stats import chi2

    return float(chi2.sf(x, df))


@functools.cache
def chi_square_threshold(df: int, alpha: float) -> float:
    """The x with P(X > x) = alpha, X ~ chi-square(df)."""
    from scipy.stats import chi2

    return float(chi2.isf(alpha, df))


def uniform_fit(counts: Counter, cells: list, n: int, what: str, label: str, key: str):
    """All k cells together must fit the uniform distribution: Pearson's statistic
    Σ (count − n/k)² / (n/k) is compared with the chi-square(k − 1) quantile of level
    FALSE_FAILURE (the approximation is good here: every expected count n/k is in the hundreds)."""
    k = len(cells)
    expected = n / k
    stat = sum((counts.get(c, 0) - expected) ** 2 for c in cells) / expected
    threshold = chi_square_threshold(k - 1, FALSE_FAILURE)
    if stat > threshold:
        table = ", ".join(f"{c}: {counts.get(c, 0)}" for c in cells)
        raise Broken(
            key,
            f"{label}: over {n} seeded calls the {k} possible {what}s are not equally likely: "
            f"each should come out about {expected:.0f} times, and together the counts are "
            f"too far from that (chi-square {stat:.1f} over {k} {what}s, above {threshold:.1f}, "
            f"which a fair shuffle exceeds with probability {FALSE_FAILURE:g}). A common cause: "
            f"swapping each position with any position (j in 0..n-1) instead of one not yet "
            f"placed (j in i..n-1) makes some orders likelier. Got {table}",
        )


# a result of the wrong form names no mistake (a dtype does: one catalogued habit gives it)
_FORM_KEYS = ("type", "shape", "device")


def _suite_trial(suite: Callable) -> Callable:
    """The TrialDriver trial of a whole suite (its one case is `thorough`): the number of calls it
    made, or a Finding tagged with the property broken. A catalogued mistake whose own run of the
    suite breaks the same property first is named."""

    def trial(impl: Callable, thorough: bool, _setting, call: Callable):
        # generator=None cases draw from the global generator: leave it as it was
        with torch.random.fork_rng(devices=_cuda_devices()):
            try:
                return suite(impl, thorough, call)
            except Broken as broken:
                return Finding(broken.message, tag=broken.key, evidence=broken.key)

    return trial


def _whole_suite(thorough: bool) -> list[bool]:
    return [thorough]


def _nameable(student_key: str, _mistake_key: str) -> bool:
    return student_key not in _FORM_KEYS


def suite_driver(suite: Callable, covered: str) -> TrialDriver:
    return TrialDriver(_whole_suite, _suite_trial(suite), covered=covered, matches=_nameable)
