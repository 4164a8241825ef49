"""The grading kernel as a fork of the pre-imported grading job, not a new interpreter.

A grading job imports torch, the checks, ipykernel and nbgrader before any student code runs
(`job.trusted_imports`); nbgrader then runs in a fork of the job (`nbgrader_app.autograde_in_job`).
Started the usual way (`python -m ipykernel_launcher -f CONNECTION_FILE`), the student's kernel
was a third interpreter that imported all of it again (≈ 2–2.7 CPU s a notebook). Here the
kernel is a fork of that nbgrader process instead (`ForkProvisioner`, a jupyter_client kernel
provisioner), and only nbgrader's `Execute` inside a grading job uses it (`ForkingExecute`, put
in nbgrader's autograde preprocessors by `nbgrader_app._autograde_here`); students' and
lectures' kernels are never forked.

The child is made into the kernel a fresh `ipykernel_launcher` would have been
(`_become_fresh_kernel`):

- its own session and process group (as `jupyter_client.launcher.launch_kernel`), so interrupts
  (SIGINT to the group: nbgrader's per-cell timeout) and kills reach the kernel and what it
  started, as before;
- stdin on /dev/null (the launcher gives a pipe it closes at once: EOF either way); stdout and
  stderr are the nbgrader process's (the job's autograde log), as the launcher leaves them;
- every other inherited descriptor is replaced by /dev/null (not merely closed: objects the
  child inherited, e.g. nbclient's event loop or the gradebook's SQLite connection, may close
  "their" descriptor number later, which must never be one the kernel has opened since). The
  job's result pipe is not open in the nbgrader process in the first place, and would be
  replaced here if it were;
- signal handlers and the signal mask as a new interpreter has them, no wakeup fd, no
  inherited atexit callbacks, asyncio's running loop and policy reset (the fork happens inside
  nbclient's running loop), traitlets singletons cleared (nbgrader's app is one);
- the environment, working folder and command line the KernelManager asked for (`sys.argv` is
  `ipykernel_launcher`'s), ipykernel's parent poller pointed at the nbgrader process (its
  `JPY_PARENT_PID` default was read when the job imported ipykernel);
- torch's default generator and NumPy's legacy one reseeded from the OS, as in a fresh process
  (Python's `random` reseeds itself at fork): seeded and unseeded notebooks behave as in a fresh
  kernel, and no two kernels, nor a kernel and the job, share a random stream.

Inherited, by design: the job's imported modules (torch with one thread, the course package,
nbgrader, ipykernel; `'torch' in sys.modules` is True before the notebook imports it) and the
memory of the nbgrader process: the notebook being graded (its hidden tests, which nbgrader
sends to this kernel anyway), the job's spec (student, points and limits, all in the released
notebook), nbgrader's configuration. Nothing there is secret or grants anything the kernel
cannot already read or write in the job's folder; the points are decided by the clean re-check
in the job (`verify`), which this kernel cannot reach. No torch thread pool runs before the
fork (the job only imports torch and sets one thread), so GNU OpenMP works in the kernel.

Where forking is unavailable (not Linux, a kernel that is not this interpreter's ipykernel,
another hash seed, a failed fork, or `TRANSFORMER_LAB_KERNEL_FORK=0` in the job's environment,
which `grade` passes on from its own) the kernel is
launched the usual way and a line starting with `FALLBACK_MARK` in the autograde log says why;
the job turns it into a flag of the record (`fallback_flags`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib.util
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from nbgrader.preprocessors import Execute

SWITCH = "TRANSFORMER_LAB_KERNEL_FORK"  # "0" in the job's environment: the usual launcher
FALLBACK_MARK = "transformer_lab: grading kernel not forked: "
LAUNCHER = "ipykernel_launcher"
READY_SECONDS = 60.0  # from fork to the child leading its own session: milliseconds


# ----------------------------------------------------------------------------------------------
# When to fork.


def fork_unavailable(cmd: list[str], env: dict[str, str]) -> str | None:
    """None when this kernel command can be a fork of this process; else why not."""
    if os.environ.get(SWITCH, "1") == "0":
        return f"switched off ({SWITCH}=0)"
    if sys.platform != "linux" or not hasattr(os, "fork"):
        return f"forking a kernel needs Linux (this is {sys.platform})"
    if len(cmd) < 5 or cmd[1:4] != ["-m", LAUNCHER, "-f"] or not _this_python(cmd[0]):
        return f"the kernel is not this interpreter's ipykernel: {cmd[:4]}"
    if not _same_hash_seed(env.get("PYTHONHASHSEED")):
        return "the kernel's PYTHONHASHSEED differs from this interpreter's"
    if importlib.util.find_spec("ipykernel") is None:
        return "ipykernel is not installed"
    return None


def _this_python(executable: str) -> bool:
    """The same path, not merely the same file: another virtual environment's `python` may be
    a link to this very binary, with other packages."""
    return os.path.abspath(executable) == os.path.abspath(sys.executable)


def _same_hash_seed(wanted: str | None) -> bool:
    """A fork keeps this interpreter's string hashing: only fork where a fresh kernel would hash
    alike (PYTHONHASHSEED=0 here and there, or random in both)."""
    fixed_here = not sys.flags.hash_randomization
    if wanted in (None, "", "random"):
        return not fixed_here
    return fixed_here and wanted == "0"


def fallback_flags(log: str) -> list[str]:
    """The record's flags for kernels that were launched the usual way (from the autograde log)."""
    reasons = []
    for line in log.splitlines():
        if line.startswith(FALLBACK_MARK):
            reason = line[len(FALLBACK_MARK) :].strip()[:200]
            if reason not in reasons:
                reasons.append(reason)
    return [f"grading kernel not forked: {reason}" for reason in reasons]


