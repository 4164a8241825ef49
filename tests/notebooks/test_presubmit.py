"""`transformer-lab presubmit`: a student's notebook run as the grader will, and the report.

Most tests use a tiny synthetic lesson (one solution cell, one test cell, no torch) in a course
folder of their own, so each costs one small kernel (marked slow); one test runs a real lesson
(02). Every broken notebook is checked by the words of its report.
"""

from __future__ import annotations

import ast
import json
import sys
import types
from pathlib import Path

import nbformat
import pytest

from transformer_lab import presubmit as ps
from transformer_lab.cli import main as cli

REPO = Path(__file__).resolve().parents[2]
slow = pytest.mark.slow  # runs a notebook in a kernel
LESSON = "99_tiny"
NAME = f"{LESSON}.ipynb"
SOLVED = "def double(v):\n    return 2 * v"
TEST = 'assert double(2) == 4, "double(2) should be 4"'
HIDDEN = '### BEGIN HIDDEN TESTS\nraise AssertionError("SECRET-HIDDEN-TEST")\n### END HIDDEN TESTS'


def _meta(grade_id: str, test: bool) -> dict:
    return {
        "grade": test,
        "grade_id": grade_id,
        "locked": test,
        "schema_version": 3,
        "solution": not test,
        "task": False,
        **({"points": 1} if test else {}),
    }


def _cell(source: str, cell_id: str, nbgrader: dict | None = None, tags=()):
    cell = nbformat.v4.new_code_cell(source)
    cell["id"] = cell_id
    if nbgrader:
        cell.metadata["nbgrader"] = nbgrader
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def _notebook(solution: str = "def double(v):\n    raise NotImplementedError()", test=TEST):
    """The tiny lesson: setup, a solution cell, its test cell, the presubmit cell."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Lesson 99 (exercise)"),
        _cell("import os\nSCALE = 2", "setup"),
        _cell(solution, "double-solution", _meta("double-solution", False)),
        _cell(test, "double-test", _meta("double-test", True)),
        _cell(f'from transformer_lab import presubmit\n\npresubmit.run("{NAME}")', "presubmit"),
    ]
    nb.cells[0]["id"] = "title"
    return nb


@pytest.fixture
def course(tmp_path) -> Path:
    """A course folder with the tiny lesson released, and a folder for the student's work."""
    (tmp_path / "exercises" / LESSON).mkdir(parents=True)
    nbformat.write(_notebook(), tmp_path / "exercises" / LESSON / NAME)
    (tmp_path / "work").mkdir()
    return tmp_path


def _student(course: Path, nb, name: str = NAME) -> Path:
    path = course / "work" / name
    nbformat.write(nb, path)
    return path


def _solved():
    return _notebook(SOLVED, TEST + "\n" + HIDDEN)


def _check(path: Path, **kw) -> str:
    report = ps.presubmit(path, **kw)
    text = report.text()
    assert "SECRET-HIDDEN-TEST" not in text and "BEGIN HIDDEN" not in text, text
    assert report.will_grade == text.splitlines()[0].endswith("will grade."), text
    return text


# ----------------------------------------------------------------------------------------------
# A correct notebook, and one whose code is wrong.


