"""Drivers: how an exercise runs the student's code and compares it with the reference.

Each driver gives ``cases(thorough)``, ``run_case(ex, student_obj, case, index, setting)`` and
``covered(thorough)``; every failure goes through ``exercise.fail`` and every "Likely mistake"
through ``Exercise.diagnose`` (or TrialDriver's matching of findings).

- FunctionDriver: a function of tensors: outputs and input gradients, float64/float32, devices.
- ModuleDriver: an nn.Module class: the reference's weights copied in, then as FunctionDriver plus
  parameter gradients.
- CustomDriver: anything else (a function check(ex, student_obj, thorough)).

The drivers judged by their answer rather than by tensors and gradients (ExactDriver, RaisesDriver,
TrialDriver) are in ``check.answer_drivers``; they call the student as these do, through
``call_student``, on ``own_copies`` of the inputs, checked by ``require_unchanged``.

The comparison helpers are looked up on ``check.compare`` at call time (``compare.X``), so a
patched comparison behaves the same for every driver (tests/grading/test_tamper.py relies on it).
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable

import torch
from torch import nn

from . import compare, crashes, exercise, generic, parameters
from .devices import available_devices, settings
from .exercise import Case, Exercise, fail
from .forbid import ImplementThisYourself


def cpu_first(run: Callable, device: torch.device):
    """`run(device)`, a catalogued mistake or an altered input (``check.variants``) on a failing
    case, after `run(cpu)` when `device` is an accelerator.

    On CUDA an index out of range (an id one too large, a target of -100) is a device-side
    assert, after which nothing in the process can use the GPU again: every later check, cell
    and test fails. On the CPU the same indexing raises IndexError, which skips the mistake; so a
    mistake reaches the GPU only once it ran on the CPU. It then runs on the case's own device,
    so its ties (torch.topk) and its rounding are those of the student's result.
    A TrialDriver's diagnosis runs its trials of mistakes and altered inputs the same way
    (`setting_on`); only its probe of the reference, which runs the case's own inputs, runs on the
    device alone (``variants.probe`` reads a case whose implementation is called once)."""
    if device.type != "cpu":
        run(torch.device("cpu"))
    return run(device)


def setting_on(setting, device: torch.device):
    """A TrialDriver setting (a torch.device, a tuple holding one, or anything else) with its
    device replaced by `device`."""
    if isinstance(setting, torch.device):
        return device
    if isinstance(setting, tuple):
        return tuple(device if isinstance(s, torch.device) else s for s in setting)
    return setting


def device_of(setting) -> torch.device:
    """The device a TrialDriver setting runs on (the CPU when it names none)."""
    if isinstance(setting, torch.device):
        return setting
    if isinstance(setting, tuple):
        return next((s for s in setting if isinstance(s, torch.device)), torch.device("cpu"))
    return torch.device("cpu")


class Driver:
    """Runs one exercise: ``cases(thorough)``, ``run_case(...)`` for each, ``covered(thorough)``.

    A subclass fails through `fail` (the one place that words a failure) and names a catalogued mistake
    through ``ex.diagnose``. ``run`` returns how many cases passed.
    """

    def cases(self, thorough: bool) -> list:
        raise NotImplementedError

    def run_case(self, ex: Exercise, student_obj, case, index: int, setting) -> None:
        raise NotImplementedError

    def settings(self, thorough: bool) -> list:
        return [None]

    def covered(self, thorough: bool) -> str:
        return "every case"

    def run(self, ex: Exercise, student_obj, thorough: bool) -> int:
        cases, n = self.cases(thorough), 0
        for setting in self.settings(thorough):
            for index, case in enumerate(cases):
                self.run_case(ex, student_obj, case, index, setting)
                n += 1
        return n


class _TensorDriver(Driver):
    """Shared by FunctionDriver and ModuleDriver: every (device, dtype), outputs then gradients."""

    no_grad = ""

    def __init__(
        self,
        cases: Callable[[bool], list[Case]],
        outputs: tuple[str, ...] = ("output",),
        constant: tuple[str, ...] = (),
    ):
        """`constant` names floating inputs whose gradient is not compared: a 0/1 mask given as
        floats is data, and a right implementation may compare it (mask != 0) instead."""
        self._cases, self.outputs, self.constant = cases, tuple(outputs), tuple(constant)

    def grad_leaves(self, inputs: dict) -> list:
        return [(k, v) for k, v in compare.grad_leaves(inputs) if k not in self.constant]

    def cases(self, thorough: bool) -> list[Case]:
        return self._cases(thorough)

    def settings(self, thorough: bool) -> list:
        return settings(thorough)

    def run(self, ex: Exercise, student_obj, thorough: bool) -> int:
        """Every case in every (device, dtype); a case pinned to a dtype (``Case.dtype``) runs
        once per device, in that dtype, where the device's first dtype comes."""
        cases, n, pinned_done = self.cases(thorough), 0, set()
        for device, dtype in self.settings(thorough):
            for index, case in enumerate(cases):
                if case.dtype is not None:
                    if device in pinned_done:
                        continue
                    self.run_case(ex, student_obj, case, index, (device, case.dtype))
                else:
                    self.run_case(ex, student_obj, case, index, (device, dtype))
                n += 1
            pinned_done.add(device)
        return n

    def covered(self, thorough: bool) -> str:
        where = ", ".join(d.type for d in available_devices()) if thorough else "cpu"
        pinned = sorted(
            {str(c.dtype).removeprefix("torch.") for c in self.cases(thorough) if c.dtype}
        )
        also = f" (and {', '.join(pinned)} where a case says)" if pinned else ""
        return f"forward and gradients, float64 and float32{also} on {where}"

    def compare(
        self,
        ex,
        case,
        setting,
        expected,
        got,
        run_mistake,
        index,
        ref_leaves,
        stu_leaves,
        unexplained: Callable | None = None,
    ):
        """Outputs first (naming a catalogued mistake if one matches, else a generic one, else
        what `unexplained()` finds), then every gradient."""
        device, dtype = setting
        text = case.text(dtype, device)
        problem = compare.compare_outputs(expected, got, self.outputs, dtype, device)
        if problem:
            same = lambda a, b: compare.same_within_tolerance(a, b, dtype, device)  # noqa: E731
            sizes = _sizes(case, ref_leaves)
            mistake = ex.diagnose(run_mistake, got, expected, same, sizes)
            if mistake is None and unexplained is not None:
                mistake = unexplained()
            fail(ex, problem, text, mistake)
        cot = compare.cotangents(expected, seed=7 + index)
        ref_grads = compare.backward(expected, cot, [v for _, v in ref_leaves])
        try:  # the student's graph: an in-place change autograd needed raises only here
            stu_grads = compare.backward(compare.as_tuple(got), cot, [v for _, v in stu_leaves])
        except Exception as err:
            fail(
                ex,
                f"the backward pass through your code raised {type(err).__name__}: {err}",
                text,
                cause=err,
            )
        for (key, _), rg, sg in zip(ref_leaves, ref_grads, stu_grads):
            if rg is None:
                continue
            named = generic.name_gradient(rg, sg, key, output_right=True)
            mistake = exercise.Mistake(*named) if named else None
            if sg is None:
                fail(ex, self.no_grad.format(key=key), text, mistake)
            problem = compare.compare_tensor(
                rg, sg, f"the gradient with respect to `{key}`", dtype, device
            )
            if problem:
                fail(ex, problem, text, mistake)


