"""The engine behind every test cell: compare the student's code with the reference.

A test cell calls ``check.<name>(<name>)``, e.g. ``check.scaled_dot_product_attention(
scaled_dot_product_attention)``. The check

- runs the student's code and the reference on identical inputs (drawn from the check's own
  ``torch.Generator``, never the global seed) and, for modules, identical weights (the
  reference's parameters are copied into the student's module);
- compares outputs and gradients (inputs' and parameters') in float64 and float32 on the CPU,
  and again on every accelerator present, with a tolerance per dtype;
- on a mismatch says what differs (shape, dtype, device, where, by how much) and, when the
  student's output equals one of the exercise's catalogued mistakes, names it in one sentence;
- while the student's code runs, makes the reference twin and the PyTorch built-ins the exercise
  replaces raise "implement this yourself";
- saves a passing implementation into the student's own package (see ``transformer_lab.student``)
  unless grading mode is on.

``thorough=True`` (the hidden tests) runs many more cases: batch and head dimensions, length-1
sequences, large logits, broadcast and fully-masked rows, every device.
Works in plain Jupyter, Colab and under nbgrader alike; nothing here needs nbgrader.

This module holds what every check shares: ``Exercise`` (a declared exercise, which is its own
check), ``Mistake``, ``CheckFailed`` and ``fail`` (the one place that words a failure), the
tolerances and the comparison of outputs. ``check.drivers`` runs the student's code (one driver
per kind of exercise); ``check.forbid`` switches the forbidden names off.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

import torch
from torch import nn

from ..registry import EXERCISES, GRADING_ENV, grading_mode  # noqa: F401 (GRADING_ENV: re-export)
from .feedback import not_written_sentence, render, student_frames, unwritten, wrap
from .forbid import ImplementThisYourself, forbid, resolve  # noqa: F401 (re-exported)

# (atol, rtol) per dtype; accelerators get a little more room for float32 (different kernels).
TOLERANCES = {torch.float64: (1e-9, 1e-7), torch.float32: (3e-5, 3e-4)}
ACCELERATOR_FLOAT32 = (2e-4, 2e-3)


class CheckFailed(AssertionError):
    """The student's code disagrees with the reference. The message says how.

    ``exercise`` (its name), ``problem`` (one sentence: what differs), ``case`` (the inputs, e.g.
    "two heads (float64 on cpu)"), ``mistake`` (the catalogued mistake's sentence, when one matches)
    and ``cause`` (the student's own exception, when their code raised). Without an explicit
    `message`, ``str(err)`` is composed from them.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        exercise: str | None = None,
        problem: str | None = None,
        case: str | None = None,
        mistake: str | None = None,
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
        self.mistake, self.cause = mistake, cause

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


def _not_implemented(
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


# The devices the thorough checks may use, e.g. "cuda" (GPU check: the catalogue on CUDA alone) or
# "cpu"; unset: every device present. Devices named here but absent are left out.
CHECK_DEVICES_ENV = "TRANSFORMER_LAB_CHECK_DEVICES"


def available_devices() -> list[torch.device]:
    """The CPU plus every accelerator present (CUDA, MPS); only those named in
    $TRANSFORMER_LAB_CHECK_DEVICES (comma-separated types) when it is set."""
    found = [torch.device("cpu")]
    if torch.cuda.is_available():
        found.append(torch.device("cuda"))
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append(torch.device("mps"))
    wanted = os.environ.get(CHECK_DEVICES_ENV, "").strip()
    if wanted:
        names = {name.strip() for name in wanted.split(",") if name.strip()}
        unknown = names - {"cpu", "cuda", "mps"}
        if unknown:
            raise ValueError(
                f"{CHECK_DEVICES_ENV}={wanted!r}: unknown device type(s) {sorted(unknown)}; "
                "use cpu, cuda or mps"
            )
        found = [d for d in found if d.type in names]
        if not found:
            raise RuntimeError(
                f"{CHECK_DEVICES_ENV}={wanted!r} names no device present here "
                f"(present: cpu{', cuda' if torch.cuda.is_available() else ''})"
            )
    return found


@contextlib.contextmanager
def exact_float32():
    """Full float32 precision on CUDA while a check runs (no TF32), restored exactly afterwards.

    Why switch TF32 off rather than widen the tolerances: on Ampere and later GPUs, cuDNN runs
    float32 convolutions in TF32 by default (ViT's patch Conv2d; matmuls too once a program asks
    for "high" precision). TF32 keeps 10 bits of mantissa, so its error is ~1e-3 relative and
    grows with the length of the sum: no fixed tolerance bounds it, and one wide enough would be
    ten times float32's. With TF32 off, one tolerance per dtype holds on every device and a
    student's code gets the same verdict, and the same named mistake, on the CPU and on a GPU
    (what the GPU check's catalogue step verifies). The learner's own training keeps whatever
    they chose: only the check's own computation runs in IEEE float32.

    PyTorch 2.9 added per-backend ``fp32_precision`` strings beside the legacy ``allow_tf32``
    flags and refuses to read a legacy flag that disagrees with them; so both are set
    consistently (the legacy setters first, which update both), and both are put back.
    """
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    new_api = [
        (obj, "fp32_precision")
        for obj in (matmul, getattr(cudnn, "conv", None), getattr(cudnn, "rnn", None))
        if obj is not None and hasattr(obj, "fp32_precision")
    ]
    saved_new = [(obj, attr, getattr(obj, attr)) for obj, attr in new_api]
    saved_legacy = []
    for getter, setter in (
        (lambda: torch.get_float32_matmul_precision(), torch.set_float32_matmul_precision),
        (lambda: cudnn.allow_tf32, lambda value: setattr(cudnn, "allow_tf32", value)),
    ):
        try:  # a state the program mixed from both APIs cannot be read the legacy way
            saved_legacy.append((setter, getter()))
        except RuntimeError:
            pass
    torch.set_float32_matmul_precision("highest")
    cudnn.allow_tf32 = False
    for obj, attr, _ in saved_new:
        setattr(obj, attr, "ieee")
    try:
        yield
    finally:
        for setter, value in saved_legacy:
            setter(value)
        for obj, attr, value in saved_new:
            setattr(obj, attr, value)


def _dtypes_for(device: torch.device) -> list[torch.dtype]:
    return [torch.float32] if device.type == "mps" else [torch.float64, torch.float32]


def _tolerance(dtype: torch.dtype, device: torch.device) -> tuple[float, float]:
    if dtype == torch.float32 and device.type != "cpu":
        return ACCELERATOR_FLOAT32
    return TOLERANCES[dtype]


def devices(thorough: bool) -> list[torch.device]:
    """The devices a check runs on: the CPU, plus every accelerator when thorough."""
    return available_devices() if thorough else [torch.device("cpu")]


def settings(thorough: bool) -> list[tuple[torch.device, torch.dtype]]:
    """(device, dtype) pairs a check runs under: float64 and float32 on each of `devices`."""
    return [(device, dtype) for device in devices(thorough) for dtype in _dtypes_for(device)]


def fail(
    ex: Exercise | str,
    problem: str,
    case: str | None = None,
    mistake: Mistake | None = None,
    cause: BaseException | None = None,
) -> NoReturn:
    """Raise the CheckFailed for `ex`: the one place that words a failure.

    `problem` is one sentence saying what differs; `case` the inputs it was seen on; `mistake` the
    catalogued mistake the student's result matches; `cause` the exception their code raised.
    """
    raise CheckFailed(
        exercise=getattr(ex, "name", ex),
        problem=problem,
        case=case,
        mistake=mistake.sentence if mistake is not None else None,
        cause=cause,
    ) from None


# ----------------------------------------------------------------------------------------------
# Exercises: what each one compares against, what it may not call, its catalogue of mistakes.


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


@dataclass(eq=False)
class Exercise:
    """One graded exercise, and its check: ``check.<name>(student_obj, thorough=False)``.

    `reference` is the right answer (a function or an nn.Module class) in
    ``transformer_lab.<module>``; `forbidden` the dotted names that raise while the student's code
    runs; `driver` says how the student's code is run and compared (FunctionDriver, ModuleDriver,
    ExactDriver, CustomDriver); `mistakes` the catalogue named on a matching wrong result.
    Creating an Exercise declares it in ``EXERCISES``.
    """

    name: str
    lesson: str  # "02"
    module: str  # the reference module, e.g. "attention"
    reference: Callable
    forbidden: tuple[str, ...] = ()  # dotted names that raise while the student's code runs
    mistakes: list[Mistake] = field(default_factory=list)
    driver: object = None  # a check.drivers.Driver
    doc: str = ""  # what the check checks, e.g. "scaled_dot_product_attention(q, k, v) -> ..."

    def __post_init__(self):
        keyed = []
        for i, m in enumerate(self.mistakes):
            keyed.append(m if m.key else Mistake(f"#{i}", m.sentence, m.impl))
        self.mistakes = keyed
        keys = [m.key for m in keyed]
        if len(set(keys)) != len(keys):
            raise ValueError(f"{self.name}: mistake keys must be unique, got {keys}")
        self.__doc__ = f"Check {self.doc or self.name}."
        EXERCISES.add(self)

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
        _run_driver(self, student_obj, thorough, self.driver)

    def run_student(self, student_obj, call: Callable):
        """call() with this exercise's forbidden names switched off (they raise)."""
        with forbid(self.forbidden, student_obj, self.name):
            return call()

    def diagnose(self, run_mistake: Callable, got, expected, same: Callable) -> Mistake | None:
        """The catalogued mistake whose result equals the student's (and not the reference's).

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
        return None


# ----------------------------------------------------------------------------------------------
# Comparing outputs.


def _as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _identical(a, b) -> bool:
    """Exactly equal tensors: same dtype, shape, device type and every entry (for exact results
    such as masks and token ids)."""
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.dtype == b.dtype
        and a.shape == b.shape
        and a.device.type == b.device.type
        and torch.equal(a.cpu(), b.cpu())
    )


def _fmt_index(flat_index: int, shape: torch.Size) -> str:
    index = []
    for size in reversed(shape):
        index.append(flat_index % size)
        flat_index //= size
    return str(tuple(reversed(index)))


def compare_tensor(expected, got, what: str, dtype, device) -> str | None:
    """None when equal within tolerance, else one sentence saying what differs."""
    if not isinstance(got, torch.Tensor):
        return f"{what} should be a tensor but is a {type(got).__name__}"
    if tuple(got.shape) != tuple(expected.shape):
        return f"{what} has shape {tuple(got.shape)} but should have shape {tuple(expected.shape)}"
    if got.dtype != expected.dtype:
        return f"{what} has dtype {got.dtype} but should have dtype {expected.dtype} (same as the inputs)"
    if got.device.type != expected.device.type:
        return f"{what} is on device {got.device} but the inputs are on {expected.device}"
    if expected.dtype == torch.bool or not expected.is_floating_point():
        if torch.equal(got, expected):
            return None
        if got.numel() == 1:  # a scalar: no index to give
            return f"{what} differs: got {got.item()}, expected {expected.item()}"
        where = (got != expected).flatten().nonzero()[0].item()
        return (
            f"{what} differs at index {_fmt_index(where, got.shape)}: "
            f"got {got.flatten()[where].item()}, expected {expected.flatten()[where].item()}"
        )
    atol, rtol = _tolerance(dtype, device)
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()
    scalar = g.numel() == 1  # one value: no index and no count to give
    tolerance = f"tolerance atol={atol:g}, rtol={rtol:g} for {str(dtype).replace('torch.', '')}"
    bad_nan = g.isnan() & ~e.isnan()
    if bad_nan.any():
        where = bad_nan.flatten().nonzero()[0].item()
        reference = f"where the reference gives {e.flatten()[where].item():.6g}"
        if scalar:
            return f"{what} contains NaN {reference}"
        return (
            f"{what} contains NaN ({int(bad_nan.sum())} of {g.numel()} entries, first at index "
            f"{_fmt_index(where, g.shape)}) {reference}"
        )
    bad_inf = g.isinf() & ~e.isinf()
    if bad_inf.any():
        where = bad_inf.flatten().nonzero()[0].item()
        if scalar:
            return f"{what} contains inf where the reference gives {e.item():.6g}"
        return f"{what} contains inf (first at index {_fmt_index(where, g.shape)})"
    if torch.allclose(g, e, atol=atol, rtol=rtol, equal_nan=True):
        return None
    if scalar:
        return f"{what} differs: got {g.item():.6g}, expected {e.item():.6g} ({tolerance})"
    diff = (g - e).abs().nan_to_num(0.0)
    where = diff.flatten().argmax().item()
    n_bad = int((diff > atol + rtol * e.abs()).sum())
    return (
        f"{what} differs in {n_bad} of {g.numel()} entries; the largest difference is "
        f"{diff.flatten()[where].item():.3g} at index {_fmt_index(where, g.shape)} "
        f"(got {g.flatten()[where].item():.6g}, expected {e.flatten()[where].item():.6g}; "
        f"{tolerance})"
    )


_compare_tensor = compare_tensor  # old name: the drivers read it at call time (patchable)


def _compare_outputs(expected, got, names: tuple[str, ...], dtype, device) -> str | None:
    expected, got_t = _as_tuple(expected), _as_tuple(got)
    if len(got_t) != len(expected) or (len(expected) > 1 and not isinstance(got, (tuple, list))):
        return (
            f"the result should be {len(expected)} value(s) ({', '.join(names)}) "
            f"but is {type(got).__name__}"
            + (f" of length {len(got_t)}" if isinstance(got, (tuple, list)) else "")
        )
    for e, g, name in zip(expected, got_t, names):
        problem = _compare_tensor(e, g, name, dtype, device)
        if problem:
            return problem
    return None


# ----------------------------------------------------------------------------------------------
# Cases: inputs built in float64 on the CPU from the check's own generator, then moved.


@dataclass
class Case:
    label: str
    make: Callable[[torch.Generator], dict]  # -> keyword arguments (float64 / bool CPU tensors)
    init: dict = field(default_factory=dict)  # constructor arguments (module exercises)


def _move(inputs: dict, dtype, device, requires_grad: bool) -> dict:
    moved = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor):
            value = value.to(device)
            if value.is_floating_point():
                value = value.to(dtype).detach().requires_grad_(requires_grad)
        moved[key] = value
    return moved


def _grad_leaves(inputs: dict) -> list[tuple[str, torch.Tensor]]:
    return [(k, v) for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.requires_grad]


def _cotangents(outputs: tuple, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.device, o.dtype)
        for o in outputs
    ]


def _backward(outputs: tuple, cotangents, leaves: list[torch.Tensor]) -> list:
    pairs = [(o, c) for o, c in zip(outputs, cotangents) if o.is_floating_point()]
    if not pairs or not leaves:
        return []
    loss = sum((o * c).nan_to_num(0.0).sum() for o, c in pairs)
    if not loss.requires_grad:
        return [None] * len(leaves)
    return list(torch.autograd.grad(loss, leaves, allow_unused=True))


def _same(a, b, dtype, device) -> bool:
    a, b = _as_tuple(a), _as_tuple(b)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            if x != y:
                return False
            continue
        if x.shape != y.shape:
            return False
        atol, rtol = _tolerance(dtype, device)
        if not torch.allclose(
            x.detach().double().cpu(),
            y.detach().double().cpu(),
            atol=atol,
            rtol=rtol,
            equal_nan=True,
        ):
            return False
    return True


# public: whether two results (tensors or tuples of them) agree within the tolerance
same_within_tolerance = _same


def _case_text(case: Case, dtype, device) -> str:
    return f"{case.label} ({str(dtype).replace('torch.', '')} on {device.type})"


def _init_parameters(module: nn.Module, seed: int) -> None:
    """Fill every parameter from the check's own generator (independent of the global seed)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            fan_in = p.shape[-1] if p.dim() > 1 else p.shape[0]
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) / math.sqrt(fan_in))


init_parameters = _init_parameters  # public: a lesson module's own model, seeded weights


def _passed(
    ex: Exercise, student_obj, n_cases: int, thorough: bool, seconds: float, what: str
) -> None:
    kind = "thorough" if thorough else "visible"
    print(
        "\n".join(
            wrap(f"✓ {ex.name}: all {n_cases} {kind} checks passed ({what}; {seconds:.2f} s)")
        )
    )
    if not grading_mode():
        from .. import student as _student

        _student.save(ex.name, student_obj, thorough=thorough)


def _run_driver(ex: Exercise, student_obj, thorough: bool, driver) -> None:
    if student_obj is None:
        fail(ex, f"pass your implementation, e.g. check.{ex.name}({ex.name})")
    if getattr(student_obj, "_transformer_lab_forbidden", None) or student_obj is ex.reference:
        raise ImplementThisYourself(
            f"implement this yourself: check.{ex.name} was given the reference implementation, "
            "not yours"
        )
    if (  # a subclass of the reference would inherit the answer (our own mutants are exempt)
        isinstance(student_obj, type)
        and isinstance(ex.reference, type)
        and issubclass(student_obj, ex.reference)
        and not student_obj.__module__.startswith("transformer_lab.")
    ):
        raise ImplementThisYourself(
            f"implement this yourself: your {student_obj.__name__} subclasses the reference "
            f"{ex.reference.__name__}; subclass nn.Module and write it out"
        )
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is several times faster on a busy CPU
    try:
        with exact_float32():  # no TF32 on a GPU: float32 compared as float32 (see its docstring)
            n = driver.run(ex, student_obj, thorough)
    except NotImplementedError as err:  # what a driver or a lesson's own check let through
        _not_implemented(ex, student_obj, err)
    finally:
        torch.set_num_threads(threads)
    n, what = n if isinstance(n, tuple) else (n, driver.covered(thorough))
    _passed(ex, student_obj, n, thorough, time.perf_counter() - start, what)
