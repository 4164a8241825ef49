"""The grading worker's process (`worker.Worker.start` runs ``python -m
transformer_lab_grader.worker_process FD``): it imports what every job imports, then forks a
child per request that becomes the job (see `worker` for why, and for the protocol).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import tempfile
import traceback

from . import sandbox
from .worker import JOB_MODULE

RESULT_FD = 3  # the job's result pipe, as $TRANSFORMER_LAB_RESULT_FD


def main(control_fd: int) -> None:
    """Import what every job imports, then serve."""
    sock = socket.socket(fileno=control_fd)
    problem = None
    try:
        from . import job

        job.trusted_imports()
    except Exception as error:  # noqa: BLE001 - the grader falls back and says why
        problem = f"the grading worker could not import what a job needs: {error!r}"[:300]
    _reply(sock, {"ready": True, "problem": problem})
    if problem is None:
        serve(sock)


def _reply(sock: socket.socket, message: dict) -> bool:
    try:
        sock.send(json.dumps(message).encode())
        return True
    except OSError:
        return False


def serve(sock: socket.socket) -> None:
    """Fork a job per request, report each job's end; on end of file kill the rest and return."""
    running: dict[int, int] = {}  # job id -> pid (the leader of the job's session)
    while True:
        readable, _, _ = select.select([sock], [], [], 0.1)
        if not _report_ended(sock, running):
            break
        if not readable:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 22, 3)
        except OSError:
            data, fds = b"", []
        if not data:
            break
        request = json.loads(data)
        if request["op"] == "run":
            try:
                running[request["id"]] = _fork_job(request, fds, sock)
            except OSError as error:
                _reply(sock, {"id": request["id"], "error": f"could not fork the job: {error}"})
            finally:
                for fd in fds:
                    os.close(fd)
        elif request["op"] == "kill" and request["id"] in running:  # not reaped: no pid reuse
            with contextlib.suppress(ProcessLookupError):
                os.killpg(running[request["id"]], signal.SIGKILL)
    for pid in running.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    for pid in running.values():
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def _report_ended(sock: socket.socket, running: dict[int, int]) -> bool:
    """Reap the jobs that ended and tell the grader; False when the grader is gone."""
    for job_id, pid in list(running.items()):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            del running[job_id]
            if not _reply(sock, {"id": job_id, "status": os.waitstatus_to_exitcode(status)}):
                return False
    return True


def _fork_job(request: dict, fds: list[int], sock: socket.socket) -> int:
    """Fork; the child becomes the job and never comes back. Returns the child's pid."""
    if len(fds) != 3:
        raise OSError(f"expected 3 descriptors with the request, got {len(fds)}")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = _become_job(request, fds, sock)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except BaseException:  # noqa: BLE001 - into the job's stderr (or the worker's log)
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    return pid


def _become_job(request: dict, fds: list[int], sock: socket.socket) -> int:
    """In the forked child: become the job (see the module docstring), then run its command."""
    os.setsid()
    out, err, result = fds
    sock.detach()  # its descriptor is closed below with the rest; the object must not close it
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.dup2(result, RESULT_FD)
    close_inherited(keep=(0, 1, 2, RESULT_FD))
    _fresh_stdio()
    sandbox._set_limits(sandbox.Limits(**request["limits"]))
    os.chdir(request["cwd"])
    _as_job_environment(dict(request["env"], TRANSFORMER_LAB_RESULT_FD=str(RESULT_FD)))
    return _run_command(request["command"])


def close_inherited(keep: tuple[int, ...]) -> None:
    """Close every descriptor not in `keep` (the worker's control socket above all)."""
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else []:
        if int(name) not in keep:
            with contextlib.suppress(OSError):
                os.close(int(name))
    top = max(keep) + 1
    os.closerange(top, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1 << 16)


def _fresh_stdio() -> None:
    """sys.stdin/stdout/stderr on descriptors 0-2, as a new interpreter has them (whatever the
    worker's were: a test's capture, a log), so the job's prints land in its own files."""
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def _as_job_environment(env: dict[str, str]) -> None:
    """The job's environment instead of the worker's (putenv too: exec'd programs see it)."""
    os.environ.clear()
    os.environ.update(env)
    _reset_import_time_state()


def _reset_import_time_state() -> None:
    """Forget what the worker derived from its own environment and folder before the job's.

    Checked for everything the worker imports (nbgrader, nbconvert, jupyter_core/_client,
    traitlets, torch, transformer_lab and its checks; not matplotlib): HOME, JUPYTER_*,
    IPYTHONDIR, TRANSFORMER_LAB_* (course root, student folder, quick and grading mode) are read
    when called, not at import (IPython's folder too). Read at import, and the same in the
    worker's environment as in every job's (both from `run_setup.job_env`, i.e.
    `sandbox.GRADING_ENV`): tqdm's TQDM_* defaults, the thread counts (OMP_NUM_THREADS;
    torch.set_num_threads(1) in `trusted_imports`) and MPLBACKEND. What remains is reset here;
    tests/grading/test_worker.py::test_import_time_state_follows_the_job checks the lot."""
    tempfile.tempdir = None  # gettempdir() caches $TMPDIR
    sys.path_importer_cache.clear()  # finders of the worker's own folders


def _run_command(command: list[str]) -> int:
    """The job's command, in this process where it is one of ours (the grading job; a `python
    -c` snippet, which the tests use), else exec'd (all descriptors but stdio and fd 3 closed)."""
    python = command[:1] == [sys.executable]
    if python and command[1:3] == ["-m", JOB_MODULE] and command[3:4] == ["--job"]:
        from .job import run_job

        sys.argv = [JOB_MODULE, *command[3:]]
        run_job(command[4])
        return 0
    if python and command[1:2] == ["-c"] and len(command) >= 3:
        sys.argv = ["-c", *command[3:]]
        exec(compile(command[2], "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102
        return 0
    os.execvp(command[0], command)
    return 127  # not reached


if __name__ == "__main__":
    main(int(sys.argv[1]))
