"""Declared exercises, and how a check fails: ``Exercise``, ``Mistake``, ``Case``, ``CheckFailed``.

A test cell calls ``check.<name>(<name>)``, e.g. ``check.scaled_dot_product_attention(
scaled_dot_product_attention)``. The check

- runs the student's code and the reference on identical inputs (drawn from the check's own
  ``torch.Generator``, never the global seed) and, for modules, identical weights (the
  reference's parameters are copied into the student's module): the exercise's driver
  (``check.drivers``) does this, comparing through ``check.compare``;
- compares outputs and gradients in float64 and float32 on the CPU, and again on every accelerator
  present when thorough (``check.devices``);
- on a mismatch says what differs and, when the student's output equals one of the exercise's
  catalogued mistakes, names it in one sentence (``fail``, ``Exercise.diagnose``);
- while the student's code runs, makes the reference twin and the PyTorch built-ins the exercise
  replaces raise "implement this yourself" (``check.forbid``);
- on a pass, tells the registry's listeners (``transformer_lab.registry.on_pass``: the student's
  package saves it) unless grading mode is on.

``thorough=True`` (the hidden tests) runs many more cases: batch and head dimensions, length-1
sequences, large logits, broadcast and fully-masked rows, every device.
Works in plain Jupyter, Colab and under nbgrader alike; nothing here needs nbgrader.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

import torch

from .. import registry
from ..registry import EXERCISES
from . import crashes, generic, variants
from .devices import exact_float32
from .feedback import not_written_sentence, render, student_frames, unwritten, wrap
from .forbid import ImplementThisYourself, forbid


class CheckFailed(AssertionError):
    """The student's code disagrees with the reference. The message says how.

    ``exercise`` (its name), ``problem`` (one sentence: what differs), ``case`` (the inputs, e.g.
    "two heads (float64 on cpu)"), ``mistake`` (the catalogued mistake's sentence, when one matches),
    ``mistake_key`` (its stable key) and ``cause`` (the student's own exception, when their code
    raised). Grading keeps them as data (`transformer_lab_grader.failures`). Without an
    explicit `message`, ``str(err)`` is composed from them.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        exercise: str | None = None,
        problem: str | None = None,
        case: str | None = None,
        mistake: str | None = None,
        mistake_key: str | None = None,
        cause: BaseException | None = None,
    ):
        if message is None:
            message = f"{exercise}: {problem}"
            if case:
                message += f"\n  case: {case}"
            if mistake:
                message += f"\nLikely mistake: {mistake}"
        super().__init__(message)
        self.message = message
        self.exercise, self.problem, self.case = exercise, problem, case
        self.mistake, self.mistake_key, self.cause = mistake, mistake_key, cause

    def __str__(self) -> str:
        return self.message

    def _render_traceback_(self) -> list[str]:  # IPython shows these lines instead of a traceback
        return render(self)


class NotWrittenYet(NotImplementedError):
    """The check reached an exercise's untouched stub (nbgrader's ``raise NotImplementedError()``).

    IPython shows one line, ``✗ `online_softmax` is not written yet: fill in the cell above.``, not
    a traceback through the engine. It is still a NotImplementedError, and it is *named* one
    (``__name__``): what the kernel records as the error's ``ename`` and what grading reads as
    "not attempted" stay as they were; the cell fails, so nbgrader gives it no points.
    ``exercise`` is the check's name, ``function`` the stub that raised.
    """

    unwritten = True  # check/feedback.py renders it as its one line

    def __init__(self, message: str, *, exercise: str | None = None, function: str | None = None):
        super().__init__(message)
        self.exercise, self.function = exercise, function

    def _render_traceback_(self) -> list[str]:  # IPython shows these lines instead of a traceback
        return render(self)


NotWrittenYet.__name__ = "NotImplementedError"


def fail(
    ex: Exercise | str,
    problem: str,
    case: str | None = None,
    mistake: Mistake | None = None,
    cause: BaseException | None = None,
) -> NoReturn:
    """Raise the CheckFailed for `ex`: the one place that words a failure.

    `problem` is one sentence saying what differs; `case` the inputs it was seen on; `mistake` the
    catalogued mistake the student's result matches; `cause` the exception their code raised
    (with no catalogued mistake, ``check.crashes`` may name what causes that error).
    """
    if mistake is None and cause is not None:
        named = crashes.name(cause)
        mistake = Mistake(*named) if named else None
    raise CheckFailed(
        exercise=getattr(ex, "name", ex),
        problem=problem,
        case=case,
        mistake=mistake.sentence if mistake is not None else None,
        mistake_key=mistake.key if mistake is not None else None,
        cause=cause,
    ) from None


