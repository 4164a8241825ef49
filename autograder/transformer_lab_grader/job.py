"""One grading job: autograde one student with nbgrader, the student's cells run once in their
box and every test judged here (`judged_execute.JudgedExecute`, `judge`), read the private
gradebook, hand back one record.

    python -m transformer_lab_grader.job --job SPEC.json

The job is trusted code and runs outside the student's box: only the student's process
(`verify_child`, started by the judge) is boxed. The spec (written by `grading.Grader`) names the
student, the assignment, the job's private course copy, the graded cells, the limits and the
box; the record goes to the pipe whose descriptor is in TRANSFORMER_LAB_RESULT_FD, and `grade`
validates it (`records.validate_record`).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import nbformat

from . import gradebook, nbgrader_app, sandbox
from .course import autograded_dir
from .failures import clean_failure
from .notebook_format import nbgrader_meta
from .records import OUTPUT_CHARS

MEMORY_MARKS = ("MemoryError", "DefaultCPUAllocator: can't allocate", "std::bad_alloc")
MARGIN = 20.0  # seconds the job keeps for itself before the parent's wall-clock cap


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


def read_results(course: Path, spec: dict, report: dict) -> tuple[dict, dict, list[str]]:
    """Per-cell scores from the private gradebook; outputs from the autograded notebook; the
    judge's notes (cells stopped at their limit, the timeout budget spent) and a note for a
    cell that ran out of memory. A test cell the judge gave no verdict scores 0, whatever
    nbgrader made of it (nbgrader passes a test cell that has no error output)."""
    student, assignment, cells = spec["student"], spec["assignment"], spec["cells"]
    scores = gradebook.cell_scores(course, assignment, student, cells)
    outputs, notes = {}, [str(n) for n in report.get("notes", [])]
    verdicts = report.get("verdicts") if isinstance(report.get("verdicts"), dict) else {}
    for gid, cell in cells.items():
        if cell.get("test") and gid not in verdicts:
            scores[gid] = 0.0
            notes.append(f"test cell {gid} was not run by the grader: scored 0")
    for name in spec["notebooks"]:
        nb = nbformat.read(_autograded(course, spec, name), as_version=4)
        for i, c in enumerate(nb.cells):
            if c.cell_type != "code":
                continue
            gid = nbgrader_meta(c).get("grade_id")
            output = _cell_output(c)
            if any(m in output for m in MEMORY_MARKS):
                label = gid or f"{i + 1} (id {c.get('id', '?')})"
                notes.append(
                    f"cell {label} ran out of memory (cap {spec['memory_bytes'] / sandbox.GiB:g} GiB)"
                )
            if gid in cells:
                outputs[gid] = output
    return scores, outputs, notes


def _autograded(course: Path, spec: dict, name: str) -> Path:
    return autograded_dir(course, spec["student"], spec["assignment"]) / name


# ----------------------------------------------------------------------------------------------
# The judged execution's settings (nbgrader's Execute replaced: `judged_execute`).


def judge_settings(spec: dict, folder: Path) -> dict:
    """What `judged_execute.judge_notebook` needs, written beside the job's course: the deadline
    (wall clock), the student's folder, the limits, the box, where the report goes."""
    return {
        "deadline": time.time() + spec["wall_seconds"] - MARGIN,
        "workdir": str(folder / "student"),
        "report": str(folder / "report.json"),
        "memory_bytes": spec["memory_bytes"],
        "cell_limits": spec.get("cell_limits"),
        "cell_timeout": spec.get("cell_timeout"),
        "box": spec.get("box"),
        "setup": _released_setup(Path(spec["course"]), spec["assignment"]),
    }


def _released_setup(course: Path, assignment: str) -> str | None:
    """The released setup cell's source (the course's code: not run, not flagged, if left as is)."""
    from .verify import released_setup_source

    try:
        return released_setup_source(course, assignment)
    except Exception:  # noqa: BLE001 - no released notebook: nbgrader says so itself
        return None


# ----------------------------------------------------------------------------------------------
# The job's steps.


def trusted_imports() -> None:
    """Everything the job needs, imported before any student code runs: the job's working
    folder is taken off the module search path, and nothing is imported from it later."""
    here = {"", ".", os.getcwd()}
    sys.path[:] = [p for p in sys.path if p not in here and not _inside(p, Path.cwd())]
    import nbclient.exceptions  # noqa: F401
    import nbgrader.api  # noqa: F401
    import nbgrader.apps.nbgraderapp  # noqa: F401
    import torch

    import transformer_lab
    import transformer_lab.check  # noqa: F401

    transformer_lab.load_all()  # every model module, not only those the checks import

    from . import judge, judged_execute, verify_flags  # noqa: F401

    torch.set_num_threads(1)
    _warm_caches()