# ----------------------------------------------------------------------------------------------
# The parent's side: nbgrader's Execute -> a kernel manager -> the provisioner -> a handle.


class ForkedKernel:
    """What jupyter_client's LocalProvisioner needs of a `subprocess.Popen`, for a forked kernel
    (our child: waitpid gives its exit status, as Popen's would)."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: gone all the same
                self.returncode = -signal.SIGKILL
            else:
                if done:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkProvisioner(LocalProvisioner):
    """LocalProvisioner whose launch forks this (pre-imported) process into the kernel; every
    other operation (interrupt and kill through the process group, wait, cleanup) is
    LocalProvisioner's own, on a `ForkedKernel`."""

    forked = False

    async def launch_kernel(self, cmd: list[str], **kwargs: Any):
        env = dict(kwargs.get("env") or os.environ)
        reason = fork_unavailable(cmd, env)
        if reason:
            print(FALLBACK_MARK + reason, file=sys.stderr, flush=True)
            return await super().launch_kernel(cmd, **kwargs)
        env["JPY_PARENT_PID"] = str(os.getpid())  # as jupyter_client.launcher does
        cwd = kwargs.get("cwd")
        try:
            self.process = fork_kernel(cmd, env, None if cwd is None else str(cwd))
        except OSError as error:  # e.g. no memory for a copy of this process: launch instead
            print(f"{FALLBACK_MARK}fork failed: {error}", file=sys.stderr, flush=True)
            return await super().launch_kernel(cmd, **kwargs)
        self.pid = self.pgid = self.process.pid  # the child is its own session's leader
        self.cwd = cwd or os.getcwd()
        self.forked = True
        return self.connection_info


class ForkingKernelManager(AsyncKernelManager):
    """AsyncKernelManager (nbgrader's) whose kernels are forks of this process."""

    async def _async_pre_start_kernel(self, **kw: Any):
        if self.provisioner is None:
            self.kernel_id = self.kernel_id or kw.pop("kernel_id", None) or _new_id()
            self.provisioner = ForkProvisioner(
                kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self
            )
        return await super()._async_pre_start_kernel(**kw)


def _new_id() -> str:
    import uuid

    return str(uuid.uuid4())


class ForkingExecute(Execute):
    """nbgrader's Execute preprocessor (same configuration section) with forked kernels."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("kernel_manager_class", ForkingKernelManager)
        super().__init__(*args, **kwargs)


EXECUTE_NAMES = ("nbgrader.preprocessors.Execute", "nbgrader.preprocessors.execute.Execute")


def autograde_preprocessors(configured: list | None = None) -> list:
    """The course's autograde preprocessors (`configured`, from its nbgrader_config.py) or else
    nbgrader's default ones, with `ForkingExecute` in place of `Execute` (named by its class or
    its import path; the rest as given)."""
    if configured is None:
        from nbgrader.converters import Autograde

        configured = Autograde.class_traits()["autograde_preprocessors"].default()
    return [ForkingExecute if p is Execute or p in EXECUTE_NAMES else p for p in configured]


# ----------------------------------------------------------------------------------------------
# The fork.


def fork_kernel(cmd: list[str], env: dict[str, str], cwd: str | None) -> ForkedKernel:
    """Fork; the child becomes the kernel and never returns. The parent returns once the child
    leads its own session (so a signal to its process group always reaches it)."""
    for stream in (sys.stdout, sys.stderr):  # nothing buffered here is written twice
        with contextlib.suppress(Exception):
            stream.flush()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        _run_as_kernel(cmd, env, cwd, ready_w)  # never returns
    os.close(ready_w)
    try:  # nothing within the time: kill it (nbclient then sees a dead kernel, as with any)
        if not select.select([ready_r], [], [], READY_SECONDS)[0]:
            os.kill(pid, signal.SIGKILL)
        # else b"k", or b"" when the child died before it was ready (poll() says so)
    finally:
        os.close(ready_r)
    return ForkedKernel(pid)


def _run_as_kernel(cmd: list[str], env: dict[str, str], cwd: str | None, ready_w: int) -> None:
    code = 1
    try:
        _become_fresh_kernel(cmd, env, cwd, keep=ready_w)
        os.write(ready_w, b"k")
        os.close(ready_w)
        code = _kernel_main(int(env["JPY_PARENT_PID"]))
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001 - say it on the kernel's stderr (the autograde log)
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()  # the kernel's own (the inherited ones were dropped)
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _become_fresh_kernel(cmd: list[str], env: dict[str, str], cwd: str | None, keep: int) -> None:
    """The state a fresh `python -m ipykernel_launcher` would start in (module docstring)."""
    os.setsid()
    _only_standard_descriptors(keep)
    _fresh_signals()
    _fresh_interpreter_state()
    os.environ.clear()
    os.environ.update(env)
    if cwd:
        os.chdir(cwd)
    sys.argv = [importlib.util.find_spec(LAUNCHER).origin, *cmd[3:]]
    _fresh_random_state()


def _only_standard_descriptors(keep: int) -> None:
    """stdin from /dev/null; every other inherited descriptor but stdout, stderr and `keep`
    replaced by /dev/null (module docstring: why not closed)."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    for fd in _open_descriptors():
        if fd > 2 and fd not in (keep, null):
            os.dup2(null, fd, inheritable=False)
    os.close(null)