def not_implemented(
    ex: Exercise, student_obj, err: NotImplementedError, what: str = "your code", case=None
) -> NoReturn:
    """The student's code raised `err`: an untouched stub raises NotWrittenYet (one line); a
    NotImplementedError their own code raised for another reason fails the check like any other
    error; one raised outside their code (no frame of theirs) is raised again unchanged."""
    if isinstance(err, NotWrittenYet):
        raise err
    found = unwritten(err, student_obj)
    if found is not None:
        name, direct = found
        raise NotWrittenYet(
            not_written_sentence(name, direct, ex.name), exercise=ex.name, function=name
        ) from None
    if student_frames(err.__traceback__):
        fail(ex, f"{what} raised NotImplementedError: {err}", case, cause=err)
    raise err


@dataclass(frozen=True)
class Mistake:
    """A known wrong implementation (same signature as the exercise) and the sentence naming it.

    `key` is short and stable ("no-scale", "softmax-query-axis"): tests select a mistake by it.
    (The old form ``Mistake(sentence, impl)`` still works, keyed "#<position>", until every lesson
    is converted.)
    """

    key: str
    sentence: str | Callable
    impl: Callable | None = None

    def __post_init__(self):
        if self.impl is None and callable(self.sentence):  # old form Mistake(sentence, impl)
            object.__setattr__(self, "impl", self.sentence)
            object.__setattr__(self, "sentence", self.key)
            object.__setattr__(self, "key", "")


@dataclass
class Case:
    """One input of a tensor exercise: inputs built in float64 on the CPU from the check's own
    generator, then moved to each (device, dtype) the check runs under."""

    label: str
    make: Callable[[torch.Generator], dict]  # -> keyword arguments (float64 / bool CPU tensors)
    init: dict = field(default_factory=dict)  # constructor arguments (module exercises)
    # A case for a dtype rule (e.g. "the result in the input's dtype", which only a low precision
    # such as bfloat16 can show): it runs once per device, in this dtype alone.
    dtype: torch.dtype | None = None

    def text(self, dtype: torch.dtype, device: torch.device) -> str:
        """How a failure names this case, e.g. 'two heads (float64 on cpu)'."""
        return f"{self.label} ({str(dtype).replace('torch.', '')} on {device.type})"


