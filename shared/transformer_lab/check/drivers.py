"""Drivers: how an exercise runs the student's code and compares it with the reference.

Each driver gives ``cases(thorough)``, ``run_case(ex, student_obj, case, index, setting)`` and
``covered(thorough)``; every failure goes through ``exercise.fail`` and every "Likely mistake"
through ``Exercise.diagnose`` (or TrialDriver's matching of findings).

- FunctionDriver: a function of tensors: outputs and input gradients, float64/float32, devices.
- ModuleDriver: an nn.Module class: the reference's weights copied in, then as FunctionDriver plus
  parameter gradients.
- ExactDriver: a result that must equal the reference's exactly (counts, masks, token ids).
- RaisesDriver: an input the exercise must reject with an error (a ValueError that says why).
- TrialDriver: traces and statistical properties, judged by a whole trial per case.
- CustomDriver: anything else (a function check(ex, student_obj, thorough)).

The comparison helpers are looked up on ``check.compare`` at call time (``compare.X``), so a
patched comparison behaves the same for every driver (tests/grading/test_tamper.py relies on it).
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from . import compare, crashes, exercise, generic, parameters, variants
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


def _student_call(ex, student_obj, call, what: str, case_text: str | None = None, run_mistake=None):
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


def _own_copies(inputs: dict) -> dict:
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


def _require_unchanged(
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


def _named_arguments(ex, args: tuple, kwargs: dict) -> dict:
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
        stu_in = _own_copies(compare.move(base, dtype, device, True))
        text = case.text(dtype, device)

        def run_mistake(impl):  # on the CPU first (cpu_first)
            return cpu_first(lambda where: impl(**compare.move(base, dtype, where, False)), device)

        call = lambda: student_fn(**stu_in)  # noqa: E731
        got = _student_call(ex, student_fn, call, "your function", text, run_mistake)
        _require_unchanged(ex, ref_in, stu_in, text)

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
            student = _student_call(
                ex, student_cls, lambda: student_cls(**case.init), "constructing your module", text
            )
        if not isinstance(student, nn.Module):
            fail(ex, f"{ex.name} should be an nn.Module subclass", text)
        student.to(device=device, dtype=dtype)
        _copy_weights(ex, reference, student, case)
        student.eval()

        ref_in = compare.move(base, dtype, device, True)
        expected = compare.as_tuple(reference(**ref_in))
        stu_in = _own_copies(compare.move(base, dtype, device, True))

        def run_mistake_on(impl, where):
            wrong = impl(**case.init)
            wrong.load_state_dict(reference.state_dict())
            wrong.to(device=where, dtype=dtype).eval()
            return wrong(**compare.move(base, dtype, where, False))

        def run_mistake(impl):  # on the CPU first (cpu_first)
            return cpu_first(lambda where: run_mistake_on(impl, where), device)

        call = lambda: student(**stu_in)  # noqa: E731
        got = _student_call(ex, student_cls, call, "your forward", text, run_mistake)
        _require_unchanged(ex, ref_in, stu_in, text, None, "your forward")

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


@dataclass(frozen=True)
class Call:
    """One exact-output case: the arguments of one call (for ExactDriver), and optionally the
    label its failures name it by (default: the call written out, e.g. "f('rnn', 1, k=3)")."""

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    label: str | None = None

    def text(self, name: str) -> str:
        if self.label is not None:
            return self.label
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{name}({', '.join(parts)})"


def exactly_equal(got, expected) -> bool:
    """Exact equality: tensors by dtype, shape, device and entries; numbers by value (a bool is not
    a number); anything else by ==."""
    if isinstance(expected, torch.Tensor) or isinstance(got, torch.Tensor):
        return compare.identical(got, expected)
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        return isinstance(got, (int, float)) and not isinstance(got, bool) and got == expected
    try:  # e.g. a NumPy array against a list: an ambiguous truth value is not equality
        return bool(got == expected)
    except (TypeError, ValueError, RuntimeError):
        return False


class ExactDriver(Driver):
    """A function whose result must equal the reference's exactly (counts, masks, token ids).

    `cases(thorough)` gives Call objects. A wrong result fails as "<call> returned X, expected Y";
    with `describe(expected, got) -> problem` it fails as that problem with the call's text as the
    case. The mistake whose `impl(*args, **kwargs)` `equal`s the student's result is named.
    The student gets its own copy of every tensor, as FunctionDriver and ModuleDriver give it: one
    changed in place fails, named by `in_place` where the exercise words it, else generically.
    `covered` is the passing line's summary, e.g. "every kind, length and kernel size".
    """

    def __init__(
        self,
        cases: Callable[[bool], list[Call]],
        covered: str = "every case",
        equal: Callable = exactly_equal,
        describe: Callable | None = None,
        in_place: exercise.Mistake | None = None,
    ):
        self._cases, self._covered, self.equal, self.describe = cases, covered, equal, describe
        self.in_place = in_place

    def cases(self, thorough: bool) -> list[Call]:
        return self._cases(thorough)

    def covered(self, thorough: bool) -> str:
        return self._covered

    def run_case(self, ex, student_fn, call: Call, index, setting) -> None:
        expected = ex.reference(*call.args, **call.kwargs)
        text = call.text(ex.name)
        given = _named_arguments(ex, call.args, call.kwargs)
        names, n_positional = list(given), len(call.args)

        def with_inputs(fn, inputs: dict):  # the call's own split into positional and keyword
            positional = (inputs[k] for k in names[:n_positional])
            return fn(*positional, **{k: inputs[k] for k in names[n_positional:]})

        def run_mistake(impl):  # on copies of its own: a mistake may change its inputs in place
            return with_inputs(impl, _own_copies(given))

        own = _own_copies(given)
        student_call = lambda: with_inputs(student_fn, own)  # noqa: E731
        got = _student_call(ex, student_fn, student_call, text, None, run_mistake)
        _require_unchanged(ex, given, own, text, self.in_place)
        if self.equal(got, expected):
            return
        values = [*call.args, *call.kwargs.values()]
        sizes = {s for v in values if isinstance(v, torch.Tensor) for s in v.shape}
        sizes |= {v for v in values if isinstance(v, int) and not isinstance(v, bool)}
        mistake = ex.diagnose(run_mistake, got, expected, self.equal, sizes)
        if self.describe is not None:
            fail(ex, self.describe(expected, got), text, mistake)
        fail(ex, f"{text} returned {got!r}, expected {expected}", mistake=mistake)


def shape_or_type(value) -> str:
    """How a rejection check names what came back instead of an error: a tensor's shape, else the
    type's name."""
    return str(tuple(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__


@dataclass(frozen=True)
class Reject:
    """One input an exercise must reject (for RaisesDriver): `call(impl)` runs an implementation
    on it, `label` names it in a failure (the case line)."""

    label: str
    call: Callable
    names: tuple[str, ...] = ()  # numbers the error's message must quote (the sizes at fault)


class RaisesDriver(Driver):
    """Inputs the exercise must reject by raising `error` (a ValueError that says what is wrong).

    `cases(thorough)` gives Reject objects. Another exception fails as "<what> raised <Error>:
    <message>" (with the student's line); a result fails as "<what> returned <shown(result)>
    instead of raising <error>". The mistake that does the same (raises the same other kind of
    error, or returns) is named; failing that, a KeyError or IndexError is named as a lookup made
    before the input was checked. `what` is "your function" or "your module".
    """

    def __init__(
        self,
        cases: Callable[[bool], list[Reject]],
        what: str = "your function",
        error: type[Exception] = ValueError,
        shown: Callable[[object], str] = shape_or_type,
        covered: str = "every input it must reject",
    ):
        self._cases, self.what, self.error = cases, what, error
        self.shown, self._covered = shown, covered

    def cases(self, thorough: bool) -> list[Reject]:
        return self._cases(thorough)

    def covered(self, thorough: bool) -> str:
        return self._covered

    def outcome(self, impl, case: Reject) -> tuple[str, object]:
        """What `impl` does on `case`: (the error's name, None), ("raised", the other exception)
        or ("returned", the result). A refusal or an unwritten stub goes through."""
        try:
            out = case.call(impl)
        except (ImplementThisYourself, NotImplementedError):
            raise
        except self.error as err:
            quoted = set(re.findall(r"\d+", str(err)))
            if not set(case.names) <= quoted:
                return "vague", err
            return self.error.__name__, None
        except Exception as err:
            return "raised", err
        return "returned", out

    def run_case(self, ex, student_obj, case: Reject, index, setting) -> None:
        expected = self.error.__name__
        kind, what = ex.run_student(student_obj, lambda: self.outcome(student_obj, case))
        if kind == expected:
            return
        mistake = ex.diagnose(lambda impl: self.outcome(impl, case)[0], kind, expected, str.__eq__)
        if kind == "raised" and mistake is None and isinstance(what, LookupError):
            mistake = _lookup_error(type(what).__name__, expected)
        if kind == "raised":
            problem = f"{self.what} raised {type(what).__name__}: {what}"
            fail(ex, problem, case.label, mistake, what)
        if kind == "vague":
            problem = (
                f"{self.what} raised {expected}: {what}, a message that does not quote the "
                f"sizes at fault ({', '.join(case.names)})"
            )
            fail(ex, problem, case.label, mistake)
        problem = f"{self.what} returned {self.shown(what)} instead of raising {expected}"
        fail(ex, problem, case.label, mistake)


def _lookup_error(raised: str, expected: str) -> exercise.Mistake:
    """A lookup's own error (a dict's KeyError, an index's IndexError) where the exercise asks
    for `expected`: the input was looked up before it was checked."""
    return exercise.Mistake(
        "lookup-error-not-checked",
        f"the input is looked up (a dict, a table, an index) before it is checked, so the "
        f"lookup's own {raised} escapes: test the input first and raise {expected} with a "
        f"message that says what is wrong (`if kind not in (...): raise {expected}(...)`)",
    )


@dataclass(frozen=True)
class Finding:
    """What a trial found wrong: `problem` (one sentence), `case` (the inputs), and `evidence` with
    a `tag` (what kind of failure) by which a catalogued mistake's trial is matched."""

    problem: str
    case: str | None = None
    tag: str = ""
    evidence: object = None


class TrialDriver(Driver):
    """Traces and statistical properties: anything judged by running a whole trial per case.

    ``trial(impl, case, setting, call)`` runs one implementation on one case and returns a Finding
    when it is wrong, else None; it must run the implementation only through
    ``call(thunk, what, case_text)`` (for the student: forbidden names off, and an exception fails
    the check as "<what> raised <Error>: <message>"). On a finding the same trial is run for each
    catalogued mistake; the first whose finding has the same tag and ``matches(student's evidence,
    mistake's evidence)`` is named. `settings(thorough)` gives what each case runs under (default:
    ``[None]``); `covered` is the passing line's summary (or a function of `thorough` giving it).
    A trial that passed may return an int n instead of None: its case then counts as n checks (a
    case that is a whole suite of calls).
    """

    def __init__(
        self,
        cases: Callable[[bool], list],
        trial: Callable,
        covered: str | Callable[[bool], str] = "every case",
        matches: Callable = lambda a, b: a == b,
        settings: Callable[[bool], list] | None = None,
    ):
        self._cases, self.trial, self._covered = cases, trial, covered
        self.matches, self._settings = matches, settings

    def cases(self, thorough: bool) -> list:
        return self._cases(thorough)

    def settings(self, thorough: bool) -> list:
        return self._settings(thorough) if self._settings else [None]

    def covered(self, thorough: bool) -> str:
        return self._covered(thorough) if callable(self._covered) else self._covered

    def run(self, ex: Exercise, student_obj, thorough: bool) -> int:
        cases, n = self.cases(thorough), 0
        for setting in self.settings(thorough):
            for index, case in enumerate(cases):
                passed = self.run_case(ex, student_obj, case, index, setting)
                n += 1 if passed is None else passed
        return n

    def run_case(self, ex, student_obj, case, index, setting) -> int | None:
        def student_call(thunk, what, case_text=None):
            return _student_call(ex, student_obj, thunk, what, case_text)

        finding = self.trial(student_obj, case, setting, student_call)
        if finding is None or isinstance(finding, int):
            return finding
        fail(ex, finding.problem, finding.case, self._name(ex, case, setting, finding))

    def _name(self, ex, case, setting, finding: Finding) -> exercise.Mistake | None:
        """The catalogued mistake whose trial finds the same; else, for a trial that calls the
        implementation once on a tensor case, the generic mistake that relates its evidence to
        the reference's result (``check.generic``), or the altered input of the reference whose
        trial finds the same (``check.variants``)."""

        def trial_of(impl):  # a mistake or an altered input: on the CPU first (cpu_first)
            return cpu_first(
                lambda where: self.trial(
                    impl, case, setting_on(setting, where), lambda thunk, *_: thunk()
                ),
                device_of(setting),
            )

        def same_finding(impl, out=None) -> bool:
            try:
                theirs = trial_of(impl)
                evidence = theirs.evidence if out is None else out(theirs.evidence)
                return theirs.tag == finding.tag and bool(self.matches(finding.evidence, evidence))
            except Exception:  # no finding (None), or evidence the change cannot take
                return False

        for mistake in ex.mistakes:
            if same_finding(mistake.impl):
                return mistake
        if not isinstance(finding.evidence, torch.Tensor):
            return None
        run = lambda impl: self.trial(impl, case, setting, lambda thunk, *_: thunk())  # noqa: E731
        probed = variants.probe(ex.reference, run)
        if probed is None:  # a statistical trial: its inputs and result cannot be read
            return None
        arguments, expected = probed
        same = lambda a, b: bool(self.matches(a, b))  # noqa: E731
        named = generic.name(finding.evidence, expected, same, variants.case_sizes(arguments))
        if named:
            return exercise.Mistake(*named)
        for impl, out, named in variants.candidates(ex.reference, run):
            if same_finding(impl, out):
                return exercise.Mistake(*named)
        return None


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
