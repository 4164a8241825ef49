"""One grading run of one assignment on this machine (`Grader`; the pipeline: see `grade`): find
the students, skip those already graded, grade each in a job of its own, validate and write
every record, then the CSV and the gradebook.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import nbformat

from . import cell_limits, identities, sandbox, timing
from . import worker as job_worker
from .course import PACKAGE_REPO, autograded_dir
from .notebook_format import graded_cells, released_notebooks
from .plain_text import printable, shown
from .records import (
    lesson_digest,
    load_records,
    load_valid,
    now,
    record_path,
    ungradable,
    validate_record,
    write_csv,
    write_record,
)
from .regrade import STALE, history_entry, regrade_reason
from .run_setup import RunSetup, job_env
from .submission import (
    MAX_NOTEBOOK_BYTES,
    Ungradable,
    find_students,
    prepare_submission,
    submission_sha256,
)

# Folders of the course and of the package's repository that a grading job never sees.
PRIVATE_FOLDERS = ("solutions", "autograder/work", "student_package", ".git")


class Grader(RunSetup):
    """One grading run of one assignment; `run()` returns every record of the assignment."""

    def __init__(
        self,
        course: Path,
        assignment: str,
        submissions: Path,
        *,
        out: Path | None = None,
        jobs: int = 1,
        force: bool = False,
        allow_older: bool = False,
        students: list[str] | None = None,
        limits: sandbox.Limits | None = None,
        isolate: bool = True,
        quiet: bool = False,
        worker: bool | None = None,
    ):
        self.course = Path(course).resolve()
        self.assignment = assignment
        self.submissions = Path(submissions).resolve()
        self.out = out
        self.jobs = max(1, int(jobs))
        self.force = force
        self.allow_older = allow_older
        self.context: dict[str, dict] = {}  # student -> what `_one` adds to the new record
        self.only = set(students) if students else None
        self.limits = limits or sandbox.Limits()
        self.isolate = isolate
        self.quiet = quiet
        # one pre-imported process forks every job (`worker`); None: $TRANSFORMER_LAB_GRADING_WORKER
        self.use_worker = job_worker.switched_on(worker)
        self._worker: job_worker.Worker | None = None
        self._worker_problem: str | None = None
        self.released = released_notebooks(self.course, assignment)
        self.cells = graded_cells(self.released)
        self.lock = threading.Lock()
        self._base: Path | None = None
        self._base_lock = threading.Lock()
        self._limits: cell_limits.CellLimits | None = None
        self._count = 0
        self.run_dir: Path | None = None

    def say(self, message: str) -> None:
        """Print a line, without the control characters (or lone surrogates) a student's text
        could bring to the terminal (a reason quotes their process's words)."""
        if not self.quiet:
            print(printable(message), flush=True)

    def run(self) -> list[dict]:
        if not self.submissions.exists():
            raise SystemExit(f"no such file or folder: {self.submissions}")
        if self.submissions.is_file() or not any(self.submissions.glob(f"*/{self.assignment}")):
            from .collect import collect

            target = self.course / "autograder" / "work" / "collected" / self.assignment
            collected = collect(self.submissions, self.assignment, target)
            self.say(collected.summary())
            self.submissions = target
        found, problems = find_students(self.submissions, self.assignment)
        whos = identities.read(self.submissions, found)
        for problem in problems:
            self.say(f"not graded: {problem}")
        if self.only is not None:
            unknown = sorted(self.only - set(found))
            for student in unknown:
                self.say(f"not graded: no submission from {student}")
            found = {s: f for s, f in found.items() if s in self.only}
        todo, lesson, kept = [], lesson_digest(self.course, self.assignment), {}
        for student, folder in found.items():
            sha = submission_sha256(folder)
            at = timing.submitted_at(folder, whos[student])
            old = load_valid(
                record_path(self.course, self.assignment, student),
                student,
                self.assignment,
                self.cells,
            )
            another = old is not None and old.get("submission_sha256") != sha
            if another and timing.older(at, old.get("submitted_at")):
                if not self.allow_older:
                    self.say(
                        f"{student}: this submission ({at}) is older than the one on record "
                        f"({old['submitted_at']}), kept the newer; --allow-older grades it"
                    )
                    continue
            kept[student] = whos[student]  # an older folder's identity is not kept either
            why = regrade_reason(old, sha, lesson)
            if why in (None, STALE) and not self.force:  # a stale record: `grade` lists it
                self.say(
                    f"{student}: already graded ({old['score']:g}/{old['max_score']:g}), skipped"
                )
                continue
            self.context[student] = history_entry(old, at, why or "--force")
            todo.append((student, folder, sha))
        identities.keep(self.course, self.assignment, kept)
        if todo:
            sandbox.isolation(self.isolate)  # no box to be had: stop here, saying how to get one
            self.run_dir = Path(tempfile.mkdtemp(prefix="transformer-lab-grade-"))
            try:
                self._start_worker()
                # the gradebook prepared (in the worker) while the reference solution is timed
                base = threading.Thread(target=self._prepare_base, daemon=True)
                base.start()
                self.say(f"time limits: {cell_limits.describe(self.time_limits())}")
                base.join()
                with concurrent.futures.ThreadPoolExecutor(self.jobs) as pool:
                    futures = [pool.submit(self._one, *job) for job in todo]
                    for future in concurrent.futures.as_completed(futures):
                        future.result()
                return self._finish()  # the merge: the worker's last job
            finally:
                self._stop_worker()
                if not os.environ.get("TRANSFORMER_LAB_KEEP_GRADING_DIR"):
                    shutil.rmtree(self.run_dir, ignore_errors=True)
        return self._finish()

    def _finish(self) -> list[dict]:
        """Every record of the assignment: into the CSV, and merged into the gradebook."""
        records = load_records(self.course, self.assignment)
        if self.out is not None:
            write_csv(records, Path(self.out), {self.assignment: self.cells})
        try:
            self.merge(records)
        except Exception as error:  # the records and the CSV are what counts
            self.say(f"warning: could not merge into the course gradebook: {error}")
        return records

    def _one(self, student: str, folder: Path, sha: str) -> dict:
        start = time.monotonic()
        try:
            record = self._grade(student, folder, sha)
        except Exception as error:  # a bug of ours must not lose the student either
            record = ungradable(
                student, self.assignment, self.cells, f"internal grader error: {error!r}", sha=sha
            )
            traceback.print_exc()
        record["seconds"] = round(time.monotonic() - start, 2)
        record["submission_sha256"] = sha
        record["graded_at"] = now()
        record["lesson_sha256"] = lesson_digest(self.course, self.assignment)
        record.update(self.context.get(student, {}))
        if record["status"] != "graded":  # no stale autograded notebook for feedback
            shutil.rmtree(autograded_dir(self.course, student, self.assignment), ignore_errors=True)
        with self.lock:
            write_record(self.course, record)
            if self.out is not None and self.csv_due():
                write_csv(
                    load_records(self.course, self.assignment),
                    Path(self.out),
                    {self.assignment: self.cells},
                )
        reason = f" ({shown(record['reason'])})" if record.get("reason") else ""
        self.say(
            f"{student}: {record['status']} {record['score']:g}/{record['max_score']:g}{reason}"
        )
        return record

    def csv_due(self) -> bool:
        """Rewrite the CSV after this record? (always here; `cluster` spaces it out)"""
        return True

    def _grade(self, student: str, folder: Path, sha: str) -> dict:
        if folder.name != self.assignment:
            return ungradable(
                student,
                self.assignment,
                self.cells,
                f"no {self.assignment}/ folder in the submission",
                sha=sha,
            )
        with self.lock:  # short job folder names: Unix socket paths are limited to 107 bytes
            self._count += 1
            job = self.run_dir / "jobs" / str(self._count)
        course = job / "course"
        submitted = course / "autograder" / "work" / "submitted" / student / self.assignment
        try:
            notes, flags = prepare_submission(folder, self.released, submitted)
        except Ungradable as why:
            return ungradable(student, self.assignment, self.cells, str(why), sha=sha)
        (course / "autograder").mkdir(parents=True, exist_ok=True)
        for path in (self.course / "autograder").glob("*.py"):
            shutil.copy(path, course / "autograder" / path.name)
        shutil.copytree(
            self.course / "exercises" / self.assignment, course / "exercises" / self.assignment
        )
        shutil.copy(self.base_gradebook(), course / "autograder" / "work" / "gradebook.db")
        # the box of the student's process: the course and the package read-only, and none of
        # their private folders, the submissions, nor any job's folder (its own is bound again)
        hide = [str(root / sub) for root in {self.course, PACKAGE_REPO} for sub in PRIVATE_FOLDERS]
        hide += [str(self.run_dir)]
        if not _is_ancestor(self.submissions, [self.course, PACKAGE_REPO, Path(sys.prefix)]):
            hide.append(str(self.submissions))
        readonly = tuple(sorted(str(p) for p in {self.course, PACKAGE_REPO}))
        box = sandbox.Box(self.isolate, tuple(hide), readonly)
        spec = {
            "student": student,
            "assignment": self.assignment,
            "course": str(course),
            "cells": self.cells,
            "notebooks": sorted(self.released),
            "cell_timeout": self.limits.cell_timeout,
            "cell_limits": self.time_limits().to_json(),
            "wall_seconds": self.limits.wall_seconds,
            "memory_bytes": self.limits.memory_bytes,
            "box": box.to_json(),
        }
        (job / "spec.json").write_text(json.dumps(spec))
        env = job_env(course, job / "home")
        result = self._launch(  # the job is trusted: its student's process is boxed, not it
            [sys.executable, "-m", job_worker.JOB_MODULE, "--job", str(job / "spec.json")],
            flags,
            cwd=course / "autograder",
            env=env,
            limits=self.limits,
            keep=job,
        )
        if not self.isolate:
            flags.append(sandbox.NO_SANDBOX.format(why="--no-sandbox"))
        if result.timed_out:
            return ungradable(
                student,
                self.assignment,
                self.cells,
                f"timeout: grading took longer than {self.limits.wall_seconds:g} s "
                "(wall-clock cap per notebook)",
                sha=sha,
                flags=flags,
            )
        try:
            record = validate_record(
                json.loads(result.record.decode("utf-8")), student, self.assignment, self.cells
            )
        except (ValueError, UnicodeDecodeError) as error:
            tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
            why = _crash_reason(result.returncode, "\n".join(tail), self.limits)
            return ungradable(
                student,
                self.assignment,
                self.cells,
                f"{why} (no valid result: {error})",
                sha=sha,
                flags=flags,
            )
        record["flags"] = flags + [f for f in record["flags"] if f not in flags]
        self._keep_autograded(course, student)
        reasons = [r for r in [*notes, record.get("reason")] if r]
        record["reason"] = "; ".join(reasons) if reasons else None
        return record

    def _keep_autograded(self, job_course: Path, student: str) -> None:
        """Copy the job's autograded notebooks into the course (for feedback), only if they
        parse as notebooks of sane size."""
        src = autograded_dir(job_course, student, self.assignment)
        dest = autograded_dir(self.course, student, self.assignment)
        keep = {}
        for name in self.released:
            path = src / name
            if (
                path.is_file()
                and not path.is_symlink()
                and path.stat().st_size < MAX_NOTEBOOK_BYTES
            ):
                try:
                    keep[name] = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
                except Exception:
                    continue
        if keep:
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir(parents=True)
            for name, nb in keep.items():
                nbformat.write(nb, dest / name)


def _is_ancestor(folder: Path, paths: list[Path]) -> bool:
    return any(p == folder or folder in p.parents for p in paths)


def _crash_reason(returncode: int | None, tail: str, limits: sandbox.Limits) -> str:
    if returncode is not None and returncode < 0:
        name = (
            signal.Signals(-returncode).name
            if -returncode in signal.Signals._value2member_map_
            else returncode
        )
        if -returncode == signal.SIGXCPU:
            return "CPU time limit reached"
        return f"the grading job was killed by {name}"
    if "MemoryError" in tail:
        return f"memory limit reached ({limits.memory_bytes / sandbox.GiB:g} GiB)"
    return f"the grading job failed (exit {returncode}): {tail[-300:]}"
