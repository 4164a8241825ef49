"""A clean re-check of a graded notebook that the student's code cannot influence.

nbgrader runs the hidden tests in the same kernel as the student's code, so a submission can
monkeypatch ``torch.allclose``, redefine ``check.<name>``, patch the engine, the reference or
built-ins, and fool an in-kernel check. ``verify`` re-checks every graded cell so that the JUDGE
never runs in a process where student code ran:

- this process (the parent, trusted) reads the released test cells (from the nbgrader source
  notebook, hidden tests included, or the released notebook) and runs them itself, with the real
  ``transformer_lab.check``: every check, its cases, the reference, the tolerances and the mistake
  catalogue run here, in a process that never executes student code;
- a CHILD process (quick and grading mode, one thread, a time limit, a memory limit) executes the
  student's code cells in order, like nbgrader (a cell's error is recorded and the next runs), up
  to the last test cell (the cells after it ran after every test in nbgrader's run too);
- each name a test cell passes to a check (``scaled_dot_product_attention``, ``SelfAttention``,
  ``alpha_22``, ...) becomes a stand-in here: calling it sends the call's inputs to the child,
  which calls the student's object on them (a module class is constructed there; its weights are
  the ones the check loads into the stand-in) and sends back outputs, later the gradients (an
  autograd function ties both ends together), as tensors and plain numbers only; this side reads
  them as JSON and raw tensor bytes (`verify_wire.unpack_reply`), nothing that runs code. A
  value (``alpha_22``) comes back as data;
- while the student's code runs in the child, the exercise's forbidden built-ins and reference
  raise, as in the notebook, and a profiler watches for calls of them through aliases the
  student kept, and for a copy of the reference's code: such a call refuses the cell with a
  message naming it (and a flag);
- the submission's source is scanned for red flags (patching torch/check/transformer_lab or
  builtins, reading the course's files, ...), which are flagged for the instructor.

Every exercise kind is covered by this one mechanism, whatever its check's driver (function,
module, custom, statistical): the checks themselves run unchanged here. Functions, nn.Module
classes (weights mirrored here, ``torch.func.functional_call`` there), other classes and the
objects they return (a KVCache: methods, ``len``, ``[]`` are forwarded), values (``alpha_22``),
``torch.Generator`` arguments (state sent and brought back) and gradients across calls (a cache
holding earlier chunks) all travel. A call whose arguments cannot be pickled (a lambda) fails its
cell with a flag "could not re-check ...".

What it cannot promise: the child is the student's process, so a determined student can defeat
the *refusal* of forbidden calls there (e.g. by code compiled under a library file name, or by
answering the parent's requests from a thread of their own); the judge, the reference and the
comparison are out of reach whatever the child does. The source red flags point the instructor
at such code. Run it inside the grader's sandbox (no network, read-only course and package).

    verify(lesson, notebook, workdir, course=..., timeout=300.0)
      -> {"cells": {grade_id: {"passed": bool, "message": str}}, "flags": [str]}
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import io
import json
import os
import time
from pathlib import Path

import torch

from ..notebook_setup import SETUP_ID
from .cell_limits import RECHECK, TimeoutBudget
from .cell_needs import cells_the_tests_need
from .notebook_format import cell_source, is_test_cell, nbgrader_meta, python_source, unmarked
from .sandbox import GRADING_FLAG
from .verify_child import CELL_TIMED_OUT
from .verify_flags import source_flags
from .verify_remote import CheckFront, TestNames
from .verify_session import MAX_RESTARTS, PER_TEST, Session, Spawner
from .verify_wire import MAX_TEXT, VerifyError

DEFAULT_MEMORY = 6 * 2**30  # address-space limit of the child (bytes)

__all__ = [
    "VerifyError",
    "released_test_cells",
    "source_flags",
    "student_code_cells",
    "tampering_flags",
    "verify",
]


# ==============================================================================================
# Notebooks: the released test cells and the student's code cells.


def lesson_folder(course: Path, lesson: str) -> str:
    """'02' or '02_qkv_attention' -> '02_qkv_attention' (the folder under exercises/)."""
    exercises = Path(course) / "exercises"
    if (exercises / lesson).is_dir():
        return lesson
    found = sorted(p.name for p in exercises.glob(f"{lesson}_*") if p.is_dir())
    if len(found) != 1:
        raise VerifyError(f"no released lesson {lesson!r} under {exercises}")
    return found[0]


def _read_json_notebook(path: Path) -> dict:
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise VerifyError(f"cannot read notebook {path}: {err}") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise VerifyError(f"{path} is not a notebook (no list of cells)")
    return nb


def released_test_cells(course: Path, lesson: str) -> dict[str, str]:
    """{grade_id: source} of the graded test cells, in notebook order, hidden tests included.

    The list of cells is the released notebook's; each cell's text is the nbgrader source
    notebook's (solutions/, which holds the hidden tests) when the course has it, never the
    submission's.
    """
    folder = lesson_folder(course, lesson)
    released = _read_json_notebook(Path(course) / "exercises" / folder / f"{folder}.ipynb")
    cells = {
        nbgrader_meta(c)["grade_id"]: cell_source(c) for c in released["cells"] if is_test_cell(c)
    }
    source_path = Path(course) / "solutions" / folder / f"{folder}.ipynb"
    if source_path.is_file():
        source = _read_json_notebook(source_path)
        for c in source["cells"]:
            if is_test_cell(c) and nbgrader_meta(c)["grade_id"] in cells:
                cells[nbgrader_meta(c)["grade_id"]] = cell_source(c)
    return {gid: unmarked(src) for gid, src in cells.items()}


def released_setup_source(course: Path, lesson: str) -> str | None:
    """The text of the released notebook's Colab setup cell (the course's own code), if any."""
    folder = lesson_folder(course, lesson)
    released = _read_json_notebook(Path(course) / "exercises" / folder / f"{folder}.ipynb")
    for cell in released["cells"]:
        if cell.get("id") == SETUP_ID and cell.get("cell_type") == "code":
            return cell_source(cell)
    return None


def student_code_cells(nb: dict, test_ids, course_code: str | None = None) -> list[tuple[int, str]]:
    """(index, source) of the submission's code cells that are not graded test cells, nor the
    course's own setup cell left exactly as released (`course_code`); an edited setup cell is the
    student's code like any other."""
    out = []
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        if nbgrader_meta(cell).get("grade_id") in test_ids or is_test_cell(cell):
            continue
        if course_code is not None and cell_source(cell) == course_code:
            continue
        out.append((i, cell_source(cell)))
    return out


