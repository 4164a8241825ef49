"""Checks for lesson 07, exercise 4 — `length_normalised_score`, beam search's length penalty.

The convention taught (lecture 07, `encoder_decoder.beam_search`): plain length normalisation,
log p(Y | x) / |Y|^alpha, |Y| the number of generated tokens with EOS counted; not GNMT's
((5 + |Y|) / 6)^alpha, which the lecture names as the softer alternative.
"""

from __future__ import annotations

import torch

from .. import encoder_decoder as _encoder_decoder
from .drivers import FunctionDriver
from .exercise import Case, Exercise, Mistake

__all__ = ["length_normalised_score"]

# ==============================================================================================
# Mutants: each a full wrong implementation (none calls the reference, which is forbidden).


def _alpha_ignored(log_probs, lengths, alpha):
    """Always the mean log-probability per token: alpha = 1 whatever it is."""
    return log_probs / lengths.to(log_probs.dtype)


def _multiplied(log_probs, lengths, alpha):
    """log p * |Y|^alpha: the penalty turned round, which favours short outputs even more."""
    return log_probs * lengths.to(log_probs.dtype) ** alpha


def _gnmt(log_probs, lengths, alpha):
    """GNMT's ((5 + |Y|) / 6)^alpha: the other convention, not the one this exercise asks for."""
    return log_probs / ((5 + lengths.to(log_probs.dtype)) / 6) ** alpha


def _eos_not_counted(log_probs, lengths, alpha):
    """(|Y| - 1)^alpha: the EOS token left out of the length."""
    return log_probs / (lengths.to(log_probs.dtype) - 1) ** alpha


def _bos_counted(log_probs, lengths, alpha):
    """(|Y| + 1)^alpha: the BOS token counted in the length too."""
    return log_probs / (lengths.to(log_probs.dtype) + 1) ** alpha


def _precedence(log_probs, lengths, alpha):
    """log p / |Y| * alpha: the power written as a product (operator precedence)."""
    return log_probs / lengths.to(log_probs.dtype) * alpha


def _integer_alpha(log_probs, lengths, alpha):
    """|Y| ** int(alpha): the exponent truncated to an integer (0.6 becomes 0)."""
    return log_probs / lengths.to(log_probs.dtype) ** int(alpha)


def _alpha_times_length(log_probs, lengths, alpha):
    """log p / (alpha * |Y|): alpha as a factor of the length, not its exponent."""
    return log_probs / (alpha * lengths.to(log_probs.dtype))


def _power_swapped(log_probs, lengths, alpha):
    """alpha ** |Y|: base and exponent swapped."""
    return log_probs / alpha ** lengths.to(log_probs.dtype)


def _probabilities(log_probs, lengths, alpha):
    """exp(log p) / |Y|^alpha: the probability normalised, not its logarithm."""
    return log_probs.exp() / lengths.to(log_probs.dtype) ** alpha


def _root(log_probs, lengths, alpha):
    """|Y| ** (1 / alpha): the alpha-th root of the length, not its power."""
    return log_probs / lengths.to(log_probs.dtype) ** (1.0 / alpha)


def _floor_division(log_probs, lengths, alpha):
    """log p // |Y|^alpha: floor division, the scores rounded down to whole numbers."""
    return log_probs // lengths.to(log_probs.dtype) ** alpha


def _lengths_view_as(log_probs, lengths, alpha):
    """lengths.view_as(log_probs): breaks when the lengths only broadcast to log_probs' shape."""
    return log_probs / lengths.view_as(log_probs).to(log_probs.dtype) ** alpha


# ==============================================================================================
# Cases.


