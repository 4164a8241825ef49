"""Grading's own execution on every lesson's solution (a file of its own, so that pytest-xdist's
`--dist loadfile` runs it beside test_pipeline.py's autograde rather than after it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from transformer_lab_grader.course import assignments

REPO = Path(__file__).resolve().parents[2]
LESSONS = assignments(REPO)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_judge_gives_every_solution_every_test(lesson, tmp_path):
    """Grading's own execution (`judge`: the student's cells in their process, the tests in the
    judge) agrees with nbgrader's in-kernel run (test_pipeline.py) on every lesson's solution. (An untouched
    exercise scoring 0 when judged: tests/grading/test_tamper.py and test_bad_submissions.py.)"""
    from transformer_lab_grader.verify import verify

    notebook = REPO / "solutions" / lesson / f"{lesson}.ipynb"
    result = verify(lesson, notebook, tmp_path, course=REPO, timeout=900)
    failed = {gid: c["message"] for gid, c in result["cells"].items() if not c["passed"]}
    assert result["cells"] and not failed, failed
