"""A lesson added exactly as CONTRIBUTING's "Adding a lesson" says is picked up everywhere.

In a temporary copy of the course (never the repository) the test writes a tiny lesson 99,
`99_scratch`, with the files CONTRIBUTING lists and nothing else: the reference module, its check
module, the solution notebook, the lecture, and a row in each course map (README.md and
lectures/00_start_here.ipynb). Then, with nothing else edited:

- generation (`make exercises`: `notebook_setup`, then `transformer-lab generate`, whose lessons by
  default are the folders of solutions/, lesson 99 last) gives lesson 99 its Colab badge and setup
  cell and releases its exercise without the solution or the hidden test (only lesson 99 is
  generated here: test_pipeline.py keeps the others byte-identical);
- the checks know it: `check.double` is lesson 99's, in course order after lesson 13, passes the
  reference and names the catalogued mistake;
- the lesson lists of the tests (the course maps) include it;
- grading (`transformer-lab grade`) gives the solution full marks and the untouched exercise 0.

Every command runs in a child process on the copy (PYTHONPATH = its shared/ and autograder/), as a lesson author
would run it there. The copy is deleted at the end, lesson 99 with it.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
LESSON = "99_scratch"
COPIED = ("shared", "solutions", "exercises", "lectures", "autograder", "tests")
IGNORED = shutil.ignore_patterns("__pycache__", "*.egg-info", "work", ".ipynb_checkpoints")

pytestmark = pytest.mark.slow

# CONTRIBUTING step 1: the reference module.
REFERENCE = '''
"""Lesson 99 — a scratch lesson: doubling a tensor."""

import torch


def double(x: torch.Tensor) -> torch.Tensor:
    """x (...) -> 2·x (...)."""
    return 2 * x
'''

# Step 3: the checks (the shape of check/lesson02.py).
CHECKS = '''
"""Checks for lesson 99 — scratch: `double`."""

import torch

from .. import scratch as _scratch
from .drivers import FunctionDriver
from .exercise import Case, Exercise, Mistake

__all__ = ["double"]


def _double_square(x):
    return x * x


def _double_cases(thorough: bool) -> list[Case]:
    shapes = [(3,), (2, 5)] + ([(4, 3, 2)] if thorough else [])
    return [
        Case(f"x {shape}", lambda g, shape=shape: {"x": torch.randn(*shape, generator=g, dtype=torch.float64)})
        for shape in shapes
    ]


double = Exercise(
    name="double",
    lesson="99",
    module="scratch",
    reference=_scratch.double,
    mistakes=[Mistake("square", "you squared x instead of doubling it.", _double_square)],
    driver=FunctionDriver(_double_cases),
    doc="double(x) -> 2·x",
)
'''


def _meta(grade_id: str, *, points: int | None = None) -> dict:
    """nbgrader's metadata: a solution cell without points, a locked test cell with them."""
    test = points is not None
    extra = {"points": points} if test else {}
    return {
        "nbgrader": {"grade_id": grade_id, "grade": test, "solution": not test, "locked": test}
        | {"schema_version": 3, "task": False}
        | extra
    }


def _cell(kind: str, source: str, cell_id: str, metadata: dict | None = None):
    make = nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell
    cell = make(textwrap.dedent(source).strip("\n"), metadata=metadata or {})
    cell["id"] = cell_id
    return cell


def _notebook(cells) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "display_name": "Python 3",
        "language": "python",
        "name": "python3",
    }
    return nb


