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
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

GRADING_ENV = "TRANSFORMER_LAB_GRADING"

# (atol, rtol) per dtype; accelerators get a little more room for float32 (different kernels).
TOLERANCES = {torch.float64: (1e-9, 1e-7), torch.float32: (3e-5, 3e-4)}
ACCELERATOR_FLOAT32 = (2e-4, 2e-3)


class CheckFailed(AssertionError):
    """The student's code disagrees with the reference. The message says how."""

    def __init__(
        self, message=None, *, exercise=None, problem=None, case=None, mistake=None, cause=None
    ):
        if message is None:
            message = f"{exercise}: {problem}" + (f"\n  case: {case}" if case else "")
            message += f"\nLikely mistake: {mistake}" if mistake else ""
        super().__init__(message)
        self.exercise, self.problem, self.case = exercise, problem, case
        self.mistake, self.cause = mistake, cause

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of a traceback
        from .feedback import render

        return render(self)


class ImplementThisYourself(RuntimeError):
    """Raised by a built-in or reference function that the graded exercise must not call."""

    _render_traceback_ = CheckFailed._render_traceback_


def grading_mode() -> bool:
    """True under the autograder (nbgrader's config sets TRANSFORMER_LAB_GRADING=1)."""
    return os.environ.get(GRADING_ENV, "") not in ("", "0", "false", "False")


def available_devices() -> list[torch.device]:
    """The CPU plus every accelerator present (CUDA, MPS)."""
    found = [torch.device("cpu")]
    if torch.cuda.is_available():
        found.append(torch.device("cuda"))
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append(torch.device("mps"))
    return found


def _dtypes_for(device: torch.device) -> list[torch.dtype]:
    return [torch.float32] if device.type == "mps" else [torch.float64, torch.float32]


def _tolerance(dtype: torch.dtype, device: torch.device) -> tuple[float, float]:
    if dtype == torch.float32 and device.type != "cpu":
        return ACCELERATOR_FLOAT32
    return TOLERANCES[dtype]


# ----------------------------------------------------------------------------------------------
# Exercises: what each one compares against, what it may not call, its catalogue of mistakes.


@dataclass(frozen=True)
class Mistake:
    """A known wrong implementation (same signature as the exercise) and the sentence naming it."""

    sentence: str
    impl: Callable


@dataclass
class Exercise:
    name: str
    lesson: str  # "02"
    module: str  # the reference module, e.g. "attention"
    reference: Callable
    forbidden: tuple[str, ...]  # dotted names that raise while the student's code runs
    mistakes: list[Mistake] = field(default_factory=list)


EXERCISES: dict[str, Exercise] = {}


def _register(ex: Exercise) -> Exercise:
    EXERCISES[ex.name] = ex
    return ex


# ----------------------------------------------------------------------------------------------
# Forbidden names: patched for the duration of the student's call, restored afterwards.


def _resolve(dotted: str):
    """'torch.nn.functional.scaled_dot_product_attention' -> (owner object, attribute name)."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:-1]:
            owner = getattr(owner, attr)
        return owner, parts[-1]
    raise ImportError(dotted)


def _stub(dotted: str, exercise: str) -> Callable:
    short = dotted.replace("torch.nn.functional.", "F.").replace("torch.nn.", "nn.")

    def refuse(*args, **kwargs):
        raise ImplementThisYourself(
            f"implement this yourself: {short} is what the exercise `{exercise}` asks you to "
            "build, so it is switched off while your code is checked. Write it with basic tensor "
            "operations (@, softmax, tanh, ...)."
        )

    refuse.__name__ = f"forbidden_{dotted.rsplit('.', 1)[-1]}"
    refuse._transformer_lab_forbidden = dotted
    return refuse


def _namespaces(obj) -> Iterator[dict]:
    """The global namespaces the student's function or class looks names up in."""
    seen: set[int] = set()
    functions = []
    if isinstance(obj, type):
        for klass in obj.__mro__:
            if klass.__module__.startswith(("torch", "builtins")):
                continue
            for value in vars(klass).values():
                value = getattr(value, "__func__", value)
                if callable(value) and hasattr(value, "__globals__"):
                    functions.append(value)
    elif hasattr(obj, "__globals__"):
        functions.append(obj)
    for fn in functions:
        if id(fn.__globals__) not in seen:
            seen.add(id(fn.__globals__))
            yield fn.__globals__


