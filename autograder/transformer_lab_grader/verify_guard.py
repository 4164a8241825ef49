"""The re-check child's guard: while the student's code runs for one request, the exercise's
forbidden names are switched off (``transformer_lab.check.forbid``, as in the notebook) and a
profiler notes every call of them, also through aliases the student kept, and every copy of their
code that runs. What was noted refuses the request (the parent fails the cell and flags it).

Everything here is captured in the child before the student's first line runs (`capture`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path

from transformer_lab.check.forbid import resolve as resolve_dotted


def short(dotted: str) -> str:
    return dotted.replace("torch.nn.functional.", "F.").replace("torch.nn.", "nn.")


def _fingerprint(code) -> tuple:
    """What a copy of a function's source compiles to, wherever it was compiled."""
    consts = tuple(repr(c) for c in code.co_consts if not hasattr(c, "co_code"))
    return (code.co_name, code.co_code, code.co_names, consts)


# ----------------------------------------------------------------------------------------------
# What is trusted: captured before the first student line runs.


@dataclasses.dataclass
class Trusted:
    """Functions and tables captured before the student's code runs."""

    setprofile: Callable
    getprofile: Callable
    threading_setprofile: Callable
    monitors: dict  # id -> the functions that replace a profiler or tracer
    monitor_codes: set
    library: tuple  # folders whose code is not the student's
    forbidden: dict  # exercise -> Forbidden
    library_cache: dict = dataclasses.field(default_factory=dict)

    def is_student(self, frame) -> bool:
        if frame is None:
            return False
        filename = frame.f_code.co_filename
        known = self.library_cache.get(filename)
        if known is None:
            known = self.library_cache[filename] = not (
                filename.startswith("<frozen") or os.path.abspath(filename).startswith(self.library)
            )
        return known


@dataclasses.dataclass
class Forbidden:
    """One exercise's forbidden names, and how their originals are recognised when called."""

    names: list[str]  # the dotted names that resolve (the others are skipped, as in the checks)
    c_funcs: dict  # id -> (C function, dotted)
    codes: dict  # code object -> dotted (a forbidden Python function, or a method of a class)
    copies: dict  # fingerprint -> dotted (the same code compiled elsewhere)
    reference: type | None  # a class that must not be subclassed

    def __post_init__(self):
        self.copy_names = {key[0] for key in self.copies}


def forbidden_tables(exercises: dict) -> dict[str, Forbidden]:
    """Per exercise: the forbidden attributes, their C functions and their Python code objects."""
    tables = {}
    for name, ex in exercises.items():
        names, c_funcs, codes, copies = [], {}, {}, {}
        for dotted in ex.forbidden:
            try:
                owner, attr = resolve_dotted(dotted)
                original = getattr(owner, attr)
            except (ImportError, AttributeError):
                continue
            names.append(dotted)
            if isinstance(original, type):
                for value in vars(original).values():
                    value = getattr(value, "__func__", value)
                    if hasattr(value, "__code__"):
                        codes.setdefault(value.__code__, dotted)
            elif hasattr(original, "__code__"):
                codes.setdefault(original.__code__, dotted)
                copies.setdefault(_fingerprint(original.__code__), dotted)
            elif callable(original):
                c_funcs.setdefault(id(original), (original, dotted))
        reference = ex.reference if isinstance(ex.reference, type) else None
        tables[name] = Forbidden(names, c_funcs, codes, copies, reference)
    return tables


def capture(check) -> Trusted:
    import threading

    import transformer_lab

    library = tuple(
        str(Path(p).resolve())
        for p in {
            sys.prefix,
            sys.base_prefix,
            os.path.dirname(transformer_lab.__file__),
            os.path.dirname(
                __file__
            ),  # this grader (once the subpackage transformer_lab.instructor)
        }
    )
    return Trusted(
        setprofile=sys.setprofile,
        getprofile=sys.getprofile,
        threading_setprofile=threading.setprofile,
        monitors={id(sys.setprofile): sys.setprofile, id(sys.settrace): sys.settrace},
        monitor_codes={threading.setprofile.__code__, threading.settrace.__code__},
        library=library,
        forbidden=forbidden_tables(check.EXERCISES),
    )


