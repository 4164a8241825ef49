"""Every catalogued mistake of every exercise fails with exactly the message it had.

tests/checks/fixtures/check_messages.json was recorded from the checks before they moved to declared
exercises (``Exercise``/``Mistake``/drivers); converting a lesson module must not change a word.
Keyed by exercise and mistake sentence; each entry holds the visible and the thorough outcome
(timings normalised). Regenerate only for a deliberate change of wording:
``.venv/bin/python tests/checks/check_messages.py > tests/checks/fixtures/check_messages.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import check_messages  # noqa: E402

from transformer_lab import check  # noqa: E402

FROZEN = json.loads((Path(__file__).parent / "fixtures" / "check_messages.json").read_text())


@pytest.fixture(autouse=True)
def _grading(monkeypatch):
    monkeypatch.setenv("TRANSFORMER_LAB_GRADING", "1")  # never save a mutant anywhere


def test_every_exercise_is_frozen():
    assert list(FROZEN) == list(check.EXERCISES)


@pytest.mark.parametrize("name", list(FROZEN))
def test_messages_unchanged(name):
    ex = check.EXERCISES[name]
    assert [m.sentence for m in ex.mistakes] == list(FROZEN[name])
    for mistake in ex.mistakes:
        for mode, thorough in (("visible", False), ("thorough", True)):
            got = check_messages.outcome(name, mistake.impl, thorough)
            assert got == FROZEN[name][mistake.sentence][mode], (mistake.key, mode)
