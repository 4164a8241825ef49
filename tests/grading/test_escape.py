"""Escape attempts against the grading box (`transformer_lab_grader/sandbox.py`, bubblewrap).

Each attack is a small program run as a grading job runs (`sandbox.run`, the course read-only, the
hidden folders, the job's own folder) that tries one way out. The harness judges from outside,
by what changed on the machine wherever it can: a file in the machine's /tmp or home, a file in
the course, a connection accepted by a listener on the machine's loopback, the hidden answer
printed by the job. Every attack must fail against the real box, and get through a deliberately
weakened box (`bubblewrap.WEAKENINGS`), which proves that the attack is real and that the protection
it meets is the one that stops it.

Then hostile students, end to end: submissions of the tiny lesson whose extra cell tries the same
things inside the student's process (boxed; the judge runs outside the box) are graded with
`grade`; each scores below full marks, and the course, the gradebook, the machine's /tmp and home
are unchanged and no connection is made; a student who stops every process it can signal does
not stop the judge, which grades the rest of the notebook.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import select
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import nbformat
import pytest
from test_instructor_grade import NAME, TINY, _student_nb, tiny_course  # noqa: F401

from transformer_lab_grader import bubblewrap, grade, sandbox

pytestmark = pytest.mark.skipif(
    sandbox.box_unavailable() is not None,
    reason=f"no bubblewrap box here: {sandbox.box_unavailable()}",
)
ROOT = os.geteuid() == 0
TOKEN = "the-hidden-answer-" + uuid.uuid4().hex[:8]

# Shared by the attacks: ctypes' libc, a report line, the paths from the environment.
PRELUDE = r"""
import ctypes, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
E = os.environ
def report(escaped, how=""):
    print(json.dumps({"escaped": bool(escaped), "how": str(how)[:300]}))
    sys.exit(0)
def err():
    return os.strerror(ctypes.get_errno())
"""

ATTACKS = {
    # enter another process's mount namespace (through /proc/<pid>/ns), then write to its /tmp
    "setns": r"""
mine = os.readlink("/proc/self/ns/mnt")
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        if os.readlink(f"/proc/{pid}/ns/mnt") == mine:
            continue
        fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
    except OSError:
        continue
    if libc.setns(fd, 0x00020000) == 0:
        open(E["HOST_TMP_MARK"], "w").write("out")
        report(True, f"setns into {pid}")
report(False, "no other mount namespace to enter")
""",
    # unmount what hides solutions/ and read the answer under it
    "umount": r"""
code = libc.umount2(E["SECRET"].encode(), 2)
try:
    report(E["TOKEN"] in open(os.path.join(E["SECRET"], "answer.txt")).read(), f"umount {code}")
except OSError as e:
    report(False, f"umount {code} {err()}; {e}")
""",
    # remount the read-only course writable and write into it
    "remount": r"""
code = libc.mount(None, E["COURSE"].encode(), None, 32 | 4096, None)  # MS_REMOUNT | MS_BIND
try:
    open(os.path.join(E["COURSE"], "pwned.txt"), "w").write("x")
    report(True, "wrote into the course")
except OSError as e:
    report(False, f"remount {code} {err()}; {e}")
""",
    "write-course": r"""
try:
    open(os.path.join(E["COURSE"], "pwned.txt"), "w").write("x")
    report(True, "wrote into the course")
except OSError as e:
    report(False, e)
""",
    # ptrace the judge (a process of the grader's, outside the box); SEIZE does not stop it
    "ptrace-judge": r"""
pid = int(E["JUDGE_PID"])
code = libc.ptrace(0x4206, pid, None, None)  # PTRACE_SEIZE
report(code == 0, f"ptrace {code} {err()}")
""",
    # signal the judge (signal 0: the permission check alone, harmless)
    "signal-judge": r"""
try:
    os.kill(int(E["JUDGE_PID"]), 0)
    report(True, "may signal the judge")
except OSError as e:
    report(False, e)
""",
    # connect to a listener on the machine's loopback
    "loopback": r"""
try:
    socket.create_connection(("127.0.0.1", int(E["HOST_PORT"])), timeout=3).close()
    report(True, "connected")
except OSError as e:
    report(False, e)
""",
    # write into the machine's /tmp, and into the grader's home
    **{
        name: f"""
try:
    open(E["{mark}"], "w").write("out")
    report(True, "wrote")
except OSError as e:
    report(False, e)
"""
        for name, mark in (("write-tmp", "HOST_TMP_MARK"), ("write-home", "HOST_HOME_MARK"))
    },
    "read-solutions": r"""
