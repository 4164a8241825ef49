"""The term's settings (issue 28, items 2 and 4): due dates, an extension, a late policy and a
roster, in autograder/work/term.toml, applied by the export (raw and penalised scores both kept)
and counted by the report. No notebook is graded: records are written as `grade` writes them.
Each check keeps today's behaviour as a mutant that must fail it.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from test_instructor_grade import TINY, copy_of, tiny_course  # noqa: F401

from transformer_lab_grader import commands, export, term
from transformer_lab_grader import records as rec

TOML = f"""
[due]
{TINY} = "2026-11-20T23:59:00+00:00"

[extensions.{TINY}]
ben = "2026-11-23T23:59:00+00:00"

[late]
percent_per_day = 10
cap_percent = 25

[roster]
file = "roster.csv"
missing = "{{missing}}"
"""
ROSTER = "student,name\namy,Amy Adams\nben,Ben Bo\ncal,Cal Cole\nzoe,Zoe Zed\n"


@pytest.fixture
def course(tiny_course, tmp_path) -> Path:  # noqa: F811
    return copy_of(tiny_course, tmp_path)


def _settings(course: Path, missing: str = "zero") -> None:
    folder = course / term.CONFIG.parent
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "term.toml").write_text(TOML.replace("{missing}", missing))
    (folder / "roster.csv").write_text(ROSTER)


def _record(course: Path, student: str, score: float, submitted_at: str) -> None:
    rec.write_record(
        course,
        {
            "student": student,
            "assignment": TINY,
            "status": "graded",
            "reason": None,
            "score": score,
            "max_score": 3.0,
            "flags": [],
            "submitted_at": submitted_at,
            "cells": {},
        },
    )


def _class(course: Path) -> None:
    _record(course, "amy", 3.0, "2026-11-20T22:00:00+00:00")  # on time
    _record(course, "ben", 3.0, "2026-11-22T10:00:00+00:00")  # late, within his extension
    _record(course, "cal", 2.0, "2026-11-22T01:00:00+00:00")  # 2 started days late: -20%
    _record(course, "dan", 3.0, "2026-11-27T00:00:00+00:00")  # 7 days late: capped at -25%


LONG = [
    ["amy", "3", "graded", "2026-11-20T22:00:00+00:00", "2026-11-20T23:59:00+00:00", "0", "0", "3"],
    ["ben", "3", "graded", "2026-11-22T10:00:00+00:00", "2026-11-23T23:59:00+00:00", "0", "0", "3"],
    [
        "cal",
        "2",
        "graded",
        "2026-11-22T01:00:00+00:00",
        "2026-11-20T23:59:00+00:00",
        "2",
        "20",
        "1.6",
    ],
    [
        "dan",
        "3",
        "graded",
        "2026-11-27T00:00:00+00:00",
        "2026-11-20T23:59:00+00:00",
        "7",
        "25",
        "2.25",
    ],
    ["zoe", "0", "missing", "", "2026-11-20T23:59:00+00:00", "", "", "0"],
]
WIDE = [
    ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", TINY],
    ["Points Possible", "", "", "", "", "3"],
    ["Amy Adams", "", "", "amy", "", "3"],
    ["Ben Bo", "", "", "ben", "", "3"],
    ["Cal Cole", "", "", "cal", "", "1.6"],
    ["dan", "", "", "dan", "", "2.25"],
    ["Zoe Zed", "", "", "zoe", "", "0"],
]


def _exports(course: Path, tmp_path: Path) -> tuple[list[list[str]], list[list[str]]]:
    long = export.export(course, tmp_path / "long.csv", TINY).read_text()
    rows = list(csv.DictReader(io.StringIO(long)))
    picked = ["student", "score", "status", *export.LATE_COLUMNS]
    picked.remove("student")
    long_rows = [[r["student"], *(r[c] for c in picked)] for r in rows]
    wide = export.export_wide(course, tmp_path / "wide.csv", TINY).read_text()
    return long_rows, list(csv.reader(io.StringIO(wide)))


def test_late_scores_are_penalised_beside_the_raw_ones_and_the_roster_is_complete(course, tmp_path):
    _settings(course)
    _class(course)
    assert _exports(course, tmp_path) == (LONG, WIDE)


def test_a_blank_for_the_missing_when_the_instructor_says_so(course, tmp_path):
    _settings(course, missing="blank")
    _class(course)
    long, wide = _exports(course, tmp_path)
    assert long[-1] == ["zoe", "", "missing", "", "2026-11-20T23:59:00+00:00", "", "", ""]
    assert wide[-1] == ["Zoe Zed", "", "", "zoe", "", ""]


MUTANTS = {
    "no penalty (today)": (term, "lateness", lambda *a: (0, 0.0)),
    "the extension ignored": (term.Term, "due_for", lambda self, a, s: self.due.get(a)),
    "no roster (today)": (term, "read_roster", lambda path: None),
    "the penalty computed but not applied": (term, "penalised", lambda score, penalty: score),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_wrong_term_fails_the_check(course, tmp_path, monkeypatch, mutant):
    owner, name, replacement = MUTANTS[mutant]
    monkeypatch.setattr(owner, name, replacement)
    _settings(course)
    _class(course)
    assert _exports(course, tmp_path) != (LONG, WIDE)


def test_the_report_counts_pass_rates_over_the_enrolled_class(course, tmp_path):
    _settings(course)
    _class(course)
    assert commands.report(course, TINY, tmp_path / "report") == 0
    roster = json.loads((tmp_path / "report" / "summary.json").read_text())["roster"]
    assert (roster["enrolled"], roster["missing"]) == (4, ["zoe"])
    text = (tmp_path / "report" / "report.md").read_text()
    assert "Missing: zoe." in text


@pytest.mark.parametrize(
    "text, error",
    [
        ('[due]\nx = "not a date"\n', "due.x = 'not a date' is not a date"),
        ('[roster]\nmissing = "maybe"\n', "roster.missing is 'maybe'"),
        ("[late]\ncap_percent = 150\n", "cap_percent in [0, 100]"),
        ('[roster]\nfile = "nowhere.csv"\n', "nowhere.csv"),
    ],
)
def test_a_bad_term_file_is_refused_with_the_reason(course, text, error):
    (course / term.CONFIG).parent.mkdir(parents=True, exist_ok=True)
    (course / term.CONFIG).write_text(text)
    with pytest.raises(SystemExit, match="term.toml") as raised:
        term.load(course)
    assert error in str(raised.value)
