"""Which graded exercises exist: name -> exercise (its lesson, reference module and order).

A leaf module: it imports nothing from ``transformer_lab``. The check package fills ``EXERCISES``
as each lesson's exercises are declared (``transformer_lab.check.lessonNN``), so read it through
``transformer_lab.check.EXERCISES`` (importing the package declares every exercise):
``transformer_lab.student`` does, one explicit import. A check that passes calls the listeners
added with :func:`on_pass` (the student's package saves the passing code): so the check package
never imports ``student``, and the dependency between the two goes one way.
"""

from __future__ import annotations

import os
from collections.abc import Callable

GRADING_ENV = "TRANSFORMER_LAB_GRADING"
# What every process that runs a student's code for grading gets (the grader's student process,
# presubmit's kernel): one thread per library (jobs run side by side), no display, no hub
# downloads, no progress bars, fixed hashing, and grading mode (earlier lessons on the reference,
# nothing saved into a student package).
GRADING_SETTINGS = {
    GRADING_ENV: "1",
    "TRANSFORMER_LAB_NO_PROGRESS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TQDM_DISABLE": "1",
    "PYTHONHASHSEED": "0",
}


# Folders of code that stands between a check and the student's code (the grader's stand-ins and
# its student process): their frames count as this package's in a student's traceback
# (`check.feedback`). The grader adds its own folder (`add_machinery`): transformer_lab never
# imports the grader.
MACHINERY_DIRS: list[str] = []


def add_machinery(folder: str | os.PathLike) -> None:
    """Count the frames of the code in `folder` as the package's (hidden from students)."""
    folder = os.path.realpath(folder)
    if folder not in MACHINERY_DIRS:
        MACHINERY_DIRS.append(folder)


def grading_mode() -> bool:
    """True under the autograder (nbgrader's config sets TRANSFORMER_LAB_GRADING=1)."""
    return os.environ.get(GRADING_ENV, "") not in ("", "0", "false", "False")


class Registry(dict):
    """{name: exercise} in declaration order (lesson by lesson), filled as exercises are declared.

    Each value has at least ``name``, ``lesson`` ("02"), ``module`` (e.g. "attention"),
    ``reference`` and ``mistakes``.
    """

    def add(self, exercise) -> None:
        """Declare `exercise` (called when an Exercise is created)."""
        self[exercise.name] = exercise

    def order(self, name: str) -> int:
        """Position of `name` in the course (len(self) for an unknown name)."""
        names = list(self)
        return names.index(name) if name in names else len(names)


EXERCISES = Registry()

_LISTENERS: list[Callable] = []


def on_pass(listener: Callable) -> None:
    """Call ``listener(exercise, student_obj, thorough)`` whenever a check passes outside grading
    mode (once per listener, however often it is added)."""
    if listener not in _LISTENERS:
        _LISTENERS.append(listener)


def passed(exercise, student_obj, thorough: bool) -> None:
    """A check passed: tell every listener."""
    for listener in _LISTENERS:
        listener(exercise, student_obj, thorough)
