"""The merge of records into nbgrader's gradebook (`gradebook_merge.merge_into_gradebook`): one pass
per assignment, and the same gradebook as the record-by-record merge it replaced.

The oracle is that earlier merge, kept here only: for every record it re-read the released
notebook, created the student and the submission through nbgrader's API, looked up each grade
with `find_grade` and committed. Both merge the same records into two copies of one course, in
three rounds (new students; a manual score given in between; changed scores, new students and a
cell the notebook does not have), and every grade row, comment, submission and student must be
the same. A merge of records already in the gradebook writes nothing.
"""

from __future__ import annotations

import random
import shutil
import warnings
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from transformer_lab_grader import gradebook, gradebook_merge, nbgrader_app
from transformer_lab_grader.notebook_format import graded_cells, released_notebooks

REPO = Path(__file__).resolve().parents[2]
LESSON = "02_qkv_attention"


def merge_one_by_one(course: Path, records: list[dict]) -> int:
    """The merge before the one-pass version (the oracle)."""
    from nbgrader.api import MissingEntry

    written = 0
    with warnings.catch_warnings(), gradebook._gradebook(course) as gb:
        warnings.simplefilter("ignore")
        known = {a.name for a in gb.assignments}
        for record in records:
            assignment = record["assignment"]
            if assignment not in known:
                continue
            cells = graded_cells(released_notebooks(Path(course), assignment))
            gb.update_or_create_student(record["student"])
            try:
                gb.find_submission(assignment, record["student"])
            except MissingEntry:
                gb.add_submission(assignment, record["student"])
            for gid, cell in record.get("cells", {}).items():
                if gid not in cells:
                    continue
                try:
                    row = gb.find_grade(
                        gid, Path(cells[gid]["notebook"]).stem, assignment, record["student"]
                    )
                except MissingEntry:
                    continue
                row.auto_score = float(cell["score"])  # a manual score stays (issue 28)
            gb.db.commit()
            written += 1
    return written


def synthetic_records(course: Path, students: list[str], seed: int) -> list[dict]:
    """One graded record per student with random scores (a few ungradable: all zero)."""
    cells = graded_cells(released_notebooks(course, LESSON))
    rng = random.Random(seed)
    records = []
    for student in students:
        ungradable = rng.random() < 0.1
        scores = {
            gid: 0.0 if ungradable else float(rng.choice([0.0, cell["points"]]))
            for gid, cell in cells.items()
        }
        records.append(
            {
                "student": student,
                "assignment": LESSON,
                "status": "ungradable" if ungradable else "graded",
                "cells": {
                    gid: {"score": s, "passed": s == cells[gid]["points"], "output": ""}
                    for gid, s in scores.items()
                },
            }
        )
    return records


def gradebook_rows(course: Path) -> dict[str, list[tuple]]:
    """Every grade, comment, submission and student of the gradebook, without the random ids."""
    from nbgrader.api import Grade

    with gradebook._gradebook(course) as gb:
        grades = sorted(
            (
                g.student.id,
                g.assignment.name,
                g.notebook.name,
                g.cell.name,
                g.cell.type,
                g.auto_score,
                g.manual_score,
                g.extra_credit,
                g.needs_manual_grade,
            )
            for g in gb.db.query(Grade)
        )
        comments = []
        submissions = []
        for assignment in gb.assignments:
            for submission in assignment.submissions:
                submissions.append((submission.student.id, assignment.name))
                for nb in submission.notebooks:
                    comments += [
                        (submission.student.id, nb.name, c.cell.name, c.manual_comment)
                        for c in nb.comments
                    ]
        students = sorted(s.id for s in gb.students)
    return {
        "grades": grades,
        "comments": sorted(comments),
        "submissions": sorted(submissions),
        "students": students,
    }


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    return nbgrader_app.course_copy(REPO, tmp_path_factory.mktemp("c") / "course", [LESSON])


