"""Checks for lesson 01, practice 3 — `practice_lstm`, deck 004's "Transformer vs LSTM".

One letter of A to D; each wrong one is named with the reason it is wrong.
"""

from __future__ import annotations

from .answers import letters
from .exercise import Mistake, fail, practice

__all__ = ["practice_lstm"]

LSTM_RIGHT = "B"  # easier to parallelise: 1 sequential step per layer against n
D_MODEL = 512  # the base Transformer's width, for the counts the sentences quote


def _lstm_mistakes() -> dict[str, Mistake]:
    d = D_MODEL
    n = 2 * d
    return {
        "A": Mistake(
            "fewer-operations",
            f"(A) is not true in general: per layer, self-attention does n²·d multiply-adds and "
            f"a recurrent layer n·d² (Vaswani et al., Table 1), so attention does fewer only "
            f"while n < d. At d = {d} and n = {n}: {n * n * d:,} against {n * d * d:,}. What "
            "it has fewer of is sequential steps.",
        ),
        "C": Mistake(
            "fewer-parameters",
            f"(C) is false: at the same width d, an LSTM layer has 8·d² weights (four gates, each "
            f"with an input and a hidden matrix), a Transformer layer 4·d² in attention plus 8·d² "
            f"in its FFN (d_ff = 4·d): {8 * d * d:,} against {12 * d * d:,} at d = {d}.",
        ),
        "D": Mistake(
            "better-at-order",
            "(D) is false: self-attention has no sense of order at all (swap two words and their "
            "outputs just swap); a Transformer knows positions only through the positional "
            "encodings of lesson 04, while an LSTM reads in order by construction.",
        ),
    }


@practice
def practice_lstm(value, thorough: bool = False) -> None:
    """Check the answer to "Transformer vs LSTM": the letter (A to D) of the correct statement."""
    name = "practice_lstm"
    letter = letters(name, value, "ABCD")
    if letter != LSTM_RIGHT:
        fail(name, f"({letter}) is not the correct statement", mistake=_lstm_mistakes()[letter])
    print(
        "✓ practice_lstm: B — an LSTM needs n sequential steps for n tokens, self-attention one "
        "per layer"
    )
