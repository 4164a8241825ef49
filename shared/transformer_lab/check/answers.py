"""Reading a practice question's answer: letters in quotes, checked for form before content.

    letters("practice_drop_in", "A, c", "ABCDE", many=True)  ->  "AC"
    plain_number(np.int64(11))  ->  11;  plain_number(torch.tensor(0.5))  ->  0.5

A wrong *form* (an untouched ``...``, a number, a letter that is not an option) fails with a
sentence that says what to write; whether the letters are *right* is the question's own check.
"""

from __future__ import annotations

import re

import torch

from .exercise import Mistake, NotWrittenYet, fail


def unanswered(name: str) -> NotWrittenYet:
    """The error for an answer still at its released ``...``: one line, like an untouched stub."""
    return NotWrittenYet(
        f"`{name}` is not written yet: set it in the cell above.",
        exercise=name,
    )


def plain_number(value):
    """`value` as a plain Python number where it is a number in another dress: a NumPy scalar or
    0-d array (np.int64, np.float64) or a 0-d tensor gives its int (integer dtypes) or float
    (floating dtypes). Anything else comes back unchanged: a Python number, a bool of any kind, a
    complex number, a tensor or array of several numbers, a string."""
    if isinstance(value, torch.Tensor):
        if value.dim() == 0 and value.dtype != torch.bool and not value.is_complex():
            return value.item()
        return value
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        kind = value.dtype.kind  # "i"/"u" integers, "f" floats; "b" (bool), "c", "O"... kept
        if kind in "iu":
            return int(value)
        if kind == "f":
            return float(value)
    return value


def letters(name: str, value, options: str, *, many: bool = False) -> str:
    """The answer `value` to question `name` as sorted, distinct upper-case letters of `options`.

    `many`: several letters may be chosen ("ACE", "A, C, E" or "(A) (C) (E)"); otherwise exactly
    one ("C" or "(c)")."""
    example = '"AC"' if many else '"A"'
    what = "one or more letters" if many else "a letter"
    if value is ...:
        raise unanswered(name)
    if value is None:
        fail(name, f"replace the None with your answer, {what} such as {example}")
    if not isinstance(value, str):
        fail(
            name,
            f"the answer should be {what} in quotes, such as {example}, got {type(value).__name__}",
        )
    # "C and D", "A or B": the joining words are not letters of the answer
    words = [w for w in re.findall(r"[A-Za-z]+", value) if w.lower() not in ("and", "or")]
    chosen = "".join(words).upper()
    choices = ", ".join(options)
    if not chosen or any(letter not in options for letter in chosen):
        fail(
            name,
            f"the answer should be made of the letters {choices}, got {value!r}",
            mistake=_OPTION_TEXT if _words_not_letters(words) else None,
        )
    if not many and (len(words) != 1 or len(chosen) != 1):
        several = Mistake(
            "several-letters",
            "the question has one correct statement and asks for its letter alone: several "
            "letters are not read as a partial answer, so keep the one you can justify.",
        )
        fail(name, f"choose exactly one of {choices}, got {value!r}", mistake=several)
    return "".join(sorted(set(chosen)))


_OPTION_TEXT = Mistake(
    "option-text",
    "the answer is the letter that stands before the statement you chose, not the statement's "
    'words: write that letter alone, in quotes (such as "B").',
)


def _words_not_letters(words: list[str]) -> bool:
    """Whether an answer that is not made of the options' letters holds words (an option's text,
    "New York"), not a wrong letter or letters in capitals ("AX")."""
    return any(len(word) > 1 and not word.isupper() for word in words)