def _two_copies(course: Path, tmp_path: Path) -> tuple[Path, Path]:
    old, new = tmp_path / "old", tmp_path / "new"
    shutil.copytree(course, old)
    shutil.copytree(course, new)
    return old, new


def _give_manual_score(course: Path, student: str, gid: str, score: float) -> None:
    from nbgrader.api import MissingEntry

    with gradebook._gradebook(course) as gb:
        try:
            gb.find_grade(gid, LESSON, LESSON, student).manual_score = score
        except MissingEntry:  # a wrong merge left it out: the comparison says so
            return
        gb.db.commit()


def _three_rounds(course: Path, tmp_path: Path) -> list[tuple[dict, dict]]:
    """(old gradebook, new gradebook) after each round."""
    old, new = _two_copies(course, tmp_path)
    first = synthetic_records(course, [f"s{i:03d}" for i in range(40)], seed=1)
    changed = synthetic_records(course, [f"s{i:03d}" for i in range(20, 50)], seed=2)
    kept = first[0]  # its scores stay; a manual score is given in between
    gid = next(iter(kept["cells"]))
    second = [kept, *first[1:20], *changed]
    second[-1]["cells"]["no-such-test"] = {"score": 9.0, "passed": True, "output": ""}
    rounds = []
    for n, records in enumerate([first, second, second]):
        if n == 1:
            for each in (old, new):
                _give_manual_score(each, kept["student"], gid, 0.5)
        assert merge_one_by_one(old, records) == gradebook_merge.merge_into_gradebook(new, records)
        rounds.append((gradebook_rows(old), gradebook_rows(new)))
    return rounds


def test_the_one_pass_merge_writes_what_the_record_by_record_merge_wrote(course, tmp_path):
    rounds = _three_rounds(course, tmp_path)
    for old, new in rounds:
        assert new == old
    first, second, _ = (old for old, _ in rounds)
    assert len(first["students"]) == 40 and len(second["students"]) == 50
    assert len(second["grades"]) == 50 * 2 and second["comments"]
    # the manual score given in round two survives the merges of rounds two and three
    assert [g for g in second["grades"] if g[0] == "s000" and g[6] is not None] != []
    assert [g for g in rounds[2][1]["grades"] if g[0] == "s000" and g[6] is not None] != []


def _erasing_merge(db, assignment, cells, records):
    """Today's merge before issue 28: every merged row's manual score set to None."""
    merged = ORIGINAL_MERGE(db, assignment, cells, records)
    for row in gradebook._grade_rows(db, assignment).values():
        row.manual_score = None
    return merged


ORIGINAL_MERGE = gradebook_merge._merge_assignment


MUTANTS = {
    "erases the manual scores of formgrader": ("_merge_assignment", _erasing_merge),
    "no submission for a new student": ("_add_submission", lambda db, assignment, student: None),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_wrong_merge_is_caught(course, tmp_path, monkeypatch, mutant):
    name, replacement = MUTANTS[mutant]
    monkeypatch.setattr(gradebook_merge, name, replacement)
    rounds = _three_rounds(course, tmp_path)
    assert any(old != new for old, new in rounds)


def test_records_already_in_the_gradebook_are_not_written_again(course, tmp_path):
    records = synthetic_records(course, [f"s{i:03d}" for i in range(30)], seed=3)
    target = tmp_path / "course"
    shutil.copytree(course, target)
    gradebook_merge.merge_into_gradebook(target, records)
    writes = []

    def count(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")):
            writes.append(statement)

    event.listen(Engine, "before_cursor_execute", count)
    try:
        assert gradebook_merge.merge_into_gradebook(target, records) == 30
        assert writes == []
        records[5]["cells"]["sdpa-test"]["score"] = 2.5
        gradebook_merge.merge_into_gradebook(target, records)
        assert len([w for w in writes if w.lstrip().upper().startswith("UPDATE")]) == 1
    finally:
        event.remove(Engine, "before_cursor_execute", count)
