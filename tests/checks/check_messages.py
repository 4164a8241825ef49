"""Record the exact failure message of every catalogued mistake of every exercise.

Run each mistake through its check (visible and thorough) and write {exercise: {mistake: message}}.
Mistakes are named by key when they have one, else by position ("#3"); the sentence is the stable
identity across the conversion, so the fixture is keyed by sentence. Timings are normalised.

    .venv/bin/python tests/checks/check_messages.py > tests/checks/fixtures/check_messages.json   # regenerate
The guard is tests/checks/test_messages_frozen.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys

import torch

from transformer_lab import check

_TIME = re.compile(r"\d+\.\d+ s\b")


def outcome(name: str, impl, thorough: bool) -> str:
    """The check's failure message, or "passed: <its printed line>" (timings normalised)."""
    torch.manual_seed(0)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            getattr(check, name)(impl, thorough=thorough)
    except AssertionError as err:
        return _TIME.sub("<t> s", str(err))
    except Exception as err:  # noqa: BLE001 - the frozen record says what was raised
        return f"{type(err).__name__}: {_TIME.sub('<t> s', str(err))}"
    return "passed: " + _TIME.sub("<t> s", printed.getvalue().strip())


def record(lessons: set[str] | None = None) -> dict:
    out: dict = {}
    for name, ex in check.EXERCISES.items():
        if lessons and ex.lesson not in lessons:
            continue
        out[name] = {
            m.sentence: {
                "visible": outcome(name, m.impl, False),
                "thorough": outcome(name, m.impl, True),
            }
            for m in ex.mistakes
        }
    return out


if __name__ == "__main__":
    # never save into a student package (set here, not on import: the tests that import this
    # module set it for themselves, and the worker that runs them runs other tests too)
    os.environ.setdefault("TRANSFORMER_LAB_GRADING", "1")
    json.dump(record(set(sys.argv[1:]) or None), sys.stdout, indent=1, ensure_ascii=False)
    print()
