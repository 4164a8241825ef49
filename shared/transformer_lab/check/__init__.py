"""The engine behind every test cell: compare the student's code with the reference.

A test cell calls ``check.<name>(<name>)``, e.g. ``check.scaled_dot_product_attention(
scaled_dot_product_attention)``; the hidden tests add ``thorough=True``.

- ``engine``: the machinery shared by every lesson (identical inputs and weights, forward and
  gradient comparison per dtype and device, the mistake catalogue, forbidden built-ins, saving a
  passing implementation into the student's package);
- ``lessonNN``: one module per lesson with its exercises, their cases and their catalogued
  mistakes. Every public name of a ``lessonNN`` module is a check, re-exported here.

Works in plain Jupyter, Colab and under nbgrader alike; nothing here needs nbgrader.
"""

from __future__ import annotations

import importlib
import pkgutil

from .engine import (
    EXERCISES,
    TOLERANCES,
    CheckFailed,
    Exercise,
    ImplementThisYourself,
    Mistake,
    available_devices,
    forbid,
    grading_mode,
)

__all__ = [
    "EXERCISES",
    "TOLERANCES",
    "CheckFailed",
    "Exercise",
    "ImplementThisYourself",
    "Mistake",
    "available_devices",
    "forbid",
    "grading_mode",
]

# Each lesson module registers its exercises in EXERCISES and defines one check per exercise.
for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _info.name.startswith("lesson"):
        _module = importlib.import_module(f"{__name__}.{_info.name}")
        for _name in getattr(_module, "__all__", ()):
            globals()[_name] = getattr(_module, _name)
            __all__.append(_name)
