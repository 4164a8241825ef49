"""Run one untrusted grading job in a box made by bubblewrap (`bwrap`, the sandbox Flatpak uses).

`run(command, ...)` starts `command` with rlimits (address space, CPU time, file size, processes,
no core dumps) and a wall-clock cap that kills the whole box; the box itself (what it gives
the job, and why a process inside cannot leave it) is `bubblewrap`'s.

Where `bwrap` is missing on Linux, `run` raises `SandboxUnavailable` naming the install command;
only an explicit `isolate=False` (`transformer-lab grade --no-sandbox`) runs a job unboxed, and
`Result.warning` then says so (the grader puts it in every record's flags). On other systems
(macOS) the job runs with the rlimits and the wall-clock cap only, with that warning.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from transformer_lab import registry

from .bubblewrap import GiB, MiB, _give, box_argv, box_ids

GRADING_FLAG = registry.GRADING_ENV  # what transformer_lab.check.grading_mode() reads
GRADING_ENV = dict(registry.GRADING_SETTINGS)  # what every process running a student's code gets


@dataclasses.dataclass
class Limits:
    """Per-job caps. `wall_seconds` is for the whole notebook; `cell_timeout` for every cell (the
    instructor's override; None: each cell's limit is max(cell_floor, cell_factor x the reference
    solution's time for that cell), see `cell_limits`; None there: the course's
    autograder/cell_limits.json, else 10 s and 20; `cell_budget` likewise, else 20 s)."""

    memory_bytes: int = 4 * GiB  # RLIMIT_AS of every process of the job
    wall_seconds: float = 900.0
    cpu_seconds: int | None = None  # RLIMIT_CPU per process; default: 2 x wall_seconds
    file_bytes: int = 512 * MiB  # RLIMIT_FSIZE: no single file larger than this
    cell_timeout: float | None = None
    cell_floor: float | None = None
    cell_factor: float | None = None
    cell_budget: float | None = None


@dataclasses.dataclass
class Result:
    returncode: int | None  # None: killed at the wall-clock cap
    timed_out: bool
    seconds: float
    stdout: str
    stderr: str
    record: bytes  # what the job wrote to its private result pipe (fd 3)
    isolated: bool
    warning: str | None


class SandboxUnavailable(RuntimeError):
    """Grading was asked for a box that this machine cannot make (the message says how to fix it)."""


INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: "
    "`sudo dnf install bubblewrap`), or grade without a sandbox with --no-sandbox (every record "
    "of that run is flagged)"
)
NO_SANDBOX = (
    "graded without a sandbox ({why}): the student's code could read and write what the grader "
    "can, and reach the network"
)

PROCESSES = 1024  # RLIMIT_NPROC of a box's uid (threads count too)


@functools.lru_cache(maxsize=1)
def box_unavailable() -> str | None:
    """None when bubblewrap can make the box here (probed once, as a job would be boxed); else
    why not."""
    if sys.platform != "linux":
        return f"the sandbox needs Linux (this is {sys.platform})"
    if shutil.which("bwrap") is None:
        return "bubblewrap (`bwrap`) is not installed"
    with tempfile.TemporaryDirectory(prefix="tl-box-probe-") as folder:
        keep = Path(folder)
        ids = box_ids()
        if ids is not None:
            _give(keep, ids)
        probe = subprocess.run(
            box_argv(["true"], cwd=keep, keep=keep, ids=ids),
            capture_output=True,
            text=True,
            timeout=60,
        )
    if probe.returncode != 0:
        return f"bubblewrap could not make the box: {(probe.stderr or probe.stdout).strip()[:300]}"
    return None


def _set_limits(limits: Limits, processes: int | None = None) -> None:
    """preexec_fn: runs in the child before exec; every descendant inherits the limits."""
    try:  # if the grader dies, the job dies with it (bwrap --die-with-parent takes the rest)
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    cpu = int(limits.cpu_seconds or 2 * limits.wall_seconds + 60)
    _lower(resource.RLIMIT_CORE, 0, 0)
    _lower(resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes)
    _lower(resource.RLIMIT_CPU, cpu, cpu + 5)
    _lower(resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes)
    if processes is not None:
        _lower(resource.RLIMIT_NPROC, processes, processes)


def _lower(which: int, soft: int, hard: int) -> None:
    """Set a limit, never above what this process may already use (a job's student process
    inherits the job's limits: it may only get tighter ones)."""
    _, current = resource.getrlimit(which)
    if current != resource.RLIM_INFINITY:
        soft = current if soft == resource.RLIM_INFINITY else min(soft, current)
        hard = current if hard == resource.RLIM_INFINITY else min(hard, current)
    resource.setrlimit(which, (min(soft, hard), hard))


def _process_cap(ids) -> int:
    """RLIMIT_NPROC for a box: PROCESSES for a uid of its own; for the grader's own uid (not
    root), what that uid runs already plus PROCESSES."""
    if ids is not None:
        return PROCESSES
    uid, mine = os.getuid(), 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{name}").st_uid == uid:
                    mine += len(os.listdir(f"/proc/{name}/task"))
    return mine + PROCESSES


def isolation(isolate: bool = True) -> tuple[bool, str | None]:
    """(whether a job gets its box, the warning recorded when it does not). Raises
    SandboxUnavailable on Linux when a box was asked for and bubblewrap cannot make it."""
    if not isolate:
        return False, NO_SANDBOX.format(why="--no-sandbox")
    why = box_unavailable()
    if why is None:
        return True, None
    if sys.platform == "linux":
        raise SandboxUnavailable(f"cannot grade in a sandbox: {why}; {INSTALL_HINT}")
    return False, NO_SANDBOX.format(why=why)


@dataclasses.dataclass(frozen=True)
class Box:
    """Where a student's process runs: in a box (`isolate`; see the module docstring) or, only
    on an explicit --no-sandbox, unboxed with the rlimits alone; `hide`: folders covered by empty
    tmpfs; `readonly`: folders bound read-only again on top of the private homes. Travels in the
    grading job's spec as JSON."""

    isolate: bool = True
    hide: tuple[str, ...] = ()
    readonly: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"isolate": self.isolate, "hide": list(self.hide), "readonly": list(self.readonly)}

    @classmethod
    def from_json(cls, data: dict | None) -> Box:
        data = data or {}
        return cls(
            bool(data.get("isolate", True)),
            tuple(map(str, data.get("hide", ()))),
            tuple(map(str, data.get("readonly", ()))),
        )


def popen(
    command: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    limits: Limits,
    box: Box,
    keep: Path,
    pass_fds=(),
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
    weaken=frozenset(),
) -> tuple[subprocess.Popen, str | None]:
    """Start `command` in `box` with the rlimits of `limits` (address space, CPU time, file
    size, processes, no core dumps), in a session of its own; `keep` is its own folder (visible
    and writable). Returns (the process, the warning to record when it is not boxed). Raises
    SandboxUnavailable on Linux when a box was asked for and bubblewrap cannot make it.
    `weaken`: the escape tests' mutants only."""
    isolated, warning = isolation(box.isolate)
    weaken = frozenset(weaken)
    ids, argv = None, list(command)
    if isolated:
        ids = None if "root" in weaken else box_ids()
        argv = box_argv(
            command,
            cwd=cwd,
            keep=keep,
            ids=ids,
            hide=box.hide,
            readonly=box.readonly,
            weaken=weaken,
        )
        if ids is not None:
            _give(keep, ids)
    processes = None if "no-nproc" in weaken or not isolated else _process_cap(ids)
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
        preexec_fn=functools.partial(_set_limits, limits, processes),
        pass_fds=tuple(pass_fds),
    )
    return proc, warning