# ----------------------------------------------------------------------------------------------
# The guard around each request.

NOTHING_FORBIDDEN = Forbidden([], {}, {}, {}, None)


class Guard:
    """The exercise's forbidden names raise (``check.forbid``, as in the notebook); a profiler
    notes each call of them, also through aliases the student kept, and each copy of their code
    that runs. `refused` lists what was noted."""

    def __init__(self, trusted: Trusted, forbid: Callable, exercise: str | None):
        self.trusted = trusted
        self.forbid = forbid
        self.exercise = exercise
        self.table = trusted.forbidden.get(exercise, NOTHING_FORBIDDEN)
        self.refused: list[str] = []

    def note(self, what: str) -> None:
        if what not in self.refused:
            self.refused.append(what)

    def __enter__(self):
        self.stack = contextlib.ExitStack()
        # One `forbid` per name: each name's stand-in says which name it stands for.
        for dotted in self.table.names:
            self.stack.enter_context(self.forbid((dotted,), None, self.exercise or ""))
        self.stand_ins = self._stand_in_codes()
        self.hook = self._hook
        self.trusted.threading_setprofile(self.hook)
        self.trusted.setprofile(self.hook)
        return self

    def _stand_in_codes(self) -> set:
        codes = set()
        for dotted in self.table.names:
            with contextlib.suppress(ImportError, AttributeError):
                owner, attr = resolve_dotted(dotted)
                code = getattr(getattr(owner, attr), "__code__", None)
                if code is not None and code not in self.table.codes:
                    codes.add(code)
        return codes

    def _hook(self, frame, event, arg):
        t, table = self.trusted, self.table
        if event == "c_call":
            hit = table.c_funcs.get(id(arg))
            if hit is not None and hit[0] is arg and t.is_student(frame):
                self.note(f"called forbidden {short(hit[1])}")
            elif id(arg) in t.monitors and t.monitors[id(arg)] is arg and t.is_student(frame):
                self.note("tampered with the re-check's call monitor")
        elif event == "call":
            code = frame.f_code
            dotted = table.codes.get(code)
            if code in self.stand_ins:  # a switched-off name was called, by anyone
                self.note(f"called forbidden {_stand_in_name(frame)}")
            elif dotted is not None:  # equal code: the original, or a copy of it
                if t.is_student(frame):
                    self.note(f"ran a copy of {dotted}")
                elif t.is_student(frame.f_back):
                    self.note(f"called forbidden {short(dotted)}")
            elif code in t.monitor_codes and t.is_student(frame.f_back):
                self.note("tampered with the re-check's call monitor")
            elif table.copies and code.co_name in table.copy_names:
                if t.is_student(frame):
                    copied = table.copies.get(_fingerprint(code))
                    if copied:
                        self.note(f"ran a copy of {copied}")

    def __exit__(self, *exc):
        still = self.trusted.getprofile() is self.hook
        self.trusted.setprofile(None)
        self.trusted.threading_setprofile(None)
        self.stack.close()
        if not still:
            self.note("tampered with the re-check's call monitor")
        return False


def _stand_in_name(frame) -> str:
    """The (short) name a ``check.forbid`` stand-in replaces, from its closure."""
    return str(frame.f_locals.get("short", "a switched-off function"))


# ----------------------------------------------------------------------------------------------
# What the judge accepts as a refusal (the texts `Guard._hook`, `Guard.__exit__` and
# `verify_child.Answers.call` note). The student's process can send anything, so the judge takes
# only these for a flag: no text of the student's own reaches the record, the CSV or the report.

TAMPERED = "tampered with the re-check's call monitor"
UNKNOWN_REFUSAL = "sent a refusal the re-check does not know (was the re-check tampered with?)"


def known_refusals(exercise) -> set[str]:
    """The refusals the child can note for `exercise` (a ``check`` Exercise, or None)."""
    known = {TAMPERED, "called forbidden a switched-off function"}
    for dotted in getattr(exercise, "forbidden", ()):
        known |= {f"called forbidden {short(dotted)}", f"ran a copy of {dotted}"}
    reference = getattr(exercise, "reference", None)
    if isinstance(reference, type):
        known.add(f"subclassed the reference {reference.__module__}.{reference.__qualname__}")
    return known
