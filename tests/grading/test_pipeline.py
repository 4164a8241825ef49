"""The exercise pipeline end to end, every lesson: generate, grade, feedback.

A temporary copy of the course (solutions/, exercises/, autograder/*.py), so that parallel test
workers never share a gradebook. Each lesson's solution and untouched exercise are graded by
`grade`, as an instructor grades a class: each notebook runs once, in its box, and every test
cell, hidden ones included, runs in the judge outside it.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from transformer_lab_grader import feedback, grade, nbgrader_app
from transformer_lab_grader.course import assignments

REPO = Path(__file__).resolve().parents[2]
# Every lesson in solutions/ is covered; its points are what its test cells declare.
LESSONS = assignments(REPO)


def _declared_points(lesson: str) -> float:
    nb = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    return float(sum(c.metadata.get("nbgrader", {}).get("points", 0) for c in nb.cells))


def _graded_by_hand(lesson: str) -> dict[str, float]:
    """The written answers (nbgrader's manually graded answer cells: solution and grade) and
    their points, which autograding leaves at 0 until the instructor grades them."""
    nb = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    by_hand = [c.metadata.get("nbgrader", {}) for c in nb.cells]
    return {
        m["grade_id"]: m.get("points", 0) for m in by_hand if m.get("grade") and m.get("solution")
    }


POINTS = {lesson: _declared_points(lesson) for lesson in LESSONS}
BY_HAND = {lesson: float(sum(_graded_by_hand(lesson).values())) for lesson in LESSONS}

pytestmark = pytest.mark.slow


def _solution_regions(source: str) -> list[str]:
    return re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", source, flags=re.S)


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(REPO / "solutions", root / "solutions")
    shutil.copytree(REPO / "exercises", root / "exercises")
    (root / "autograder").mkdir()
    for path in (REPO / "autograder").glob("*.py"):
        shutil.copy(path, root / "autograder" / path.name)
    nbgrader_app.generate(root, LESSONS, quiet=True)
    return root


def test_lessons_are_found():
    assert {"01_rnn_limits", "02_qkv_attention"} <= set(LESSONS)
    assert BY_HAND["01_rnn_limits"] == 2.0  # the written answer, Transformer vs LSTM
    assert all(POINTS[lesson] > 0 for lesson in LESSONS), POINTS


@pytest.mark.parametrize("lesson", LESSONS)
def test_exercises_equal_a_fresh_generate(course, lesson):
    name = f"{lesson}/{lesson}.ipynb"
    fresh = (course / "exercises" / name).read_bytes()
    assert (REPO / "exercises" / name).read_bytes() == fresh, (
        f"exercises/{name} is stale or hand-edited: run `make exercises`"
    )


@pytest.mark.parametrize("lesson", LESSONS)
def test_exercises_hold_no_solution_or_hidden_test(lesson):
    source = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    released = nbformat.read(REPO / "exercises" / lesson / f"{lesson}.ipynb", as_version=4)
    released_code = "\n".join(c.source for c in released.cells if c.cell_type == "code")
    outside = "\n".join(
        re.sub(r"### BEGIN SOLUTION\n.*?### END SOLUTION", "", c.source, flags=re.S)
        for c in source.cells
    )
    n_regions = n_code_regions = 0
    for cell in source.cells:
        for region in _solution_regions(cell.source):
            n_regions += 1
            n_code_regions += cell.cell_type == "code"  # a written answer is released blank
            for line in region.splitlines():
                line = line.strip()
                if len(line) > 12 and line not in outside:
                    assert line not in released_code, f"solution line leaked: {line!r}"
    assert n_regions >= 2
    assert "BEGIN HIDDEN TESTS" not in released_code
    assert "thorough=True" not in released_code
    assert released_code.count("raise NotImplementedError()") == n_code_regions
    for cell in released.cells:  # no outputs committed
        assert not cell.get("outputs"), cell.id


@pytest.mark.parametrize("lesson", LESSONS)
def test_solution_notebooks_are_committed_without_outputs(lesson):
    nb = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    assert all(
        not c.get("outputs") and c.get("execution_count") is None
        for c in nb.cells
        if c.cell_type == "code"
    )
    assert nb.cells[0].cell_type == "markdown" and "Learning objectives" in nb.cells[0].source
    assert f"../../lectures/{lesson}_lecture.ipynb" in nb.cells[0].source
    points = POINTS[lesson]
    assert f"**Points:** {points:g}" in nb.cells[0].source


def _tampered_submission(course: Path, tmp: Path) -> Path:
    """Lesson 02 solved, but the sdpa test cell deleted, the other test cell's metadata stripped
    (as some editors do) and a warning printed by the student's code."""
    nb = nbformat.read(
        course / "solutions" / "02_qkv_attention" / "02_qkv_attention.ipynb", as_version=4
    )
    nb.cells = [c for c in nb.cells if c.get("id") != "sdpa-test"]
    for cell in nb.cells:
        if cell.get("id") == "self-attention-test":
            del cell.metadata["nbgrader"]
        if cell.get("id") == "sdpa-solution":
            cell.source = cell.source.replace(
                "    d_k = q.shape[-1]",
                '    import warnings\n    warnings.warn("a harmless warning")\n    d_k = q.shape[-1]',
            )
    path = tmp / "02_qkv_attention.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def graded(course, tmp_path_factory) -> dict:
    """Every lesson's solution and untouched exercise, and one tampered lesson-02 notebook,
    graded as an instructor grades them (`grade`: each notebook runs once, boxed, and is judged
    from outside). Returns {(student, lesson): record}."""
    tmp = tmp_path_factory.mktemp("tampered")
    submissions = tmp_path_factory.mktemp("submissions")
    handed_in = {
        lesson: {
            "solution": course / "solutions" / lesson / f"{lesson}.ipynb",
            "untouched": course / "exercises" / lesson / f"{lesson}.ipynb",
        }
        for lesson in LESSONS
    }
    handed_in["02_qkv_attention"]["tampered"] = _tampered_submission(course, tmp)
    records = {}
    for lesson, students in handed_in.items():
        for student, notebook in students.items():
            folder = submissions / student / lesson
            folder.mkdir(parents=True)
            shutil.copy(notebook, folder / f"{lesson}.ipynb")
        out = tmp_path_factory.mktemp("out") / "grades.csv"
        for record in grade.grade(course, lesson, submissions, out=out, jobs=2, quiet=True):
            records[(record["student"], lesson)] = record
    return records


def _score(record: dict) -> tuple[float, float]:
    assert record["status"] == "graded", record
    return (record["score"], record["max_score"])


@pytest.mark.parametrize("lesson", LESSONS)
def test_solutions_get_full_marks(graded, lesson):
    """Full marks for what is autograded; a written answer waits for the instructor."""
    assert _score(graded[("solution", lesson)]) == (
        POINTS[lesson] - BY_HAND[lesson],
        POINTS[lesson],
    )
    failed = {
        gid: c["output"]
        for gid, c in graded[("solution", lesson)]["cells"].items()
        if not c["passed"] and gid not in _graded_by_hand(lesson)
    }
    assert not failed, failed


@pytest.mark.parametrize("lesson", LESSONS)
def test_untouched_exercises_get_zero(graded, lesson):
    assert _score(graded[("untouched", lesson)]) == (0.0, POINTS[lesson])


def test_deleted_or_stripped_test_cells_and_warnings_cost_nothing(graded, course):
    assert _score(graded[("tampered", "02_qkv_attention")]) == (8.0, 8.0)
    nb = nbformat.read(
        course / "autograder/work/autograded/tampered/02_qkv_attention/02_qkv_attention.ipynb",
        as_version=4,
    )
    assert any("was missing from the submission" in c.source for c in nb.cells)


@pytest.mark.parametrize("lesson", LESSONS)
def test_solution_notebooks_run_without_error_when_graded(graded, course, lesson):
    path = course / f"autograder/work/autograded/solution/{lesson}/{lesson}.ipynb"
    nb = nbformat.read(path, as_version=4)
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert not errors
    assert any("thorough checks passed" in json.dumps(c.get("outputs", [])) for c in nb.cells)


def test_feedback_never_shows_hidden_tests(graded, course):
    paths = feedback.feedback(course, "02_qkv_attention")
    assert {p.parent.parent.name for p in paths} >= {"solution", "untouched"}
    for path in paths:
        html = path.read_text(encoding="utf-8")
        assert "thorough=True" not in html and "BEGIN HIDDEN TESTS" not in html
        assert "hidden tests run here when grading" in html
    untouched = next(p for p in paths if p.parent.parent.name == "untouched").read_text(
        encoding="utf-8"
    )
    assert "NotImplementedError" in untouched


def test_cli_rejects_an_unknown_lesson_or_missing_notebook_with_a_message(tmp_path):
    with pytest.raises(SystemExit, match="no lesson named '99_nope'"):
        nbgrader_app.submit(REPO, "99_nope", [tmp_path / "x.ipynb"])
    with pytest.raises(SystemExit, match="no such notebook"):
        nbgrader_app.submit(REPO, "02_qkv_attention", [tmp_path / "x.ipynb"])
