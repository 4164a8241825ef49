"""The pre-imported grading worker (`transformer_lab_grader/worker.py`), which forks every grading job: a job
forked from it pays no imports and never reaches the worker; it is never boxed (the job is trusted
code; the student's process that its judge starts is boxed, `judge`).

One real worker (`python -m transformer_lab_grader.worker_process`) serves most tests; the mutants
(a child that skips the namespaces, keeps the control socket, keeps the worker's environment)
run in a worker forked from this test process with the mutation patched in, and must fail the
same checks. The whole pipeline (a tiny course, nbgrader, records) runs with the worker, with it
switched off, and with a worker that cannot serve (the fallback and its flag).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from test_instructor_grade import NAME, TINY, _student_nb, tiny_course  # noqa: F401

from transformer_lab_grader import grade, job, run_setup, sandbox, worker, worker_process
from transformer_lab_grader.course import PACKAGE_REPO

needs_namespaces = pytest.mark.skipif(
    sandbox.box_unavailable() is not None,
    reason=f"no bubblewrap box here: {sandbox.box_unavailable()}",
)


def _worker_env(home: Path) -> dict[str, str]:
    env = run_setup.job_env(PACKAGE_REPO, home)
    env["ONLY_IN_THE_WORKER"] = "1"
    return env


@pytest.fixture(scope="module")
def real_worker(tmp_path_factory):
    folder = tmp_path_factory.mktemp("worker")
    started = worker.Worker.start(_worker_env(folder / "home"), folder / "run")
    assert started.available() is None, (folder / "run" / "worker.log").read_text()
    yield started
    started.stop()


@contextlib.contextmanager
def forked_worker():
    """A worker forked from this process: what the test patched into `worker` applies there."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            ours.close()
            os.chdir(tempfile.mkdtemp())  # as the real one: not in the repository (its .venv)
            worker_process.main(theirs.detach())
        finally:
            os._exit(0)
    theirs.close()
    handle = worker.Worker(ours, pid)
    try:
        assert handle.available(300) is None
        yield handle
    finally:
        handle.stop()


# What a job sees, printed as JSON by a `python -c` job (run in the forked child, in-process).
PROBE = r"""
import json, os, socket, sys, tempfile
from pathlib import Path
seen = {"pids": sum(p.isdigit() for p in os.listdir("/proc")),
        "torch imported before": "torch" in sys.modules}
links = {}  # first: the probe's own sockets below are not the job's
for fd in os.listdir("/proc/self/fd"):
    try:
        links[int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # the listing's own descriptor, closed by now
        pass
seen["sockets"] = sorted(fd for fd, link in links.items() if link.startswith("socket:"))
result_fd = int(os.environ["TRANSFORMER_LAB_RESULT_FD"])
seen["extra fds"] = sorted(set(links) - {0, 1, 2, result_fd})
seen["hidden"] = sorted(os.listdir(os.environ["SECRET"]))
try:
    open(os.path.join(os.environ["COURSE"], "new.txt"), "w")
    seen["course"] = "writable"
except OSError as error:
    seen["course"] = error.errno
try:  # a listener on the machine's loopback, outside the job
    socket.create_connection(("127.0.0.1", int(os.environ["HOST_PORT"])), timeout=2)
    seen["loopback"] = "up"
except OSError:
    seen["loopback"] = "down"
seen["worker env"] = "ONLY_IN_THE_WORKER" in os.environ
Path("mine.txt").write_text("ok")
os.write(int(os.environ["TRANSFORMER_LAB_RESULT_FD"]), b"done")
print(json.dumps(seen))
"""


_LISTENERS: list[socket.socket] = []


def _box(tmp_path: Path) -> dict:
    secret, course, job_dir = tmp_path / "secret", tmp_path / "course", tmp_path / "job"
    for folder in (secret, course, job_dir):
        folder.mkdir(parents=True)
    (secret / "answer.txt").write_text("42")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    _LISTENERS.append(listener)  # open until the tests end
    env = {"PATH": os.environ["PATH"], "SECRET": str(secret), "COURSE": str(course)}
    env["HOST_PORT"] = str(listener.getsockname()[1])
    return dict(
        cwd=job_dir,
        env=env,
        limits=sandbox.Limits(wall_seconds=120),
        hide=[secret],
        readonly=[course],
        keep=job_dir,
    )


