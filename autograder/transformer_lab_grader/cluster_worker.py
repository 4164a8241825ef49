"""The Dask worker's side of grading on a cluster (`cluster`): the task's entry point, shipped by
value, checks that this worker can grade as the instructor would (`unfit_reason`: same package,
same code), then `grade_on_worker` grades one student with the local code path in a private
temporary course rebuilt from the task.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import pickle
import shutil
import tempfile
import threading
from pathlib import Path

from . import worker as job_worker
from .course import autograded_dir
from .grading import Grader
from .run_setup import job_env

# ----------------------------------------------------------------------------------------------
# What both sides compare: the package's code.


def package_digest() -> str:
    """sha256 over the names and bytes of every .py file of the installed transformer_lab and of
    this grader."""
    import transformer_lab

    digest = hashlib.sha256()
    for package in (transformer_lab.__file__, __file__):
        top = Path(package).resolve().parent
        for path in sorted(top.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            digest.update(str(path.relative_to(top.parent)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def identity() -> dict[str, str]:
    """What a worker must share with the instructor's process to grade identically."""
    import transformer_lab

    versions = {"transformer_lab": transformer_lab.__version__, "digest": package_digest()}
    for name in ("torch", "nbgrader"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "missing"
    return versions


def unfit_reason(expected: dict[str, str]) -> str | None:
    """Why this process cannot grade for an instructor whose identity() is `expected`; None if
    it can. Hard: the package's version and code. torch and nbgrader must be installed."""
    mine = identity()
    if mine["transformer_lab"] != expected["transformer_lab"]:
        return (
            f"it has transformer_lab {mine['transformer_lab']}, the instructor "
            f"{expected['transformer_lab']}"
        )
    if mine["digest"] != expected["digest"]:
        return (
            f"its transformer_lab code differs from the instructor's (digest "
            f"{mine['digest'][:12]}, the instructor's {expected['digest'][:12]}): a stale or "
            "edited install"
        )
    missing = [name for name in ("torch", "nbgrader") if mine[name] == "missing"]
    if missing:
        return f"{' and '.join(missing)} not installed"
    return None


# ----------------------------------------------------------------------------------------------
# The task's entry point. It is shipped by value (its source, see `entry`), so that a worker
# without transformer_lab can run it and say so, instead of failing to unpickle a reference to
# a module it does not have.

_ENTRY_SOURCE = '''
def entry(shared, task):
    """Runs on the worker: check the environment, then grade one student (task None: check)."""
    import importlib
    import socket

    try:
        from distributed import get_worker

        where = f"Dask worker {get_worker().address} on {socket.gethostname()}"
    except Exception:
        where = f"Dask worker on {socket.gethostname()}"
    try:
        cluster = importlib.import_module("transformer_lab_grader.cluster_worker")
    except Exception as error:
        return {
            "unfit": f"{where} cannot import transformer_lab ({type(error).__name__}: {error})",
            "where": where,
        }
    reason = cluster.unfit_reason(shared["identity"])
    if reason is not None:
        return {"unfit": f"{where}: {reason}", "where": where}
    if task is None:
        return {"ok": where}
    reply = cluster.grade_on_worker(shared, task)
    reply["where"] = where
    return reply
'''


_ENTRY = []


def entry():
    """The worker-side function, built from source so that it pickles by value."""
    if not _ENTRY:
        namespace = {"__name__": "transformer_lab_cluster_entry"}  # a module no one can import
        exec(compile(_ENTRY_SOURCE, "<transformer_lab cluster entry>", "exec"), namespace)
        _ENTRY.append(namespace["entry"])
    return _ENTRY[0]


# ----------------------------------------------------------------------------------------------
# Worker side.

_ENV_LOCK = threading.Lock()


def _safe(name: str) -> str:
    if Path(name).is_absolute() or ".." in Path(name).parts:
        raise ValueError(f"bad path in the task: {name!r}")
    return name


def _write_files(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        path = root / _safe(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _rebuild_folder(folder: Path, entries: list[tuple[str, str, object]]) -> None:
    """The student's folder as `shadow_folder` described it: same names, same notebooks."""
    folder.mkdir(parents=True, exist_ok=True)
    blank = folder.parent.parent / ".linked"  # outside the folder: a symlink's target
    blank.write_bytes(b"")
    for name, kind, value in entries:
        path = folder / _safe(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "bytes":
            path.write_bytes(value)
        elif kind == "sized":  # a notebook too large to grade: only its size matters
            with open(path, "wb") as f:
                f.truncate(int(value))
        elif kind == "link":
            path.symlink_to(blank)
        else:
            path.write_bytes(b"")


def grade_on_worker(shared: dict, task: dict) -> dict:
    """Grade one student with the local code path in a private temporary course."""
    root = Path(tempfile.mkdtemp(prefix="tl-dask-"))
    try:
        course = root / "course"
        _write_files(course, shared["files"])
        base = root / "base" / "gradebook.db"
        base.parent.mkdir()
        base.write_bytes(shared["gradebook"])
        submissions = root / "subs"
        folder = submissions / task["student"] / shared["assignment"]
        _rebuild_folder(folder, task["entries"])
        grader = Grader(course, shared["assignment"], submissions, quiet=True)
        for name, value in pickle.loads(shared["settings"]).items():
            setattr(grader, name, value)
        grader.run_dir = root / "run"
        grader._base = base
        if grader.use_worker:  # one pre-imported worker per Dask worker process forks the jobs
            grader._worker = job_worker.process_worker(lambda home: job_env(course, home))
        with _ENV_LOCK:  # what the job's environment takes from this process (run_setup.job_env)
            for name, value in shared["environ"].items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        record = grader._grade(task["student"], folder, task["sha"])
        done = autograded_dir(course, task["student"], shared["assignment"])
        autograded = {
            p.name: p.read_bytes()
            for p in sorted(done.glob("*.ipynb"))
            if p.is_file() and not p.is_symlink()
        }
        return {"record": record, "autograded": autograded}
    finally:
        shutil.rmtree(root, ignore_errors=True)