def solution_notebook() -> nbformat.NotebookNode:
    """Step 4: header, setup cell, one graded exercise (task, solution, test), closing cell."""
    return _notebook(
        [
            _cell(
                "md",
                """
                # Lesson 99 — Scratch (exercise)

                **Lecture:** [99 — scratch](../../lectures/99_scratch_lecture.ipynb) · **time:** 5 min · **points:** 1
                """,
                "title",
            ),
            _cell(
                "code",
                "from transformer_lab import check, train\n\nQUICK = train.quick_mode()",
                "setup",
            ),
            _cell(
                "md",
                "## 1. Double a tensor\n\n`double(x)` returns `2 * x`, same shape.",
                "double-task",
            ),
            _cell(
                "code",
                """
                def double(x):
                    \"\"\"x (...) -> 2·x (...).\"\"\"
                    ### BEGIN SOLUTION
                    return 2 * x
                    ### END SOLUTION
                """,
                "double-solution",
                _meta("double-solution"),
            ),
            _cell(
                "code",
                """
                check.double(double)
                ### BEGIN HIDDEN TESTS
                check.double(double, thorough=True)
                ### END HIDDEN TESTS
                """,
                "double-test",
                _meta("double-test", points=1),
            ),
            _cell("md", "Next: nothing, this is the last lesson.", "next"),
            _cell("code", "from transformer_lab import student\n\nstudent.progress();", "progress"),
        ]
    )


def lecture_notebook() -> nbformat.NotebookNode:
    return _notebook(
        [
            _cell("md", "# Lecture 99 — Scratch\n\nDoubling, narrated.", "title"),
            _cell(
                "code",
                "import torch\n\nfrom transformer_lab.scratch import double\n\nprint(double(torch.ones(2)))",
                "demo",
            ),
        ]
    )


def add_course_map_rows(root: Path) -> None:
    """Step 4's last sentence: a row in README.md's course map and in 00_start_here's."""
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8")
    last = next(line for line in reversed(text.splitlines()) if line.startswith("| 13 |"))
    row = (
        f"| 99 | scratch | [lecture](lectures/{LESSON}_lecture.ipynb) | "
        f"[exercise](exercises/{LESSON}/{LESSON}.ipynb) | `scratch` |"
    )
    readme.write_text(text.replace(last, f"{last}\n{row}"), encoding="utf-8")

    start = root / "lectures" / "00_start_here.ipynb"
    nb = nbformat.read(start, as_version=4)
    for cell in nb.cells:
        lines = cell.source.splitlines()
        at = [i for i, line in enumerate(lines) if line.startswith("| 13 |")]
        if cell.cell_type == "markdown" and at:
            lines.insert(
                at[0] + 1,
                f"| 99 | **Scratch** | doubling | [lecture]({LESSON}_lecture.ipynb) | "
                f"[exercise](../exercises/{LESSON}/{LESSON}.ipynb) |",
            )
            cell.source = "\n".join(lines)
    nbformat.write(nb, start)


def add_lesson_99(root: Path) -> None:
    package = root / "shared" / "transformer_lab"
    (package / "scratch.py").write_text(REFERENCE.lstrip(), encoding="utf-8")
    (package / "check" / "lesson99.py").write_text(CHECKS.lstrip(), encoding="utf-8")
    (root / "solutions" / LESSON).mkdir()
    nbformat.write(solution_notebook(), root / "solutions" / LESSON / f"{LESSON}.ipynb")
    nbformat.write(lecture_notebook(), root / "lectures" / f"{LESSON}_lecture.ipynb")
    add_course_map_rows(root)


@pytest.fixture(scope="module")
def course():
    # Not under pytest's basetemp: that is private to this user (0700), and a grading job's box
    # runs as a uid of its own, which must read the course's package (else it imports another).
    with tempfile.TemporaryDirectory(prefix="scratch-lesson-") as folder:
        os.chmod(folder, 0o755)
        root = Path(folder) / "course"
        yield from _course(root)
    assert not root.exists()


def _course(root: Path):
    root.mkdir()
    for name in COPIED:
        shutil.copytree(REPO / name, root / name, ignore=IGNORED)
    for name in ("README.md", "pyproject.toml"):
        shutil.copy(REPO / name, root / name)
    before = {p.relative_to(root) for p in root.rglob("*") if p.is_file()}
    add_lesson_99(root)
    after = {p.relative_to(root) for p in root.rglob("*") if p.is_file()}
    assert sorted(map(str, after - before)) == sorted(
        [
            "lectures/99_scratch_lecture.ipynb",
            "shared/transformer_lab/check/lesson99.py",
            "shared/transformer_lab/scratch.py",
            f"solutions/{LESSON}/{LESSON}.ipynb",
        ]
    )
    yield root


