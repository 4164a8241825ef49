"""The re-check child's guard: while the student's code runs for one request, the exercise's
forbidden names are switched off (``transformer_lab.check.forbid``, as in the notebook) and a
profiler notes every call of them, also through aliases the student kept, and every copy of their
code that runs. What was noted refuses the request (the parent fails the cell and flags it).

Everything here is captured in the child before the student's first line runs (`capture`).

The guard lives in the student's process, so it cannot be tamper-proof; it raises the bar and
makes tampering visible:

- the profile hook is a closure over read-only tables (no bound method: ``sys.getprofile()``
  does not hand out the guard); its notes are counted by an ``itertools.count``, which cannot be
  wound back;
- while the guard is on, a call from the student's code of what reaches or replaces it
  (``sys.getprofile``/``setprofile``/``settrace``/``_getframe``/``_current_frames``,
  ``threading.setprofile``/``settrace``/``getprofile``, ``inspect.currentframe``/``stack``,
  ``gc.get_objects``/``get_referrers``/``get_referents``, ``sys.monitoring``) is noted as
  tampering, so the request is refused and flagged;
- at exit the guard checks its own state: the profiler and ``threading``'s hook are still the
  hook, the hook's code and closure are unchanged, its list of notes holds every note it counted,
  the forbidden names are still switched off, and the student/library verdicts it cached are
  right; anything else is noted as tampering.

What a determined student can still do (documented, not stopped): reach the guard's frames
without a call (an exception's ``__traceback__.tb_frame.f_back``, a generator's frame) and change
the guard's own state there; read ``threading._profile_hook`` (the hook) without a call; call the
watched built-ins through C code that the profiler does not see (``map(sys._getframe, [0])``);
patch the grader's or the course's modules in a notebook cell, where no guard runs (they are in
``sys.modules``); or use ``ctypes``. The judge never trusts the child for a verdict (it only gets
data back), so such a student can at most pass off the course's reference as their own; the
source flags (`notebook_format.check_calls`) name most of these tricks in the record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import inspect
import itertools
import os
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FunctionType, MappingProxyType

from transformer_lab.check.forbid import resolve as resolve_dotted


def short(dotted: str) -> str:
    return dotted.replace("torch.nn.functional.", "F.").replace("torch.nn.", "nn.")


def _fingerprint(code) -> tuple:
    """What a copy of a function's source compiles to, wherever it was compiled."""
    consts = tuple(repr(c) for c in code.co_consts if not hasattr(c, "co_code"))
    return (code.co_name, code.co_code, code.co_names, consts)


# ----------------------------------------------------------------------------------------------
# What is trusted: captured before the first student line runs.

TAMPERED = "tampered with the re-check's guard"
# What reaches or replaces the guard: the modules' functions, by name.
WATCHED = {
    sys: "getprofile setprofile gettrace settrace _getframe _current_frames _current_exceptions",
    gc: "get_objects get_referrers get_referents",
    threading: "getprofile setprofile gettrace settrace setprofile_all_threads "
    "settrace_all_threads",
    inspect: "currentframe stack trace",
    traceback: "walk_stack",
}


def _watched() -> tuple[dict, dict]:
    """(id -> (C function, name), code -> name) of what reaches or replaces the guard."""
    c_funcs, codes = {}, {}
    modules = dict(WATCHED)
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        modules[monitoring] = " ".join(n for n in vars(monitoring) if not n.startswith("_"))
    for module, names in modules.items():
        prefix = "sys.monitoring" if module is monitoring else module.__name__
        for name in names.split():
            func = getattr(module, name, None)
            if hasattr(func, "__code__"):
                codes[func.__code__] = f"{prefix}.{name}"
            elif callable(func):
                c_funcs[id(func)] = (func, f"{prefix}.{name}")
    return c_funcs, codes