def run(
    command: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    limits: Limits,
    hide: list[Path] = (),
    readonly: list[Path] = (),
    keep: Path,
    isolate: bool = True,
    weaken=frozenset(),
) -> Result:
    """Run `command` (`popen`: boxed unless `isolate` is False) to its end or to the wall-clock
    cap of `limits`, which kills its whole session. `keep` is its own folder (stays visible and
    writable); `hide` are covered by empty tmpfs; `readonly` (the course, the package's
    repository) are bound read-only again on top of the private homes. `weaken`: the escape
    tests' mutants only.

    The command may write one result (bytes) to the pipe whose descriptor is in
    $TRANSFORMER_LAB_RESULT_FD; nothing else it writes is trusted.
    """
    box = Box(isolate, tuple(map(str, hide)), tuple(map(str, readonly)))
    read_fd, write_fd = os.pipe()
    env = dict(env, TRANSFORMER_LAB_RESULT_FD=str(write_fd))
    start = time.monotonic()
    with open(keep / ".stdout", "w+b") as out, open(keep / ".stderr", "w+b") as err:
        try:
            proc, warning = popen(
                command,
                cwd=cwd,
                env=env,
                limits=limits,
                box=box,
                keep=keep,
                pass_fds=(write_fd,),
                stdout=out,
                stderr=err,
                weaken=weaken,
            )
        finally:
            os.close(write_fd)
        os.set_blocking(read_fd, False)
        chunks, timed_out = [], False
        deadline = start + limits.wall_seconds
        while True:
            _drain(read_fd, chunks)
            if proc.poll() is not None:
                break
            if time.monotonic() > deadline:
                timed_out = True
                _kill_group(proc)
                break
            time.sleep(0.2)
        proc.wait()
        _drain(read_fd, chunks)
        os.close(read_fd)
        stdout, stderr = tails(out, err)
    return Result(
        returncode=None if timed_out else proc.returncode,
        timed_out=timed_out,
        seconds=time.monotonic() - start,
        stdout=stdout,
        stderr=stderr,
        record=b"".join(chunks),
        isolated=box.isolate and warning is None,
        warning=warning,
    )


def tails(out, err) -> tuple[str, str]:
    """The last 200 kB of a job's stdout and stderr files, as text."""
    texts = []
    for file in (out, err):
        file.seek(0)
        texts.append(file.read()[-200_000:].decode("utf-8", "replace"))
    return texts[0], texts[1]


def _drain(fd: int, chunks: list[bytes], cap: int = 64 * MiB) -> None:
    while sum(map(len, chunks)) < cap:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if not data:
            return
        chunks.append(data)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the job's session (bwrap's --die-with-parent takes the box down with it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
