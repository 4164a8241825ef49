"""The checks behind every test cell: compare the student's code with the reference.

A test cell calls ``check.<name>(<name>)``, e.g. ``check.scaled_dot_product_attention(
scaled_dot_product_attention)``; the hidden tests add ``thorough=True``.

- ``exercise``: ``Exercise`` (a declared exercise, which is its own check), ``Mistake``, ``Case``,
  ``CheckFailed`` and ``fail`` (the one place that words a failure), ``Exercise.diagnose`` (the
  catalogued mistake a wrong result matches), and practice questions (``practice``);
- ``compare``: tolerances per dtype and device, comparing outputs and gradients;
- ``devices``: the devices and dtypes a check runs on, and float32 without TF32;
- ``drivers``: how an exercise is run (``FunctionDriver``, ``ModuleDriver``, ``CustomDriver``) on
  identical inputs and weights; ``answer_drivers``: those judged by the answer (``ExactDriver``,
  ``RaisesDriver``, ``TrialDriver``);
- ``forbid``: the built-ins and references switched off while the student's code runs;
- ``feedback``: how a failed check looks in a notebook (a short message, the student's own frames;
  one line for an exercise not written yet);
- ``lessonNN``: one module per lesson declaring its exercises, their cases and their catalogued
  mistakes; a lesson whose checks would pass ~600 lines continues in ``lessonNN_<topic>`` modules
  (08, 09, 10).

The lesson modules are found, not listed: every ``lessonNN`` and ``lessonNN_<topic>`` module of
this package is imported in name order (lesson by lesson, a lesson's own module before its
continuations), which declares its exercises in ``EXERCISES`` and its practice questions in
``PRACTICE``. This package's ``check.<name>`` are read from those two registries, in course order:
a new lesson's check module needs no edit here.

A passing check tells ``transformer_lab.registry``'s listeners (the student's package saves the
code); this package never imports ``transformer_lab.student``, which imports it.
Works in plain Jupyter, Colab and under nbgrader alike; nothing here needs nbgrader.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

from ..registry import EXERCISES, grading_mode
from .answer_drivers import Call, ExactDriver, Finding, RaisesDriver, Reject, TrialDriver
from .compare import TOLERANCES
from .devices import available_devices, exact_float32
from .drivers import CustomDriver, FunctionDriver, ModuleDriver
from .exercise import PRACTICE, CheckFailed, Exercise, Mistake, NotWrittenYet, fail
from .forbid import ImplementThisYourself, forbid
from .stub_cells import install as _install_stub_handler

__all__ = [
    "EXERCISES",
    "LESSON_MODULES",
    "PRACTICE",
    "TOLERANCES",
    "Call",
    "CheckFailed",
    "CustomDriver",
    "ExactDriver",
    "Exercise",
    "Finding",
    "FunctionDriver",
    "ImplementThisYourself",
    "Mistake",
    "ModuleDriver",
    "NotWrittenYet",
    "RaisesDriver",
    "Reject",
    "TrialDriver",
    "available_devices",
    "exact_float32",
    "fail",
    "forbid",
    "grading_mode",
]

LESSON_MODULES = sorted(
    module.name
    for module in pkgutil.iter_modules(__path__)
    if re.fullmatch(r"lesson\d\d(_\w+)?", module.name)
)
"""The lesson modules in course order: lesson01, ..., lesson08, lesson08_kvcache, lesson08_sampling,
lesson09, ..."""

for _name in LESSON_MODULES:
    importlib.import_module(f"{__name__}.{_name}")

_install_stub_handler()  # in IPython: a demo cell reaching a stub says so in one line
globals().update(EXERCISES)
globals().update(PRACTICE)
__all__ += [*EXERCISES, *PRACTICE]
