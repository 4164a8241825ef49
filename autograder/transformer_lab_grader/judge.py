"""One execution of a notebook, judged from outside the student's box.

The student's code cells run once, in order, in one process of the student's (`verify_child`,
started in its bubblewrap box by `verify_session.Session`). Every graded test cell, visible and
hidden, runs here, in the judge, with the real `transformer_lab.check`: the names a test uses
are stand-ins that call the student's objects across the pipe (`verify_remote`), and only plain
data and tensors come back (`verify_wire`). So the tests, the reference, the tolerances and the
mistake catalogue never enter a process where student code runs, and nothing the student does
can change a verdict except by computing the right numbers.

    Judge(workdir, deadline=..., limits=Limits(...), box=Box(...)).run(cells)
      -> Outcome: each cell's outputs (nbformat's), each test's verdict, notes, flags

Order is nbgrader's: the student cells before a test run before it, those after it after it.
A test that runs past its own time limit (an endless loop in one graded function) ends the
student's process; the next test gets a fresh one, which first runs the cells so far again
(at most MAX_RESTARTS times a notebook), so one loop costs one exercise, not all. A student
process that dies while it runs the student's own cells (os._exit, a segfault) is the
notebook's end, as a dead kernel is for nbgrader: `Outcome.died` says so. The cells after the
last test are not run: no test can see them.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import io
import os
import time
from pathlib import Path

from .cell_limits import RECHECK
from .failures import failure_named, failure_of
from .judge_cells import Cell, cells_of, label
from .judge_limits import Limits
from .sandbox import GRADING_FLAG
from .verify_remote import CheckFront, TestNames
from .verify_session import MAX_RESTARTS, PER_TEST, Session
from .verify_wire import MAX_TEXT, ChildGone

TIMEOUT_ENAME = "CellTimeoutError"  # a student cell stopped at its limit, as nbclient names it
AFTER_THE_LAST_TEST = "(not run by the grader: no test comes after this cell)\n"
SHORTENED = (
    " (this test ran past the per-cell time limit of {limit:g} s, shortened because the "
    "notebook had spent its timeout budget of {budget:g} s: an endless loop?)"
)


@dataclasses.dataclass
class Outcome:
    """What one execution gave: {index: nbformat outputs}, {grade id: verdict} (passed, message,
    failure: `failures`' data, None when passed), notes for the record (cells stopped at their
    limit), flags for the instructor, and why the student's process died, if it did."""

    outputs: dict[int, list[dict]] = dataclasses.field(default_factory=dict)
    cell_seconds: dict[int, float] = dataclasses.field(default_factory=dict)
    verdicts: dict[str, dict] = dataclasses.field(default_factory=dict)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    flags: list[str] = dataclasses.field(default_factory=list)
    died: str | None = None
    cpu: float = 0.0  # CPU seconds of the student's processes, as they reported them