@slow
def test_a_solved_notebook_will_grade_and_its_hidden_tests_do_not_run(course, capsys):
    path = _student(course, _solved())
    assert cli(["presubmit", str(path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"presubmit: {NAME} will grade.\n"), text
    assert f"file name: {NAME} (right)" in text
    assert "visible checks: 1 of 1 pass\n  ✓ double-test" in text
    assert "SECRET-HIDDEN-TEST" not in text  # the hidden block raises: it did not run


@slow
def test_wrong_code_grades_but_its_visible_check_fails_with_its_message(course):
    text = _check(_student(course, _notebook("def double(v):\n    return v + 1")))
    assert "will grade." in text.splitlines()[0]
    assert "visible checks: 0 of 1 pass" in text
    assert "✗ double-test: AssertionError: double(2) should be 4" in text


@slow
def test_the_grading_settings_apply_and_nothing_is_saved(course, tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path / "mine"))
    monkeypatch.delenv("TRANSFORMER_LAB_GRADING", raising=False)
    monkeypatch.delenv("TRANSFORMER_LAB_QUICK", raising=False)
    settings = (
        "import os\n"
        "assert os.environ['TRANSFORMER_LAB_GRADING'] == '1', 'not grading mode'\n"
        "assert os.environ['TRANSFORMER_LAB_QUICK'] == '1', 'not quick mode'\n"
        f"assert os.environ['TRANSFORMER_LAB_STUDENT_DIR'] != {str(tmp_path / 'mine')!r}\n"
        "assert os.getcwd() != " + repr(str(course / "work")) + ", 'ran in the student folder'"
    )
    nb = _solved()
    nb.cells.insert(2, _cell(settings, "settings"))
    text = _check(_student(course, nb))
    assert text.startswith(f"presubmit: {NAME} will grade."), text
    assert not (tmp_path / "mine").exists()


@slow
def test_a_real_lesson_solution_will_grade_and_saves_nothing(tmp_path, monkeypatch):
    lesson = "02_qkv_attention"
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path / "mine"))
    path = tmp_path / f"{lesson}.ipynb"
    path.write_bytes((REPO / "solutions" / lesson / f"{lesson}.ipynb").read_bytes())
    text = _check(path)  # the release is found in this package's repository
    assert text.startswith(f"presubmit: {lesson}.ipynb will grade."), text
    assert "visible checks: 2 of 2 pass" in text
    assert "thorough" not in text
    assert not (tmp_path / "mine").exists()


# ----------------------------------------------------------------------------------------------
# Broken notebooks.


@slow
def test_a_renamed_file_is_found_and_named(course):
    text = _check(_student(course, _solved(), "Copy of 99_tiny.ipynb"))
    assert text.startswith("presubmit: Copy of 99_tiny.ipynb will NOT grade as it is:"), text
    assert f"the file is named 'Copy of 99_tiny.ipynb': it must be named '{NAME}'" in text
    assert "visible checks: 1 of 1 pass" in text


@slow
def test_a_deleted_test_cell(course):
    nb = _solved()
    nb.cells = [c for c in nb.cells if c.id != "double-test"]
    text = _check(_student(course, nb))
    assert "will NOT grade as it is" in text
    assert "test cell double-test is missing: copy it back from the released exercise" in text
    assert "✗ double-test: its test cell is missing" in text


@slow
def test_a_notebook_edited_in_place_in_exercises_is_compared_with_its_source(course):
    """`make lab` students edit exercises/ itself: its solutions/ source stands in for it."""
    (course / "solutions" / LESSON).mkdir(parents=True)
    nbformat.write(_solved(), course / "solutions" / LESSON / NAME)
    mine = _notebook(SOLVED)
    mine.cells = [c for c in mine.cells if c.id != "double-test"]
    nbformat.write(mine, course / "exercises" / LESSON / NAME)
    text = _check(course / "exercises" / LESSON / NAME)
    assert "test cell double-test is missing" in text
    (course / "solutions" / LESSON / NAME).unlink()  # no source: nothing to compare with
    assert "the released exercise was not found" in _check(course / "exercises" / LESSON / NAME)


@slow
def test_an_edited_test_cell_runs_as_released(course):
    nb = _notebook("def double(v):\n    return v", "pass  # my own test")
    text = _check(_student(course, nb))
    assert "test cell double-test was edited: the grader runs the released one" in text
    assert "✗ double-test: AssertionError: double(2) should be 4" in text


@slow
def test_an_infinite_loop_is_stopped_and_the_rest_still_runs(course):
    nb = _solved()
    nb.cells.insert(2, _cell("while True:\n    pass", "spin"))
    nb.cells.insert(3, _cell("import time\ntime.sleep(600)", "sleep"))
    text = _check(_student(course, nb), cell_timeout=3)
    assert "will NOT grade as it is" in text
    assert "cell 3 (id spin: while True:) ran past 3 s and was stopped" in text
    assert "cell 4 (id sleep: import time) ran past 3 s and was stopped" in text
    assert "visible checks: 1 of 1 pass" in text  # the kernel was interrupted, not lost


