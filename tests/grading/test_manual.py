"""Manual grading that lasts (issue 28, item 3): formgrader's scores and `grade-manual`'s CSV are
part of the grades that export, report and feedback show, and no autograde run erases them.

Most tests grade no notebook: records are written directly (as `grade` writes them) over the
tiny lesson with one written answer graded by hand (`why-answer`, 2 points). Each check keeps
today's behaviour as a mutant that must fail it. The whole way on real grading (issue 23's goal:
`grade` on real submissions, the answer scored in nbgrader's gradebook as formgrader scores it,
the score in both exports, the report and the feedback, and still there after `grade --force`)
is part of the scripted term, tests/grading/test_scripted_term.py.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import nbformat
import pytest
from test_instructor_grade import NAME, TINY, copy_of, tiny_course  # noqa: F401

from transformer_lab_grader import (
    cli,
    commands,
    feedback,
    gradebook,
    gradebook_merge,
    manual,
    nbgrader_app,
)
from transformer_lab_grader import records as rec
from transformer_lab_grader.notebook_format import graded_cells, released_notebooks

WHY = "why-answer"
WRITTEN = {  # an nbgrader "manually graded answer" cell: solution and grade, not locked
    "grade": True,
    "grade_id": WHY,
    "locked": False,
    "points": 2,
    "schema_version": 3,
    "solution": True,
    "task": False,
}


def with_written_answer(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The tiny lesson's source `nb` with the written answer appended."""
    answer = nbformat.v4.new_markdown_cell(
        "### BEGIN SOLUTION\nNo step waits for the previous one.\n\n"
        "Rubric: 2 points for saying so.\n### END SOLUTION",
        metadata={"nbgrader": WRITTEN},
    )
    answer["id"] = "why"
    nb.cells.append(answer)
    return nb


def add_written_answer(course: Path) -> None:
    """Add the written answer to the tiny lesson's source and release it again."""
    source = course / "solutions" / TINY / NAME
    nbformat.write(with_written_answer(nbformat.read(source, as_version=4)), source)
    nbgrader_app.generate(course, [TINY], quiet=True)


@pytest.fixture
def course(tiny_course, tmp_path) -> Path:  # noqa: F811
    """The tiny course with a written answer graded by hand, released again."""
    dest = copy_of(tiny_course, tmp_path)
    add_written_answer(dest)
    return dest.resolve()


def _record(course: Path, student: str, add: float, mul: float, sha: str = "s1") -> dict:
    cells = graded_cells(released_notebooks(course, TINY))
    scores = {"add-test": add, "mul-test": mul, WHY: 0.0}  # grading leaves the answer at 0
    record = {
        "student": student,
        "assignment": TINY,
        "status": "graded",
        "reason": None,
        "score": sum(scores.values()),
        "max_score": sum(c["points"] for c in cells.values()),
        "flags": [],
        "submission_sha256": sha,
        "graded_at": "2026-11-22T10:00:00+00:00",
        "lesson_sha256": rec.lesson_digest(course, TINY),
        "cells": {
            gid: {
                "score": scores[gid],
                "max_score": c["points"],
                "passed": scores[gid] == c["points"],
                "exercises": c["exercises"],
                "output": "",
            }
            for gid, c in cells.items()
        },
    }
    rec.write_record(course, record)
    return record


def _formgrader(course: Path, student: str, score: float, comment: str) -> None:
    """What formgrader does when the instructor scores the written answer."""
    with gradebook._gradebook(course) as gb:
        gb.find_grade(WHY, TINY, TINY, student).manual_score = score
        gb.find_comment(WHY, TINY, TINY, student).manual_comment = comment
        gb.db.commit()


def _regrade(course: Path, records: list[dict]) -> None:
    """What `grade --force` does to the grades: new records, merged into the gradebook."""
    for record in records:
        rec.write_record(course, record)
    gradebook_merge.merge_into_gradebook(course, records)


def _long(course: Path, tmp_path: Path) -> dict[str, dict[str, str]]:
    assert commands.export(course, tmp_path / "grades.csv", TINY) == 0
    rows = csv.DictReader(io.StringIO((tmp_path / "grades.csv").read_text()))
    return {row["student"]: row for row in rows}