def isolation_problems(result: sandbox.Result, box: dict, boxed: bool = True) -> list[str]:
    """What is wrong with a probed job (empty: as good as `sandbox.run`'s; `boxed`: its box too)."""
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    problems = []
    if boxed and (not result.isolated or seen["pids"] > 3):
        problems.append(f"not in a PID namespace of its own ({seen['pids']} processes seen)")
    if boxed and seen["hidden"]:
        problems.append(f"a hidden folder shows {seen['hidden']}")
    if boxed and seen["course"] != 30:  # EROFS
        problems.append(f"the course is {seen['course']}")
    if boxed and seen["loopback"] != "down":
        problems.append("the network is reachable")
    if seen["sockets"]:
        problems.append(f"socket descriptors open in the job: {seen['sockets']}")
    if seen["extra fds"]:
        problems.append(f"descriptors other than stdio and the result pipe: {seen['extra fds']}")
    if seen["worker env"]:
        problems.append("the worker's environment reached the job")
    if result.record != b"done" or (box["keep"] / "mine.txt").read_text() != "ok":
        problems.append("the job's folder or result pipe did not work")
    return problems


def test_a_forked_job_imported_nothing_and_holds_nothing_of_the_worker(real_worker, tmp_path):
    box = _box(tmp_path / "w")
    forked = real_worker.run([sys.executable, "-c", PROBE], **box)
    assert isolation_problems(forked, box, boxed=False) == []
    assert json.loads(forked.stdout)["torch imported before"] is True  # the worker's imports
    assert forked.warning.startswith("graded without a sandbox (--no-sandbox)")
    assert isolation_problems(forked, box) != []  # and it is not boxed
    with pytest.raises(ValueError, match="never boxed"):
        real_worker.run([sys.executable, "-c", PROBE], **box, isolate=True)


@needs_namespaces
def test_a_sandboxed_job_passes_every_isolation_check(tmp_path):
    box = _box(tmp_path / "s")
    fresh = sandbox.run([sys.executable, "-c", PROBE], **box)
    assert isolation_problems(fresh, box) == []
    assert json.loads(fresh.stdout)["torch imported before"] is False
    assert (tmp_path / "s" / "secret" / "answer.txt").exists()
    assert not (tmp_path / "s" / "course" / "new.txt").exists()


def test_a_mutant_child_keeping_the_control_socket_fails_the_check(tmp_path, monkeypatch):
    monkeypatch.setattr(worker_process, "close_inherited", lambda *args, **kwargs: None)
    box = _box(tmp_path)
    with forked_worker() as broken:
        result = broken.run([sys.executable, "-c", PROBE], **box)
    problems = isolation_problems(result, box, boxed=False)
    assert any("socket descriptors" in problem for problem in problems), problems


def test_the_unmutated_forked_worker_passes_the_check(tmp_path):
    box = _box(tmp_path)
    with forked_worker() as fine:
        result = fine.run([sys.executable, "-c", PROBE], **box)
    assert isolation_problems(result, box, boxed=False) == []


def test_the_worker_is_single_threaded(real_worker):
    """fork() is only safe in a single-threaded process."""
    assert os.listdir(f"/proc/{real_worker.pid}/task") == [str(real_worker.pid)]


ENVIRONMENT_PROBE = r"""
import json, os, sys, tempfile
import jupyter_core.paths as jp
from transformer_lab import registry, student, train
def mpl_folders():  # after the check above: this imports matplotlib where the worker did not
    import matplotlib, matplotlib.style, matplotlib.texmanager
    return {"mpl config": matplotlib.get_configdir(), "mpl cache": matplotlib.get_cachedir(),
            "mpl styles": matplotlib.style.USER_LIBRARY_PATHS,
            "mpl tex": str(matplotlib.texmanager.TexManager._cache_dir)}
print(json.dumps({
    "home": os.path.expanduser("~"),
    "tmp": tempfile.gettempdir(),
    "runtime": jp.jupyter_runtime_dir(),
    "config": jp.jupyter_config_dir(),
    "data": jp.jupyter_data_dir(),
    "student": str(student.student_dir()),
    "quick": train.quick_mode(),
    "grading": registry.grading_mode(),
    "cwd": os.getcwd(),
    "path": sys.path,
    "matplotlib": "matplotlib.pyplot" in sys.modules,
    **mpl_folders(),
}))
"""


