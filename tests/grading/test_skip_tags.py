"""A test cell tagged `skip-execution` is still run and scores only what it earns (red team B, F1).

nbclient skips a cell tagged `skip-execution`, and nbgrader scores a test cell without error
output as passed: the judge used to skip such cells too, so an untouched exercise whose test
cells a student tagged (JupyterLab's property inspector) got full marks. Three layers stop it,
each tested here with a mutant (the layer weakened back) that the attack beats:

- `judge_cells.cells_of` never skips a test cell;
- `notebook_format.repair` restores graded cells' tags from the release and flags the change;
- `job.read_results` scores 0 any test cell the judge gave no verdict.

The attack itself is graded end to end (`grade`): the untouched exercise with both test cells
tagged scores 0 and is flagged; an honest solution with the same tags keeps its 8 points.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from transformer_lab_grader import grade, job, judge_cells, nbgrader_app, notebook_format, sandbox

REPO = Path(__file__).resolve().parents[2]
LESSON = "02_qkv_attention"
NAME = f"{LESSON}.ipynb"
TESTS = ("sdpa-test", "self-attention-test")
DEMOS = ("lookup", "variance", "saturate", "widget", "heatmap", "layer-demo", "progress")
FLAG = "the tags of graded cell {} were changed (graded with the released ones)"


def _notebook(folder: str, slim: bool = True) -> nbformat.NotebookNode:
    nb = nbformat.read(REPO / folder / LESSON / NAME, as_version=4)
    if slim:
        nb.cells = [c for c in nb.cells if c.get("id") not in DEMOS]
    return nb


def _tagged(nb, *ids: str, tags=("skip-execution",)) -> nbformat.NotebookNode:
    for cell in nb.cells:
        if cell.get("id") in ids:
            cell.metadata.setdefault("tags", []).extend(tags)
    return nb


def _test_ids(cells) -> list[str]:
    return [c.test for c in cells if c.test]


# ---------------------------------------------------------------------------------------------
# Layer 1: the judge runs every test cell.


def test_cells_of_keeps_tagged_test_cells_and_skips_tagged_student_cells():
    nb = _tagged(_notebook("exercises"), *TESTS, "setup")
    cells = judge_cells.cells_of(nb)
    assert _test_ids(cells) == list(TESTS)
    assert "setup" not in [c.cell_id for c in cells]  # a student's cell: skipped as nbclient does


def test_cells_of_mutant_skipping_tagged_tests_loses_them(monkeypatch):
    monkeypatch.setattr(judge_cells, "is_test_cell", lambda cell: False)  # the old rule
    assert _test_ids(judge_cells.cells_of(_tagged(_notebook("exercises"), *TESTS))) == []


# ---------------------------------------------------------------------------------------------
# Layer 2: repair restores the release's tags.


def test_repair_restores_the_released_tags_and_flags_the_change():
    released = _notebook("exercises", slim=False)
    nb = _tagged(_notebook("exercises", slim=False), *TESTS, "setup")
    fixed = notebook_format.repair(nb, released)
    for cell in nb.cells:
        if cell.get("id") in TESTS:
            assert "tags" not in cell.metadata, cell.metadata
    assert fixed.flags == [FLAG.format(gid) for gid in TESTS]
    assert fixed.changed
    setup = next(c for c in nb.cells if c.get("id") == "setup")
    assert setup.metadata["tags"] == ["skip-execution"]  # not a graded cell: the student's own


def test_repair_leaves_an_honest_notebook_alone():
    released = _notebook("exercises", slim=False)
    nb = _notebook("exercises", slim=False)
    for cell in nb.cells:
        if cell.get("id") in TESTS:
            cell.metadata["tags"] = []  # an editor's empty list is no change
    fixed = notebook_format.repair(nb, released)
    assert (fixed.flags, fixed.notes, fixed.changed) == ([], [], False)


def test_repair_mutant_keeping_the_students_tags_is_beaten(monkeypatch):
    monkeypatch.setattr(notebook_format, "_restore_run_metadata", lambda cell, released: False)
    nb = _tagged(_notebook("exercises", slim=False), *TESTS)
    fixed = notebook_format.repair(nb, _notebook("exercises", slim=False))
    assert fixed.flags == []
    assert all(
        "skip-execution" in c.metadata.get("tags", []) for c in nb.cells if c.get("id") in TESTS
    )


# ---------------------------------------------------------------------------------------------
# Layer 3: a test cell without the judge's verdict scores 0.


def _results(monkeypatch, cells: dict, verdicts: dict):
    monkeypatch.setattr(job.gradebook, "cell_scores", lambda *a: {g: 5.0 for g in cells})
    spec = {"student": "s", "assignment": LESSON, "cells": cells, "notebooks": []}
    return job.read_results(Path("/nonexistent"), spec, {"verdicts": verdicts})


def test_a_test_cell_without_a_verdict_scores_zero(monkeypatch):
    cells = notebook_format.graded_cells({NAME: _notebook("exercises")})
    verdicts = {"sdpa-test": {"passed": True}}
    scores, _, notes = _results(monkeypatch, cells, verdicts)
    assert scores == {"sdpa-test": 5.0, "self-attention-test": 0.0}
    assert notes == ["test cell self-attention-test was not run by the grader: scored 0"]


def test_read_results_mutant_trusting_nbgrader_is_beaten(monkeypatch):
    cells = notebook_format.graded_cells({NAME: _notebook("exercises")})
    cells = {gid: {k: v for k, v in c.items() if k != "test"} for gid, c in cells.items()}
    scores, _, notes = _results(monkeypatch, cells, {})  # the judge gave no verdict at all
    assert scores == {"sdpa-test": 5.0, "self-attention-test": 5.0}
    assert notes == []


# ---------------------------------------------------------------------------------------------
# The attack, graded.


@pytest.mark.slow
def test_grade_of_tagged_test_cells_gives_nothing_and_flags(tmp_path):
    course = nbgrader_app.course_copy(REPO, tmp_path / "course", [LESSON])
    students = {
        "honest": _notebook("solutions"),
        "honest_tagged": _tagged(_notebook("solutions"), *TESTS),
        "skip_untouched": _tagged(_notebook("exercises"), *TESTS),
    }
    submissions = tmp_path / "submissions"
    for student, nb in students.items():
        (submissions / student / LESSON).mkdir(parents=True)
        nbformat.write(nb, submissions / student / LESSON / NAME)
    records = grade.grade(
        course,
        LESSON,
        submissions,
        out=tmp_path / "grades.csv",
        jobs=2,
        limits=sandbox.Limits(wall_seconds=500, cell_timeout=60),
        quiet=True,
    )
    by = {r["student"]: r for r in records}
    assert {s: (r["status"], r["score"]) for s, r in by.items()} == {
        "honest": ("graded", 8.0),
        "honest_tagged": ("graded", 8.0),
        "skip_untouched": ("graded", 0.0),
    }, by
    flags = {s: [f for f in r["flags"] if "without a sandbox" not in f] for s, r in by.items()}
    assert flags["honest"] == []
    for student in ("honest_tagged", "skip_untouched"):
        assert flags[student] == [FLAG.format(gid) for gid in TESTS], flags
    assert "NotImplementedError" in by["skip_untouched"]["cells"]["sdpa-test"]["output"]