def _the_formgrader_score_lasts(course: Path, tmp_path: Path) -> None:
    records = [_record(course, "amy", 2.0, 1.0), _record(course, "ben", 0.0, 1.0)]
    gradebook_merge.merge_into_gradebook(course, records)
    _formgrader(course, "amy", 1.5, "Right about the steps; say why that is slow.")
    for _ in range(2):  # export, then a regrade (--force) and export again
        rows = _long(course, tmp_path)
        assert (rows["amy"]["score"], rows["amy"][f"{TINY}/{WHY}"]) == ("4.5", "1.5")
        assert (rows["ben"]["score"], rows["ben"]["max_score"]) == ("1", "5")
        _regrade(course, records)
    with gradebook._gradebook(course) as gb:
        assert gb.find_grade(WHY, TINY, TINY, "amy").manual_score == 1.5
    commands.export(course, tmp_path / "wide.csv", TINY, wide=True)
    wide = list(csv.reader(io.StringIO((tmp_path / "wide.csv").read_text())))
    assert [row[-1] for row in wide[1:]] == ["5", "4.5", "1"]
    assert commands.report(course, TINY, tmp_path / "report") == 0
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["scores"] == {"amy": 4.5, "ben": 1.0}
    assert summary["problems"] == []
    page = feedback.feedback(course, TINY, ["amy"])[0].read_text()
    assert "4.5 / 5 points" in page
    assert "graded by hand: Right about the steps; say why that is slow." in page


def test_a_formgrader_score_lasts_through_regrades_and_reaches_every_output(course, tmp_path):
    _the_formgrader_score_lasts(course, tmp_path)


MUTANTS = {
    "outputs read the result records alone (today)": (manual, "overlay", lambda *a: None),
    "formgrader's gradebook is never read": (manual, "harvest", lambda *a: 0),
}  # the merge that erased formgrader's scores (today) is test_merge's mutant


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_outputs_without_the_manual_grades_fail_the_check(course, tmp_path, monkeypatch, mutant):
    owner, name, replacement = MUTANTS[mutant]
    monkeypatch.setattr(owner, name, replacement)
    with pytest.raises(AssertionError):
        _the_formgrader_score_lasts(course, tmp_path)


def _table(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "manual.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_grade_manual_imports_a_csv_that_regrades_keep(course, tmp_path, capsys):
    records = [_record(course, "amy", 2.0, 1.0)]
    gradebook_merge.merge_into_gradebook(course, records)
    table = _table(tmp_path, f'student,grade_id,score,comment\namy,{WHY},2,"Clear, and why."\n')
    assert cli.main(["--course-dir", str(course), "grade-manual", TINY, str(table)]) == 0
    assert "1 manual grades kept" in capsys.readouterr().out
    _regrade(course, records)
    assert _long(course, tmp_path)["amy"]["score"] == "5"
    with gradebook._gradebook(course) as gb:  # formgrader shows it too
        assert gb.find_grade(WHY, TINY, TINY, "amy").manual_score == 2.0
        assert gb.find_comment(WHY, TINY, TINY, "amy").manual_comment == "Clear, and why."
    # formgrader does not take it back: the gradebook holds the same grade
    assert manual.harvest(course, TINY) == 0


@pytest.mark.parametrize(
    "text, error",
    [
        ("student,grade_id,score\namy,no-such-cell,1\n", "has no graded cell 'no-such-cell'"),
        (f"student,grade_id,score\namy,{WHY},3\n", "score 3 outside [0, 2]"),
        (f"student,grade_id,score\namy,{WHY},many\n", "manual.csv:2: score 'many' is not"),
        ("student,score\namy,1\n", "missing column(s) grade_id"),
    ],
)
def test_a_bad_manual_csv_is_refused_with_the_reason(course, tmp_path, capsys, text, error):
    _record(course, "amy", 2.0, 1.0)
    table = _table(tmp_path, text)
    assert cli.main(["--course-dir", str(course), "grade-manual", TINY, str(table)]) == 1
    assert error in capsys.readouterr().err
    assert manual.load(course, TINY) == {}


def test_a_manual_grade_for_an_older_submission_is_kept_and_named_in_the_report(course, tmp_path):
    _record(course, "amy", 2.0, 1.0, sha="first")
    manual.put(course, TINY, [("amy", WHY, 2.0, "good")], source="test")
    _record(course, "amy", 2.0, 1.0, sha="resubmitted")
    assert _long(course, tmp_path)["amy"]["score"] == "5"
    commands.report(course, TINY, tmp_path / "report")
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["problems"] == [
        f"amy: {WHY} was graded by hand for another submission than the one on record; look "
        "at it again (`grade-manual` or formgrader)"
    ]