def up_to_the_last_test(nb: dict, code: list, test_ids) -> list[tuple[int, str]]:
    """The student's cells up to the submission's last graded test cell: nbgrader ran every test
    before the cells after it, so those cannot have changed any of its verdicts, and the re-check
    (which only ever takes nbgrader's points away) needs them no more (lessons 09 and 10 train a
    model there). Every cell when a released test is not in the submission."""
    where = {}
    for i, cell in enumerate(nb["cells"]):
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            gid = nbgrader_meta(cell).get("grade_id")
            if gid in test_ids:
                where[gid] = i
    if set(where) != set(test_ids):
        return list(code)
    last = max(where.values())
    return [(i, src) for i, src in code if i < last]


# ==============================================================================================
# verify


def tampering_flags(result: dict, kernel_passed: dict) -> list[str]:
    """Cells that passed in the notebook (nbgrader) but not on the clean re-check."""
    return [
        f"suspected tampering: {gid} passed in the notebook but not on a clean re-check"
        for gid, cell in result["cells"].items()
        if kernel_passed.get(gid) and not cell["passed"]
    ]


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def verify(
    lesson: str,
    notebook: Path,
    workdir: Path,
    *,
    course: Path,
    timeout: float = 300.0,
    kernel_passed: dict | None = None,
    memory: int | None = DEFAULT_MEMORY,
    cell_timeout: float | None = 120.0,
    cell_limits=None,
    kernel_timeouts=(),
    settled=(),
    fork: bool = False,
    slow_cells=(),
    kernel_failed=(),
) -> dict:
    """Re-check every graded cell of `notebook` where its code cannot touch the judge.

    lesson: the assignment ('02_qkv_attention', or '02'); notebook: the (repaired) submission;
    workdir: a private folder for the child (its working directory); course: the course root
    (exercises/, and solutions/ for the hidden tests); timeout: for the whole re-check, seconds;
    kernel_passed: optionally nbgrader's {grade_id: passed}, to flag cells that passed there but
    not here; memory: the child's address-space limit in bytes (None: none); cell_timeout: each
    cell's and each test's time limit, or `cell_limits` (a `cell_limits.CellLimits`: a limit per
    grade id or cell id, `cell_timeout` for the others, and the notebook's timeout budget, see
    `cell_limits.TimeoutBudget`); kernel_timeouts: grade ids or cell ids of the cells that hit
    their limit in nbgrader's kernel (they get the short limit here at once); settled: grade ids
    of tests not to run (they hit their limit in nbgrader's run and got 0 points there, which the
    re-check can only confirm: it never gives points); fork: make the
    children by forking this process (which must have imported torch and the checks and run no
    thread: the grading job) instead of starting `python -I` (which imports them again in every
    child); slow_cells: ids of the submission's cells that took over a second in nbgrader's run:
    those no test needs are left out at first (`cell_needs`); kernel_failed: grade ids of
    tests with 0 points in nbgrader's run (a test that fails without those cells runs again
    with them, unless it is one of these).

    Returns {"cells": {grade_id: {"passed": bool, "message": str}}, "flags": [str],
    "seconds": {grade_id: wall-clock seconds of each test run here}, "left_out": {"cells": the
    indices of the student's cells the first child did not run, "of": how many there are}}.
    """
    course, workdir = Path(course), Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)  # before a child is forked into it
    tests = released_test_cells(course, lesson)
    try:
        nb = _read_json_notebook(Path(notebook))
    except VerifyError as err:
        cells = {gid: {"passed": False, "message": str(err)} for gid in tests}
        return {"cells": cells, "flags": []}
    code = student_code_cells(nb, set(tests), released_setup_source(course, lesson))
    flags = source_flags(code)  # every cell's
    every = [i for i, _ in code]
    code = up_to_the_last_test(nb, code, set(tests))
    # Import every check (and what they use) before the child runs a line of student code, so
    # nothing the child writes on disk can change the judge.
    importlib.import_module("transformer_lab.check")
    if memory and torch.cuda.is_available():
        memory = None  # CUDA reserves far more address space than it uses: RLIMIT_AS breaks it
    limits = RecheckLimits(nb, cell_limits, cell_timeout, kernel_timeouts)
    settled_tests = {gid: {"passed": False, "message": NOT_RECHECKED} for gid in settled}
    tests_to_run = {gid: src for gid, src in tests.items() if gid not in settled_tests}
    slow = {
        i for i, c in enumerate(nb["cells"]) if isinstance(c, dict) and c.get("id") in slow_cells
    }
    first = cells_the_tests_need(code, list(tests_to_run.values()), slow)
    deadline = time.monotonic() + timeout
    seconds: dict[str, float] = {}
    with _grading_mode():  # never save into a student package from here
        ran, sessions = _run_tests(
            tests_to_run,
            code,
            workdir,
            deadline,
            memory,
            limits,
            fork,
            seconds,
            first=first,
            kernel_failed=set(kernel_failed),
        )
    cells = {gid: ran.get(gid) or settled_tests[gid] for gid in tests}
    for each in sessions:
        flags += [f for f in each.flags if f not in flags]
    ran_first = {i for i, _ in first}
    left_out = {"cells": [i for i in every if i not in ran_first], "of": len(every)}
    result = {"cells": cells, "flags": flags, "seconds": seconds, "left_out": left_out}
    if kernel_passed:
        result["flags"] += [f for f in tampering_flags(result, kernel_passed) if f not in flags]
    return result