@dataclasses.dataclass
class Trusted:
    """Functions and tables captured before the student's code runs."""

    setprofile: Callable
    getprofile: Callable
    threading_setprofile: Callable
    threading_getprofile: Callable
    watched: MappingProxyType  # id -> (C function, name): what reaches or replaces the guard
    watched_codes: MappingProxyType  # code -> name: the same, written in Python
    library: tuple  # folders whose code is not the student's
    forbidden: dict  # exercise -> Forbidden
    helpers: tuple  # (id, os.path.abspath, short, _fingerprint, _stand_in_name)

    def is_library(self, filename: str) -> bool:
        abspath = self.helpers[1]
        return filename.startswith("<frozen") or abspath(filename).startswith(self.library)


@dataclasses.dataclass
class Forbidden:
    """One exercise's forbidden names, and how their originals are recognised when called; the
    tables are read-only."""

    names: tuple[str, ...]  # the dotted names that resolve (the others are skipped, as in checks)
    c_funcs: MappingProxyType  # id -> (C function, dotted)
    codes: MappingProxyType  # code object -> dotted (a forbidden Python function or class method)
    copies: MappingProxyType  # fingerprint -> dotted (the same code compiled elsewhere)
    reference: type | None  # a class that must not be subclassed

    def __post_init__(self):
        self.copy_names = frozenset(key[0] for key in self.copies)


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
        read_only = (MappingProxyType(d) for d in (c_funcs, codes, copies))
        tables[name] = Forbidden(tuple(names), *read_only, reference)
    return tables


def capture(check) -> Trusted:
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
    watched, watched_codes = _watched()
    return Trusted(
        setprofile=sys.setprofile,
        getprofile=sys.getprofile,
        threading_setprofile=threading.setprofile,
        threading_getprofile=threading.getprofile,
        watched=MappingProxyType(watched),
        watched_codes=MappingProxyType(watched_codes),
        library=library,
        forbidden=forbidden_tables(check.EXERCISES),
        helpers=(id, os.path.abspath, short, _fingerprint, _stand_in_name),
    )


# ----------------------------------------------------------------------------------------------
# The guard around each request.

NOTHING_FORBIDDEN = Forbidden((), *(MappingProxyType({}) for _ in range(3)), None)


def _make_hook(t: Trusted, table: Forbidden, stand_ins: frozenset, refused: list, notes, cache):
    """The profile hook: a closure (it hands out no guard) over read-only tables, `refused` (the
    notes, each counted by `notes`) and `cache` (file name -> whether it is the student's)."""
    id_, abspath, short, fingerprint, stand_in_name = t.helpers
    c_calls = MappingProxyType(
        {k: (f, f"{TAMPERED}: called {name}") for k, (f, name) in t.watched.items()}
        | {k: (f, f"called forbidden {short(dotted)}") for k, (f, dotted) in table.c_funcs.items()}
    )
    codes, copies, copy_names = table.codes, table.copies, table.copy_names
    watched_codes, library = t.watched_codes, t.library
    append, count, get = refused.append, notes.__next__, cache.get

    def note(what):
        if what not in refused:
            append(what)
            count()

    def is_student(frame):
        if frame is None:
            return False
        filename = frame.f_code.co_filename
        known = get(filename)
        if known is None:
            library_code = filename.startswith("<frozen") or abspath(filename).startswith(library)
            known = cache[filename] = not library_code
        return known

    def hook(frame, event, arg):
        if event == "c_call":
            hit = c_calls.get(id_(arg))
            if hit is not None and hit[0] is arg and is_student(frame):
                note(hit[1])
        elif event == "call":
            code = frame.f_code
            dotted = codes.get(code)
            if code in stand_ins:  # a switched-off name was called, by anyone
                note(f"called forbidden {stand_in_name(frame)}")
            elif dotted is not None:  # equal code: the original, or a copy of it
                if is_student(frame):
                    note(f"ran a copy of {dotted}")
                elif is_student(frame.f_back):
                    note(f"called forbidden {short(dotted)}")
            elif code in watched_codes and is_student(frame.f_back):
                note(f"{TAMPERED}: called {watched_codes[code]}")
            elif copies and code.co_name in copy_names and is_student(frame):
                copied = copies.get(fingerprint(code))
                if copied:
                    note(f"ran a copy of {copied}")

    return hook


