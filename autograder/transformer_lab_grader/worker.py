"""One pre-imported grading worker per run: it forks the grading jobs.

Why: a job started as `python -m transformer_lab_grader.job` pays the interpreter's start and
`job.trusted_imports` (torch, nbgrader, the checks: about 2.5-2.8 CPU s) for every notebook
(benchmarks/history/journal.md §11). The worker pays them once per run (`Grader.run`) or once per Dask
worker process (`process_worker`), then for each job forks a child that becomes the job:

- a new session, killed with its parent (PR_SET_PDEATHSIG), the job's rlimits (`_set_limits`);
- the job's working folder and environment (`os.environ` replaced: nothing of the worker's), and
  import-time state that depends on the environment reset (`_reset_import_time_state`);
- every inherited descriptor closed except stdin (/dev/null), the job's stdout/stderr files and
  its result pipe (fd 3, as $TRANSFORMER_LAB_RESULT_FD): the worker's control socket never reaches
  a job. The child never returns into the worker's loop (it ends with os._exit).

A job is trusted code and is never boxed: it never runs a line of the student's code, which runs
in a boxed interpreter of its own that the job's judge starts (`judge`, `sandbox`).

The worker itself never runs student code: it only imports what `job.trusted_imports` imports (a
job imports all of it before any student code runs anyway) and forks. It is single-threaded
(fork needs that). The grader keeps everything else as `sandbox.run` does: the wall-clock cap (it
asks the worker to SIGKILL the job's session), stdout/stderr, the `sandbox.Result`. Where the
worker cannot start, `Grader` falls back to one interpreter per job and says so in the flags;
TRANSFORMER_LAB_GRADING_WORKER=0 (or `Grader(worker=False)`) switches it off.

Protocol on a SOCK_SEQPACKET socket pair (one message per datagram, JSON):
grader -> worker: {"op": "run", "id", "command", "cwd", "env", "limits"} with three descriptors (stdout, stderr, the result pipe's write end);
{"op": "kill", "id"}; end of file: stop (the worker kills what still runs, then exits).
worker -> grader: {"ready": true, "problem": null or why it cannot serve}, then
{"id", "status"} when a job ended (status as `subprocess.Popen.returncode`), or {"id", "error"}.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import sandbox

SWITCH = "TRANSFORMER_LAB_GRADING_WORKER"  # "0": one interpreter per job, as before
READY_SECONDS = 600.0  # the worker's imports, on a heavily loaded machine
JOB_MODULE = "transformer_lab_grader.job"
WORKER_MODULE = "transformer_lab_grader.worker_process"  # the worker's side


def switched_on(choice: bool | None = None) -> bool:
    """`choice` if given, else the environment's TRANSFORMER_LAB_GRADING_WORKER (default on)."""
    if choice is not None:
        return bool(choice)
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