@contextlib.contextmanager
def _grading_mode():
    """The checks in grading mode (as under nbgrader) while the re-check runs here."""
    old = os.environ.get(GRADING_FLAG)
    os.environ[GRADING_FLAG] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(GRADING_FLAG, None)
        else:
            os.environ[GRADING_FLAG] = old


class RecheckLimits:
    """Each student cell's (in the child) and each test's (here) time limit in the re-check,
    with the notebook's timeout budget (`cell_limits.TimeoutBudget`, shared by every child and
    test of the re-check): a cell that hit its limit in nbgrader's kernel, or in an earlier child,
    gets the short limit at once. Without `cell_limits`: `cell_timeout` everywhere, no budget."""

    def __init__(self, nb: dict, cell_limits, cell_timeout, kernel_timeouts=()):
        self.nb, self.cell_limits, self.cell_timeout = nb, cell_limits, cell_timeout
        self.known = set(kernel_timeouts)
        self.budget = TimeoutBudget(cell_limits.budget if cell_limits is not None else None)

    def _key(self, index: int) -> tuple[str | None, str | None]:
        cell = self.nb["cells"][index]
        return nbgrader_meta(cell).get("grade_id"), cell.get("id")

    def pair(self, grade_id=None, cell_id=None) -> tuple[float | None, float | None]:
        """(full, short) limit of a cell or test."""
        if self.cell_limits is None:
            return self.cell_timeout, self.cell_timeout
        full, short = self.cell_limits.pair(grade_id, cell_id)
        if (grade_id or cell_id) in self.known:
            return short, short
        return full, short

    def child_spec(self, code: list) -> dict:
        """What a new child needs: each cell as [index, source, full, short], the budget so far."""
        cells = [[i, python_source(src), *self.pair(*self._key(i))] for i, src in code]
        return {"cells": cells, "budget": self.budget.to_json()}

    def learn_from_child(self, code: list, errors: dict[int, str]) -> None:
        """Charge the budget as the child did (the same arithmetic, from its cell errors)."""
        for i, _ in code:
            limit = self.budget.limit(*self.pair(*self._key(i)))
            if errors.get(i, "").startswith(CELL_TIMED_OUT):
                grade_id, cell_id = self._key(i)
                self.budget.charge(f"{i + 1}", limit)
                self.known.add(grade_id or cell_id or "")

    def test_limit(self, grade_id: str) -> tuple[float | None, float | None]:
        """(this test's limit, its full limit): from the reference solution's time for this test
        in the re-check (`cell_limits.RECHECK`), where it was measured; else the cell's."""
        timed = self.cell_limits is not None and RECHECK + grade_id in self.cell_limits.seconds
        full, short = self.pair(RECHECK + grade_id if timed else grade_id)
        if grade_id in self.known:
            full = short
        return self.budget.limit(full, short), full

    def test_timed_out(self, grade_id: str, limit: float) -> None:
        self.budget.charge(grade_id, limit)
        self.known.add(grade_id)