def _state(fn, seen: set | None = None) -> list[tuple]:
    """A function's code, defaults and closure, and those of the functions it closes over."""
    seen = set() if seen is None else seen
    if id(fn) in seen:
        return []
    seen.add(id(fn))
    cells = tuple(c.cell_contents for c in fn.__closure__ or ())
    found = [(fn, fn.__code__, fn.__defaults__, fn.__kwdefaults__, *cells)]
    for value in cells:
        if isinstance(value, FunctionType):
            found += _state(value, seen)
    return found


def _same(a: list[tuple], b: list[tuple]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(u is v for u, v in zip(x, y)) for x, y in zip(a, b)
    )


class Guard:
    """The exercise's forbidden names raise (``check.forbid``, as in the notebook); a profiler
    notes each call of them, also through aliases the student kept, each copy of their code
    that runs, and each reach for the guard itself. `refused` lists what was noted."""

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
        self.switched_off = self._switched_off()
        stand_ins = frozenset(
            code
            for _, _, value in self.switched_off
            if (code := getattr(value, "__code__", None)) is not None
            and code not in self.table.codes
        )
        self.notes, self.cache = itertools.count(), {}
        self.hook = _make_hook(
            self.trusted, self.table, stand_ins, self.refused, self.notes, self.cache
        )
        self.hook_state = _state(self.hook)
        self.trusted.threading_setprofile(self.hook)
        self.trusted.setprofile(self.hook)
        return self

    def _switched_off(self) -> list[tuple]:
        """(owner, attribute, the stand-in there now) for each forbidden name."""
        found = []
        for dotted in self.table.names:
            with contextlib.suppress(ImportError, AttributeError):
                owner, attr = resolve_dotted(dotted)
                found.append((owner, attr, getattr(owner, attr)))
        return found

    def intact(self) -> bool:
        """Whether the guard's state is as it left it (checked before it is switched off)."""
        t, hook = self.trusted, self.hook
        return (
            t.getprofile() is hook
            and t.threading_getprofile() is hook
            and _same(_state(hook), self.hook_state)
            and len(self.refused) == next(self.notes)
            and all(getattr(o, a, None) is v for o, a, v in self.switched_off)
            and all(v is not t.is_library(f) for f, v in list(self.cache.items()))
        )

    def __exit__(self, *exc):
        try:
            still = self.intact()
        except Exception:  # noqa: BLE001 - e.g. a closure cell emptied
            still = False
        self.trusted.setprofile(None)
        self.trusted.threading_setprofile(None)
        self.stack.close()
        if not still:
            self.note(f"{TAMPERED}: its state was changed")
        return False


def _stand_in_name(frame) -> str:
    """The (short) name a ``check.forbid`` stand-in replaces, from its closure."""
    return str(frame.f_locals.get("short", "a switched-off function"))


# ----------------------------------------------------------------------------------------------
# What the judge accepts as a refusal: the texts that `_make_hook`'s hook, `Guard.__exit__` and
# `verify_child.Answers` note (`verify_read.REFUSALS` among them). The student's process can send
# anything, so the judge takes only these for a flag: no text of the student's own reaches the
# record, the CSV or the report.

UNKNOWN_REFUSAL = "sent a refusal the re-check does not know (was the re-check tampered with?)"


def known_refusals(exercise) -> set[str]:
    """The refusals the child can note for `exercise` (a ``check`` Exercise, or None)."""
    from .verify_read import REFUSALS  # torch: the judge has it already

    c_funcs, codes = _watched()
    watched = [name for _, name in c_funcs.values()] + list(codes.values())
    known = {"called forbidden a switched-off function", f"{TAMPERED}: its state was changed"}
    known |= {f"{TAMPERED}: called {name}" for name in watched} | REFUSALS
    for dotted in getattr(exercise, "forbidden", ()):
        known |= {f"called forbidden {short(dotted)}", f"ran a copy of {dotted}"}
    reference = getattr(exercise, "reference", None)
    if isinstance(reference, type):
        known.add(f"subclassed the reference {reference.__module__}.{reference.__qualname__}")
    return known