try:
    report(E["TOKEN"] in open(os.path.join(E["SECRET"], "answer.txt")).read(), "read")
except OSError as e:
    report(False, e)
""",
    # another student's submission, in another job's folder of the same run
    "read-other": r"""
try:
    report(E["TOKEN"] in open(E["OTHER"]).read(), "read")
except OSError as e:
    report(False, e)
""",
    # a fork bomb, stopped by the harness at 3000 processes (the mutant's "escape")
    "fork-bomb": r"""
import time
n = 0
while n < 3000:
    try:
        pid = os.fork()
    except OSError as e:
        report(False, f"stopped at {n}: {e}")
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
report(True, f"{n} processes")
""",
    "see-machine": r"""
pids = [p for p in os.listdir("/proc") if p.isdigit()]
report(len(pids) > 5, f"{len(pids)} processes visible")
""",
    "capabilities": r"""
caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
report(int(caps, 16) != 0, f"CapEff {caps}")
""",
}

# The weakened box each attack gets through: the protection that stops it, dropped.
MUTANTS = {
    "setns": {"root", "host-proc"},
    "umount": {"root"},
    "remount": {"root"},
    "write-course": {"root", "rw-course"},
    "ptrace-judge": {"root", "share-pid"},
    "signal-judge": {"root", "share-pid"},
    "loopback": {"share-net"},
    "write-tmp": {"host-tmp"},
    "write-home": {"root", "host-home"},
    "read-solutions": {"no-hide"},
    "read-other": {"root", "host-tmp", "no-hide"},
    "fork-bomb": {"no-nproc"},
    "see-machine": {"host-proc"},
    "capabilities": {"root"},
}


def test_every_attack_has_a_mutant_and_every_weakening_is_used():
    assert set(MUTANTS) == set(ATTACKS)
    assert set().union(*MUTANTS.values()) == bubblewrap.WEAKENINGS


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    """What the attacks aim at: a listener on the loopback, a stand-in judge process of the
    grader's, and marker paths in the machine's /tmp and home (removed afterwards)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.setblocking(False)
    judge = subprocess.Popen(["sleep", "600"])
    tag = uuid.uuid4().hex[:10]
    marks = {
        "HOST_TMP_MARK": Path("/tmp") / f"tl-escape-{tag}",
        "HOST_HOME_MARK": Path.home() / f".tl-escape-{tag}",
    }
    yield {"listener": listener, "judge": judge, "marks": marks}
    judge.kill()
    judge.wait()
    listener.close()
    for mark in marks.values():
        mark.unlink(missing_ok=True)


def _accepted(listener: socket.socket) -> int:
    count = 0
    while select.select([listener], [], [], 0.2)[0]:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            break
        conn.close()
        count += 1
    return count


def _layout(tmp_path: Path) -> dict:
    course, run = tmp_path / "course", tmp_path / "run"
    secret = course / "solutions"
    secret.mkdir(parents=True)
    (secret / "answer.txt").write_text(TOKEN)
    (course / "lesson.txt").write_text("the course")
    job, other = run / "jobs" / "1", run / "jobs" / "2"
    job.mkdir(parents=True)
    other.mkdir(parents=True)
    (other / "theirs.ipynb").write_text(TOKEN)
    return {"course": course, "secret": secret, "run": run, "job": job, "other": other}


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        h.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def attempt(name: str, tmp_path: Path, machine: dict, weaken=()) -> tuple[bool, str]:
    """Run one attack as a job; (escaped, what happened), judged from outside where possible."""
    where = _layout(tmp_path)
    marks = machine["marks"]
    for mark in marks.values():
        mark.unlink(missing_ok=True)
    _accepted(machine["listener"])
    env = {
        "PATH": os.environ["PATH"],
        "COURSE": str(where["course"]),
        "SECRET": str(where["secret"]),
        "OTHER": str(where["other"] / "theirs.ipynb"),
        "TOKEN": TOKEN,
        "JUDGE_PID": str(machine["judge"].pid),
        "HOST_PORT": str(machine["listener"].getsockname()[1]),
        **{key: str(path) for key, path in marks.items()},
    }
    before = _digest(where["course"])
    result = sandbox.run(
        [sys.executable, "-c", PRELUDE + ATTACKS[name]],
        cwd=where["job"],
        env=env,
        limits=sandbox.Limits(wall_seconds=60),
        hide=[where["secret"], where["run"]],
        readonly=[where["course"]],
        keep=where["job"],
        weaken=weaken,
    )
    lines = result.stdout.strip().splitlines()
    said = json.loads(lines[-1]) if lines else {"escaped": False, "how": result.stderr[-300:]}
    evidence = [f"{mark.name} written on the machine" for mark in marks.values() if mark.exists()]
    if _accepted(machine["listener"]):
        evidence.append("a connection reached the machine's loopback")
    if _digest(where["course"]) != before:
        evidence.append("the course changed")
    if name in ("write-tmp", "write-home", "setns", "loopback", "remount", "write-course"):
        escaped = bool(evidence)  # judged by the machine alone
    else:
        escaped = bool(said["escaped"] or evidence)
    return escaped, "; ".join([said["how"], *evidence])


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_the_box_stops_the_attack(name, tmp_path, machine):
    escaped, how = attempt(name, tmp_path, machine)
    assert not escaped, how
    assert machine["judge"].poll() is None  # the judge still runs


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_the_attack_gets_through_its_weakened_box(name, tmp_path, machine):
    if "root" in MUTANTS[name] and not ROOT:
        pytest.skip("this weakened box runs the job as root: only a root grader can build it")
    escaped, how = attempt(name, tmp_path, machine, weaken=MUTANTS[name])
    assert escaped, f"the attack failed against the weakened box {MUTANTS[name]}: {how}"


