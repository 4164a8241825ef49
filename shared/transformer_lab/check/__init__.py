"""The engine behind every test cell: compare the student's code with the reference.

A test cell calls ``check.<name>(<name>)``, e.g. ``check.scaled_dot_product_attention(
scaled_dot_product_attention)``; the hidden tests add ``thorough=True``.

- ``engine``: ``Exercise`` and ``Mistake``, tolerances, forward and gradient comparison per dtype
  and device, ``fail`` (the one place that words a failure) and saving a passing implementation
  into the student's package;
- ``drivers``: how an exercise is run (``FunctionDriver``, ``ModuleDriver``, ``ExactDriver``,
  ``TrialDriver``, ``CustomDriver``) on identical inputs and weights;
- ``forbid``: the built-ins and references switched off while the student's code runs;
- ``feedback``: how a failed check looks in a notebook (a short message, the student's own frames;
  one line for an exercise not written yet);
- ``lessonNN``: one module per lesson declaring its exercises (each an ``Exercise``, which is
  its own check), their cases and their catalogued mistakes; a lesson whose checks would pass
  ~600 lines continues in ``lessonNN_<topic>`` modules (08, 09, 10).

The lesson modules are found, not listed: every ``lessonNN`` and ``lessonNN_<topic>`` module of
this package is imported in name order (lesson by lesson, a lesson's own module before its
continuations), which declares its exercises in ``EXERCISES``; the ``__all__`` of a module that
declares exercises becomes this package's (``check.<name>``), while a module that only helps the
others (``lesson10_properties``) exports nothing here. A new lesson's check module needs no edit
here.

``EXERCISES`` (also ``transformer_lab.registry.EXERCISES``) lists every exercise in course order.
Works in plain Jupyter, Colab and under nbgrader alike; nothing here needs nbgrader.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

from .drivers import (
    Call,
    CustomDriver,
    ExactDriver,
    Finding,
    FunctionDriver,
    ModuleDriver,
    TrialDriver,
)
from .engine import (
    EXERCISES,
    TOLERANCES,
    CheckFailed,
    Exercise,
    ImplementThisYourself,
    Mistake,
    NotWrittenYet,
    available_devices,
    exact_float32,
    fail,
    forbid,
    grading_mode,
)

__all__ = [
    "EXERCISES",
    "LESSON_MODULES",
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
    _lesson = importlib.import_module(f"{__name__}.{_name}")
    _exports = {name: getattr(_lesson, name) for name in _lesson.__all__}
    if any(isinstance(value, Exercise) for value in _exports.values()):  # not a shared helper
        globals().update(_exports)
        __all__ += _lesson.__all__