class Judge:
    """One notebook's execution: the student's process (restarted after a test's endless
    loop), the tests here."""

    def __init__(
        self,
        workdir: Path,
        *,
        deadline: float,
        limits: Limits,
        memory: int | None = None,
        box=None,
    ):
        self.workdir, self.deadline, self.limits = Path(workdir), deadline, limits
        self.memory, self.box = memory, box
        self.session: Session | None = None
        self.sessions: list[Session] = []
        self.ran: list[Cell] = []  # the student's cells run so far (a fresh process replays them)
        self.outcome = Outcome()

    def run(self, cells: list[Cell]) -> Outcome:
        with _grading_mode():  # the checks as under nbgrader; nothing saved into a package
            return self._run(cells)

    def _run(self, cells: list[Cell]) -> Outcome:
        pending: list[Cell] = []
        try:
            for cell in cells:
                if cell.test is None:
                    pending.append(cell)
                    continue
                self._student_cells(pending)
                pending = []
                self._test(cell)
        finally:
            if self.session is not None:
                self.session.close()
        for cell in pending:
            self.outcome.outputs[cell.index] = [_stream("stdout", AFTER_THE_LAST_TEST)]
        for session in self.sessions:
            self.outcome.cpu += session.cpu
            self._flag(*session.flags)
            if session.warning:
                self._flag(session.warning)
        budget = self.limits.budget
        if budget.note():  # right after the note of the cell that spent it
            notes = self.outcome.notes
            start = f"cell {budget.spent_at} hit"
            where = next((i + 1 for i, n in enumerate(notes) if n.startswith(start)), len(notes))
            notes.insert(where, budget.note())
        return self.outcome

    # -- the student's process ------------------------------------------------------------------
    def _start(self) -> Session:
        """A fresh student process that has run the cells so far (their outputs are not kept)."""
        session = Session(
            self.limits.cell_spec(self.ran),
            self.workdir / f"run{len(self.sessions)}",
            self.deadline,
            self.memory,
            box=self.box,
            budget=self.limits.budget.to_json(),
        )
        self.sessions.append(session)
        return session

    def _student_cells(self, cells: list[Cell]) -> None:
        if self.session is None or (self.session.dead and self._may_restart()):
            if self.session is not None:
                self.session.close()
            self.session = self._start()
        if not cells or self.outcome.died or self.session.dead:
            return
        # the limits only shrink as the batch runs: their sum bounds the wait
        given = [self.limits.given(c) for c in cells]
        deadline = self.deadline
        if all(given):
            deadline = min(deadline, time.monotonic() + sum(given) + 30.0)
        budget = self.limits.budget.to_json()  # tests here charge it too: the process gets it
        try:
            outputs = self.session.run(self.limits.cell_spec(cells), deadline, budget)
        except ChildGone as gone:
            self.outcome.died = str(gone)
            return
        finally:
            self.session.deadline = self.deadline
        for cell in cells:  # the same arithmetic as the student's process, in the same order
            out = outputs.get(cell.index, {})
            error = out.get("error") or {}
            text = f"{error.get('ename', '')}: {error.get('evalue', '')}" if error else ""
            limit = self.limits.given(cell)
            if self.limits.learn(cell, limit, text):
                error = dict(error, ename=TIMEOUT_ENAME)
                self.outcome.notes.append(
                    f"cell {label(cell)} hit the per-cell timeout of {limit:g} s"
                )
            self.outcome.outputs[cell.index] = _outputs(out, error)
            self.outcome.cell_seconds[cell.index] = out.get("seconds", 0.0)
            self.ran.append(cell)

    def _may_restart(self) -> bool:
        return bool(self.session.test_timed_out) and len(self.sessions) <= MAX_RESTARTS

    # -- the tests ------------------------------------------------------------------------------
    def _test(self, cell: Cell) -> None:
        gid = cell.test
        started = time.monotonic()
        session = self.session
        if self.outcome.died:
            verdict = _failed(
                "DeadKernelError",
                f"the student's process died before this test: {self.outcome.died}",
            )
        elif session.dead:  # its endless loops used up the fresh processes
            verdict = _failed("TimeoutError", session.dead)
        else:
            verdict = self._limited_test(session, gid, cell.source)
            if session.dead and not session.test_timed_out:  # it died under the test: as a
                self.outcome.died = session.dead  # kernel that dies, the notebook's end
        self.outcome.verdicts[gid] = {
            key: verdict.get(key) for key in ("passed", "message", "failure")
        }
        self.outcome.seconds[gid] = round(time.monotonic() - started, 3)
        outputs = [_stream("stdout", verdict["stdout"])] if verdict["stdout"] else []
        if verdict.get("error"):
            outputs.append(verdict["error"])
        self.outcome.outputs[cell.index] = outputs

    def _limited_test(self, session: Session, gid: str, src: str) -> dict:
        """One test under its own time limit (charged to the budget when it runs past it)."""
        limit, full = self.limits.test_limit(gid)
        per_test = time.monotonic() + limit if limit else self.deadline
        session.deadline = min(self.deadline, per_test)
        reason = ""
        if per_test < self.deadline:
            shortened = full is not None and limit < full
            reason = (SHORTENED if shortened else PER_TEST).format(
                limit=limit, budget=self.limits.budget.seconds or 0
            )
        session.timeout_reason = reason
        verdict = run_test_cell(session, gid, src)
        if session.dead and verdict.get("error"):  # not a student's error: the process is gone
            ename = "TimeoutError" if session.test_timed_out else "DeadKernelError"
            verdict = _failed(ename, session.dead)
        if session.test_timed_out:
            self.limits.test_timed_out(gid, limit)
            self.outcome.notes.append(f"cell {gid} hit the per-cell timeout of {limit:g} s")
        session.deadline = self.deadline
        return verdict

    def _flag(self, *flags: str) -> None:
        for flag in flags:
            if flag not in self.outcome.flags:
                self.outcome.flags.append(flag)


