"""Grade on Dask workers: ``transformer-lab grade ASSIGNMENT SUBMISSIONS --scheduler tcp://HOST:PORT``.

The instructor's process does what a local run does (find the students, skip those already
graded, validate every record, write results/, the CSV and the gradebook); only the grading of one
student, the unit of work of `grading.Grader._grade`, moves to a Dask worker:

1. Once per run, the course files a job needs travel to the cluster as one task input (held by
   the scheduler, so a worker that dies does not lose it): autograder/*.py,
   exercises/<assignment>/, solutions/<assignment>/ (the hidden tests; the sandbox hides them
   from the student's code as it does locally), a copy of the gradebook prepared once for the run,
   the grader's settings (limits, --no-sandbox, ...), and the package's version and digest.
2. Per student, the task carries the student's folder as the grader sees it: the bytes of every
   top-level notebook, and the names (not the bytes) of every other file, which the grader only
   lists as "ignored extra files". No shared filesystem is assumed.
3. On the worker, `cluster_worker.grade_on_worker` rebuilds that course and that folder in a
   temporary folder and runs the local code path, `Grader._grade`, unchanged: the same repair,
   the same sandbox, the same nbgrader job, judged. It returns the record and the autograded
   notebooks (for feedback) and deletes its folder. Workers never see the course's results/, CSV or
   gradebook.
4. Back here, the record is validated again against the release (`records.validate_record`) and
   the autograded notebooks pass the same checks as local ones (`Grader._keep_autograded`).

A worker that dies mid-task (killed, out of memory, its machine gone): Dask gives the task to
another worker; the record is written once, here, when the one result arrives. A task whose
workers keep dying (more than Dask's `distributed.scheduler.allowed-failures`, 3 by default)
makes the student ungradable with that reason. A worker that cannot grade (no transformer_lab,
another version of it, or edited code: `identity`) ends the run with a message naming the
worker, at the start or when a worker that joined later gets a student; the records already
written stay, and a rerun resumes.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import threading
import time
import uuid
from pathlib import Path

from .cluster_worker import entry, identity
from .course import autograded_dir
from .grading import Grader
from .records import validate_record
from .submission import MAX_NOTEBOOK_BYTES

# Students waiting on the cluster at once (one thread each here; Dask queues them on its side).
IN_FLIGHT = 512
# The CSV is rewritten at most this often while results arrive (and always at the end): with
# thousands of students, rewriting it after each one costs more than grading.
CSV_EVERY_SECONDS = 30.0
# What a local run keeps to itself: the worker's Grader gets its own paths and lock.
LOCAL_ONLY = {
    "course",
    "submissions",
    "out",
    "lock",
    "_base",
    "_count",
    "run_dir",
    "only",
    "quiet",
    "jobs",
    "released",
    "cells",
    # ClusterGrader's own
    "scheduler",
    "check_workers",
    "client",
    "graded_by",
    "_shared",
    "_shared_lock",
    "_futures",
    "_unfit",
    "_csv_at",
}
INSTALL_HINT = (
    "every Dask worker needs the same transformer-lab as this machine, with its [lab] extra "
    "(pip install -e '/path/to/transformer-lab[lab,cluster]'), in the Python that runs "
    "`dask worker`; see INSTRUCTORS.md, 'Grading on many machines'"
)


class WorkerUnfit(SystemExit):
    """A worker cannot grade (no package, another version): ends the run, records no student."""


# ----------------------------------------------------------------------------------------------
# Instructor side.


def shadow_folder(folder: Path) -> list[tuple[str, str, object]]:
    """What a worker needs of a student's folder to grade it exactly as here: every file the
    grader lists (not hidden, not in .ipynb_checkpoints), with the bytes of the top-level
    notebooks only (the only files `prepare_submission` reads)."""
    entries = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if not path.is_file() or ".ipynb_checkpoints" in rel.parts or path.name.startswith("."):
            continue
        if path.is_symlink():
            entries.append((str(rel), "link", None))
        elif path.suffix == ".ipynb" and len(rel.parts) == 1:
            size = path.stat().st_size
            if size > MAX_NOTEBOOK_BYTES:
                entries.append((str(rel), "sized", size))
            else:
                entries.append((str(rel), "bytes", path.read_bytes()))
        else:
            entries.append((str(rel), "empty", None))
    return entries


def connect(address: str, timeout: float = 30.0):
    """A Dask client of the scheduler at `address`, with a clear error when that fails."""
    try:
        from distributed import Client
    except ImportError:
        raise SystemExit(
            "--scheduler needs Dask distributed: pip install -e '.[cluster]' (or `make install`)"
        ) from None
    if "://" not in address:
        raise SystemExit(f"--scheduler {address}: expected an address like tcp://HOST:8786")
    try:
        return Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as error:
        raise SystemExit(f"cannot reach the Dask scheduler at {address}: {error}") from None


class ClusterGrader(Grader):
    """A `Grader` whose students are graded on Dask workers. `scheduler`: the scheduler's
    address (tcp://HOST:PORT), or, from Python, a `distributed.Client` or a cluster object
    (dask-jobqueue's SLURMCluster, dask-kubernetes' KubeCluster, a dask-gateway cluster)."""

    local_jobs = False  # no grading worker here: each Dask worker process has its own

    def __init__(self, *args, scheduler: str, check_workers: bool = True, **options):
        super().__init__(*args, **options)
        self.scheduler = scheduler
        self.check_workers = check_workers
        self.jobs = IN_FLIGHT
        self.client = None
        self._shared = None
        self._shared_lock = threading.Lock()
        self._futures: dict[str, object] = {}
        self._unfit: str | None = None
        self._csv_at = 0.0
        self.graded_by: dict[str, str] = {}  # student -> the worker whose result was kept

    def run(self) -> list[dict]:
        if isinstance(self.scheduler, str):
            self.client, owned = connect(self.scheduler), True
        elif hasattr(self.scheduler, "submit"):  # a distributed.Client of the caller's
            self.client, owned = self.scheduler, False
        elif hasattr(self.scheduler, "get_client"):  # SLURMCluster, KubeCluster, dask-gateway
            self.client, owned = self.scheduler.get_client(), False
        else:
            raise TypeError(f"scheduler: an address, a Client or a cluster, not {self.scheduler!r}")
        try:
            workers = self.preflight()
            self.say(f"grading on {workers} Dask workers at {self.address}")
            return super().run()
        finally:
            if owned:
                self.client.close()
            self.client = None

    @property
    def address(self) -> str:
        return self.scheduler if isinstance(self.scheduler, str) else self.client.scheduler.address

    def preflight(self, wait: float = 60.0) -> int:
        """Wait for a worker; every connected worker must be able to grade."""
        try:
            self.client.wait_for_workers(1, timeout=wait)
        except (TimeoutError, OSError):
            raise SystemExit(
                f"no Dask worker joined the scheduler at {self.address} within {wait:g} s: "
                "start workers first (INSTRUCTORS.md, 'Grading on many machines')"
            ) from None
        if self.check_workers:
            replies = self.client.run(entry(), {"identity": identity()}, None)
            bad = sorted(
                f"{address}: {reply['unfit']}"
                for address, reply in replies.items()
                if "unfit" in reply
            )
            if bad:
                raise WorkerUnfit(
                    f"{len(bad)} of {len(replies)} Dask workers cannot grade:\n  "
                    + "\n  ".join(bad)
                    + f"\n{INSTALL_HINT}"
                )
        return len(self.client.scheduler_info().get("workers", {}))

    def shared(self):
        """The run's course files and settings, once, as a task the scheduler can re-run."""
        with self._shared_lock:
            if self._shared is None:
                self._shared = self._submit_shared()
            return self._shared

    def _submit_shared(self):
        gradebook = self.base_gradebook().read_bytes()
        files = {}
        for path in sorted((self.course / "autograder").glob("*.py")):
            files[f"autograder/{path.name}"] = path.read_bytes()
        for part in ("exercises", "solutions"):
            top = self.course / part / self.assignment
            for path in sorted(top.rglob("*")):
                if path.is_file() and ".ipynb_checkpoints" not in path.parts:
                    files[str(path.relative_to(self.course))] = path.read_bytes()
        settings = {}
        for name, value in vars(self).items():
            if name in LOCAL_ONLY:
                continue
            try:
                settings[name] = pickle.loads(pickle.dumps(value))
            except Exception:
                continue
        payload = {
            "assignment": self.assignment,
            "identity": identity(),
            "files": files,
            "gradebook": gradebook,
            "settings": pickle.dumps(settings),
            "environ": {
                name: os.environ.get(name)
                for name in ("TRANSFORMER_LAB_QUICK",)  # read by run_setup.job_env on the worker
            },
        }
        key = f"transformer-lab-course-{self.assignment}-{uuid.uuid4().hex[:8]}"
        return self.client.submit(dict, payload, key=key, pure=False)

    def _grade(self, student: str, folder: Path, sha: str) -> dict:
        if self._unfit:
            raise WorkerUnfit(self._unfit)
        if folder.name != self.assignment:  # nothing to send: the local answer, no job
            return super()._grade(student, folder, sha)
        task = {"student": student, "sha": sha, "entries": shadow_folder(folder)}
        key = f"grade-{self.assignment}-{student}-{uuid.uuid4().hex[:8]}"
        future = self.client.submit(entry(), self.shared(), task, key=key, pure=False)
        with self.lock:
            self._futures[student] = future
        try:
            reply = future.result()
        except Exception as error:
            if self._unfit:
                raise WorkerUnfit(self._unfit) from None
            if type(error).__name__ == "KilledWorker":
                raise RuntimeError(
                    "the Dask workers grading this notebook died (the task was tried on "
                    f"several workers): {error}"
                ) from None
            raise
        finally:
            with self.lock:
                self._futures.pop(student, None)
        if "unfit" in reply:
            self._stop(f"{reply['unfit']}\n{INSTALL_HINT}")
            raise WorkerUnfit(self._unfit)
        record = validate_record(reply["record"], student, self.assignment, self.cells)
        with self.lock:
            self.graded_by[student] = reply["where"]
        with tempfile.TemporaryDirectory(prefix="tl-dask-back-") as tmp:
            job_course = Path(tmp) / "course"
            dest = autograded_dir(job_course, student, self.assignment)
            dest.mkdir(parents=True)
            for name, data in reply.get("autograded", {}).items():
                if name in self.released:  # only the assignment's notebooks, by their names
                    (dest / name).write_bytes(data)
            self._keep_autograded(job_course, student)
        return record

    def _stop(self, reason: str) -> None:
        """A worker cannot grade: cancel what is queued; the run ends with `reason`."""
        with self.lock:
            if self._unfit is None:
                self._unfit = reason
            pending = list(self._futures.values())
        if pending:
            self.client.cancel(pending)

    def csv_due(self) -> bool:
        """Called under self.lock after each record: rewrite the CSV at most every
        CSV_EVERY_SECONDS (`run` writes it at the end in any case)."""
        if time.monotonic() - self._csv_at < CSV_EVERY_SECONDS:
            return False
        self._csv_at = time.monotonic()
        return True