def _environment_seen(handle, tmp_path: Path) -> tuple[dict, Path]:
    job_dir = tmp_path / "job"
    (job_dir / "tmp").mkdir(parents=True)
    env = run_setup.job_env(PACKAGE_REPO, job_dir / "home")
    env.update(TMPDIR=str(job_dir / "tmp"), TRANSFORMER_LAB_QUICK="0")
    env[sandbox.GRADING_FLAG] = "1"
    result = handle.run(
        [sys.executable, "-c", ENVIRONMENT_PROBE],
        cwd=job_dir,
        env=env,
        limits=sandbox.Limits(wall_seconds=120),
        keep=job_dir,
        isolate=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1]), job_dir


def _environment_problems(seen: dict, job_dir: Path) -> list[str]:
    home = job_dir / "home"
    wanted = {
        "home": str(home),
        "tmp": str(job_dir / "tmp"),
        "runtime": str(home / "runtime"),
        "config": str(home / "jupyter"),
        "student": str(home / "student_package"),
        "quick": False,
        "grading": True,
        "cwd": str(job_dir),
        # the worker does not import pyplot (no student code runs in a job)
        "matplotlib": False,
        "mpl config": str(home / "mpl"),
        "mpl cache": str(home / "mpl"),
        "mpl styles": [str(home / "mpl" / "stylelib")],
        "mpl tex": str(home / "mpl" / "tex.cache"),
    }
    problems = [f"{k}: {seen[k]!r} != {v!r}" for k, v in wanted.items() if seen[k] != v]
    if not seen["data"].startswith(str(home)):
        problems.append(f"data dir {seen['data']}")
    stale = [p for p in seen["path"] if p in ("", ".") or "worker" in Path(p).parts[-2:]]
    if stale:
        problems.append(f"the worker's folder on sys.path: {stale}")
    return problems


def test_import_time_state_follows_the_job(tmp_path_factory, tmp_path):
    """What the job reads from its environment (HOME, TMPDIR, JUPYTER_*, the student folder,
    quick and grading mode) is the job's, not the worker's, although the worker imported
    nbgrader, jupyter_core, torch and the checks under its own environment."""
    folder = tmp_path_factory.mktemp("worker-env")
    env = _worker_env(folder / "home")
    env.update(TMPDIR=str(folder), TRANSFORMER_LAB_QUICK="1")
    started = worker.Worker.start(env, folder / "worker")
    try:
        assert started.available() is None
        seen, job_dir = _environment_seen(started, tmp_path)
    finally:
        started.stop()
    assert _environment_problems(seen, job_dir) == []


