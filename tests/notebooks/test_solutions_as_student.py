"""Each solution notebook, run as a student runs it (quick mode, outside grading), passes its checks
and saves every graded part into the student's package, source only."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from transformer_lab import check
from transformer_lab_grader.course import assignments

REPO = Path(__file__).resolve().parents[2]
LESSONS = assignments(REPO)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("lesson", LESSONS)
def test_solution_notebook_runs_for_a_student_and_saves_their_package(
    lesson, tmp_path, monkeypatch
):
    monkeypatch.setenv("TRANSFORMER_LAB_QUICK", "1")
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path / "pkg"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("TRANSFORMER_LAB_NO_PROGRESS", "1")
    monkeypatch.delenv("TRANSFORMER_LAB_GRADING", raising=False)
    nb = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    number = lesson.split("_")[0]
    exercises = [ex for ex in check.EXERCISES.values() if ex.lesson == number]
    assert exercises, f"no check is registered for lesson {number}"
    package = tmp_path / "pkg" / "transformer_lab_student"
    for ex in exercises:  # every graded part the solution passes is saved, source only
        saved = (package / f"{ex.module}.py").read_text()
        assert "### BEGIN SOLUTION" not in saved
        assert re.search(rf"^(def|class) {ex.name}\b", saved, flags=re.M), (ex.name, ex.module)