def _open_descriptors() -> list[int]:
    """This process's open descriptors (from /proc; without it, every possible one tried)."""
    try:
        candidates = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        import resource

        candidates = range(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    fds = []
    for fd in candidates:  # the listing's own descriptor is closed by now: fstat skips it
        with contextlib.suppress(OSError):
            os.fstat(fd)
            fds.append(fd)
    return fds


def _fresh_signals() -> None:
    """Handlers, mask and wakeup fd as a new Python interpreter has them."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.set_wakeup_fd(-1)
    for signum in signal.valid_signals():
        if signum in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python sets them at start-up
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


_INHERITED: list = []  # kept alive: their finalisers must not run in the kernel


def _fresh_interpreter_state() -> None:
    """No inherited event loop, atexit callbacks, logging handlers or application singletons."""
    _INHERITED.append(asyncio.get_event_loop_policy())
    asyncio.events._set_running_loop(None)
    asyncio.set_event_loop_policy(None)
    atexit._clear()
    import logging

    _INHERITED.append(list(logging.root.handlers))
    logging.root.handlers.clear()
    logging.root.setLevel(logging.WARNING)
    from traitlets.config.configurable import SingletonConfigurable

    for cls in _subclasses(SingletonConfigurable):
        if cls.__dict__.get("_instance") is not None:
            _INHERITED.append(cls._instance)
            cls._instance = None


def _subclasses(cls: type) -> list[type]:
    found, todo = [], [cls]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                todo.append(sub)
    return [cls, *found]


def _fresh_random_state() -> None:
    """torch's default generator and NumPy's legacy global one reseeded from the OS, as a fresh
    process seeds them (torch 2.13 seeds its default generator non-deterministically): an
    unseeded notebook draws numbers no other kernel and not the job draw; a seeded one
    (`torch.manual_seed`) draws what it draws in a fresh kernel."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _kernel_main(parent_pid: int) -> int:
    """ipykernel_launcher's main, in this process; returns the exit code."""
    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]  # as ipykernel_launcher (the shell puts "" back)
    from ipykernel.kernelapp import IPKernelApp

    IPKernelApp.launch_instance(parent_handle=parent_pid)
    return 0


def kernel_imports() -> None:
    """What a fresh kernel imports before the notebook's first cell (ipykernel, IPython's shell
    and history), and matplotlib's pyplot, which every course notebook imports (the backend
    comes from MPLBACKEND, Agg when grading, as in a fresh kernel): the fork finds them
    imported. Called by `job.trusted_imports`, before any student code runs (in the grading
    `worker` too, which then points matplotlib at each job's own folders). Not ipykernel's
    debugger (debugpy: pydevd has no business in the process that judges the re-check).
    Switched off, nothing: the job imports what it did before forked kernels."""
    if os.environ.get(SWITCH, "1") == "0":
        return
    import sqlite3  # noqa: F401

    import ipykernel.ipkernel  # noqa: F401
    import ipykernel.kernelapp  # noqa: F401
    import IPython.core.completerlib  # noqa: F401
    import IPython.core.debugger  # noqa: F401
    import IPython.core.oinspect  # noqa: F401
    import IPython.extensions.storemagic  # noqa: F401

    with contextlib.suppress(ImportError):
        import matplotlib.pyplot  # noqa: F401