@contextlib.contextmanager
def _grading_mode():
    old = os.environ.get(GRADING_FLAG)
    os.environ[GRADING_FLAG] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(GRADING_FLAG, None)
        else:
            os.environ[GRADING_FLAG] = old


def run_test_cell(session: Session, gid: str, src: str) -> dict:
    """One test cell, run here with the real checks; the notebook's names it uses are
    stand-ins that call into the student's process. {"passed", "message", "stdout", "error",
    "failure"}: the failure as data (`failures`), from the check's own exception."""
    scope = {"__builtins__": builtins, "__name__": "__judge__", "check": CheckFront(session)}
    out = io.StringIO()
    try:
        compiled = compile(src, f"<test cell {gid}>", "exec")
        with contextlib.redirect_stdout(out):
            exec(compiled, scope, TestNames(session))  # noqa: S102 - the released test cell
        printed = out.getvalue()[-MAX_TEXT:]
        return {"passed": True, "message": printed.strip(), "stdout": printed, "error": None}
    except BaseException as err:  # noqa: BLE001 - any failure fails the cell
        if isinstance(err, KeyboardInterrupt):
            raise
        if isinstance(err, NameError) and session.cell_errors:
            first = min(session.cell_errors)
            err = NameError(
                f"{err} (cell {first + 1} of the notebook raised "
                f"{_first_line(session.cell_errors[first])})"
            )
        verdict = _failed(type(err).__name__, str(err))
        verdict["stdout"] = out.getvalue()[-MAX_TEXT:]
        verdict["failure"] = failure_of(err)
        return verdict


def _failed(ename: str, evalue: str) -> dict:
    message = f"{ename}: {evalue}"[:MAX_TEXT]
    error = {
        "output_type": "error",
        "ename": ename,
        "evalue": evalue[:MAX_TEXT],
        "traceback": [message],
    }
    failure = failure_named(ename, evalue)
    return {"passed": False, "message": message, "stdout": "", "error": error, "failure": failure}


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def _stream(name: str, text: str) -> dict:
    return {"output_type": "stream", "name": name, "text": text}


def _outputs(out: dict, error: dict | None) -> list[dict]:
    """A student cell's outputs as nbformat's: its stdout, its stderr, its error."""
    outputs = [_stream(n, out[n]) for n in ("stdout", "stderr") if out.get(n)]
    if error:
        outputs.append(
            {
                "output_type": "error",
                "ename": error.get("ename", "Error"),
                "evalue": error.get("evalue", ""),
                "traceback": list(error.get("traceback", [])),
            }
        )
    return outputs


REFERENCE_SECONDS = 1800.0  # the reference solution's whole run, at most


def time_notebook(notebook: Path, workdir: Path) -> tuple[dict[str, float], list[str]]:
    """A source notebook (the reference solution: trusted, so unboxed) run once as a student's
    notebook is run, timed: ({grade id or cell id: seconds} of each student cell and
    {RECHECK + grade id: seconds} of each test, the tests it fails). Raises RuntimeError when
    its process dies."""
    import nbformat

    cells = cells_of(nbformat.read(notebook, as_version=4))
    deadline = time.monotonic() + REFERENCE_SECONDS
    outcome = Judge(Path(workdir), deadline=deadline, limits=Limits()).run(cells)
    if outcome.died:
        raise RuntimeError(f"the reference solution {Path(notebook).name} died: {outcome.died}")
    times: dict[str, float] = {}
    for cell in cells:
        if cell.test:
            times[RECHECK + cell.test] = outcome.seconds.get(cell.test, 0.0)
        elif cell.index in outcome.cell_seconds:
            for key in (cell.grade_id, cell.cell_id):
                if key:
                    times[key] = round(outcome.cell_seconds[cell.index], 3)
    failed = sorted(gid for gid, verdict in outcome.verdicts.items() if not verdict["passed"])
    return times, failed
