"""Grading on Dask workers (`transformer-lab grade ... --scheduler tcp://HOST:PORT`).

Each test starts real `dask scheduler` and `dask worker` processes on 127.0.0.1 (free ports, no
dashboard, one thread per worker) and stops them at the end. Lesson 02 is graded for four
students: an honest one (full marks), a partial one in a misnamed notebook with extra files and a
symlink (an exception in one exercise: 5 of 8 points, and the repair notes), an invalid notebook
and a folder without the lesson (both ungradable). The same class graded locally (`--jobs 2`)
is the reference: the cluster's records must be identical, field by field (bar the timing).
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
from distributed import Client

from transformer_lab_grader import (
    cluster,
    cluster_worker,
    grade,
    nbgrader_app,
    notebook_format,
    sandbox,
    submission,
)
from transformer_lab_grader import records as rec

REPO = Path(__file__).resolve().parents[2]
LESSON = "02_qkv_attention"
NAME = f"{LESSON}.ipynb"
FULL = 8.0
LIMITS = sandbox.Limits(wall_seconds=600, cell_timeout=120)
DEMOS = ("lookup", "variance", "saturate", "widget", "heatmap", "layer-demo", "progress")
FORWARD = "        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)\n"
TIMING = ("seconds", "graded_at", "timings", "cpu_timings")  # when, and how long each phase took

pytestmark = pytest.mark.slow


# ----------------------------------------------------------------------------- the class


def _solution() -> nbformat.NotebookNode:
    nb = nbformat.read(REPO / "solutions" / LESSON / NAME, as_version=4)
    nb.cells = [c for c in nb.cells if c.get("id") not in DEMOS]  # the demos only cost time
    return nb


def _write_class(submissions: Path) -> None:
    honest = submissions / "honest" / LESSON
    honest.mkdir(parents=True)
    nbformat.write(_solution(), honest / NAME)
    partial = submissions / "partial" / LESSON
    (partial / "data").mkdir(parents=True)
    nb = _solution()
    cell = next(c for c in nb.cells if c.get("id") == "self-attention-solution")
    assert FORWARD in cell.source
    cell.source = cell.source.replace(FORWARD, '        raise ValueError("bug")\n' + FORWARD)
    nbformat.write(nb, partial / "my_attempt.ipynb")
    (partial / "data" / "notes.txt").write_text("scratch " * 1000)
    (partial / "link.txt").symlink_to(partial / "data" / "notes.txt")
    (partial / ".hidden").write_text("not listed")
    broken = submissions / "broken" / LESSON
    broken.mkdir(parents=True)
    (broken / NAME).write_bytes(b'{"cells": [}, "metadata": nope')
    (submissions / "nofolder" / "03_multihead_attention").mkdir(parents=True)


def _comparable(record: dict) -> dict:
    """The record without when and how long; the checks' own timings ("0.23 s") masked."""
    same = {k: v for k, v in record.items() if k not in TIMING}
    same["cells"] = {
        gid: {**cell, "output": re.sub(r"\d+(\.\d+)? s\b", "<t> s", cell["output"])}
        for gid, cell in record["cells"].items()
    }
    return same


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    return nbgrader_app.course_copy(REPO, tmp_path_factory.mktemp("c") / "course", [LESSON])