@slow
def test_a_slow_cell_is_noted_but_grades(course, monkeypatch):
    monkeypatch.setattr(ps, "GRADER_FLOOR", 0.5)  # the grader's 10 s, scaled down
    nb = _solved()
    nb.cells.insert(2, _cell("import time\ntime.sleep(1.5)", "nap"))
    text = _check(_student(course, nb))
    assert text.startswith(f"presubmit: {NAME} will grade."), text
    note = "note: cell 3 (id nap: import time) took "
    assert note in text and "s (the grader allows a cell 0.5 s, or 20 x" in text.split(note)[1]


@slow
def test_an_error_in_an_early_cell_is_named_first(course):
    nb = _solved()
    nb.cells[1].source = "import torhc\nSCALE = 2"
    nb.cells[2].source = "def double(v):\n    return SCALE * v"
    text = _check(_student(course, nb))
    lines = text.splitlines()
    assert lines[0] == f"presubmit: {NAME} will NOT grade as it is:"
    assert lines[1] == (
        "  ✗ cell 2 (id setup: import torhc) raised ModuleNotFoundError: No module named 'torhc'"
    )
    assert "✗ double-test: NameError: name 'SCALE' is not defined" in text
    nb.cells[1].source = "raise NotImplementedError()"  # no message: no dangling colon
    text = _check(_student(course, nb))
    assert "  ✗ cell 2 (id setup: raise NotImplementedError()) raised NotImplementedError\n" in text


@slow
def test_a_kernel_that_dies_is_named(course):
    nb = _solved()
    nb.cells.insert(2, _cell("import os\nos._exit(1)", "quit"))
    text = _check(_student(course, nb))
    assert "will NOT grade as it is" in text
    assert "the Python kernel died in cell 3 (id quit: import os)" in text


@slow
def test_stripped_metadata(course):
    nb = _solved()
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
    text = _check(_student(course, nb))
    assert "will NOT grade as it is" in text
    assert "the nbgrader metadata of 2 cells is gone (double-solution, double-test)" in text
    assert "visible checks: 1 of 1 pass" in text  # its test cell still found, by its id


def test_an_unreadable_file(course):
    path = course / "work" / NAME
    path.write_text(json.dumps(nbformat.v4.new_notebook())[:-20])
    text = _check(path)
    assert text.startswith(f"presubmit: {NAME} will NOT grade as it is:\n  ✗ it is not a readable")


@slow
def test_without_a_release_it_still_runs_and_says_what_it_could_not_compare(tmp_path, monkeypatch):
    monkeypatch.setattr(ps, "course_roots", lambda notebook: [])
    path = tmp_path / NAME
    nbformat.write(_notebook(SOLVED, TEST + "\n" + HIDDEN), path)
    text = _check(path)
    assert text.startswith(f"presubmit: {NAME} will grade.")
    assert "the released exercise was not found" in text
    assert "visible checks: 1 of 1 pass" in text  # the hidden block was cut out here too
    # the last cell still knows the name the notebook must have
    assert "it must be named '99_tiny.ipynb'" in _check(path, name="x.ipynb", expected=NAME)


def test_a_bad_limit_is_refused(course):
    with pytest.raises(ValueError, match="cell_timeout must be positive"):
        ps.presubmit(_student(course, _solved()), cell_timeout=0)


# ----------------------------------------------------------------------------------------------
# The last cell of every exercise.


def test_the_last_cell_skips_while_grading_and_inside_presubmit(monkeypatch, capsys):
    monkeypatch.setenv("TRANSFORMER_LAB_GRADING", "1")
    ps.run(NAME)
    monkeypatch.delenv("TRANSFORMER_LAB_GRADING")
    monkeypatch.setenv(ps.PRESUBMIT_ENV, "1")
    ps.run(NAME)
    assert capsys.readouterr().out.count("presubmit: skipped") == 2