@dataclass(eq=False)
class Exercise:
    """One graded exercise, and its check: ``check.<name>(student_obj, thorough=False)``.

    `reference` is the right answer (a function or an nn.Module class) in
    ``transformer_lab.<module>``; `forbidden` the dotted names that raise while the student's code
    runs; `driver` says how the student's code is run and compared (FunctionDriver, ModuleDriver,
    ExactDriver, RaisesDriver, TrialDriver, CustomDriver); `mistakes` the catalogue named on a
    matching wrong result; `uses` the earlier exercises of the same notebook that the student's
    code calls by their notebook names (SelfAttention calls ``scaled_dot_product_attention``):
    grading runs this exercise with the course's reference for each of them in place of the
    student's, so that a mistake there costs only its own exercise (``instructor.verify_earlier``);
    the check in the student's own notebook runs their code as it is. Creating an Exercise
    declares it in ``EXERCISES``.
    """

    name: str
    lesson: str  # "02"
    module: str  # the reference module, e.g. "attention"
    reference: Callable
    forbidden: tuple[str, ...] = ()  # dotted names that raise while the student's code runs
    mistakes: list[Mistake] = field(default_factory=list)
    driver: object = None  # a check.drivers.Driver
    doc: str = ""  # what the check checks, e.g. "scaled_dot_product_attention(q, k, v) -> ..."
    uses: tuple[str, ...] = ()  # earlier exercises of the notebook its code calls by name

    def __post_init__(self):
        self._check_uses()
        keyed = []
        for i, m in enumerate(self.mistakes):
            keyed.append(m if m.key else Mistake(f"#{i}", m.sentence, m.impl))
        self.mistakes = keyed
        keys = [m.key for m in keyed]
        if len(set(keys)) != len(keys):
            raise ValueError(f"{self.name}: mistake keys must be unique, got {keys}")
        self.__doc__ = f"Check {self.doc or self.name}."
        EXERCISES.add(self)

    def _check_uses(self) -> None:
        """Each name in `uses` is an exercise declared before this one, in the same lesson."""
        if isinstance(self.uses, str):
            raise TypeError(f"{self.name}: uses is a tuple of exercise names, got {self.uses!r}")
        self.uses = tuple(self.uses)
        for name in self.uses:
            earlier = EXERCISES.get(name)
            if earlier is None or earlier is self or name == self.name:
                raise ValueError(
                    f"{self.name}: uses {name!r}, which is not an exercise declared before it"
                )
            if earlier.lesson != self.lesson:
                raise ValueError(
                    f"{self.name} (lesson {self.lesson}): uses {name!r} of lesson "
                    f"{earlier.lesson}; only an earlier exercise of the same notebook can be "
                    "named (grading runs earlier lessons on the reference already)"
                )

    def mistake(self, key: str) -> Mistake:
        """The catalogued mistake with this key."""
        for m in self.mistakes:
            if m.key == key:
                return m
        raise KeyError(
            f"{self.name} has no mistake {key!r}; its keys: {[m.key for m in self.mistakes]}"
        )

    def __call__(self, student_obj, thorough: bool = False) -> None:
        """Check `student_obj` (the hidden tests pass thorough=True); raise CheckFailed if wrong."""
        if self.driver is None:
            raise TypeError(f"{self.name} has no driver; its lesson module runs it with _run")
        self._refuse_the_reference(student_obj)
        start = time.perf_counter()
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny tensors: one thread is several times faster on a busy CPU
        try:
            with exact_float32():  # no TF32 on a GPU: float32 compared as float32 (its docstring)
                n = self.driver.run(self, student_obj, thorough)
        except NotImplementedError as err:  # what a driver or a lesson's own check let through
            not_implemented(self, student_obj, err)
        except RuntimeError as err:  # CUDA reports a device-side assert late, wherever it syncs
            if not crashes.is_device_assert(err):
                raise
            fail(self, f"your code stopped a CUDA kernel: {str(err).splitlines()[0]}", cause=err)
        finally:
            torch.set_num_threads(threads)
        n, what = n if isinstance(n, tuple) else (n, self.driver.covered(thorough))
        self._passed(student_obj, n, thorough, time.perf_counter() - start, what)

    def _refuse_the_reference(self, student_obj) -> None:
        if student_obj is None:
            fail(self, f"pass your implementation, e.g. check.{self.name}({self.name})")
        if (
            getattr(student_obj, "_transformer_lab_forbidden", None)
            or student_obj is self.reference
        ):
            raise ImplementThisYourself(
                f"implement this yourself: check.{self.name} was given the reference "
                "implementation, not yours"
            )
        if (  # a subclass of the reference would inherit the answer (our own mutants are exempt)
            isinstance(student_obj, type)
            and isinstance(self.reference, type)
            and issubclass(student_obj, self.reference)
            and not student_obj.__module__.startswith("transformer_lab.")
        ):
            raise ImplementThisYourself(
                f"implement this yourself: your {student_obj.__name__} subclasses the reference "
                f"{self.reference.__name__}; subclass nn.Module and write it out"
            )

    def _passed(self, student_obj, n_cases: int, thorough: bool, seconds: float, what: str):
        kind = "thorough" if thorough else "visible"
        line = f"✓ {self.name}: all {n_cases} {kind} checks passed ({what}; {seconds:.2f} s)"
        print("\n".join(wrap(line)))
        if not registry.grading_mode():
            registry.passed(self, student_obj, thorough)

    def run_student(self, student_obj, call: Callable):
        """call() with this exercise's forbidden names switched off (they raise)."""
        with forbid(self.forbidden, student_obj, self.name):
            return call()

    def diagnose(
        self, run_mistake: Callable, got, expected, same: Callable, sizes=()
    ) -> Mistake | None:
        """The catalogued mistake whose result equals the student's (and not the reference's);
        failing that, the generic one that explains how the student's tensor relates to the
        reference's (``check.generic``: transposed axes, a constant factor, ...; `sizes` are
        the case's sizes, by which a factor such as √d_k is named); failing that, the small
        change of the case's inputs under which the reference gives the student's result
        (``check.variants``: a wrong axis, a scale, an off-by-one argument, an inverted mask).

        `run_mistake(impl)` runs one mistake on the failing case; `same(a, b)` compares results.
        A mistake that raises is skipped.
        """
        for mistake in self.mistakes:
            try:
                with torch.no_grad():
                    out = run_mistake(mistake.impl)
            except Exception:
                continue
            if same(out, got) and not same(out, expected):
                return mistake
        named = generic.name(got, expected, same, sizes) or variants.name(
            self.reference, run_mistake, got, expected, same, sizes
        )
        return Mistake(*named) if named else None


PRACTICE: dict[str, Callable] = {}
"""The practice questions' checks (``check.alpha_22(value)``) in course order: a test cell's check
that is not an Exercise (an answer, not code: no reference, nothing saved)."""


def practice(check: Callable) -> Callable:
    """Declare `check` a practice question's check: ``check.<its name>`` beside the exercises."""
    PRACTICE[check.__name__] = check
    return check