def test_the_boxs_own_tmp_is_writable_and_private(tmp_path):
    name = f"tl-private-{uuid.uuid4().hex[:8]}"
    script = (
        "import os, tempfile\n"
        "assert tempfile.gettempdir() == '/tmp'\n"
        f"for folder in ('/tmp', '/var/tmp', '/dev/shm'):\n"
        f"    open(os.path.join(folder, {name!r}), 'w').write('mine')\n"
        f"print(sorted(os.listdir('/tmp')))\n"
    )
    result = sandbox.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        limits=sandbox.Limits(wall_seconds=60),
        hide=[Path("/tmp"), Path.home()],  # a grader that hides them leaves them usable
        keep=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert name in result.stdout
    assert not [
        Path(f) / name for f in ("/tmp", "/var/tmp", "/dev/shm") if (Path(f) / name).exists()
    ]


def test_an_unknown_weakening_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown weakening"):
        bubblewrap.box_argv(["true"], cwd=tmp_path, keep=tmp_path, ids=None, weaken={"nothing"})


# ------------------------------------------------------------- a judge beside the student's code

# The judge (the grading job) and student code of the same uid in one box, as --no-sandbox runs
# them: the student tries to ptrace the judge. `job.not_traceable` (PR_SET_DUMPABLE 0) is what
# stops it there. (Boxed, the student's process cannot even see the judge: its own PID namespace.)
JUDGE_AND_STUDENT = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if sys.argv[1] == "harden":
    from transformer_lab_grader.job import not_traceable
    not_traceable()
judge = os.getpid()
child = os.fork()
if child == 0:
    code = libc.ptrace(0x4206, judge, None, None)  # PTRACE_SEIZE the judge
    try:
        mem = open(f"/proc/{judge}/mem", "rb")
        mem.close()
        readable = True
    except OSError:
        readable = False
    print(json.dumps({"seized": code == 0, "mem": readable}), flush=True)
    os._exit(0)
os.waitpid(child, 0)
"""


def _yama() -> int:
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text())
    except (OSError, ValueError):
        return 0


@pytest.mark.parametrize("harden", ["harden", "mutant"])
def test_the_judge_in_the_box_cannot_be_traced_by_the_student(harden, tmp_path):
    if harden == "mutant" and _yama() > 0:
        pytest.skip("Yama stops ptrace of a parent here anyway: the mutant cannot show the attack")
    result = sandbox.run(
        [sys.executable, "-c", JUDGE_AND_STUDENT, harden],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join(bubblewrap.PACKAGE_PARENTS)},
        limits=sandbox.Limits(wall_seconds=60),
        keep=tmp_path,
    )
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    if harden == "harden":
        assert seen == {"seized": False, "mem": False}, result.stderr
    else:  # the same judge, dumpable: the student gets in
        assert seen["seized"] and seen["mem"], seen


def test_not_traceable_sets_the_flag():
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        from transformer_lab_grader.job import not_traceable

        not_traceable()
        os._exit(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


# ------------------------------------------------------------------------- hostile students

# Extra cells of hostile submissions (each also gets `add` wrong): run in the student's process,
# in its box. Each writes what it managed into its own output, which the grader keeps.
HOSTILE_CELLS = {
    "setns": ATTACKS["setns"],
    "umount": ATTACKS["umount"],
    "remount": ATTACKS["remount"],
    "ptrace": r"""
