"""Checks for lesson 12, exercise 5 — `positive_random_features`: Performer's FAVOR+ features.

φ(x) = exp(ω·x − |x|²/2) / √m for the m rows ω of omega. Compared with the reference (outputs and
gradients with respect to x and ω, float64 and float32, every device when thorough), then the
property the features exist for: with many Gaussian directions, φ(q)·φ(k) estimates exp(q·k).
"""

from __future__ import annotations

import math

import torch

from .. import scaling as _scaling
from .drivers import CustomDriver, FunctionDriver
from .exercise import Case, Exercise, Mistake, fail
from .forbid import ImplementThisYourself

__all__ = ["positive_random_features"]

# ==============================================================================================
# Mutants: the formula with one slip each.


def _features_bug(bug: str):
    """The catalogued positive_random_features mistake `bug`, with the exercise's signature."""

    def impl(x, omega):
        if bug == "quarter-scaled":  # x / d^(1/4): the attention's scaling of q and k
            x = x * x.shape[-1] ** -0.25
        squared = (x * x).sum() if bug == "norm-whole-tensor" else (x * x).sum(-1, keepdim=True)
        norm_term = {
            "no-norm": 0.0,
            "plus-norm": -squared / 2,
            "no-half": squared,
            "norm-not-squared": squared.sqrt() / 2,
            "omega-norm": (omega * omega).sum(-1) / 2,  # |ω_i|²/2, not |x|²/2
        }.get(bug, squared / 2)
        m, d = omega.shape
        if bug == "norm-outside":  # exp(ω·x) / √m − |x|²/2: the norm term outside the exp
            return torch.exp(x @ omega.T) / math.sqrt(m) - squared / 2
        if bug == "omega-untransposed":  # omega's columns, (m, d) taken as (d, m)
            return torch.exp(x @ omega - norm_term) / math.sqrt(m)
        if bug == "scale-inside":  # exp(ω·x / √m − |x|²/2): the 1/√m put inside the exp
            return torch.exp(x @ omega.T / math.sqrt(m) - norm_term)
        features = torch.exp(x @ omega.T - norm_term)
        divisor = {"no-sqrt-m": 1.0, "divided-by-m": m, "sqrt-d": math.sqrt(d)}
        return features / divisor.get(bug, math.sqrt(m))

    impl.__name__ = impl.__qualname__ = f"positive_random_features_{bug.replace('-', '_')}"
    return impl


# ==============================================================================================
# Cases: |x| about 1 or less, m ≠ d, several rows (a norm over the whole tensor shows).


def _cases(thorough: bool) -> list[Case]:
    def case(x_shape, m, scale=0.5, label=""):
        d = x_shape[-1]

        def make(g):
            x = torch.randn(*x_shape, generator=g, dtype=torch.float64) * scale
            return {"x": x, "omega": torch.randn(m, d, generator=g, dtype=torch.float64)}

        text = f"x {tuple(x_shape)}, omega ({m}, {d})"
        return Case(text + (f", {label}" if label else ""), make)

    cases = [case((5, 4), 7), case((2, 3, 6), 16, label="batched rows")]
    if thorough:
        cases += [
            case((8,), 3, label="one vector"),
            case((2, 2, 3, 5), 1, label="one feature"),
            case((4, 2), 64, scale=1.5, label="larger |x|"),
            case((3, 16), 8, scale=0.25, label="m < d"),
        ]
    return cases


# ==============================================================================================
# The kernel estimate: φ(q)·φ(k) over many directions approaches exp(q·k).

_PAIRS, _D, _M, _TOLERANCE = 4, 4, 20_000, 0.05


def _check(ex, student, thorough):
    n = FunctionDriver(_cases).run(ex, student, thorough)
    g = torch.Generator().manual_seed(12)
    # |q|, |k| about 0.6: the estimate's relative spread is about sqrt((exp(|q + k|²) − 1) / m),
    # near 1 % here, so the tolerance is several spreads (and the draw is fixed: no flaky check)
    q, k = (torch.randn(_PAIRS, _D, generator=g, dtype=torch.float64) * 0.3 for _ in range(2))
    omega = torch.randn(_M, _D, generator=g, dtype=torch.float64)
    text = f"{_PAIRS} pairs q, k ({_D},), |q|, |k| about 0.6, omega ({_M}, {_D}) ~ N(0, I)"

    def estimate():
        return (student(q, omega) * student(k, omega)).sum(-1)

    try:
        got = ex.run_student(student, estimate)
    except (ImplementThisYourself, NotImplementedError):
        raise
    except Exception as err:
        fail(ex, f"your function raised {type(err).__name__}: {err}", text, cause=err)
    exact = torch.exp((q * k).sum(-1))
    error = float(((got - exact) / exact).abs().max())
    if not error <= _TOLERANCE:
        fail(
            ex,
            f"φ(q)·φ(k) = {[round(float(v), 3) for v in got]} does not estimate "
            f"exp(q·k) = {[round(float(v), 3) for v in exact]} (largest relative error "
            f"{error:.1%}, more than {_TOLERANCE:.0%})",
            text,
        )
    covered = FunctionDriver(_cases).covered(thorough)
    return n + 1, covered + f"; φ(q)·φ(k) ≈ exp(q·k) with {_M:,} features"


