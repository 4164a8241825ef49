"""The bubblewrap (`bwrap`, the sandbox Flatpak uses) command line of a grading job's box
(`box_argv`). The box gives the job:

- no capabilities, `no_new_privs` (bwrap always sets it), and an unprivileged uid/gid: a grader
  running as root starts the box as a uid of its own (`box_ids`, one per job), so that nothing
  the job does counts as root's, nor as another job's;
- its own user, mount, PID, network, IPC, UTS and cgroup namespaces (`--unshare-all`): no network
  at all (kernels talk to nbgrader over jupyter_client's `ipc` transport, Unix sockets in the
  job's own folder), and every process the job starts dies with it;
- a fresh `/proc` that shows only the box's own processes (no `/proc/<pid>/ns` of anybody else,
  no `/proc/<pid>/mem` of the grader), a minimal `/dev`;
- the machine's files read-only, with a private, empty and size-capped `/tmp`, `/var/tmp`,
  `/dev/shm`, `/run`, `/home`, `/root` and the grader's home; the course, the package's
  repository and the Python installation read-only again on top (they may live in a home);
- the folders a student must not see (`solutions/`, `autograder/work/`, `student_package/`,
  `.git`, the submissions, the other jobs of the run) covered by empty tmpfs;
- its own folder (`keep`) visible and writable, and nothing else writable that outlives it;
- death with its parent (`--die-with-parent`) and a session of its own (`--new-session`: no
  TIOCSTI into the grader's terminal).

The box is built by bubblewrap, not by hand-written `unshare`/`mount` code: a process inside it
holds no capability in any namespace, so it cannot unmount what hides a folder, remount the
course read-write, `setns` into another process's namespaces or `ptrace` anything outside.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from pathlib import Path

import transformer_lab

GiB = 1 << 30
MiB = 1 << 20

# The folders holding the two packages the box's processes import (shared/ and autograder/ in
# the repository, site-packages when installed).
PACKAGE_PARENTS = tuple(
    dict.fromkeys(str(Path(p).resolve().parents[1]) for p in (transformer_lab.__file__, __file__))
)

# Weakened boxes for the escape tests' mutants (tests/grading/test_escape.py): each drops one
# protection, and an attack in the suite must get through it. Never used by the grader.
WEAKENINGS = frozenset(
    {
        "root",  # the grader's own uid (root) with every capability, no user namespace
        "host-proc",  # the machine's /proc instead of a fresh one
        "share-pid",  # the grader's PID namespace
        "share-net",  # the machine's network namespace
        "host-tmp",  # the machine's /tmp, writable
        "host-home",  # the grader's home, writable
        "rw-course",  # the course and the package writable
        "no-hide",  # solutions/, the other jobs, the submissions left visible
        "no-nproc",  # no cap on the number of processes
    }
)

SETPRIV_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")  # only what setpriv needs to drop
BOX_UID_BASE = 200_000  # a root grader's boxes run as uids from here (one per job)
TMP_SIZE = 512 * MiB  # the box's /tmp; the other private folders get SMALL_SIZE
SMALL_SIZE = 64 * MiB
_uids = itertools.count()
_uid_lock = threading.Lock()


def box_ids() -> tuple[int, int] | None:
    """(uid, gid) a job's box runs as, outside the box: a fresh unprivileged one when the grader
    is root (so that the job owns nothing of root's nor another job's); None otherwise (the
    grader's own, in a user namespace without capabilities)."""
    if os.geteuid() != 0:
        return None
    with _uid_lock:
        n = next(_uids)
    uid = BOX_UID_BASE + (os.getpid() % 1000) * 100 + n % 100
    return uid, uid


def _give(folder: Path, ids: tuple[int, int]) -> None:
    """The job's own folder belongs to the box's uid (a root grader only); root, which builds the
    box without capabilities, may still enter it (bwrap's --chdir)."""
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), *ids)
    os.lchown(folder, *ids)
    os.chmod(folder, 0o755)


def _python_paths() -> list[str]:
    """The Python installation the job runs (it may live under a home or /tmp, which the box
    hides): the prefixes and the folders of the interpreter and of sys.path."""
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)}
    found.update(PACKAGE_PARENTS)  # the folders holding this transformer_lab and its grader
    found.add(os.path.dirname(os.path.realpath(sys.executable)))
    found.update(p for p in sys.path if p and os.path.isdir(p))
    return sorted({os.path.abspath(p) for p in found} - {"/"})


