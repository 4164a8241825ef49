"""Run one untrusted grading job in a box: resource limits, no network, a private view of the disk.

`run(command, ...)` starts `command` in a new session with rlimits (address space, CPU time,
file size, no core dumps) and a wall-clock cap that kills the whole process tree. Where Linux
namespaces are available (`unshare`, as root or through a user namespace) the job also gets:

- a network namespace of its own: no network at all (the loopback is down; kernels talk to
  nbgrader over jupyter_client's `ipc` transport, i.e. Unix sockets in the job's own folder, so
  parallel jobs can never clash on ports);
- a PID namespace: when the job ends, every process it started (a student's daemon included)
  dies with it;
- a mount namespace in which the course and the package's repository are read-only and the
  folders a student must not see (`solutions/`, `autograder/work/`, `student_package/`, the
  submissions, the other jobs of this run) are covered by empty tmpfs; only the job's own
  folder stays visible and writable.

Where namespaces are unavailable the job still runs, with the rlimits and the wall-clock cap,
and `Result.warning` says what protection was missing (the grader records it in the flags).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

GiB = 1 << 30
MiB = 1 << 20


# What every process that runs a student's code gets: one thread per library (jobs run side by
# side), no display, no hub downloads, no progress bars, fixed hashing, and grading mode (earlier
# lessons on the reference, nothing saved into a student package).
GRADING_FLAG = "TRANSFORMER_LAB_GRADING"  # what transformer_lab.check.grading_mode() reads
GRADING_ENV = {
    GRADING_FLAG: "1",
    "TRANSFORMER_LAB_NO_PROGRESS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TQDM_DISABLE": "1",
    "PYTHONHASHSEED": "0",
}


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


@functools.lru_cache(maxsize=1)
def namespaces_unavailable() -> str | None:
    """None when `unshare` can give a job its own mount, network and PID namespaces; else why not."""
    if sys.platform != "linux":
        return f"namespaces need Linux (this is {sys.platform})"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "`unshare` or `mount` is not installed"
    probe = subprocess.run(
        [
            *_unshare_prefix(),
            "sh",
            "-c",
            "mount -t tmpfs tmpfs /mnt 2>&1 || mount -t tmpfs tmpfs /tmp",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return f"`unshare` failed: {(probe.stderr or probe.stdout).strip()[:200]}"
    return None


def _unshare_prefix() -> list[str]:
    prefix = ["unshare", "--mount", "--net", "--pid", "--fork", "--kill-child"]
    if os.geteuid() != 0:
        prefix.append("--map-root-user")
    return prefix


def _set_limits(limits: Limits) -> None:
    """preexec_fn: runs in the child before exec; every descendant inherits the limits."""
    try:  # if the grader dies, the job dies with it (unshare --kill-child takes the rest)
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    cpu = int(limits.cpu_seconds or 2 * limits.wall_seconds + 60)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))


def isolation(isolate: bool = True) -> tuple[bool, str | None]:
    """(whether a job gets its namespaces, the warning recorded when it does not)."""
    why = namespaces_unavailable() if isolate else "isolation switched off"
    if why is None:
        return True, None
    return False, (
        f"grading without a sandbox ({why}): network and the course's files are visible to "
        "student code"
    )


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
) -> Result:
    """Run `command` boxed. `keep` is the job's own folder (stays visible and writable); `hide`
    are covered by empty tmpfs and `readonly` re-mounted read-only (namespaces only).

    The job may write one result (bytes) to the pipe whose descriptor is in
    $TRANSFORMER_LAB_RESULT_FD; nothing else it writes is trusted.
    """
    isolated, warning = isolation(isolate)
    if isolated:
        spec = view_spec(command, cwd, hide, readonly, keep)
        spec_path = keep / ".sandbox.json"
        spec_path.write_text(json.dumps(spec))
        # this file as a script (standard library only): no package import before the job's
        argv = [*_unshare_prefix(), sys.executable, "-I", "-S", __file__, str(spec_path)]
    else:
        argv = command
    read_fd, write_fd = os.pipe()
    env = dict(env, TRANSFORMER_LAB_RESULT_FD=str(write_fd))
    start = time.monotonic()
    with open(keep / ".stdout", "w+b") as out, open(keep / ".stderr", "w+b") as err:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            preexec_fn=functools.partial(_set_limits, limits),
            pass_fds=(write_fd,),
        )
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
        isolated=isolated,
        warning=warning,
    )


def view_spec(command, cwd: Path, hide, readonly, keep: Path) -> dict:
    """What `mount_view` needs to build a job's view of the disk, and the command run in it."""
    return {
        "hide": [str(p) for p in hide],
        "readonly": [str(p) for p in readonly],
        "keep": str(keep),
        "command": list(command),
        "cwd": str(cwd),
    }


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
    """SIGKILL the job's session (unshare --kill-child takes the PID namespace down with it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _bind(source: str, target: str) -> None:
    """mount(2) MS_BIND without mount(8), which would resolve /proc/self/fd/N to a path."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    MS_BIND = 4096
    if libc.mount(source.encode(), target.encode(), None, MS_BIND, None) != 0:
        raise OSError(ctypes.get_errno(), f"bind mount {source} -> {target} failed")


def mount_view(spec: dict) -> None:
    """The job's view of the disk, inside its own mount namespace: `readonly` folders re-mounted
    read-only, `hide` folders covered by empty tmpfs, `keep` (the job's folder) visible and
    writable even where it lies under a hidden folder. Used by `_enter` and `worker`."""
    keep = Path(spec["keep"])
    keep_fd = os.open(keep, os.O_RDONLY | os.O_DIRECTORY)

    def mount(*args: str) -> None:
        subprocess.run(["mount", *args], check=True, capture_output=True)

    subprocess.run(["mount", "--make-rprivate", "/"], capture_output=True)
    for path in spec["readonly"]:
        if os.path.isdir(path):
            mount("--bind", path, path)
            mount("-o", "remount,bind,ro", path)
    for path in sorted(spec["hide"], key=len):  # a hidden folder inside a hidden one is gone
        if os.path.isdir(path):
            mount("-t", "tmpfs", "-o", "size=1m,mode=755", "tmpfs", path)
    if not keep.is_dir():  # the job's own folder lay under a hidden one: put it back
        keep.mkdir(parents=True)
        _bind(f"/proc/self/fd/{keep_fd}", str(keep))  # the magic link still names the real one
    os.close(keep_fd)


def _enter(spec_path: str) -> None:
    """Inside the namespaces (we are PID 1 there): set up the mounts, then exec the command."""
    spec = json.loads(Path(spec_path).read_text())
    mount_view(spec)
    os.chdir(spec["cwd"])
    os.execvp(spec["command"][0], spec["command"])


if __name__ == "__main__":
    _enter(sys.argv[1])
