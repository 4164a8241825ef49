"""Which course a command works on, and which lessons it holds.

A course folder holds ``solutions/<lesson>/<lesson>.ipynb`` (the nbgrader sources),
``exercises/<lesson>/`` (what students get) and ``autograder/nbgrader_config.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

# shared/transformer_lab/instructor/course.py -> the repository this package was installed from
PACKAGE_REPO = Path(__file__).resolve().parents[3]


def course_root(path: str | os.PathLike | None = None) -> Path:
    """The course folder: the given one, else the repository this package was installed from."""
    if path is not None:
        return Path(path).resolve()
    root = PACKAGE_REPO
    if not (root / "autograder" / "nbgrader_config.py").is_file():
        raise SystemExit(f"no autograder/nbgrader_config.py under {root}: pass --course-dir")
    return root


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
