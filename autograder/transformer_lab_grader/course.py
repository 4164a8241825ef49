"""Which course a command works on, and which lessons it holds.

A course folder holds ``solutions/<lesson>/<lesson>.ipynb`` (the nbgrader sources),
``exercises/<lesson>/`` (what students get) and ``autograder/nbgrader_config.py``. A command
works on the course it is run in (the current folder or the nearest folder above it that is a
course), or on the one given with ``--course-dir``; never on wherever the package was installed
from, so that grading in a copy of the course (a new term, a trial run) stays in that copy.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

# autograder/transformer_lab_grader/course.py -> the repository this package was installed from
PACKAGE_REPO = Path(__file__).resolve().parents[2]
MARKER = Path("autograder") / "nbgrader_config.py"


def is_course(folder: Path) -> bool:
    return (Path(folder) / MARKER).is_file()


def course_root(
    path: str | os.PathLike | None = None, cwd: str | os.PathLike | None = None
) -> Path:
    """The course folder: `path` (``--course-dir``) if given, else the current folder `cwd` (by
    default the process's) or the nearest folder above it holding autograder/nbgrader_config.py."""
    if path is not None:
        root = Path(path).resolve()
        if not is_course(root):
            raise SystemExit(f"--course-dir {path}: not a course folder (no {MARKER} in {root})")
        return root
    here = Path(cwd if cwd is not None else os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if is_course(folder):
            return folder
    raise SystemExit(
        f"no course in {here} or above it (a course folder holds {MARKER}): run the command "
        "in the course folder, or pass --course-dir"
    )


def assignments(root: Path) -> list[str]:
    """Every lesson in solutions/ (folders NN_topic holding NN_topic.ipynb)."""
    return sorted(
        p.parent.name for p in (root / "solutions").glob("*/*.ipynb") if p.stem == p.parent.name
    )


def require_lesson(root: Path, assignment: str) -> str:
    """`assignment` if solutions/ holds it; else a clear error listing the lessons."""
    lessons = assignments(root)
    if assignment not in lessons:
        raise SystemExit(
            f"no lesson named {assignment!r} in solutions/ (lessons: {', '.join(lessons)})"
        )
    return assignment


def collected_dir(root: Path, assignment: str) -> Path:
    """Where `collect` (without --out) and `grade` (given a zip) put submissions: git-ignored."""
    return Path(root) / "autograder" / "work" / "collected" / assignment


def autograded_dir(root: Path, student: str, assignment: str) -> Path:
    """Where nbgrader's autograde step leaves a student's graded notebooks (feedback reads them)."""
    return Path(root) / "autograder" / "work" / "autograded" / student / assignment


def exchange_root(root: Path) -> Path:
    """nbgrader's ``Exchange.root`` for the course: what its autograder/exchange_root.py (the one
    place it is set, which nbgrader_config.py uses too) says."""
    path = Path(root) / "autograder" / "exchange_root.py"
    spec = importlib.util.spec_from_file_location("_tl_exchange_root", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except OSError as error:
        raise SystemExit(f"cannot read the exchange's place from {path}: {error}") from None
    return module.exchange_root(root)