for pid in {os.getppid(), int(E["JUDGE_PID"]), 1}:
    print("ptrace", pid, libc.ptrace(0x4206, pid, None, None), err())
""",
    "signal": r"""
for pid in (int(E["JUDGE_PID"]),):
    try:
        os.kill(pid, 0)
        print("may signal", pid)
    except OSError as e:
        print("signal", pid, e)
""",
    "loopback": ATTACKS["loopback"],
    "writes": r"""
for path in (E["HOST_TMP_MARK"], E["HOST_HOME_MARK"], os.path.join(E["COURSE"], "pwned.txt")):
    try:
        open(path, "w").write("out")
        print("wrote", path)
    except OSError as e:
        print("refused", path, e)
""",
    "read-others": r"""
import glob
for path in glob.glob(os.path.join(E["SUBMISSIONS"], "*", "*", "*.ipynb")):
    print("read", path, len(open(path).read()))
for path in glob.glob(os.path.join(E["COURSE"], "solutions", "*", "*")):
    print("read", path)
""",
    "stop-everyone": r"""
import signal
for pid in range(1, 40000):
    if pid != os.getpid():
        try:
            os.kill(pid, signal.SIGSTOP)
            print("stopped", pid)
        except OSError:
            pass
""",
    "fork-bomb": r"""
import time
n = 0
while n < 3000:
    try:
        if os.fork() == 0:
            time.sleep(20)
            os._exit(0)
    except OSError as e:
        print("stopped at", n, e)
        break
    n += 1
""",
}


def _hostile(cell: str, env: dict) -> str:
    """The attack as a notebook cell: the harness's values baked in (the kernel's environment
    is the job's), its report printed instead of exiting."""
    values = json.dumps(env)
    body = PRELUDE.replace("sys.exit(0)", "raise KeyboardInterrupt") + cell
    return (
        f"E = {values}\ntry:\n"
        + "\n".join("    " + line for line in (body.replace("E = os.environ\n", "")).splitlines())
        + "\nexcept KeyboardInterrupt:\n    pass\n"
    )


@pytest.mark.slow
def test_hostile_students_score_below_full_marks_and_change_nothing(
    tiny_course,  # noqa: F811
    tmp_path,
    machine,
):
    subs = tmp_path / "subs"
    marks = machine["marks"]
    env = {
        "COURSE": str(tiny_course),
        "SUBMISSIONS": str(subs),
        "JUDGE_PID": str(machine["judge"].pid),
        "HOST_PORT": str(machine["listener"].getsockname()[1]),
        "SECRET": str(tiny_course / "solutions" / TINY),
        "TOKEN": "def add(a, b)",
        **{key: str(path) for key, path in marks.items()},
    }
    for mark in marks.values():
        mark.unlink(missing_ok=True)
    for student, cell in HOSTILE_CELLS.items():
        nb = _student_nb(tiny_course, add="return a - b")
        attack = nbformat.v4.new_code_cell(_hostile(cell, env))
        attack["id"] = f"attack-{student}"
        nb.cells.insert(2, attack)
        folder = subs / student / TINY
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / NAME)
    _accepted(machine["listener"])
    course_before = _digest(tiny_course / "solutions") + _digest(tiny_course / "exercises")

    records = grade.grade(tiny_course, TINY, subs, jobs=2, quiet=True, force=True)

    by = {r["student"]: r for r in records if r["student"] in HOSTILE_CELLS}
    assert set(by) == set(HOSTILE_CELLS)
    for student, record in by.items():
        assert record["score"] < record["max_score"], (student, record)
    assert not [mark for mark in marks.values() if mark.exists()]
    assert _accepted(machine["listener"]) == 0
    assert _digest(tiny_course / "solutions") + _digest(tiny_course / "exercises") == course_before
    assert not (tiny_course / "pwned.txt").exists()
    assert machine["judge"].poll() is None
    outputs = json.dumps({s: r["cells"] for s, r in by.items()}) + json.dumps(
        [r.get("reason") for r in by.values()]
    )
    assert "def add(a, b):\\n    return a + b" not in outputs  # no solution leaked
    # the judge was not stopped: it judged the tests after the attack (mul is right)
    stopper = by["stop-everyone"]
    assert stopper["status"] == "graded" and stopper["cells"]["mul-test"]["passed"], stopper
