"""Drivers judged by the answer, not by tensors and gradients (``check.drivers`` has the base).

- ExactDriver: a result that must equal the reference's exactly (counts, masks, token ids);
  `Call` is one of its cases.
- RaisesDriver: an input the exercise must reject with an error (a ValueError that says why);
  `Reject` is one of its cases.
- TrialDriver: traces and statistical properties, judged by a whole trial per case; a trial
  returns a `Finding` when the implementation is wrong.

Each calls the student through ``drivers.call_student`` (forbidden names off; a crash fails the
check, named), on ``drivers.own_copies`` of the inputs, as the tensor drivers do. Those helpers
are looked up on the module at call time, so a test may weaken one for every driver.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from . import compare, drivers, exercise, generic, variants
from .drivers import Driver
from .exercise import Exercise, fail
from .forbid import ImplementThisYourself


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
        given = drivers.named_arguments(ex, call.args, call.kwargs)
        names, n_positional = list(given), len(call.args)

        def with_inputs(fn, inputs: dict):  # the call's own split into positional and keyword
            positional = (inputs[k] for k in names[:n_positional])
            return fn(*positional, **{k: inputs[k] for k in names[n_positional:]})

        def run_mistake(impl):  # on copies of its own: a mistake may change its inputs in place
            return with_inputs(impl, drivers.own_copies(given))

        own = drivers.own_copies(given)
        student_call = lambda: with_inputs(student_fn, own)  # noqa: E731
        got = drivers.call_student(ex, student_fn, student_call, text, None, run_mistake)
        drivers.require_unchanged(ex, given, own, text, self.in_place)
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
            return drivers.call_student(ex, student_obj, thunk, what, case_text)

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
            return drivers.cpu_first(
                lambda where: self.trial(
                    impl, case, drivers.setting_on(setting, where), lambda thunk, *_: thunk()
                ),
                drivers.device_of(setting),
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