positive_random_features = Exercise(
    name="positive_random_features",
    lesson="12",
    module="scaling",
    reference=_scaling.positive_random_features,
    forbidden=(
        "transformer_lab.scaling.positive_random_features",
        "transformer_lab.positive_random_features",
        "transformer_lab.scaling.performer_features",
    ),
    mistakes=[
        Mistake(
            "no-norm",
            "the −|x|²/2 term is missing: E[exp(ω·q) exp(ω·k)] = exp(|q + k|²/2), and only "
            "exp(−|q|²/2 − |k|²/2) turns it into exp(q·k).",
            _features_bug("no-norm"),
        ),
        Mistake(
            "plus-norm",
            "|x|²/2 is added, not subtracted: φ(x) = exp(ω·x − |x|²/2) / √m.",
            _features_bug("plus-norm"),
        ),
        Mistake(
            "no-half",
            "|x|² is subtracted whole, not halved: φ(x) = exp(ω·x − |x|²/2) / √m.",
            _features_bug("no-half"),
        ),
        Mistake(
            "norm-not-squared",
            "|x| is used where the squared norm |x|² = Σ x_i² belongs: φ(x) = exp(ω·x − |x|²/2) / √m.",
            _features_bug("norm-not-squared"),
        ),
        Mistake(
            "norm-whole-tensor",
            "|x|² is summed over the whole tensor, not over each vector's last axis: use "
            "(x * x).sum(-1, keepdim=True).",
            _features_bug("norm-whole-tensor"),
        ),
        Mistake(
            "no-sqrt-m",
            "the features are not divided by √m: φ(q)·φ(k) then sums m estimates of exp(q·k) "
            "instead of averaging them.",
            _features_bug("no-sqrt-m"),
        ),
        Mistake(
            "divided-by-m",
            "the features are divided by m, not √m: each of φ(q) and φ(k) carries 1/√m, so that "
            "their dot product is the average over the m directions.",
            _features_bug("divided-by-m"),
        ),
        Mistake(
            "sqrt-d",
            "the features are divided by √d (the head size), not √m (the number of directions, "
            "omega.shape[0]).",
            _features_bug("sqrt-d"),
        ),
        Mistake(
            "norm-outside",
            "−|x|²/2 was subtracted outside the exponential: it belongs inside, "
            "exp(ω·x − |x|²/2) / √m (the features are then all positive).",
            _features_bug("norm-outside"),
        ),
        Mistake(
            "quarter-scaled",
            "x is scaled by d^(−1/4) first: that belongs to the attention that uses the "
            "features (q and k each divided by d^(1/4), so that q·k comes out divided by √d); "
            "the features are of x as given, φ(x) = exp(ω·x − |x|²/2) / √m.",
            _features_bug("quarter-scaled"),
        ),
        Mistake(
            "omega-norm",
            "|ω_i|²/2, the norm of each direction, is subtracted where |x|²/2 belongs: the term "
            "is the squared norm of x, (x * x).sum(-1, keepdim=True) / 2, the same for every "
            "direction.",
            _features_bug("omega-norm"),
        ),
        Mistake(
            "omega-untransposed",
            "x @ omega multiplies x by omega's columns: omega holds one direction ω_i per row, "
            "(m, d), so the projections are x @ omega.T, shape (..., m).",
            _features_bug("omega-untransposed"),
        ),
        Mistake(
            "scale-inside",
            "the 1/√m went inside the exponential (exp(ω·x / √m − |x|²/2)): it scales the "
            "features, not the projections, φ(x) = exp(ω·x − |x|²/2) / √m.",
            _features_bug("scale-inside"),
        ),
    ],
    driver=CustomDriver(_check),
    doc="positive_random_features(x, omega) -> φ(x) = exp(ω·x − |x|²/2) / √m, shape (..., m)",
)
