"""Checks for lesson 03, practice 1 — `practice_thinking`, deck 004's self-attention question.

Lecture 02's *Thinking Machines* example: q1·k1 = 112, q1·k2 = 96, d_k = 64. The answer is a dict
with the two attention weights of *Thinking* (computed) and the letter of the deck's option that
matches them. Each wrong pair of weights is named by the slip that produces it, computed here from
the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .answers import letters, plain_number, unanswered
from .exercise import Mistake, fail, practice

__all__ = ["practice_thinking"]

DOTS = (112.0, 96.0)  # q1·k1, q1·k2
D_K = 64
OPTIONS = {  # the deck's options: weights on (v1, v2)
    "A": (0.5, 0.5),
    "B": (0.54, 0.46),
    "C": (0.88, 0.12),
    "D": (0.12, 0.88),
}
TOLERANCE = 0.005  # the weights to two decimals are enough


def thinking_weights(
    dots: tuple[float, float] = DOTS, d_k: int = D_K, how: str = "right"
) -> tuple[float, float]:
    """The weights of *Thinking* on (v1, v2): `how` is "right" (softmax of dots / √d_k) or one of
    the slips the check names."""
    x = torch.tensor(dots, dtype=torch.float64)
    ways: dict[str, Callable[[], torch.Tensor]] = {
        "right": lambda: torch.softmax(x / math.sqrt(d_k), 0),
        "no-scale": lambda: torch.softmax(x, 0),
        "scaled-by-d_k": lambda: torch.softmax(x / d_k, 0),
        "no-softmax": lambda: x / x.sum(),
        "swapped": lambda: torch.softmax(x / math.sqrt(d_k), 0).flip(0),
        "uniform": lambda: torch.full((2,), 0.5, dtype=torch.float64),
        "log-weights": lambda: torch.log_softmax(x / math.sqrt(d_k), 0),
    }
    w = ways[how]()
    return float(w[0]), float(w[1])


def _form_mistake(got, right) -> Mistake | None:
    """The right weights written in another form: as percentages, or rounded to one decimal."""
    if max(abs(g / 100 - r) for g, r in zip(got, right)) <= TOLERANCE:
        return Mistake(
            "percent",
            "those are percentages: give the weights as fractions that sum to 1 "
            f"({right[0]:.2f}, {right[1]:.2f}).",
        )
    one_decimal = all(abs(g * 10 - round(g * 10)) < 1e-9 for g in got)
    if one_decimal and all(abs(g - round(r, 1)) < 1e-9 for g, r in zip(got, right)):
        return Mistake(
            "rounded",
            f"those are the weights rounded to one decimal: give two ({right[0]:.2f}, "
            f"{right[1]:.2f}); the check allows ±{TOLERANCE:g}.",
        )
    return None


def _weight_mistakes() -> dict[str, Mistake]:
    s1, s2 = (d / math.sqrt(D_K) for d in DOTS)
    return {
        "no-scale": Mistake(
            "no-scale",
            f"the dot products {DOTS[0]:g} and {DOTS[1]:g} went into the softmax as they are: "
            f"divide them by √d_k = {math.sqrt(D_K):g} first (scores {s1:g} and {s2:g}).",
        ),
        "scaled-by-d_k": Mistake(
            "scaled-by-d_k",
            f"the dot products were divided by d_k = {D_K}: the scale is √d_k = "
            f"{math.sqrt(D_K):g}.",
        ),
        "no-softmax": Mistake(
            "no-softmax",
            "the scores were divided by their sum: attention turns them into weights with a "
            "softmax, e^{s_j} / Σ e^{s_j'}.",
        ),
        "swapped": Mistake(
            "swapped",
            "the weights are the other way round: the first is the weight on v1, Thinking's own "
            f"value, whose key gives the larger dot product ({DOTS[0]:g}).",
        ),
        "uniform": Mistake(
            "uniform",
            "equal weights would need equal scores; the two dot products differ by "
            f"{DOTS[0] - DOTS[1]:g}, the scaled scores by {s1 - s2:g}.",
        ),
        "log-weights": Mistake(
            "log-weights",
            "those are the log-weights (log_softmax): the weights are softmax(scores), "
            "positive and summing to 1.",
        ),
    }


def _letter_mistakes() -> dict[str, Mistake]:
    s1, s2 = (d / math.sqrt(D_K) for d in DOTS)
    return {
        "A": Mistake(
            "letter-uniform",
            f"(A) gives equal weights, which would need equal scores; the scaled scores are "
            f"{s1:g} and {s2:g}.",
        ),
        "B": Mistake(
            "letter-no-softmax",
            f"(B) is {DOTS[0]:g}/{sum(DOTS):g}: the dot products divided by their sum. Attention "
            "turns the scaled scores into weights with a softmax.",
        ),
        "D": Mistake(
            "letter-swapped",
            f"(D) puts the larger weight on v2, but the larger dot product ({DOTS[0]:g}) is with "
            "Thinking's own key, k1.",
        ),
    }


def _as_pair(name: str, value) -> tuple[float, float]:
    """The two weights as floats: a list, a tuple, a tensor or a NumPy array of two numbers (NumPy
    numbers and 0-d tensors in a list read as the numbers they hold)."""
    value = plain_number(value)
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().flatten().tolist()
    elif type(value).__module__ == "numpy" and hasattr(value, "tolist"):  # an array
        value = value.reshape(-1).tolist()
    if isinstance(value, (list, tuple)):
        value = type(value)(plain_number(w) for w in value)
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or not all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in value)
    ):
        alone = isinstance(value, (int, float)) and not isinstance(value, bool)
        first = alone and abs(value - thinking_weights()[0]) <= TOLERANCE
        fail(
            name,
            f'"weights" should be two numbers, the weights on v1 and v2, got {value!r}',
            mistake=Mistake(
                "first-weight-only",
                "that is the weight on v1 alone: give both weights, (weight on v1, weight on "
                "v2), which sum to 1.",
            )
            if first
            else None,
        )
    return float(value[0]), float(value[1])


@practice
def practice_thinking(value, thorough: bool = False) -> None:
    """Check the Thinking Machines answer: a dict with "weights" (the two weights of *Thinking* on
    v1 and v2) and "answer" (the letter, A to D, of the deck's option that matches them)."""
    name = "practice_thinking"
    if value is ...:
        raise unanswered(name)
    if not isinstance(value, dict) or set(value) != {"weights", "answer"}:
        got = sorted(value) if isinstance(value, dict) else type(value).__name__
        fail(name, f'the answer should be a dict with the keys "weights" and "answer", got {got}')
    got = _as_pair(name, value["weights"])
    right = thinking_weights()
    if max(abs(g - r) for g, r in zip(got, right)) > TOLERANCE:
        mistakes = _weight_mistakes()
        close = [
            key
            for key in mistakes
            if max(abs(g - w) for g, w in zip(got, thinking_weights(how=key))) <= TOLERANCE
        ]
        fail(
            name,
            f"weights ({got[0]:.4g}, {got[1]:.4g}) are not the attention weights of 'Thinking'",
            mistake=mistakes[close[0]] if close else _form_mistake(got, right),
        )
    letter = letters(name, value["answer"], "ABCD")
    matching = min(OPTIONS, key=lambda k: max(abs(o - r) for o, r in zip(OPTIONS[k], right)))
    if letter != matching:
        fail(
            name,
            f"({letter}) is not the option your weights ({got[0]:.2f}, {got[1]:.2f}) match",
            mistake=_letter_mistakes().get(letter),
        )
    print(
        f"✓ practice_thinking: softmax({DOTS[0]:g}/{math.sqrt(D_K):g}, "
        f"{DOTS[1]:g}/{math.sqrt(D_K):g}) = ({right[0]:.2f}, {right[1]:.2f}), option ({matching})"
    )