NOT_RECHECKED = "not re-checked: it hit its time limit in nbgrader's run (0 points there)"
SHORTENED = (
    " (this test ran past the per-cell time limit of {limit:g} s, shortened because the "
    "notebook had spent its timeout budget of {budget:g} s: an endless loop?)"
)


def _run_tests(
    tests: dict,
    code: list,
    workdir: Path,
    deadline: float,
    memory,
    limits,
    fork,
    seconds=None,
    first: list | None = None,
    kernel_failed=(),
):
    """Every test cell against one child running the student's cells; a test that ran past its
    own time limit (an endless loop in one graded function) gets the next tests a fresh child,
    so one loop costs one exercise, not all. Returns (verdicts, every session used); `seconds`
    gets each test's wall-clock time.

    `first`: the cells the tests need (`cell_needs`), run instead of all of `code` at first. A
    test that fails against them runs again against a child running all of `code`, so leaving a
    cell out never costs a point; not a test that ran past its limit (the same loop would run
    again), nor one in `kernel_failed` (0 points in nbgrader's run: nothing to take away).

    With `fork`, every child this may need (1 + MAX_RESTARTS, and one for all of `code`) is
    forked here, before any test runs: no child ever holds what the judge computed for a test;
    the unused ones end unused."""
    first = code if first is None or len(first) == len(code) else first
    spawner = Spawner(workdir, memory, 1 + MAX_RESTARTS + (first is not code)) if fork else None
    children = _Children(workdir, deadline, memory, limits, spawner)
    cells: dict[str, dict] = {}
    timed_out: set[str] = set()
    try:
        children.run(first, tests, cells, timed_out, seconds)
        again = {
            gid: src
            for gid, src in tests.items()
            if first is not code
            and not cells[gid]["passed"]
            and gid not in timed_out
            and gid not in kernel_failed
        }
        if again:
            children.run(code, again, cells, timed_out, seconds)
    finally:
        children.close()
        if spawner is not None:
            spawner.close()
    return cells, children.sessions