def box_argv(
    command,
    *,
    cwd: Path,
    keep: Path,
    ids: tuple[int, int] | None,
    hide=(),
    readonly=(),
    weaken=frozenset(),
) -> list[str]:
    """The bubblewrap command line that runs `command` in a job's box (see the module docstring).
    `ids`: the uid/gid the box's processes get outside (`box_ids`; a root grader only: bwrap,
    run as root, builds the box, then util-linux's `setpriv` becomes that uid with every
    capability and the bounding set dropped); None: a user namespace of the grader's own uid
    (uid 65534 inside), without capabilities. `weaken`: the tests' mutants only (WEAKENINGS)."""
    unknown = set(weaken) - WEAKENINGS
    if unknown:
        raise ValueError(f"unknown weakening {sorted(unknown)}")
    argv = ["bwrap"]
    if "root" in weaken:
        argv += ["--cap-add", "ALL"]
    elif ids is not None:  # root builds the box; setpriv below drops to the box's uid
        argv += ["--cap-drop", "ALL"]
        argv += [f for cap in SETPRIV_CAPS for f in ("--cap-add", cap)]
    else:
        argv += ["--unshare-user", "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL"]
    argv += ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "box"]
    if "share-pid" not in weaken:
        argv.append("--unshare-pid")
    if "share-net" not in weaken:
        argv.append("--unshare-net")
    argv += ["--die-with-parent", "--new-session", "--ro-bind", "/", "/"]
    if "host-proc" not in weaken:
        argv += ["--proc", "/proc"]
    argv += ["--dev", "/dev", "--perms", "1777", "--size", str(SMALL_SIZE), "--tmpfs", "/dev/shm"]
    if "host-tmp" in weaken:
        argv += ["--bind", "/tmp", "/tmp"]
    else:
        argv += ["--perms", "1777", "--size", str(TMP_SIZE), "--tmpfs", "/tmp"]
    home = os.path.expanduser("~")
    privates = ["/var/tmp", "/run", "/home", "/root", home]
    for private in dict.fromkeys(privates):
        if private not in ("/", "/tmp") and os.path.isdir(private):
            mode = "1777" if private == "/var/tmp" else "0755"
            argv += ["--perms", mode, "--size", str(SMALL_SIZE), "--tmpfs", private]
    if "host-home" in weaken:
        argv += ["--bind", home, home]
    writable = {str(p) for p in readonly} if "rw-course" in weaken else set()
    binds = [
        p
        for p in dict.fromkeys([*map(str, readonly), *_python_paths()])
        if os.path.isdir(p) and not _covers(p, ["/tmp", *privates])
    ]
    for path in binds:
        argv += _parents(path)
        argv += ["--bind" if path in writable else "--ro-bind", path, path]
    if "no-hide" not in weaken:
        for path in sorted(map(str, hide), key=len):  # a hidden folder inside a hidden one: gone
            if os.path.isdir(path) and path not in (str(keep), "/tmp", *privates):
                argv += ["--size", str(MiB), "--tmpfs", path]
    argv += [*_parents(str(keep)), "--bind", str(keep), str(keep), "--chdir", str(cwd), "--"]
    if ids is not None and "root" not in weaken:
        argv += ["setpriv", f"--reuid={ids[0]}", f"--regid={ids[1]}", "--clear-groups"]
        argv += ["--inh-caps=-all", "--bounding-set=-all", "--"]
    return argv + list(command)


def _covers(path: str, privates: list[str]) -> bool:
    """`path` is one of the box's private folders or lies above one (binding it would show the
    machine's own, e.g. a script's folder /tmp on sys.path)."""
    path = path.rstrip("/") or "/"
    return any(q == path or q.startswith(path + "/") or path == "/" for q in privates)


def _parents(path: str) -> list[str]:
    """Every folder above `path`, made enterable (bwrap makes a missing one 0700, which the box's
    uid could not enter when the path lies in a private tmpfs)."""
    parents = [str(p) for p in reversed(Path(path).parents) if str(p) != "/"]
    return [arg for parent in parents for arg in ("--perms", "0755", "--dir", parent)]