def test_a_child_keeping_the_workers_environment_fails_the_environment_check(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", "/var/tmp")
    monkeypatch.setattr(worker_process, "_as_job_environment", lambda env: None)
    with forked_worker() as broken:
        seen, job_dir = _environment_seen(broken, tmp_path)
    assert _environment_problems(seen, job_dir) != []


def test_the_wall_clock_cap_kills_the_job(real_worker, tmp_path):
    (tmp_path / "job").mkdir()
    started = time.monotonic()
    result = real_worker.run(
        [sys.executable, "-c", "import time\ntime.sleep(100)\n"],
        cwd=tmp_path / "job",
        env={"PATH": os.environ["PATH"]},
        limits=sandbox.Limits(wall_seconds=2),
        keep=tmp_path / "job",
    )
    assert result.timed_out and result.returncode is None
    assert time.monotonic() - started < 30


def test_exit_codes_signals_and_the_memory_cap_come_back_as_from_sandbox_run(real_worker, tmp_path):
    def run(how, code, **limits):
        return how(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env={"PATH": os.environ["PATH"]},
            limits=sandbox.Limits(wall_seconds=60, **limits),
            keep=tmp_path,
            isolate=False,
        )

    for code in (
        "import sys; sys.exit(3)",
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
        "raise ValueError('boom')",
    ):
        forked, fresh = run(real_worker.run, code), run(sandbox.run, code)
        assert (forked.returncode, forked.isolated) == (fresh.returncode, fresh.isolated), code
        assert forked.stderr.splitlines()[-1:] == fresh.stderr.splitlines()[-1:]
    assert run(real_worker.run, "import os; os.kill(os.getpid(), 9)").returncode == -9
    capped = run(
        real_worker.run,
        "try:\n    b = bytearray(3 * 2**30)\n    print('big')\nexcept MemoryError:\n"
        "    print('capped')\n",
        memory_bytes=real_worker_vsize(real_worker) + (1 << 30),
    )
    assert capped.stdout.strip() == "capped"


def real_worker_vsize(handle) -> int:
    """The worker's address space (a forked job starts with it; the cap must exceed it)."""
    for line in Path(f"/proc/{handle.pid}/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize")


# ----------------------------------------------------------------------------- whole runs


def _one_student(tmp_path: Path, tiny_course) -> Path:  # noqa: F811
    folder = tmp_path / "subs" / "amy" / TINY
    folder.mkdir(parents=True)
    nbformat.write(_student_nb(tiny_course), folder / NAME)
    return tmp_path / "subs"


@pytest.mark.slow
def test_an_unboxed_run_forks_its_jobs_from_the_worker_or_not_when_switched_off(
    tiny_course,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    subs = _one_student(tmp_path, tiny_course)
    common = dict(quiet=True, force=True, isolate=False)
    [forked] = grade.grade(tiny_course, TINY, subs, **common)
    assert forked["score"] == 3.0
    assert not any("grading worker" in flag for flag in forked["flags"])
    monkeypatch.setenv(worker.SWITCH, "0")
    [fresh] = grade.grade(tiny_course, TINY, subs, **common)
    assert fresh["score"] == 3.0
    assert fresh["cpu_timings"]["imports"] > 0.5  # its own interpreter imported them
    assert not any("grading worker" in flag for flag in fresh["flags"])
    # torch, nbgrader, the checks, ipykernel: imported by the worker; only matplotlib (whose
    # folders come from the job's environment at import) is left to the forked job
    assert forked["cpu_timings"]["imports"] < fresh["cpu_timings"]["imports"] / 2


@pytest.mark.slow
def test_a_worker_that_cannot_serve_falls_back_and_says_why(
    tiny_course,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    def broken_imports(**_):
        raise ImportError("no torch here")

    def start(env, cwd):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - a worker whose imports fail
            ours.close()
            os.chdir(tempfile.mkdtemp())
            job.trusted_imports = broken_imports
            worker_process.main(theirs.detach())
            os._exit(0)
        theirs.close()
        return worker.Worker(ours, pid)

    monkeypatch.setattr(worker.Worker, "start", staticmethod(start))
    subs = _one_student(tmp_path, tiny_course)
    [record] = grade.grade(tiny_course, TINY, subs, quiet=True, force=True, isolate=False)
    assert record["score"] == 3.0
    flag = next(f for f in record["flags"] if "grading worker unavailable" in f)
    assert "no torch here" in flag and "started its own interpreter" in flag


# What the worker builds once for every job it forks (`job._warm_caches`): nbformat's strict and
# relaxed notebook schemas, nbgrader's configured SQLAlchemy mappers, and what torch imports on a
# judge's first gradient (`verify_child.warm_torch`). The probe runs in a fresh interpreter
# (trusted_imports rewrites sys.path) with the worker's imports, optionally with the warming
# switched off (the mutant), and reports what a forked job would inherit, then how many modules
# a gradient with `grad_outputs` (what `check.compare.backward` asks) still imports.
WARM_PROBE = """
import json, sys
from transformer_lab_grader import job
if sys.argv[1] == "mutant":
    job._warm_caches = lambda: None
job.trusted_imports()
import nbformat.validator
import torch
from nbgrader.api import Assignment
found = {
    "relaxed": sorted(key[3] for key in nbformat.validator.validators),
    "mappers": bool(Assignment.__mapper__.configured),
}
before = set(sys.modules)
x = torch.randn(3, requires_grad=True)
torch.autograd.grad(x * 3, x, torch.randn(3))
found["imported by a gradient"] = len(set(sys.modules) - before)
print(json.dumps(found))
"""
WARMED = {"relaxed": [False, True], "mappers": True, "imported by a gradient": 0}


def _probe(source: str, argv: list[str], cwd: Path, timeout: float) -> dict:
    """The JSON that `source`, run with `argv` in a fresh interpreter on this sys.path, prints
    last."""
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", source, *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _warm_probe(tmp_path: Path, variant: str) -> dict:
    return _probe(WARM_PROBE, [variant], tmp_path, 300)


def test_the_worker_builds_the_schemas_and_mappers_every_job_inherits(tmp_path):
    assert _warm_probe(tmp_path, "as-is") == WARMED


def test_a_worker_without_the_warming_leaves_them_to_every_job(tmp_path):
    found = _warm_probe(tmp_path, "mutant")
    assert found["relaxed"] != [False, True] and not found["mappers"]
    if found["imported by a gradient"] == 0:
        pytest.skip("this torch imports nothing on a first gradient: nothing to warm")
    assert found != WARMED


# The merge into nbgrader's gradebook is the run's last job, forked from the worker
# (`run_setup.RunSetup.merge`): the grader's own process never imports nbgrader (about 3.7 CPU s
# in a fresh interpreter, 1.25 after the grader's own imports; journal §38). The probe grades in a
# fresh interpreter and reports whether nbgrader was imported there; the mutant merges in the
# grader's process, as before.
GRADER_PROBE = """
import json, sys
from pathlib import Path
from transformer_lab_grader import gradebook_merge, grade, run_setup
if sys.argv[4] == "mutant":
    run_setup.RunSetup.merge = lambda self, records: gradebook_merge.merge_into_gradebook(
        self.course, records
    )
[record] = grade.grade(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), quiet=True,
                       force=True, isolate=False)
print(json.dumps({"score": record["score"], "nbgrader imported": "nbgrader" in sys.modules}))
"""


def _graded_in_a_fresh_grader(tiny_course, tmp_path: Path, variant: str) -> tuple[dict, dict]:  # noqa: F811
    from test_instructor_grade import copy_of

    from transformer_lab_grader import gradebook

    course = copy_of(tiny_course, tmp_path)
    subs = _one_student(tmp_path, course)
    found = _probe(GRADER_PROBE, [str(course), TINY, str(subs), variant], tmp_path, 600)
    return found, gradebook.all_scores(course)


@pytest.mark.slow
def test_the_gradebook_merge_runs_in_the_worker_not_in_the_grader(tiny_course, tmp_path):  # noqa: F811
    found, scores = _graded_in_a_fresh_grader(tiny_course, tmp_path, "as-is")
    assert found == {"score": 3.0, "nbgrader imported": False}
    assert scores == {("amy", TINY, TINY): (3.0, 3.0)}


@pytest.mark.slow
def test_a_grader_that_merges_itself_imports_nbgrader(tiny_course, tmp_path):  # noqa: F811
    found, scores = _graded_in_a_fresh_grader(tiny_course, tmp_path, "mutant")
    assert found == {"score": 3.0, "nbgrader imported": True}
    assert scores == {("amy", TINY, TINY): (3.0, 3.0)}


@pytest.mark.slow
def test_a_merge_job_that_fails_is_a_warning_and_loses_no_record(tiny_course, tmp_path, capsys):  # noqa: F811
    from test_instructor_grade import copy_of

    from transformer_lab_grader.gradebook import gradebook_path

    course = copy_of(tiny_course, tmp_path)
    subs = _one_student(tmp_path, course)
    db = gradebook_path(course)
    db.parent.mkdir(parents=True, exist_ok=True)
    db.write_bytes(b"this is not a database")
    csv = tmp_path / "grades.csv"
    [record] = grade.grade(course, TINY, subs, force=True, isolate=False, out=csv)
    said = capsys.readouterr().out
    assert record["score"] == 3.0
    assert "warning: could not merge into the course gradebook: the merge exited 1" in said
    assert "not a database" in said  # the job's own error, in its output's tail
    assert "amy" in csv.read_text()
    assert db.read_bytes() == b"this is not a database"