def _sizes(case: Case, leaves) -> set[int]:
    """A case's sizes: its tensors' axes and its integer constructor arguments (d_model, ...)."""
    sizes = {s for _, t in leaves for s in t.shape}
    return sizes | {v for v in case.init.values() if isinstance(v, int) and not isinstance(v, bool)}


def call_student(ex, student_obj, call, what: str, case_text: str | None = None, run_mistake=None):
    """call() under the exercise's forbidden names; the student's own exception fails the check,
    named by what the error says (``check.crashes``), else by the catalogued mistake that raises
    the very same error on the same case (when `run_mistake(impl)` runs one)."""
    try:
        return ex.run_student(student_obj, call)
    except ImplementThisYourself:
        raise
    except NotImplementedError as err:  # an untouched stub says so in one line
        exercise.not_implemented(ex, student_obj, err, what, case_text)
    except Exception as err:
        # what the student's own error and line say first (``check.crashes``: one cause); else
        # the catalogued mistake that crashes the same way (it may have done more than crash)
        named = crashes.name(err)
        mistake = exercise.Mistake(*named) if named else _same_crash(ex, run_mistake, err)
        fail(ex, f"{what} raised {type(err).__name__}: {err}", case_text, mistake, cause=err)


def _same_crash(ex, run_mistake, err: Exception) -> exercise.Mistake | None:
    """The first catalogued mistake that raises an error of the same type with the same message
    as the student's `err` (its sizes included) on the same case, or None."""
    if run_mistake is None:
        return None
    for mistake in ex.mistakes:
        if mistake.impl is None:
            continue
        try:
            with torch.no_grad():
                run_mistake(mistake.impl)
        except Exception as theirs:
            if type(theirs) is type(err) and _same_message(str(theirs), str(err)):
                return mistake
    return None


