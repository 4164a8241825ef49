"""Inside one grading job (run by `grade` in its sandbox): autograde one student with nbgrader,
re-check the graded cells (`verify`), read the private gradebook, hand back one record.

    python -m transformer_lab.instructor.job --job SPEC.json

The spec (written by `grade.Grader`) names the student, the assignment, the job's private course
copy, the graded cells and the limits; the record goes to the pipe whose descriptor is in
TRANSFORMER_LAB_RESULT_FD, and `grade` validates it (`records.validate_record`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import time
from datetime import datetime
from pathlib import Path

import nbformat

from . import nbgrader_app, sandbox
from .cell_limits import (
    CellLimits,
    KernelLimits,
    cell_key,
    fixed,
    hit_its_limit,
    runs_in_nbclient,
)
from .notebook_format import nbgrader_meta
from .records import OUTPUT_CHARS

DIED = ("DeadKernelError", "Kernel died", "kernel died", "KernelDied")
TIMEOUT_MARKS = ("CellTimeoutError", "TimeoutError", "KeyboardInterrupt")
MEMORY_MARKS = ("MemoryError", "DefaultCPUAllocator: can't allocate", "std::bad_alloc")


def _cell_output(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        kind = output.get("output_type")
        if kind == "stream":
            parts.append(output.get("text", ""))
        elif kind == "error":
            parts.append(f"{output.get('ename', '')}: {output.get('evalue', '')}")
        elif kind in ("execute_result", "display_data"):
            parts.append(str(output.get("data", {}).get("text/plain", "")))
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", "".join(parts))
    return text[:OUTPUT_CHARS]


def read_results(course: Path, spec: dict) -> tuple[dict, dict, list[str], set[str], set[str]]:
    """Per-cell scores from the private gradebook; outputs and notes from the autograded
    notebook (a cell stopped by the per-cell timeout, with the limit the notebook's timeout
    budget gave it; the budget spent; a cell out of memory); the grade ids or cell ids of the
    cells nbgrader's kernel stopped at their limit (the re-check gives them the short limit at
    once); the ids of the cells that took SLOW_CELL seconds or more there (the re-check leaves
    out those no test needs, `cell_needs`)."""
    student, assignment, cells = spec["student"], spec["assignment"], spec["cells"]
    scores = nbgrader_app.cell_scores(course, assignment, student, cells)
    limits = job_limits(spec)
    outputs, notes, timeouts, slow = {}, [], set(), set()
    for name in spec["notebooks"]:
        nb = nbformat.read(_autograded(course, spec, name), as_version=4)
        kernel = KernelLimits(limits) if limits is not None else None
        given = kernel.replay(nb.cells) if kernel is not None else {}
        for i, c in enumerate(nb.cells):
            if c.cell_type != "code":
                continue
            gid = nbgrader_meta(c).get("grade_id")
            output = _cell_output(c)
            errors = [
                o.get("ename", "") for o in c.get("outputs", []) if o.get("output_type") == "error"
            ]
            label = cell_key(c, i)
            if c.get("id") and (_seconds_in_kernel(c) or 0.0) >= SLOW_CELL:
                slow.add(c["id"])
            if runs_in_nbclient(c) and hit_its_limit(c):
                timeouts.add(gid or c.get("id") or "")
            if any(e in TIMEOUT_MARKS for e in errors):
                limit = given.get(i)
                of = f" of {limit:g} s" if limit else ""
                notes.append(f"cell {label} hit the per-cell timeout{of}")
            if any(m in output for m in MEMORY_MARKS):
                notes.append(
                    f"cell {label} ran out of memory (cap {spec['memory_bytes'] / sandbox.GiB:g} GiB)"
                )
            if gid in cells:
                outputs[gid] = output
        if kernel is not None and kernel.budget.note():
            _note_after(notes, f"cell {kernel.budget.spent_at} hit", kernel.budget.note())
    return scores, outputs, notes, timeouts - {""}, slow


SLOW_CELL = 1.0  # seconds


def _seconds_in_kernel(cell) -> float | None:
    """How long nbgrader's kernel ran a cell (nbclient's timing metadata), if it says."""
    timing = (cell.get("metadata") or {}).get("execution") or {}
    try:
        start = datetime.fromisoformat(str(timing["iopub.execute_input"]).replace("Z", "+00:00"))
        end = datetime.fromisoformat(str(timing["shell.execute_reply"]).replace("Z", "+00:00"))
    except (KeyError, TypeError, ValueError):
        return None
    return (end - start).total_seconds()


def _note_after(notes: list[str], start: str, note: str) -> None:
    """Insert `note` after the first note starting with `start` (a long reason is cut at its
    end), else at the end."""
    where = next((i + 1 for i, n in enumerate(notes) if n.startswith(start)), len(notes))
    notes.insert(where, note)


def _autograded(course: Path, spec: dict, name: str) -> Path:
    student, assignment = spec["student"], spec["assignment"]
    return course / "autograder" / "work" / "autograded" / student / assignment / name


class VerifyTimeout(Exception):
    """The clean re-check ran past the time left to the job."""


@contextlib.contextmanager
def alarm(seconds: float):
    """Raise VerifyTimeout in this (main) thread after `seconds`."""

    def ring(signum, frame):
        raise VerifyTimeout()

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _kill_the_rest() -> None:
    """In our own PID namespace (we are PID 1), SIGKILL every other process in it."""
    if os.getpid() == 1:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ----------------------------------------------------------------------------------------------
# The job's steps.


def job_limits(spec: dict) -> CellLimits | None:
    """Each cell's time limit (`cell_limits`): the spec's derived ones, else its fixed one."""
    limits = CellLimits.from_json(spec.get("cell_limits"))
    if limits is None and spec.get("cell_timeout"):
        limits = fixed(spec["cell_timeout"])
    return limits


def kernel_limits(spec: dict) -> KernelLimits | None:
    """nbclient's `timeout_func` for the job's notebook: its limits and its timeout budget."""
    limits = job_limits(spec)
    return KernelLimits(limits) if limits is not None else None


def trusted_imports() -> None:
    """Everything the job needs, imported before any student code runs in the sandbox: the
    student's kernel can write files into the job's folder (our working directory), so nothing
    may be imported from there later; the folder is also taken off the module search path. The
    nbgrader fork, the student's kernel (a fork of that, `kernel_fork`) and the re-check's
    children share these imports (no second interpreter). Imports only: no torch thread pool
    may run before those forks (GNU OpenMP's does not survive a fork)."""
    here = {"", ".", os.getcwd()}
    sys.path[:] = [p for p in sys.path if p not in here and not _inside(p, Path.cwd())]
    import nbgrader.api  # noqa: F401
    import nbgrader.apps.nbgraderapp  # noqa: F401
    import torch
    import traitlets.config  # noqa: F401

    import transformer_lab.check  # noqa: F401

    from . import kernel_fork, verify, verify_child  # noqa: F401

    kernel_fork.kernel_imports()

    torch.set_num_threads(1)


def _inside(path: str, folder: Path) -> bool:
    try:
        return Path(path).resolve().is_relative_to(folder.resolve())
    except (OSError, ValueError):
        return False


def autograde(course: Path, spec: dict, budget: float) -> tuple[int | str, str]:
    """nbgrader autograde of the job's student: (exit code or "timeout", the log's tail)."""
    log = course.parent / "autograde.log"
    with open(log, "w+") as out:
        code = nbgrader_app.autograde_in_job(
            course,
            spec["assignment"],
            spec["student"],
            None,
            out,
            timeout=max(budget * 0.7, 10),
            cell_limits=kernel_limits(spec),
        )
        out.seek(0)
        text = out.read()[-100_000:]
    return code, text


def failure_reason(code: int | str, log: str, error: Exception) -> str:
    """Why nbgrader's results cannot be read: as precisely as its log allows."""
    if any(word in log for word in DIED):
        return "the kernel died (the notebook crashed Python: os._exit, a segfault, ...)"
    lines = [ln for ln in log.splitlines() if "rror" in ln][-3:]
    return (
        f"nbgrader could not grade the notebook (exit {code}): {error}; " + " | ".join(lines)[-600:]
    )


def recheck(
    course: Path,
    spec: dict,
    remaining: float,
    notes: list[str],
    flags: list[str],
    timeouts=(),
    slow=(),
    failed=(),
):
    """The clean re-check (`verify`): (verdicts or None, the reason points are withheld or
    None). Adds to `notes` and `flags`. `timeouts`, `slow`: the cells nbgrader's kernel stopped
    at their limit, and those it took over SLOW_CELL seconds for (`read_results`); `failed`:
    the tests with 0 points there."""
    verdicts, withheld = None, None
    try:
        if not spec.get("verify", True):
            raise RuntimeError("switched off for this run")
        from .verify import verify

        (course.parent / "verify").mkdir(exist_ok=True)
        student, assignment = spec["student"], spec["assignment"]
        submitted = course / "autograder" / "work" / "submitted" / student / assignment
        limits = job_limits(spec)
        with alarm(remaining):
            checked = verify(
                assignment,
                submitted / spec["notebooks"][0],
                course.parent / "verify",
                course=course,
                timeout=max(remaining - 10, 1.0),
                memory=spec["memory_bytes"],
                cell_timeout=limits.default if limits else 240.0,
                cell_limits=limits,
                kernel_timeouts=timeouts,
                settled=_settled(course, spec, timeouts),
                fork=True,
                slow_cells=slow,
                kernel_failed=failed,
            )
        verdicts = checked.get("cells", {})
        flags += [str(f) for f in checked.get("flags", []) if str(f) not in flags]
    except VerifyTimeout:
        # Student code can make the re-check hang (an endless loop only outside nbgrader):
        # nbgrader's points are then not trusted.
        withheld = (
            f"the clean re-check timed out ({max(remaining, 0):.0f} s left of the "
            f"{spec['wall_seconds']:g} s cap): nbgrader's points withheld"
        )
        notes.append(withheld)
        flags.append(withheld)
    except Exception as error:
        flags.append(f"verification unavailable: {type(error).__name__}: {error}"[:300])
    return verdicts, withheld


def _settled(course: Path, spec: dict, timeouts: set[str]) -> set[str]:
    """Tests that hit their limit in nbgrader's run and got 0 points there: the re-check, which
    only ever takes points away, need not run them (nor wait for them a second time)."""
    cells = {gid: cell for gid, cell in spec["cells"].items() if gid in timeouts}
    if not cells:
        return set()
    scores = nbgrader_app.cell_scores(course, spec["assignment"], spec["student"], cells)
    return {gid for gid, score in scores.items() if score <= 0}


def graded_record(spec, scores, outputs, notes, flags, verdicts, withheld) -> dict:
    """nbgrader's scores, kept only where the clean re-check agrees."""
    record = {
        "student": spec["student"],
        "assignment": spec["assignment"],
        "status": "graded",
        "reason": "; ".join(notes) or None,
        "cells": {},
        "flags": flags,
    }
    for gid, cell in spec["cells"].items():
        score = min(max(scores.get(gid, 0.0), 0.0), cell["points"])
        output = outputs.get(gid, "")
        if withheld:
            score, output = 0.0, f"{withheld}\n{output}"
        elif verdicts is not None:
            verdict = verdicts.get(gid, {"passed": False, "message": "not re-checked"})
            if score > 0 and not verdict.get("passed"):
                score = 0.0
                flags.append(  # E2: the wording of verify.tampering_flags
                    f"suspected tampering: {gid} passed in the notebook but not on a clean re-check"
                )
                output = f"clean re-check failed: {verdict.get('message', '')}\n{output}"
        record["cells"][gid] = {
            "score": score,
            "passed": score == cell["points"],
            "output": output[:OUTPUT_CHARS],
        }
    return record


def ungradable_record(spec: dict, reason: str, flags: list[str]) -> dict:
    return {
        "student": spec["student"],
        "assignment": spec["assignment"],
        "status": "ungradable",
        "reason": reason,
        "cells": {gid: {"score": 0.0, "passed": False, "output": ""} for gid in spec["cells"]},
        "flags": flags,
    }


class _Clock:
    """Wall and CPU seconds (this process and its finished children) of each phase; the first
    phase's CPU counts from the interpreter's start (the job module's own imports)."""

    def __init__(self):
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._last = (time.monotonic(), 0.0)

    @staticmethod
    def _cpu() -> float:
        import resource

        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    def lap(self, name: str) -> None:
        now = (time.monotonic(), self._cpu())
        self.wall[name] = round(now[0] - self._last[0], 3)
        self.cpu[name] = round(now[1] - self._last[1], 3)
        self._last = now


PR_SET_DUMPABLE = 4


def not_traceable() -> None:
    """This process and what it forks (nbgrader, the student's kernel, the re-check's children)
    become non-dumpable: without CAP_SYS_PTRACE, which nothing in the box has, no process of the
    box can `ptrace` the judge nor read its memory (/proc/<pid>/mem) or its descriptors. A
    student's kernel that execs a new program becomes dumpable again, but only for itself."""
    import ctypes

    if ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError("prctl(PR_SET_DUMPABLE, 0) failed")


def run_job(spec_path: str) -> None:
    """Runs inside the sandbox: autograde, verify, read the private gradebook, report on fd."""
    not_traceable()
    spec = json.loads(Path(spec_path).read_text())
    fd = int(os.environ.pop("TRANSFORMER_LAB_RESULT_FD"))
    os.set_inheritable(fd, False)  # nbgrader and the student's kernel never get the pipe
    course = Path(spec["course"])
    start = time.monotonic()
    clock = _Clock()
    trusted_imports()
    clock.lap("imports")
    budget = spec["wall_seconds"] - 15  # the parent kills the job at wall_seconds
    code, log = autograde(course, spec, budget)
    clock.lap("autograde")
    _kill_the_rest()  # a student's background process must not touch the gradebook we read
    from .kernel_fork import fallback_flags  # imported by trusted_imports

    flags: list[str] = fallback_flags(log)  # a kernel launched the usual way
    reason = None
    scores, outputs, notes, timeouts, slow = {}, {}, [], set(), set()
    if code == "timeout":
        reason = (
            f"timeout: nbgrader autograde ran past the wall-clock cap ({spec['wall_seconds']:g} s)"
        )
    else:
        try:
            scores, outputs, notes, timeouts, slow = read_results(course, spec)
        except Exception as error:  # nothing usable: say why, as precisely as the log allows
            reason = failure_reason(code, log, error)
    clock.lap("results")
    if reason is None:
        remaining = budget - (time.monotonic() - start) - 5
        failed = {gid for gid, score in scores.items() if score <= 0}
        verdicts, withheld = recheck(course, spec, remaining, notes, flags, timeouts, slow, failed)
        clock.lap("recheck")
        record = graded_record(spec, scores, outputs, notes, flags, verdicts, withheld)
    else:
        record = ungradable_record(spec, reason, flags)
    _kill_the_rest()
    # where the job's time went (informational: benchmarks/bench_grading.py --breakdown)
    record["timings"] = clock.wall
    record["cpu_timings"] = clock.cpu
    os.write(fd, json.dumps(record).encode())
    os.close(fd)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--job":
        run_job(sys.argv[2])
    else:
        raise SystemExit("usage: python -m transformer_lab.instructor.job --job SPEC.json")