def _warm_caches() -> None:
    """Build once, in the worker, what every job would otherwise build for itself and then throw
    away (each job is a fork of the worker): nbformat's compiled notebook schemas, strict and
    relaxed (nbconvert validates the notebook after each of nbgrader's preprocessors; compiling
    them cost a job about 0.1 CPU s), SQLAlchemy's configured gradebook mappers (about 0.06),
    and the modules torch imports on the judge's first gradient (`verify_child.warm_torch`:
    about 0.65). benchmarks/history/journal.md §35, §38; tests/grading/test_worker.py checks
    all three."""
    import nbformat
    import nbformat.validator
    import sqlalchemy.orm
    import torch

    from .verify_child import warm_torch

    warm_torch(torch)

    for relaxed in (False, True):
        nbformat.validator.get_validator(
            version=4, version_minor=nbformat.v4.nbformat_minor, relax_add_props=relaxed
        )
    sqlalchemy.orm.configure_mappers()


def _inside(path: str, folder: Path) -> bool:
    try:
        return Path(path).resolve().is_relative_to(folder.resolve())
    except (OSError, ValueError):
        return False


def autograde(course: Path, spec: dict, settings: Path) -> tuple[int, str]:
    """nbgrader autograde of the job's student, judged: (exit code, the log's tail)."""
    log = course.parent / "autograde.log"
    with open(log, "w+") as out:
        code = nbgrader_app.autograde_in_job(
            course, spec["assignment"], spec["student"], settings, out
        )
        out.flush()
        out.seek(0)
        text = out.read()[-100_000:]
    return code, text


PROCESS = "the student's process "  # `verify_session.Session.gone`: it sent what was refused


def failure_reason(code: int | str, log: str, error: Exception, report: dict) -> str:
    """Why nbgrader's results cannot be read: the judge's report says whether the student's
    process died; else as precisely as nbgrader's log allows."""
    died = report.get("died")
    if isinstance(died, str) and died.startswith(PROCESS + "sent "):  # it broke the protocol
        return f"the grader stopped the notebook's process: it {died[len(PROCESS) :]}"
    if died:
        return "the kernel died (the notebook crashed Python: os._exit, a segfault, ...)"
    lines = [ln for ln in log.splitlines() if "rror" in ln][-3:]
    return (
        f"nbgrader could not grade the notebook (exit {code}): {error}; " + " | ".join(lines)[-600:]
    )


def graded_record(spec, scores, outputs, notes, flags, verdicts=None) -> dict:
    """The gradebook's scores (nbgrader's, from the judged outputs), capped at each cell's points;
    each failed cell keeps the judge's failure as data (`failures`)."""
    verdicts = verdicts or {}
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
        record["cells"][gid] = {
            "score": score,
            "passed": score == cell["points"],
            "output": outputs.get(gid, "")[:OUTPUT_CHARS],
            "failure": None if score == cell["points"] else _failure(verdicts.get(gid)),
        }
    return record


def _failure(verdict) -> dict | None:
    return clean_failure(verdict.get("failure")) if isinstance(verdict, dict) else None


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
    """The judge becomes non-dumpable: a boxed student process cannot even see it (its own PID
    namespace, another uid); with --no-sandbox, where the student's process runs as the
    grader's uid, this still keeps it from `ptrace` of the judge and from reading its memory
    (/proc/<pid>/mem) or its descriptors."""
    import ctypes

    if ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError("prctl(PR_SET_DUMPABLE, 0) failed")


def run_job(spec_path: str) -> None:
    """Autograde, judged; read the private gradebook; report on the result pipe."""
    not_traceable()
    spec = json.loads(Path(spec_path).read_text())
    fd = int(os.environ.pop("TRANSFORMER_LAB_RESULT_FD"))
    os.set_inheritable(fd, False)  # nothing the job starts gets the pipe
    course = Path(spec["course"])
    clock = _Clock()
    trusted_imports()
    clock.lap("imports")
    settings = course.parent / "judge.json"
    settings.write_text(json.dumps(judge_settings(spec, course.parent)))
    code, log = autograde(course, spec, settings)
    clock.lap("autograde")
    try:
        report = json.loads((course.parent / "report.json").read_text())
    except (OSError, ValueError):
        report = {}
    flags = [str(f) for f in report.get("flags", [])]
    reason = None
    try:
        scores, outputs, notes = read_results(course, spec, report)
    except Exception as error:  # nothing usable: say why, as precisely as the log allows
        reason = failure_reason(code, log, error, report)
    clock.lap("results")
    if reason is None:
        record = graded_record(spec, scores, outputs, notes, flags, report.get("verdicts"))
    else:
        record = ungradable_record(spec, reason, flags)
    # where the job's time went (informational: benchmarks/bench_grading.py --breakdown)
    record["timings"] = clock.wall
    record["cpu_timings"] = dict(clock.cpu, student=report.get("cpu", 0.0))
    os.write(fd, json.dumps(record).encode())
    os.close(fd)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--job":
        run_job(sys.argv[2])
    else:
        raise SystemExit("usage: python -m transformer_lab_grader.job --job SPEC.json")
