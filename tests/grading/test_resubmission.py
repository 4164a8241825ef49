"""The latest submission wins (issue 28, item 2): by its submitted-at time, not by the folder
graded last; every regrade keeps the score before it, and the report says what changed and why.

The grading decisions are what is tested here, so a student's notebook is "graded" by a stand-in
for `Grader._grade` that reads the score from the file (no sandbox, a fraction of a second).
Each check keeps today's behaviour as a mutant that must fail it.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest
from test_instructor_grade import NAME, TINY, copy_of, tiny_course  # noqa: F401

from transformer_lab_grader import cell_limits, collect, commands, grading, timing
from transformer_lab_grader import records as rec

MONDAY = datetime.datetime(2026, 11, 16, 9, 0, tzinfo=datetime.timezone.utc)
FRIDAY = datetime.datetime(2026, 11, 20, 17, 0, tzinfo=datetime.timezone.utc)


def stand_in_grade(self, student: str, folder: Path, sha: str) -> dict:
    """`Grader._grade` without a sandbox: the notebook file holds the scores, either one number
    (2 or more: the add test passed; 1 or 3: the mul test) or {grade_id: score}."""
    text = (folder / NAME).read_text()
    given = json.loads(text) if text.startswith("{") else None
    if given is None:
        score = float(text)
        given = {"add-test": 2.0 * (score >= 2), "mul-test": 1.0 * (score in (1.0, 3.0))}
    cells = {
        gid: {
            "score": float(given.get(gid, 0.0)),
            "max_score": c["points"],
            "passed": given.get(gid, 0.0) == c["points"],
            "output": "",
        }
        for gid, c in self.cells.items()
    }
    return {
        "student": student,
        "assignment": TINY,
        "status": "graded",
        "reason": None,
        "score": sum(c["score"] for c in cells.values()),
        "max_score": sum(c["points"] for c in self.cells.values()),
        "flags": [],
        "cells": cells,
    }


def grade_without_a_sandbox(monkeypatch) -> None:
    monkeypatch.setattr(grading.Grader, "_grade", stand_in_grade)
    monkeypatch.setattr(
        grading.Grader, "time_limits", lambda self: cell_limits.CellLimits({}, 60.0)
    )
    monkeypatch.setattr(cell_limits, "describe", lambda limits: "fixed")


@pytest.fixture
def course(tiny_course, tmp_path, monkeypatch) -> Path:  # noqa: F811
    dest = copy_of(tiny_course, tmp_path)
    gradebook = tiny_course / "autograder" / "work" / "gradebook.db"
    if gradebook.is_file():  # the lesson registered already: no nbgrader run per test
        (dest / "autograder" / "work").mkdir()
        shutil.copy(gradebook, dest / "autograder" / "work" / "gradebook.db")
    grade_without_a_sandbox(monkeypatch)
    return dest.resolve()


def _handed_in(root: Path, student: str, score: float, when: datetime.datetime) -> Path:
    """A folder <root>/<student>/<lesson>/ whose notebook was saved at `when`."""
    folder = root / student / TINY
    folder.mkdir(parents=True, exist_ok=True)
    (folder / NAME).write_text(f"{score:g}")
    os.utime(folder / NAME, (when.timestamp(), when.timestamp()))
    return root


def _grade(course: Path, subs: Path, **options) -> int:
    settings = dict(
        out=course / "g.csv",
        jobs=1,
        force=False,
        students=None,
        memory_gib=4.0,
        wall_seconds=60.0,
        cell_timeout=None,
        isolate=False,
    )
    return commands.grade(course, TINY, subs, **{**settings, **options})


def _carol(course: Path) -> dict:
    return json.loads(rec.record_path(course, TINY, "carol").read_text())


def _latest_wins(course: Path, tmp_path: Path, capsys) -> None:
    first = _handed_in(tmp_path / "first", "carol", 0, MONDAY)
    _grade(course, first)
    resubmitted = _handed_in(tmp_path / "resubmitted", "carol", 3, FRIDAY)
    _grade(course, resubmitted)
    capsys.readouterr()
    for force in (False, True):  # §5's regrade of the first folder, plain and --force
        assert _grade(course, first, force=force) == 0
        assert (
            "carol: this submission (2026-11-16T09:00:00+00:00) is older than the one on "
            "record (2026-11-20T17:00:00+00:00), kept the newer; --allow-older grades it"
        ) in capsys.readouterr().out
        record = _carol(course)
        assert (record["score"], record["submitted_at"]) == (3.0, "2026-11-20T17:00:00+00:00")
    assert record["why"] == "new submission"
    assert [(h["score"], h["why"]) for h in record["history"]] == [(0.0, "first submission")]
    _grade(course, first, allow_older=True)  # the instructor's choice, kept in the history
    record = _carol(course)
    assert (record["score"], record["why"]) == (0.0, "new submission")
    assert [h["score"] for h in record["history"]] == [0.0, 3.0]


def test_an_older_folder_never_replaces_a_newer_submission(course, tmp_path, capsys):
    _latest_wins(course, tmp_path, capsys)


MUTANTS = {
    "the folder graded last wins (today)": ("older", lambda at, than: False),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_the_last_folder_winning_fails_the_check(course, tmp_path, capsys, monkeypatch, mutant):
    name, replacement = MUTANTS[mutant]
    monkeypatch.setattr(timing, name, replacement)
    with pytest.raises(AssertionError):
        _latest_wins(course, tmp_path, capsys)


def test_a_regrade_without_a_history_fails_the_check(course, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(grading, "history_entry", lambda old, at, why: {"submitted_at": at})
    with pytest.raises((AssertionError, KeyError)):
        _latest_wins(course, tmp_path, capsys)


def test_the_report_lists_what_changed_and_why(course, tmp_path):
    _grade(course, _handed_in(tmp_path / "a", "carol", 0, MONDAY))
    _grade(course, _handed_in(tmp_path / "a", "dave", 2, MONDAY))
    _grade(course, _handed_in(tmp_path / "b", "carol", 3, FRIDAY))
    _grade(course, tmp_path / "a", students=["dave"], force=True)
    commands.report(course, TINY, tmp_path / "report")
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["changes"] == [
        {
            "student": "carol",
            "before": 0.0,
            "after": 3.0,
            "why": "new submission",
            "submitted_at": "2026-11-20T17:00:00+00:00",
            "gradings": 2,
        },
        {
            "student": "dave",
            "before": 2.0,
            "after": 2.0,
            "why": "--force",
            "submitted_at": "2026-11-16T09:00:00+00:00",
            "gradings": 2,
        },
    ]
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| carol | 0 | 3 | new submission | 2026-11-20T17:00:00+00:00 | 2 |" in text


def test_the_exchange_timestamp_is_the_submitted_at_time_before_the_file_time(tmp_path):
    folder = _handed_in(tmp_path, "erin", 1, FRIDAY) / "erin" / TINY
    assert timing.submitted_at(folder, {}) == "2026-11-20T17:00:00+00:00"
    who = {"timestamp": "2026-11-16 09:00:00.000000 UTC"}
    assert timing.submitted_at(folder, who) == "2026-11-16T09:00:00+00:00"
    assert timing.older("2026-11-16T10:00:00+01:00", "2026-11-16T09:30:00+00:00")


def test_a_canvas_file_keeps_its_upload_time(tmp_path):
    archive = tmp_path / "canvas.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        info = zipfile.ZipInfo("smithjohn_LATE_111_901_99_tiny.ipynb", (2026, 11, 21, 8, 30, 0))
        zf.writestr(info, b"{}")
    collect.collect(archive, TINY, tmp_path / "out")
    assert timing.submitted_at(tmp_path / "out" / "111" / TINY, {}) == ("2026-11-21T08:30:00+00:00")