def _closure_cells(obj) -> Iterator:
    functions = [obj] if hasattr(obj, "__closure__") else []
    if isinstance(obj, type):
        functions = [getattr(v, "__func__", v) for v in vars(obj).values()]
    for fn in functions:
        yield from getattr(fn, "__closure__", None) or ()


@contextlib.contextmanager
def forbid(dotted_names: tuple[str, ...], student_obj, exercise: str):
    """Make each dotted name (and any alias of it the student's code holds) raise, then restore."""
    undo: list[Callable[[], None]] = []
    originals: dict[int, Callable] = {}
    try:
        for dotted in dotted_names:
            try:
                owner, attr = _resolve(dotted)
                original = getattr(owner, attr)
            except (ImportError, AttributeError):
                continue
            stub = originals.setdefault(id(original), _stub(dotted, exercise))
            setattr(owner, attr, stub)
            undo.append(lambda o=owner, a=attr, v=original: setattr(o, a, v))
        # Names the student bound directly: `from torch.nn.functional import scaled_dot_...`.
        for namespace in _namespaces(student_obj):
            for key, value in list(namespace.items()):
                if id(value) in originals and namespace[key] is value:
                    namespace[key] = originals[id(value)]
                    undo.append(lambda ns=namespace, k=key, v=value: ns.__setitem__(k, v))
        for cell in _closure_cells(student_obj):
            try:
                value = cell.cell_contents
            except ValueError:  # empty cell
                continue
            if id(value) in originals:
                cell.cell_contents = originals[id(value)]
                undo.append(lambda c=cell, v=value: setattr(c, "cell_contents", v))
        yield
    finally:
        for restore in reversed(undo):
            restore()


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


def _compare_tensor(expected, got, what: str, dtype, device) -> str | None:
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
        where = (got != expected).flatten().nonzero()[0].item()
        return (
            f"{what} differs at index {_fmt_index(where, got.shape)}: "
            f"got {got.flatten()[where].item()}, expected {expected.flatten()[where].item()}"
        )
    atol, rtol = _tolerance(dtype, device)
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()
    bad_nan = g.isnan() & ~e.isnan()
    if bad_nan.any():
        where = bad_nan.flatten().nonzero()[0].item()
        return (
            f"{what} contains NaN ({int(bad_nan.sum())} of {g.numel()} entries, first at index "
            f"{_fmt_index(where, g.shape)}) where the reference gives {e.flatten()[where].item():.6g}"
        )
    bad_inf = g.isinf() & ~e.isinf()
    if bad_inf.any():
        where = bad_inf.flatten().nonzero()[0].item()
        return f"{what} contains inf (first at index {_fmt_index(where, g.shape)})"
    if torch.allclose(g, e, atol=atol, rtol=rtol, equal_nan=True):
        return None
    diff = (g - e).abs().nan_to_num(0.0)
    where = diff.flatten().argmax().item()
    n_bad = int((diff > atol + rtol * e.abs()).sum())
    return (
        f"{what} differs in {n_bad} of {g.numel()} entries; the largest difference is "
        f"{diff.flatten()[where].item():.3g} at index {_fmt_index(where, g.shape)} "
        f"(got {g.flatten()[where].item():.6g}, expected {e.flatten()[where].item():.6g}; "
        f"tolerance atol={atol:g}, rtol={rtol:g} for {str(dtype).replace('torch.', '')})"
    )


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


def _diagnose(ex: Exercise, run_mistake: Callable, expected, got, dtype, device) -> str:
    """Name the catalogued mistake whose output equals the student's (and not the reference's)."""
    for mistake in ex.mistakes:
        try:
            with torch.no_grad():
                out = run_mistake(mistake.impl)
        except Exception:
            continue
        if _same(out, got, dtype, device) and not _same(out, expected, dtype, device):
            return f"\nLikely mistake: {mistake.sentence}"
    return ""