_RESHAPE = re.compile(r"shape '\[([-\d, ]*)\]' is invalid for input of size (\d+)")


def _same_message(a: str, b: str) -> bool:
    """The same error message; a reshape's target shape may leave an axis to -1 in one and
    spell it out in the other (view(B, L, h, -1) and view(B, L, h, d_k) fail alike)."""
    if a == b:
        return True
    found = _RESHAPE.fullmatch(a), _RESHAPE.fullmatch(b)
    if not all(found):
        return False
    (shape_a, size_a), (shape_b, size_b) = (f.groups() for f in found)
    dims_a, dims_b = shape_a.split(","), shape_b.split(",")
    return (
        size_a == size_b
        and len(dims_a) == len(dims_b)
        and all(
            x.strip() == y.strip() or "-1" in (x.strip(), y.strip()) for x, y in zip(dims_a, dims_b)
        )
    )


def _reaches(outputs, params: list) -> list[bool] | None:
    """Whether each parameter reaches the floating outputs through autograd (None: no graph)."""
    outs = [
        o
        for o in compare.as_tuple(outputs)
        if isinstance(o, torch.Tensor) and o.is_floating_point() and o.requires_grad
    ]
    if not outs or not params or not all(p.requires_grad for p in params):
        return None
    try:
        grads = torch.autograd.grad(
            outs,
            params,
            grad_outputs=[torch.ones_like(o) for o in outs],
            allow_unused=True,
            retain_graph=True,
        )
    except RuntimeError:
        return None
    return [g is not None for g in grads]


def _unused_parameters(reference: nn.Module, student: nn.Module, expected, got):
    """The mistake of parameters the reference's output depends on and the student's does not
    (``parameters.name_unused``), or None."""
    ref_params = dict(reference.named_parameters())
    stu_params = dict(student.named_parameters(remove_duplicate=False))
    keys = [k for k in ref_params if k in stu_params]
    ref_used = _reaches(expected, [ref_params[k] for k in keys])
    stu_used = _reaches(got, [stu_params[k] for k in keys])
    if ref_used is None or stu_used is None:
        return None
    unused = [k for k, r, u in zip(keys, ref_used, stu_used) if r and not u]
    named = parameters.name_unused(unused, [k for k, u in zip(keys, stu_used) if u])
    return exercise.Mistake(*named) if named else None