@pytest.fixture(scope="module")
def submissions(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("subs")
    _write_class(folder)
    return folder


def _fresh(course: Path, tmp: Path) -> Path:
    """A copy of the generated course, with no results yet."""
    return Path(shutil.copytree(course, tmp / "course", symlinks=True))


@pytest.fixture(scope="module")
def local(course, submissions, tmp_path_factory) -> dict:
    """The reference: the class graded here, --jobs 2."""
    here = _fresh(course, tmp_path_factory.mktemp("local"))
    out = here.parent / "grades.csv"
    records = grade.grade(here, LESSON, submissions, out=out, jobs=2, limits=LIMITS, quiet=True)
    return {"course": here, "records": {r["student"]: r for r in records}, "csv": out}


def test_the_reference_run_is_what_the_class_deserves(local):
    records = local["records"]
    assert sorted(records) == ["broken", "honest", "nofolder", "partial"]
    assert (records["honest"]["status"], records["honest"]["score"]) == ("graded", FULL)
    partial = records["partial"]
    assert (partial["status"], partial["score"]) == ("graded", 5.0), partial
    assert "renamed my_attempt.ipynb" in partial["reason"], partial["reason"]
    assert "ignored extra files: data/notes.txt, link.txt" in partial["reason"], partial["reason"]
    assert records["broken"]["status"] == "ungradable"
    assert "not valid JSON" in records["broken"]["reason"]
    assert records["nofolder"]["status"] == "ungradable"


# ----------------------------------------------------------------------------- the cluster


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A `dask scheduler` and `dask worker` processes on 127.0.0.1, stopped by `close`."""

    def __init__(self, tmp: Path, workers: list[dict[str, str]] | int = 2):
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []
        dask = str(Path(sys.executable).parent / "dask")
        info = tmp / "scheduler.json"
        self._start(
            [
                dask,
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(info),
            ],
            "scheduler",
            {},
        )
        deadline = time.monotonic() + 60
        while not (info.is_file() and info.stat().st_size):
            assert time.monotonic() < deadline, self.logs()
            time.sleep(0.2)
        self.address = json.loads(info.read_text())["address"]
        assert self.address.startswith("tcp://127.0.0.1:")
        envs = [{}] * workers if isinstance(workers, int) else workers
        for i, env in enumerate(envs):
            self._start(
                [
                    dask,
                    "worker",
                    self.address,
                    "--host",
                    "127.0.0.1",
                    "--nworkers",
                    "1",
                    "--nthreads",
                    "1",
                    "--no-dashboard",
                    "--name",
                    f"w{i}",
                    "--local-directory",
                    str(tmp / f"w{i}"),
                ],
                f"worker{i}",
                env,
            )
        self.client = Client(self.address, timeout=30, set_as_default=False)
        self.client.wait_for_workers(len(envs), timeout=120)

    def _start(self, argv: list[str], name: str, env: dict[str, str]) -> None:
        log = open(self.tmp / f"{name}.log", "wb")
        self.procs.append(
            subprocess.Popen(
                argv,
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        log.close()

    def logs(self) -> str:
        return "\n".join(p.read_text()[-2000:] for p in sorted(self.tmp.glob("*.log")))

    def worker_pids(self) -> dict[str, int]:
        return self.client.run(os.getpid)

    def close(self) -> None:
        self.client.close()
        for proc in reversed(self.procs):
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    running = Cluster(tmp_path_factory.mktemp("dask"))
    yield running
    running.close()


def _assert_same_as_local(course: Path, local: dict) -> list[dict]:
    records = rec.load_records(course, LESSON)
    students = [r["student"] for r in records]
    assert students == sorted(set(students)) == sorted(local["records"]), students
    for record in records:
        assert _comparable(record) == _comparable(local["records"][record["student"]])
    return records


def test_the_command_line_grades_on_the_cluster(dask_cluster, course, submissions, local, tmp_path):
    """`transformer-lab grade --scheduler`, as an instructor runs it, for the two students whose
    grading is quick (the notebooks graded in full: the next test)."""
    here = _fresh(course, tmp_path)
    out = tmp_path / "grades.csv"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_lab_grader.cli",
            "--course-dir",
            str(here),
            "grade",
            LESSON,
            str(submissions),
            "--out",
            str(out),
            "--scheduler",
            dask_cluster.address,
            "--wall-seconds",
            str(LIMITS.wall_seconds),
            "--cell-timeout",
            str(LIMITS.cell_timeout),
            "--students",
            "broken",
            "nofolder",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr + dask_cluster.logs()
    assert f"grading on 2 Dask workers at {dask_cluster.address}" in done.stdout
    assert "course: " + str(here) in done.stdout.splitlines()[0]
    records = rec.load_records(here, LESSON)
    assert [r["student"] for r in records] == ["broken", "nofolder"]
    for record in records:
        assert _comparable(record) == _comparable(local["records"][record["student"]])
    rows = list(csv.DictReader(out.open()))
    assert [r["student"] for r in rows] == ["broken", "nofolder"]
    assert "not valid JSON" in rows[0]["reason"]


def test_a_killed_worker_loses_and_duplicates_no_student(
    dask_cluster, course, submissions, local, tmp_path
):
    here = _fresh(course, tmp_path)
    grader = cluster.ClusterGrader(
        here,
        LESSON,
        submissions,
        out=tmp_path / "grades.csv",
        scheduler=dask_cluster.address,
        limits=LIMITS,
        quiet=True,
    )
    result: dict = {}

    def run():
        try:
            result["records"] = grader.run()
        except BaseException as error:  # noqa: BLE001 - reported below
            result["error"] = error

    thread = threading.Thread(target=run)
    pids = dask_cluster.worker_pids()
    thread.start()
    # wait until a worker has held a student's task for a few seconds: it is grading it
    victim, students, seen = None, [], {}
    deadline = time.monotonic() + 300
    while victim is None and thread.is_alive():
        assert time.monotonic() < deadline, dask_cluster.logs()
        for address, keys in dask_cluster.client.processing().items():
            for key in (k for k in keys if str(k).startswith("grade-")):
                seen.setdefault(key, time.monotonic())
                if time.monotonic() - seen[key] > 4 and address in pids:
                    victim = address
                    prefix = f"grade-{LESSON}-"
                    students = [str(k)[len(prefix) : -9] for k in keys if str(k).startswith(prefix)]
        time.sleep(0.3)
    assert victim is not None, "no task ran long enough to kill its worker"
    os.kill(pids[victim], signal.SIGKILL)
    thread.join(timeout=900)
    assert not thread.is_alive()
    assert "error" not in result, result.get("error")
    records = _assert_same_as_local(here, local)
    assert len(result["records"]) == len(records) == 4
    for student in students:  # graded again, elsewhere
        assert victim not in grader.graded_by[student], (victim, grader.graded_by)
    assert (tmp_path / "grades.csv").read_text() == local["csv"].read_text()
    # the autograded notebooks came back for feedback, as a local run keeps them
    autograded = here / "autograder" / "work" / "autograded"
    assert sorted(p.name for p in autograded.iterdir()) == ["honest", "partial"]
    nb = nbformat.read(autograded / "honest" / LESSON / NAME, as_version=4)
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code")


# ----------------------------------------------------------------------------- unfit workers


def _unfit_environments(tmp: Path) -> list[dict[str, str]]:
    """A worker that cannot import transformer_lab, and one whose copy of it was edited."""
    blocked = tmp / "blocked"
    blocked.mkdir()
    (blocked / "sitecustomize.py").write_text(
        "import sys\nsys.modules['transformer_lab'] = None  # not installed here\n"
    )
    stale = tmp / "stale"
    shutil.copytree(REPO / "shared" / "transformer_lab", stale / "transformer_lab")
    with open(stale / "transformer_lab" / "check" / "__init__.py", "a") as f:
        f.write("\n# an edit the instructor does not have\n")
    grader = str(REPO / "autograder")  # this checkout's grader, whatever transformer_lab they have
    return [{"PYTHONPATH": os.pathsep.join([str(path), grader])} for path in (blocked, stale)]


@pytest.fixture(scope="module")
def unfit_cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("unfit")
    running = Cluster(tmp, _unfit_environments(tmp))
    yield running
    running.close()


def test_workers_without_the_course_stop_the_run_with_a_clear_message(
    unfit_cluster, course, submissions, tmp_path
):
    here = _fresh(course, tmp_path)
    with pytest.raises(SystemExit) as stopped:
        grade.grade(here, LESSON, submissions, scheduler=unfit_cluster.address, quiet=True)
    message = str(stopped.value)
    addresses = sorted(unfit_cluster.worker_pids())
    assert "2 of 2 Dask workers cannot grade" in message, message
    assert "cannot import transformer_lab" in message, message
    assert "transformer_lab code differs from the instructor's" in message, message
    assert all(address in message for address in addresses), message
    assert "pip install" in message
    assert rec.load_records(here, LESSON) == []


def test_a_task_on_an_unfit_worker_stops_the_run_too(unfit_cluster, course, submissions, tmp_path):
    """Without the check at the start (a worker that joins later): the task itself says so."""
    here = _fresh(course, tmp_path)
    grader = cluster.ClusterGrader(
        here, LESSON, submissions, scheduler=unfit_cluster.address, quiet=True
    )
    grader.check_workers = False
    with pytest.raises(cluster.WorkerUnfit) as stopped:
        grader.run()
    message = str(stopped.value)
    assert "cannot import transformer_lab" in message or "code differs" in message, message
    assert "Dask worker tcp://127.0.0.1:" in message, message
    # no student was charged for it (a folder without the lesson needs no worker)
    assert {r["student"] for r in rec.load_records(here, LESSON)} <= {"nofolder"}


def test_a_task_pickled_by_reference_could_not_say_why(unfit_cluster):
    """The mutant of the task's entry point: a function of transformer_lab, pickled by reference
    as Dask does by default, fails on the worker without the package before it can explain (the
    worker cannot even read the message: the task hangs). Last of the tests on this cluster."""
    client = unfit_cluster.client
    blocked = next(
        address
        for address, info in client.scheduler_info()["workers"].items()
        if info["name"] == "w0"
    )
    expected = {"identity": cluster_worker.identity()}
    by_value = client.submit(cluster_worker.entry(), expected, None, workers=[blocked], pure=False)
    reply = by_value.result(timeout=120)
    assert "cannot import transformer_lab" in reply["unfit"], reply
    assert blocked in reply["unfit"], reply
    by_reference = client.submit(
        cluster_worker.unfit_reason, expected, workers=[blocked], pure=False
    )
    with pytest.raises(Exception) as failed:
        by_reference.result(timeout=30)
    assert "cannot import transformer_lab" not in str(failed.value)
    client.cancel([by_reference])


def test_an_unreachable_scheduler_is_a_clear_error(course, submissions, tmp_path):
    address = f"tcp://127.0.0.1:{_free_port()}"
    with pytest.raises(SystemExit, match=f"cannot reach the Dask scheduler at {address}"):
        cluster.connect(address, timeout=2)
    with pytest.raises(SystemExit, match="expected an address like tcp://HOST:8786"):
        cluster.connect("127.0.0.1:8786")


# ----------------------------------------------------------------------------- what travels


def test_the_shadow_of_a_folder_repairs_exactly_like_the_folder(submissions, tmp_path):
    """A worker gets the bytes of the top-level notebooks only, and the names of the rest: the
    repair (which notebook, its notes, its flags) must come out the same."""
    released = notebook_format.released_notebooks(REPO, LESSON)
    folder = tmp_path / "in" / "partial" / LESSON
    shutil.copytree(submissions / "partial" / LESSON, folder, symlinks=True)
    (folder / ".ipynb_checkpoints").mkdir(exist_ok=True)
    (folder / ".ipynb_checkpoints" / "x.ipynb").write_text("{}")
    here = submission.prepare_submission(folder, released, tmp_path / "here")
    entries = cluster.shadow_folder(folder)
    shipped = {name: kind for name, kind, _ in entries}
    assert shipped == {
        "my_attempt.ipynb": "bytes",
        "data/notes.txt": "empty",
        "link.txt": "link",
    }
    rebuilt = tmp_path / "worker" / "subs" / "partial" / LESSON
    cluster_worker._rebuild_folder(rebuilt, entries)
    there = submission.prepare_submission(rebuilt, released, tmp_path / "there")
    assert there == here
    assert (tmp_path / "there" / NAME).read_bytes() == (tmp_path / "here" / NAME).read_bytes()
    assert submission.submission_sha256(folder) != submission.submission_sha256(
        rebuilt
    )  # sha: from here
    # the mutant: a worker sent the notebooks alone would not list the extra files
    alone = tmp_path / "alone" / "subs" / "partial" / LESSON
    cluster_worker._rebuild_folder(alone, [e for e in entries if e[1] == "bytes"])
    assert submission.prepare_submission(alone, released, tmp_path / "alone-out") != here
    with pytest.raises(ValueError, match="bad path"):
        cluster_worker._rebuild_folder(tmp_path / "evil" / "s" / LESSON, [("../x", "empty", None)])
