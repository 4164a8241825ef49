"""Which graded exercises exist: name -> exercise (its lesson, reference module and order).

A leaf module: it imports nothing from ``transformer_lab``. The check engine fills ``EXERCISES``
as each lesson's exercises are declared (``transformer_lab.check.lessonNN``); readers such as
``transformer_lab.student`` only read it. The first read loads the catalogue, so a reader never
sees it empty (the load is by name, at run time, so no import edge points back at ``check``).
"""

from __future__ import annotations

import importlib
import os

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
CATALOGUE = "transformer_lab.check"  # the package whose import declares every exercise


def grading_mode() -> bool:
    """True under the autograder (nbgrader's config sets TRANSFORMER_LAB_GRADING=1)."""
    return os.environ.get(GRADING_ENV, "") not in ("", "0", "false", "False")


class Registry(dict):
    """{name: exercise} in declaration order (lesson by lesson); loads the catalogue on first read.

    Each value has at least ``name``, ``lesson`` ("02"), ``module`` (e.g. "attention"),
    ``reference`` and ``mistakes``.
    """

    _loaded = False

    def _load(self) -> None:
        if not Registry._loaded:
            Registry._loaded = True
            importlib.import_module(CATALOGUE)

    def add(self, exercise) -> None:
        """Declare `exercise` (called by the engine when an Exercise is created)."""
        dict.__setitem__(self, exercise.name, exercise)

    def __getitem__(self, name):
        self._load()
        return dict.__getitem__(self, name)

    def __contains__(self, name) -> bool:
        self._load()
        return dict.__contains__(self, name)

    def __iter__(self):
        self._load()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._load()
        return dict.__len__(self)

    def get(self, name, default=None):
        self._load()
        return dict.get(self, name, default)

    def keys(self):
        self._load()
        return dict.keys(self)

    def values(self):
        self._load()
        return dict.values(self)

    def items(self):
        self._load()
        return dict.items(self)

    def order(self, name: str) -> int:
        """Position of `name` in the course (len(self) for an unknown name)."""
        names = list(self)
        return names.index(name) if name in names else len(names)


EXERCISES = Registry()