# ----------------------------------------------------------------------------------------------
# The two drivers: plain functions (tensor in, tensor out) and nn.Module classes.


def _settings(thorough: bool):
    devices = available_devices() if thorough else [torch.device("cpu")]
    return [(device, dtype) for device in devices for dtype in _dtypes_for(device)]


def _fail(ex: Exercise, case: Case, dtype, device, problem: str, hint="", cause=None) -> None:
    raise CheckFailed(
        exercise=ex.name,
        problem=problem,
        case=f"{case.label} ({str(dtype).replace('torch.', '')} on {device.type})",
        mistake=hint.removeprefix("\nLikely mistake: ") or None,
        cause=cause,
    ) from None


def _run_student(ex: Exercise, student_obj, call: Callable):
    with forbid(ex.forbidden, student_obj, ex.name):
        return call()


def _compare_run(
    ex, case, dtype, device, names, expected, got, run_mistake, i, ref_leaves, stu_leaves, no_grad
) -> None:
    """Outputs first (naming a catalogued mistake if one matches), then every gradient."""
    problem = _compare_outputs(expected, got, names, dtype, device)
    if problem:
        hint = _diagnose(ex, run_mistake, expected, got, dtype, device)
        _fail(ex, case, dtype, device, problem, hint)
    cot = _cotangents(expected, seed=7 + i)
    ref_grads = _backward(expected, cot, [v for _, v in ref_leaves])
    stu_grads = _backward(_as_tuple(got), cot, [v for _, v in stu_leaves])
    for (key, _), rg, sg in zip(ref_leaves, ref_grads, stu_grads):
        if rg is None:
            continue
        if sg is None:
            _fail(ex, case, dtype, device, no_grad.format(key=key))
        problem = _compare_tensor(rg, sg, f"the gradient with respect to `{key}`", dtype, device)
        if problem:
            _fail(ex, case, dtype, device, problem)


def _check_function(ex, student_fn, cases, names, thorough, grad_names=None) -> int:
    n = 0
    for device, dtype in _settings(thorough):
        for i, case in enumerate(cases):
            g = torch.Generator().manual_seed(1000 + i)
            base = case.make(g)
            ref_in = _move(base, dtype, device, True)
            expected = _as_tuple(ex.reference(**ref_in))
            stu_in = _move(base, dtype, device, True)
            try:
                got = _run_student(ex, student_fn, lambda: student_fn(**stu_in))  # noqa: B023
            except (ImplementThisYourself, NotImplementedError):
                raise
            except Exception as err:
                problem = f"your function raised {type(err).__name__}: {err}"
                _fail(ex, case, dtype, device, problem, cause=err)

            def run_mistake(impl, base=base):
                return impl(**_move(base, dtype, device, False))  # noqa: B023

            ref_leaves, stu_leaves = _grad_leaves(ref_in), _grad_leaves(stu_in)
            no_grad = (
                "no gradient flows back to `{key}`: your output is cut off from the autograd graph "
                "(.detach(), .item(), numpy or a new torch.tensor(...))"
            )
            _compare_run(
                ex,
                case,
                dtype,
                device,
                names,
                expected,
                got,
                run_mistake,
                i,
                ref_leaves,
                stu_leaves,
                no_grad,
            )
            n += 1
    return n