def _length_cases(thorough: bool) -> list[Case]:
    def case(shape, alpha, max_length=12, min_length=1, lengths_shape=None, dtype=None):
        lengths_shape = lengths_shape or shape

        def make(g):
            log_probs = -torch.rand(shape, generator=g, dtype=torch.float64) * 10
            lengths = torch.randint(min_length, max_length + 1, lengths_shape, generator=g)
            lengths.view(-1)[0] = min_length  # the shortest hypothesis is always there
            return {"log_probs": log_probs, "lengths": lengths, "alpha": alpha}

        text = f"log_probs {shape}, lengths {min_length}..{max_length}, alpha={alpha}"
        if lengths_shape != shape:
            text += f", lengths of shape {lengths_shape} (broadcast)"
        return Case(text, make, dtype=dtype)

    # The text's two rules last (so an earlier case names the other mistakes): lengths that only
    # broadcast to log_probs' shape, and the scores in log_probs' dtype (bfloat16: lengths cast
    # to float32 would turn them float32).
    cases = [
        case((6,), 0.6, min_length=2),
        case((2, 4), 2.0, min_length=2),
        case((3, 4), 0.6, min_length=2, lengths_shape=(3, 1)),
        case((5,), 0.6, min_length=2, dtype=torch.bfloat16),
    ]
    if thorough:
        cases += [
            case((5,), 0.0),  # no penalty: the totals unchanged
            case((8,), 1.0),  # the mean log-probability per token
            case((3, 4), 0.6),  # a hypothesis that is EOS alone (length 1)
            case((1,), 1.5, max_length=1),
            case((2, 3, 5), 0.25, max_length=40),
        ]
    return cases


length_normalised_score = Exercise(
    name="length_normalised_score",
    lesson="07",
    module="encoder_decoder",
    reference=_encoder_decoder.length_normalised_score,
    forbidden=(
        "transformer_lab.encoder_decoder.length_normalised_score",
        "transformer_lab.encoder_decoder.beam_search",
    ),
    mistakes=[
        Mistake(
            "alpha-ignored",
            "every score is divided by |Y| itself, whatever alpha is: divide by |Y| to the power "
            "alpha (alpha = 0 leaves the total log-probability as it is).",
            _alpha_ignored,
        ),
        Mistake(
            "multiplied",
            "the log-probability is multiplied by |Y|^alpha: divide by it, so that a longer "
            "hypothesis's (more negative) total is brought up, not pushed further down.",
            _multiplied,
        ),
        Mistake(
            "gnmt",
            "this is GNMT's penalty ((5 + |Y|)/6)^alpha: the exercise asks for plain length "
            "normalisation, log p / |Y|^alpha, as our beam_search uses.",
            _gnmt,
        ),
        Mistake(
            "eos-not-counted",
            "the length leaves out one token: `lengths` already counts the generated tokens, EOS "
            "included; divide by lengths ** alpha as given.",
            _eos_not_counted,
        ),
        Mistake(
            "bos-counted",
            "the BOS token is counted in the length, (|Y| + 1)^α: |Y| counts the tokens the "
            "decoder produced, EOS included, not the BOS it was given.",
            _bos_counted,
        ),
        Mistake(
            "precedence",
            "log p / |Y| * α multiplies by α: the penalty is a power, log p / |Y| ** α (in "
            "Python, ** binds tighter than /, and / and * go left to right).",
            _precedence,
        ),
        Mistake(
            "integer-alpha",
            "α is truncated to an integer (int(alpha), or a power taken in integer arithmetic): "
            "|Y| ** 0.6 is not |Y| ** 0; convert the lengths to floats and keep α as it is.",
            _integer_alpha,
        ),
        Mistake(
            "alpha-times-length",
            "alpha multiplies the length: it is the exponent, log p / |Y|^alpha.",
            _alpha_times_length,
        ),
        Mistake(
            "power-swapped",
            "the score is divided by alpha ** |Y|: base and exponent are the other way round, "
            "|Y| ** alpha.",
            _power_swapped,
        ),
        Mistake(
            "probabilities",
            "the probability exp(log p) is normalised: the score divides the log-probability "
            "itself.",
            _probabilities,
        ),
        Mistake(
            "root",
            "the score is divided by the alpha-th root of |Y|, |Y| ** (1 / alpha): alpha is the "
            "exponent itself, log p / |Y| ** alpha.",
            _root,
        ),
        Mistake(
            "floor-division",
            "the scores are whole numbers: // is floor division, which rounds the quotient down; "
            "divide with /.",
            _floor_division,
        ),
        Mistake(
            "lengths-reshaped",
            "the lengths were reshaped to log_probs' shape (view_as / reshape / expand_as of the "
            "same size), which fails when they only broadcast to it, e.g. one length per row "
            "(B, 1) for scores (B, k): divide and let broadcasting do it.",
            _lengths_view_as,
        ),
    ],
    driver=FunctionDriver(_length_cases, outputs=("scores",)),
    doc="length_normalised_score(log_probs (...), lengths (...), alpha) -> log_probs / "
    "lengths ** alpha",
)