def own_copies(inputs: dict) -> dict:
    """The student's own copy of every tensor input (moving one to its own device or dtype does
    not copy it), so that an in-place change is seen and spares the reference's graph; a floating
    one stays a fresh leaf, requiring gradients as the caller's does."""
    return {k: _own_copy(v) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _own_copy(value: torch.Tensor) -> torch.Tensor:
    if value.is_floating_point():
        return value.detach().clone().requires_grad_(value.requires_grad)
    return value.clone()


def _unchanged(given: torch.Tensor, own: torch.Tensor) -> bool:
    """Same shape and entries (NaN where NaN was): what a copy the student left alone keeps."""
    if given.shape != own.shape or given.dtype != own.dtype:
        return False
    given, own = given.detach(), own.detach()
    if given.is_floating_point():
        both_nan = given.isnan() & own.isnan()
        return bool(((given == own) | both_nan).all())
    return torch.equal(given, own)


def require_unchanged(
    ex, ref_in: dict, stu_in: dict, text: str, mistake=None, what: str = "your function"
) -> None:
    """A tensor input the student's code changed in place fails, named as such: by `mistake`
    where the exercise words it itself, else by the generic sentence (for an integer or bool
    input, how to make a new one; for a floating one, how to compute a new one)."""
    for key, value in stu_in.items():
        if isinstance(value, torch.Tensor) and not _unchanged(ref_in[key], value):
            if value.is_floating_point():
                sentence = (
                    f"do not change `{key}` in place (the caller still needs it): `{key} /= ...`, "
                    f"`{key}.mul_(...)` or `{key}[...] = ...` rewrite the caller's tensor, even "
                    f"under torch.no_grad(); compute a new one instead (`{key} = {key} / ...`)"
                )
            else:
                sentence = (
                    f"do not change `{key}` in place (the caller still needs it): make a new "
                    f"tensor (torch.where(...), {key}.clamp(...), or {key}.clone() first), not "
                    f"{key}[...] = ..."
                )
            problem = f"{what} changed its input `{key}` in place"
            fail(ex, problem, text, mistake or exercise.Mistake("in-place-input", sentence))


def named_arguments(ex, args: tuple, kwargs: dict) -> dict:
    """A call's arguments by the reference's parameter names (positional ones too), so that an
    in-place change is named by the argument's name."""
    try:
        bound = inspect.signature(ex.reference).bind(*args, **kwargs)
        variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        if not any(bound.signature.parameters[k].kind in variadic for k in bound.arguments):
            return dict(bound.arguments)
    except (TypeError, ValueError):
        pass
    return {**{f"argument {i + 1}": a for i, a in enumerate(args)}, **kwargs}


class FunctionDriver(_TensorDriver):
    """A function of tensors: same inputs (every dtype and device), outputs and input gradients.

    `cases(thorough)` gives Case objects whose ``make(generator)`` returns the keyword arguments;
    `outputs` names the returned tensors (a tuple return has one name per value).
    """

    no_grad = (
        "no gradient flows back to `{key}`: your output is cut off from the autograd graph "
        "(.detach(), .item(), numpy or a new torch.tensor(...))"
    )

    def run_case(self, ex, student_fn, case, index, setting) -> None:
        device, dtype = setting
        base = case.make(torch.Generator().manual_seed(1000 + index))
        ref_in = compare.move(base, dtype, device, True)
        expected = compare.as_tuple(ex.reference(**ref_in))
        stu_in = own_copies(compare.move(base, dtype, device, True))
        text = case.text(dtype, device)

        def run_mistake(impl):  # on the CPU first (cpu_first)
            return cpu_first(lambda where: impl(**compare.move(base, dtype, where, False)), device)

        call = lambda: student_fn(**stu_in)  # noqa: E731
        got = call_student(ex, student_fn, call, "your function", text, run_mistake)
        require_unchanged(ex, ref_in, stu_in, text)

        leaves = (self.grad_leaves(ref_in), self.grad_leaves(stu_in))
        self.compare(ex, case, setting, expected, got, run_mistake, index, *leaves)


class ModuleDriver(_TensorDriver):
    """An nn.Module class: built from ``case.init``, the reference's weights copied in, then
    outputs, input gradients and parameter gradients compared as for FunctionDriver."""

    no_grad = "no gradient reaches `{key}` (is it used in forward?)"

    def run_case(self, ex, student_cls, case, index, setting) -> None:
        device, dtype = setting
        text = case.text(dtype, device)
        base = case.make(torch.Generator().manual_seed(2000 + index))
        with torch.random.fork_rng(devices=[]):
            reference = ex.reference(**case.init)
        init_parameters(reference, seed=3000 + index)
        reference.to(device=device, dtype=dtype).eval()
        with torch.random.fork_rng(devices=[]):
            student = call_student(
                ex, student_cls, lambda: student_cls(**case.init), "constructing your module", text
            )
        if not isinstance(student, nn.Module):
            fail(ex, f"{ex.name} should be an nn.Module subclass", text)
        student.to(device=device, dtype=dtype)
        _copy_weights(ex, reference, student, case)
        student.eval()

        ref_in = compare.move(base, dtype, device, True)
        expected = compare.as_tuple(reference(**ref_in))
        stu_in = own_copies(compare.move(base, dtype, device, True))

        def run_mistake_on(impl, where):
            wrong = impl(**case.init)
            wrong.load_state_dict(reference.state_dict())
            wrong.to(device=where, dtype=dtype).eval()
            return wrong(**compare.move(base, dtype, where, False))

        def run_mistake(impl):  # on the CPU first (cpu_first)
            return cpu_first(lambda where: run_mistake_on(impl, where), device)

        call = lambda: student(**stu_in)  # noqa: E731
        got = call_student(ex, student_cls, call, "your forward", text, run_mistake)
        require_unchanged(ex, ref_in, stu_in, text, None, "your forward")

        stu_params = dict(student.named_parameters(remove_duplicate=False))
        ref_leaves = self.grad_leaves(ref_in) + list(reference.named_parameters())
        stu_leaves = self.grad_leaves(stu_in) + [
            (k, stu_params[k]) for k, _ in reference.named_parameters()
        ]
        unexplained = lambda: _unused_parameters(reference, student, expected, got)  # noqa: E731
        self.compare(
            ex,
            case,
            setting,
            expected,
            got,
            run_mistake,
            index,
            ref_leaves,
            stu_leaves,
            unexplained,
        )


class CustomDriver(Driver):
    """A check that does not fit the drivers above (traces, statistical properties): `check(ex,
    student_obj, thorough)` runs it, failing through ``fail`` and naming mistakes through
    ``ex.diagnose``, and returns the number of cases (or (number, what it covered))."""

    def __init__(self, check: Callable):
        self.check = check

    def run(self, ex, student_obj, thorough: bool):
        return self.check(ex, student_obj, thorough)


# ----------------------------------------------------------------------------------------------
# Module weights: the reference's random parameters, copied into the student's module.


def init_parameters(module: nn.Module, seed: int) -> None:
    """Fill every parameter from the check's own generator (independent of the global seed)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            fan_in = p.shape[-1] if p.dim() > 1 else p.shape[0]
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) / math.sqrt(fan_in))


def _own_extra(stu_state: dict, key: str, ref_keys) -> bool:
    """Whether the student's state entry `key`, which the reference does not have, is theirs to
    keep: a buffer of their own (a constant such as eps or position ids, left as they made it), or
    another name for a tensor the reference names too (``nn.Sequential(self.w_1, ...)``,
    ``nn.ModuleList([self.norm1, ...])``). An extra learnable parameter is not: it changes the
    model."""
    value = stu_state[key]
    if not isinstance(value, nn.Parameter):
        return True
    return any(stu_state.get(k) is value for k in ref_keys)


def _copy_weights(ex: Exercise, reference: nn.Module, student: nn.Module, case: Case) -> None:
    ref_state = reference.state_dict()
    stu_state = student.state_dict(keep_vars=True)
    stu_keys = set(stu_state)
    missing = sorted(set(ref_state) - stu_keys)
    if missing or any(not _own_extra(stu_state, k, ref_state) for k in stu_keys - set(ref_state)):
        extra = sorted(stu_keys - set(ref_state))
        named = parameters.name_parameters(student, missing, extra, reference)
        fail(
            ex,
            "your module's parameters do not match the reference's, so its weights "
            f"cannot be copied in.\n  missing: {missing or 'none'}; unexpected: {extra or 'none'}\n"
            f"  expected parameter names: {sorted(ref_state)} (case: {case.label})",
            mistake=exercise.Mistake(*named) if named else None,
        )
    for key, value in ref_state.items():
        mine = stu_state[key]
        if mine.shape != value.shape:
            named = parameters.name_parameter_shape(key, tuple(mine.shape), tuple(value.shape))
            fail(
                ex,
                f"parameter `{key}` has shape {tuple(mine.shape)} but the reference's "
                f"has shape {tuple(value.shape)} (case: {case.label})",
                mistake=exercise.Mistake(*named) if named else None,
            )
    student.load_state_dict(ref_state, strict=False)  # the student's own extras stay as they are