def _init_parameters(module: nn.Module, seed: int) -> None:
    """Fill every parameter from the check's own generator (independent of the global seed)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            fan_in = p.shape[-1] if p.dim() > 1 else p.shape[0]
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) / math.sqrt(fan_in))


def _copy_weights(ex: Exercise, reference: nn.Module, student: nn.Module, case: Case) -> None:
    ref_state = reference.state_dict()
    stu_keys = set(student.state_dict())
    if stu_keys != set(ref_state):
        missing = sorted(set(ref_state) - stu_keys)
        extra = sorted(stu_keys - set(ref_state))
        raise CheckFailed(
            f"{ex.name}: your module's parameters do not match the reference's, so its weights "
            f"cannot be copied in.\n  missing: {missing or 'none'}; unexpected: {extra or 'none'}\n"
            f"  expected parameter names: {sorted(ref_state)} (case: {case.label})"
        )
    for key, value in ref_state.items():
        mine = student.state_dict()[key]
        if mine.shape != value.shape:
            raise CheckFailed(
                f"{ex.name}: parameter `{key}` has shape {tuple(mine.shape)} but the reference's "
                f"has shape {tuple(value.shape)} (case: {case.label})"
            )
    student.load_state_dict(ref_state)


def _check_module(ex, student_cls, cases, names, thorough) -> int:
    n = 0
    for device, dtype in _settings(thorough):
        for i, case in enumerate(cases):
            g = torch.Generator().manual_seed(2000 + i)
            base = case.make(g)
            with torch.random.fork_rng(devices=[]):
                reference = ex.reference(**case.init)
            _init_parameters(reference, seed=3000 + i)
            reference.to(device=device, dtype=dtype).eval()
            try:
                with torch.random.fork_rng(devices=[]):
                    student = _run_student(ex, student_cls, lambda: student_cls(**case.init))  # noqa: B023
            except (ImplementThisYourself, NotImplementedError):
                raise
            except Exception as err:
                _fail(
                    ex,
                    case,
                    dtype,
                    device,
                    f"constructing your module raised {type(err).__name__}: {err}",
                    cause=err,
                )
            if not isinstance(student, nn.Module):
                _fail(ex, case, dtype, device, f"{ex.name} should be an nn.Module subclass")
            student.to(device=device, dtype=dtype)
            _copy_weights(ex, reference, student, case)
            student.eval()

            ref_in = _move(base, dtype, device, True)
            expected = _as_tuple(reference(**ref_in))
            stu_in = _move(base, dtype, device, True)
            try:
                got = _run_student(ex, student_cls, lambda: student(**stu_in))  # noqa: B023
            except (ImplementThisYourself, NotImplementedError):
                raise
            except Exception as err:
                problem = f"your forward raised {type(err).__name__}: {err}"
                _fail(ex, case, dtype, device, problem, cause=err)

            def run_mistake(impl, base=base, reference=reference):
                wrong = impl(**case.init)  # noqa: B023
                wrong.load_state_dict(reference.state_dict())
                wrong.to(device=device, dtype=dtype).eval()  # noqa: B023
                return wrong(**_move(base, dtype, device, False))  # noqa: B023

            stu_params = dict(student.named_parameters())
            ref_leaves = _grad_leaves(ref_in) + list(reference.named_parameters())
            stu_leaves = _grad_leaves(stu_in) + [
                (k, stu_params[k]) for k, _ in reference.named_parameters()
            ]
            no_grad = "no gradient reaches `{key}` (is it used in forward?)"
            _compare_run(
                ex,
                case,
                dtype,
                device,
                names,
                expected,
                got,
                run_mistake,
                i,
                ref_leaves,
                stu_leaves,
                no_grad,
            )
            n += 1
    return n


def _passed(
    ex: Exercise, student_obj, n_cases: int, thorough: bool, seconds: float, what: str
) -> bool:
    kind = "thorough" if thorough else "visible"
    print(f"✓ {ex.name}: all {n_cases} {kind} checks passed ({what}; {seconds:.2f} s)")
    if not grading_mode():
        from .. import student as _student

        _student.save(ex.name, student_obj, thorough=thorough)
    return True


def _run(ex: Exercise, student_obj, cases, names, thorough, kind: str) -> bool:
    if student_obj is None:
        raise CheckFailed(f"{ex.name}: pass your implementation, e.g. check.{ex.name}({ex.name})")
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
        if kind == "module":
            n = _check_module(ex, student_obj, cases, names, thorough)
        elif kind == "function":
            n = _check_function(ex, student_obj, cases, names, thorough)
        else:
            n = kind(ex, student_obj, thorough)
    finally:
        torch.set_num_threads(threads)
    if callable(kind):  # a custom check returns its count, or (count, what it covered)
        n, what = n if isinstance(n, tuple) else (n, "every case")
    else:
        where = ", ".join(d.type for d in available_devices()) if thorough else "cpu"
        what = f"forward and gradients, float64 and float32 on {where}"
    return _passed(ex, student_obj, n, thorough, time.perf_counter() - start, what)