def test_the_last_cell_without_the_saved_file_says_so(tmp_path, monkeypatch, capsys):
    for var in ("TRANSFORMER_LAB_GRADING", ps.PRESUBMIT_ENV, "JPY_SESSION_NAME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    ps.run(NAME)
    assert f"presubmit: no {NAME} in {tmp_path}: save this notebook" in capsys.readouterr().out


def test_the_last_cell_finds_its_notebook(tmp_path, monkeypatch):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / NAME).write_text("{}")
    assert ps.this_notebook(NAME) == (Path(NAME), None)
    renamed = tmp_path / "Copy of 99_tiny.ipynb"  # JupyterLab's kernel knows its notebook
    renamed.write_text("{}")
    monkeypatch.setenv("JPY_SESSION_NAME", str(renamed))
    assert ps.this_notebook(NAME) == (renamed, None)


@slow
def test_the_last_cell_in_colab_checks_the_notebook_colab_holds(course, monkeypatch):
    held = _solved()
    held.metadata["colab"] = {"name": "Copy of 99_tiny.ipynb"}
    held.cells.insert(1, _cell('raise SystemExit("the Colab setup ran")', "colab-setup"))
    message = types.SimpleNamespace(
        blocking_request=lambda kind, timeout_sec: {"ipynb": json.loads(nbformat.writes(held))}
    )
    colab = types.ModuleType("google.colab")
    colab._message = message
    monkeypatch.setitem(sys.modules, "google", types.ModuleType("google"))
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    path, shown = ps.this_notebook(NAME)
    assert shown == "Copy of 99_tiny.ipynb"
    text = _check(path, release=course / "exercises" / LESSON / NAME, name=shown)
    assert f"the file is named 'Copy of 99_tiny.ipynb': it must be named '{NAME}'" in text
    assert "visible checks: 1 of 1 pass" in text
    assert "Colab setup" not in text  # a no-op where the grader runs: not run here either


@slow
def test_the_last_cell_runs_presubmit_in_a_process_of_its_own(course, monkeypatch, capsys):
    for var in ("TRANSFORMER_LAB_GRADING", ps.PRESUBMIT_ENV):
        monkeypatch.delenv(var, raising=False)
    path = _student(course, _solved())
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))
    monkeypatch.setenv("PYTHONPATH", str(REPO / "shared"))
    ps.run(NAME)
    out = capsys.readouterr().out
    assert f"presubmit: running {NAME} as saved at" in out
    assert f"presubmit: {NAME} will grade." in out


@pytest.mark.parametrize("folder", ["solutions", "exercises"])
def test_every_exercise_ends_with_the_presubmit_cell(folder):
    paths = sorted((REPO / folder).glob("*/*.ipynb"))
    assert len(paths) >= 13
    for path in paths:
        last = nbformat.read(path, as_version=4).cells[-1]
        assert last.id == ps.PRESUBMIT_ID and "nbgrader" not in last.metadata, path
        assert last.metadata.get("tags") == ["skip-execution"], path  # nbclient skips it
        assert f'presubmit.run("{path.name}")' in last.source, path


def test_presubmit_needs_nothing_of_the_grader():
    tree = ast.parse(Path(ps.__file__).read_text())
    imported = [
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    ] + [a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names]
    assert not [m for m in imported if "instructor" in m], imported
    from transformer_lab_grader import cell_limits, judge, sandbox

    assert (ps.GRADER_FLOOR, ps.GRADER_FACTOR) == (cell_limits.FLOOR, cell_limits.FACTOR)
    assert ps.TIMEOUT_ENAME == judge.TIMEOUT_ENAME
    assert {k: v for k, v in ps.RUN_ENV.items() if k != ps.PRESUBMIT_ENV} == {
        **sandbox.GRADING_ENV,
        "TRANSFORMER_LAB_QUICK": "1",
    }