def run(root: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root / "shared"), str(root / "autograder")]),
        "TRANSFORMER_LAB_STUDENT_DIR": str(root.parent / "student"),
        "TRANSFORMER_LAB_QUICK": "1",
        "HF_HUB_OFFLINE": "1",
        "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": "1",
    }
    env.pop("TRANSFORMER_LAB_GRADING", None)
    done = subprocess.run(
        [sys.executable, *args], cwd=root, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def generated(course):
    """`make exercises`, as CONTRIBUTING says: the notebooks' Colab parts, then every lesson."""
    run(course, "-m", "transformer_lab.notebook_setup", str(course))
    probe = "from pathlib import Path; from transformer_lab_grader.course import assignments; print(assignments(Path('.')))"
    assert run(course, "-c", probe).stdout.strip().endswith(f"'13_clip', '{LESSON}']")
    run(
        course, "-m", "transformer_lab_grader.cli", "generate", LESSON
    )  # `generate` alone: every lesson
    return course


def test_generation_releases_lesson_99(generated):
    source = nbformat.read(generated / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    assert source.cells[0].source.startswith("# Lesson 99")
    assert "colab.research.google.com" in source.cells[0].source  # the badge
    assert source.cells[1].get("id") == "colab-setup"
    released = (generated / "exercises" / LESSON / f"{LESSON}.ipynb").read_text(encoding="utf-8")
    assert "check.double(double)" in released
    assert "return 2 * x" not in released and "thorough=True" not in released


def test_the_checks_know_lesson_99_in_course_order(course):
    probe = textwrap.dedent(
        """
        import json, torch
        from transformer_lab import check
        from transformer_lab.check import CheckFailed
        names = list(check.EXERCISES)
        check.double(lambda x: 2 * x, thorough=True)
        try:
            check.double(lambda x: x * x)
            named = None
        except CheckFailed as failure:
            named = failure.mistake
        print(json.dumps({
            "last": names[-1], "lesson": check.EXERCISES["double"].lesson,
            "modules": check.LESSON_MODULES[-2:], "named": named,
        }))
        """
    )
    out = json.loads(run(course, "-c", probe).stdout.strip().splitlines()[-1])
    assert out == {
        "last": "double",
        "lesson": "99",
        "modules": ["lesson13", "lesson99"],
        "named": "you squared x instead of doubling it.",
    }


def test_the_lesson_lists_of_the_tests_include_lesson_99(course):
    """The course-map tests take their lessons from the folders: lesson 99 is among them, and its
    rows are there."""
    done = run(
        course,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-n",
        "0",
        "-q",
        "tests/notebooks/test_lectures.py",
        "-k",
        "maps_every_lesson",
    )
    assert "2 passed" in done.stdout, done.stdout
    probe = "import sys; sys.path.insert(0, 'tests/notebooks'); import test_lectures as t; print(t.LESSONS[-1])"
    assert run(course, "-c", probe).stdout.strip() == LESSON


def test_grading_gives_the_solution_full_marks_and_the_untouched_exercise_zero(generated, tmp_path):
    subs = tmp_path / "submissions"
    for student, folder in (("sol", "solutions"), ("blank", "exercises")):
        (subs / student / LESSON).mkdir(parents=True)
        shutil.copy(
            generated / folder / LESSON / f"{LESSON}.ipynb",
            subs / student / LESSON / f"{LESSON}.ipynb",
        )
    out = tmp_path / "grades.csv"
    run(
        generated, "-m", "transformer_lab_grader.cli", "grade", LESSON, str(subs), "--out", str(out)
    )
    with out.open(newline="") as f:
        scores = {row["student"]: float(row["score"]) for row in csv.DictReader(f)}
    records = generated / "autograder" / "work" / "results" / LESSON
    why = {path.name: path.read_text()[:3000] for path in records.glob("*.json")}
    assert scores == {"sol": 1.0, "blank": 0.0}, why