class Worker:
    """The grader's handle on one worker process; `run` has `sandbox.run`'s interface."""

    def __init__(self, sock: socket.socket, pid: int, reap=None):
        self.sock = sock
        self.pid = pid
        self._reap = reap or (lambda timeout: _wait_pid(pid, timeout))
        self._send_lock = threading.Lock()
        self._waiting: dict[int, queue.Queue] = {}
        self._ids = itertools.count(1)
        self._ready = threading.Event()
        self.problem: str | None = None
        self._reader = threading.Thread(target=self._read, name="grading-worker", daemon=True)
        self._reader.start()

    @classmethod
    def start(cls, env: dict[str, str], cwd: Path) -> Worker:
        """Start `python -m transformer_lab_grader.worker_process` (returns at once; the imports go
        on in the background, `available` waits for them). Its output goes to cwd/worker.log."""
        cwd.mkdir(parents=True, exist_ok=True)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [sys.executable, "-m", WORKER_MODULE, str(theirs.fileno())]
        with open(cwd / "worker.log", "ab") as log:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=(theirs.fileno(),),
            )
        theirs.close()

        def reap(timeout):
            try:
                return proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return None

        return cls(ours, proc.pid, reap)

    def available(self, timeout: float = READY_SECONDS) -> str | None:
        """None once the worker has imported everything and can fork jobs; else why not."""
        if not self._ready.wait(timeout):
            return f"the grading worker was not ready within {timeout:g} s"
        return self.problem

    def stop(self) -> None:
        """End of file on the control socket: the worker kills what still runs and exits."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        if self._reap(60) is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self._reap(None)
        self.sock.close()

    def _read(self) -> None:
        """Hand every message to the job waiting for it; when the worker is gone, tell them all."""
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                if not self._ready.is_set():
                    self.problem = "the grading worker exited while starting (see its worker.log)"
                    self._ready.set()
                self.problem = self.problem or "the grading worker exited"
                for waiting in list(self._waiting.values()):
                    waiting.put({"error": "the grading worker died"})
                return
            message = json.loads(data)
            if "ready" in message:
                self.problem = message.get("problem")
                self._ready.set()
            elif message.get("id") in self._waiting:
                self._waiting[message["id"]].put(message)

    def _send(self, message: dict, fds: list[int] = ()) -> None:
        with self._send_lock:
            socket.send_fds(self.sock, [json.dumps(message).encode()], list(fds))

    def run(
        self,
        command: list[str],
        *,
        cwd: Path,
        env: dict[str, str],
        limits: sandbox.Limits,
        hide: list[Path] = (),
        readonly: list[Path] = (),
        keep: Path,
        isolate: bool = False,
    ) -> sandbox.Result:
        """`sandbox.run` without the box, with the job forked from this worker instead of a new
        interpreter (a job is never boxed: its student's process is)."""
        if isolate:
            raise ValueError(
                "a job forked from the worker is never boxed (its student's process is)"
            )
        isolated, warning = sandbox.isolation(False)
        job_id = next(self._ids)
        replies: queue.Queue = queue.Queue()
        self._waiting[job_id] = replies
        read_fd, write_fd = os.pipe()
        request = {
            "op": "run",
            "id": job_id,
            "command": list(command),
            "cwd": str(cwd),
            "env": dict(env),
            "limits": dataclasses.asdict(limits),
        }
        start = time.monotonic()
        try:
            with open(keep / ".stdout", "w+b") as out, open(keep / ".stderr", "w+b") as err:
                try:
                    self._send(request, [out.fileno(), err.fileno(), write_fd])
                except OSError:
                    replies.put({"error": "the grading worker died"})
                finally:
                    os.close(write_fd)
                status, timed_out, chunks = self._wait(job_id, replies, read_fd, limits)
                stdout, stderr = sandbox.tails(out, err)
        finally:
            os.close(read_fd)
            self._waiting.pop(job_id, None)
        if isinstance(status, str):  # the worker could not fork it, or died
            stderr += f"\n{status}"
            status = -signal.SIGKILL
        return sandbox.Result(
            returncode=None if timed_out else status,
            timed_out=timed_out,
            seconds=time.monotonic() - start,
            stdout=stdout,
            stderr=stderr,
            record=b"".join(chunks),
            isolated=isolated,
            warning=warning,
        )

    def _wait(self, job_id: int, replies: queue.Queue, read_fd: int, limits: sandbox.Limits):
        """Read the job's result until it ends; SIGKILL it at the wall-clock cap.
        Returns (exit status or why it failed, timed out, the result's chunks)."""
        os.set_blocking(read_fd, False)
        chunks: list[bytes] = []
        deadline = time.monotonic() + limits.wall_seconds
        timed_out, reply = False, None
        while reply is None:
            sandbox._drain(read_fd, chunks)
            try:
                reply = replies.get(timeout=0.2)
            except queue.Empty:
                if not timed_out and time.monotonic() > deadline:
                    timed_out = True
                    with contextlib.suppress(OSError):
                        self._send({"op": "kill", "id": job_id})
        sandbox._drain(read_fd, chunks)
        status = reply.get("status") if "error" not in reply else reply["error"]
        return status, timed_out, chunks


def _wait_pid(pid: int, timeout: float | None) -> int | None:
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, 0 if end is None else os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > end:
            return None
        time.sleep(0.05)


_PROCESS_WORKER: Worker | None = None
_PROCESS_LOCK = threading.Lock()


def process_worker(env_for) -> Worker:
    """One worker for this whole process (a Dask worker grades many tasks): started on first
    use (`env_for(home)` gives its environment), started again if it died, stopped when the
    process exits (its control socket closes with us in any case)."""
    global _PROCESS_WORKER
    with _PROCESS_LOCK:
        dead = _PROCESS_WORKER is not None and not _PROCESS_WORKER._reader.is_alive()
        if _PROCESS_WORKER is None or dead:
            folder = Path(tempfile.mkdtemp(prefix="tl-grading-worker-"))
            _PROCESS_WORKER = Worker.start(env_for(folder / "home"), folder / "run")
            import atexit

            atexit.register(_PROCESS_WORKER.stop)
        return _PROCESS_WORKER