class _Children:
    """The re-check's children, one at a time: a fresh one after a test ran past its limit (at
    most MAX_RESTARTS of those), or for other cells."""

    def __init__(self, workdir: Path, deadline: float, memory, limits, spawner):
        self.workdir, self.deadline, self.memory = workdir, deadline, memory
        self.limits, self.spawner = limits, spawner
        self.sessions: list[Session] = []
        self.restarts = 0

    def start(self, code: list) -> Session:
        spec = self.limits.child_spec(code)
        session = Session(
            spec["cells"],
            self.workdir,
            self.deadline,
            self.memory,
            None,
            spawn=self.spawner,
            budget=spec["budget"],
        )
        self.limits.learn_from_child(code, session.cell_errors)
        self.sessions.append(session)
        return session

    def run(self, code: list, tests: dict, cells: dict, timed_out: set, seconds) -> None:
        self.close()
        session = self.start(code)
        for gid, src in tests.items():
            if session.dead and session.test_timed_out and self.restarts < MAX_RESTARTS:
                session.close()
                session = self.start(code)
                self.restarts += 1
            if session.dead:
                cells[gid] = {"passed": False, "message": session.dead}
                if session.test_timed_out:  # no child left after loops: not run, not again
                    timed_out.add(gid)
                continue
            started = time.monotonic()
            cells[gid] = _run_limited_test(session, self.limits, gid, src, self.deadline)
            if session.test_timed_out:
                timed_out.add(gid)
            if seconds is not None:
                seconds[gid] = round(time.monotonic() - started, 3)

    def close(self) -> None:
        if self.sessions:
            self.sessions[-1].close()


def _run_limited_test(session: Session, limits, gid: str, src: str, deadline: float) -> dict:
    """One test under its own time limit (charged to the budget when it runs past it)."""
    limit, full = limits.test_limit(gid)
    per_test = time.monotonic() + limit if limit else deadline
    session.deadline = min(deadline, per_test)
    reason = ""
    if per_test < deadline:
        shortened = full is not None and limit < full
        reason = (SHORTENED if shortened else PER_TEST).format(
            limit=limit, budget=limits.budget.seconds or 0
        )
    session.timeout_reason = reason
    verdict = _run_test_cell(session, gid, src)
    if session.test_timed_out:
        limits.test_timed_out(gid, limit)
    return verdict


def _run_test_cell(session: Session, gid: str, src: str) -> dict:
    """One released test cell, run here with the real checks; the notebook's names it uses are
    stand-ins that call into the child."""
    scope = {"__builtins__": builtins, "__name__": "__verify__", "check": CheckFront(session)}
    out = io.StringIO()
    try:
        compiled = compile(src, f"<test cell {gid}>", "exec")
        with contextlib.redirect_stdout(out):
            exec(compiled, scope, TestNames(session))  # noqa: S102 - the released test cell
        return {"passed": True, "message": out.getvalue()[-MAX_TEXT:].strip()}
    except BaseException as err:  # noqa: BLE001 - any failure fails the cell
        if isinstance(err, KeyboardInterrupt):
            raise
        if isinstance(err, NameError) and session.cell_errors:
            first = min(session.cell_errors)
            err = NameError(
                f"{err} (cell {first + 1} of the notebook raised "
                f"{_first_line(session.cell_errors[first])})"
            )
        message = f"{type(err).__name__}: {err}"
        return {"passed": False, "message": message[:MAX_TEXT]}
