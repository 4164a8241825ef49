"""What grading costs: a class, a first grading, hanging students, the merge, parallel runs.

    .venv/bin/python benchmarks/bench_grading.py [--lesson 02_qkv_attention] [--students 4]
    .venv/bin/python benchmarks/bench_grading.py --cost [--lessons 02_qkv_attention ...] [--students 4]
    .venv/bin/python benchmarks/bench_grading.py --first [--lessons 05_add_norm ...]
    .venv/bin/python benchmarks/bench_grading.py --hang [--lesson 02_qkv_attention]
    .venv/bin/python benchmarks/bench_grading.py --merge 1000
    .venv/bin/python benchmarks/bench_grading.py --per-lesson     # one student, every lesson
    .venv/bin/python benchmarks/bench_grading.py --cluster        # + Dask on loopback, memory

--cost: per notebook, a class of --students copies of the solution graded (the student's process
boxed by bubblewrap; then with --no-sandbox), side by side with the plain nbclient execution of the
notebook (median of 3), per-run caches warm as in a class; prints the ratios. --first: an
instructor's first grading (3 solved notebooks, --jobs 1, a fresh course copy: the start, i.e. a
fresh `transformer-lab` process's imports, measured apart; the gradebook preparation; and the
reference timing where the course ships no times; --measure-reference: paid as if it shipped
none) against 3 plain nbclient runs. --hang:
the cost of a hanging, a looping and a graded-function-looping student with the derived per-cell
limits. --merge N: merging N synthetic records into the course gradebook, the record-by-record
merge (tests/grading/test_merge.py's oracle) against the one-pass merge.

The default: N copies of the lesson's solution graded with --jobs 1, then --jobs 2, in a fresh
temporary copy of the course (the whole pipeline: repair, nbgrader autograde judged with the
student's process boxed, records, CSV, gradebook merge); wall and CPU seconds (CPU = this process
and its children), the speed-up, and a projection for 300 students x 11 lessons.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "shared"), str(REPO / "autograder")]
os.environ.setdefault("OMP_NUM_THREADS", "1")

from transformer_lab_grader import (  # noqa: E402
    cell_limits,
    grade,
    gradebook,
    gradebook_merge,
    grading,
    nbgrader_app,
    run_setup,
    sandbox,
)


def _table(*columns: str) -> None:
    """A Markdown table's header and its rule."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))


def _machine() -> str:
    """The load, the cores and the sandbox, for the first line of a table."""
    return (
        f"load {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs, sandbox: "
        f"{sandbox.box_unavailable() or 'bubblewrap'}"
    )


def _cpu() -> float:
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def one_round(lesson: str, students: int, jobs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        tmp = Path(tmp)
        course = nbgrader_app.course_copy(REPO, tmp / "course", [lesson])
        notebook = REPO / "solutions" / lesson / f"{lesson}.ipynb"
        for i in range(students):
            folder = tmp / "subs" / f"s{i:03d}" / lesson
            folder.mkdir(parents=True)
            shutil.copy(notebook, folder / notebook.name)
        wall, cpu = time.perf_counter(), _cpu()
        records = grade.grade(
            course, lesson, tmp / "subs", out=tmp / "g.csv", jobs=jobs, quiet=True
        )
        wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    full = sum(r["score"] == r["max_score"] and r["status"] == "graded" for r in records)
    return {"jobs": jobs, "wall": wall, "cpu": cpu, "full_marks": full, "n": len(records)}


def per_lesson() -> None:
    """One solution notebook per lesson through the whole pipeline (--jobs 1): the cost of one
    notebook, and the projection for 300 students x every lesson from the measured costs."""
    lessons = sorted(p.name for p in (REPO / "solutions").iterdir() if p.is_dir())
    print(f"{len(lessons)} lessons, load {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    _table("lesson", "wall (s)", "CPU (s)", "full marks")
    total_cpu = 0.0
    for lesson in lessons:
        r = one_round(lesson, 1, 1)
        total_cpu += r["cpu"]
        print(f"| {lesson} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['full_marks']}/{r['n']} |")
    print(
        f"CPU for one student's {len(lessons)} lessons: {total_cpu:.0f} s; 300 students on 2 busy "
        f"cores: {300 * total_cpu / 2 / 3600:.1f} h (each extra core divides it)"
    )


# ----------------------------------------------------------------------------------------------
# Many cores and many machines (issue 14, parts 3 and 4).


def _class(tmp: Path, lesson: str, students: int, mixed: bool = False) -> Path:
    """`students` copies of the solution notebook; `mixed`: every second one the released
    notebook instead (graded, 0 points), so that rounds can be compared record by record."""
    for i in range(students):
        part = "exercises" if mixed and i % 2 else "solutions"
        notebook = REPO / part / lesson / f"{lesson}.ipynb"
        folder = tmp / "subs" / f"s{i:03d}" / lesson
        folder.mkdir(parents=True)
        shutil.copy(notebook, folder / notebook.name)
    return tmp / "subs"


def _same(record: dict) -> dict:
    """A record without its timings (when, how long, the checks' own "0.23 s"; when its files
    were written, which each round does anew)."""
    import re

    same = {
        k: v
        for k, v in record.items()
        if k not in ("seconds", "graded_at", "timings", "cpu_timings", "submitted_at")
    }
    same["cells"] = {
        gid: {**c, "output": re.sub(r"\d+(\.\d+)? s\b", "<t> s", c["output"])}
        for gid, c in record["cells"].items()
    }
    return same


def graded_round(lesson: str, students: int, *, jobs: int = 1, workers: int = 0) -> dict:
    """One run over the same mixed class in a fresh course copy: here with `jobs`, or through
    a scheduler and `workers` one-thread `dask worker`s on 127.0.0.1 (started before the clock;
    their CPU, and their grading jobs', counted). Returns the records too."""
    with tempfile.TemporaryDirectory(prefix="bench-grading-round-") as tmp:
        tmp = Path(tmp)
        course = nbgrader_app.course_copy(REPO, tmp / "course", [lesson])
        subs = _class(tmp, lesson, students, mixed=True)
        procs, options, startup = [], {"jobs": jobs}, 0.0
        if workers:
            start = time.perf_counter()
            address, procs = start_loopback_cluster(tmp, workers)
            startup = time.perf_counter() - start
            options = {"scheduler": address}
        try:
            wall, cpu, tree = time.perf_counter(), _cpu(), _tree_cpu(procs)
            records = grade.grade(course, lesson, subs, out=tmp / "g.csv", quiet=True, **options)
            wall = time.perf_counter() - wall
            cpu = _cpu() - cpu + _tree_cpu(procs) - tree
        finally:
            stop_loopback_cluster(procs)
    return {
        "name": f"Dask, {workers} workers x 1 thread" if workers else f"--jobs {jobs}",
        "wall": wall,
        "cpu": cpu,
        "n": len(records),
        "records": [_same(r) for r in records],
        "scores": sorted(r["score"] for r in records),
        "startup": startup,
    }


class _TreeSampler:
    """Peak memory of this process's descendants (the grading jobs: sandbox, nbgrader, the
    student's kernel, the clean re-check), sampled every `every` seconds: the sum of RSS, and
    of PSS (shared pages split between the processes that map them)."""

    def __init__(self, every: float = 0.25):
        import threading

        import psutil

        self.me = psutil.Process()
        self.every = every
        self.peak_rss = self.peak_pss = 0
        self.peak_procs = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        import psutil

        while not self._stop.wait(self.every):
            rss = pss = 0
            kids = self.me.children(recursive=True)
            for proc in kids:
                try:
                    info = proc.memory_full_info()
                    rss += info.rss
                    pss += getattr(info, "pss", info.rss)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self.peak_procs = max(self.peak_procs, len(kids))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def memory_per_job(lesson: str, students: int = 2) -> dict:
    """Grade `students` solution notebooks with --jobs 1 while sampling the jobs' memory: the
    peak is one job's (one student at a time), kernel and children included."""
    with tempfile.TemporaryDirectory(prefix="bench-grading-mem-") as tmp:
        tmp = Path(tmp)
        course = nbgrader_app.course_copy(REPO, tmp / "course", [lesson])
        subs = _class(tmp, lesson, students)
        wall, cpu = time.perf_counter(), _cpu()
        with _TreeSampler() as sampled:
            records = grade.grade(course, lesson, subs, out=tmp / "g.csv", jobs=1, quiet=True)
        wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    return {
        "rss_gib": sampled.peak_rss / sandbox.GiB,
        "pss_gib": sampled.peak_pss / sandbox.GiB,
        "procs": sampled.peak_procs,
        "cpu_per_notebook": cpu / len(records),
        "wall_per_notebook": wall / len(records),
        "busy": cpu / wall,  # cores one job keeps busy
    }


def advise_jobs(mem: dict, cores: int = 16, memory_gib: float = 64.0, reserve_gib: float = 4.0):
    """--jobs N for a server: one job per core (a job is CPU-bound: about 0.85 cores busy on a
    quiet machine, RESULTS.md section 9), one core left for the instructor's process and the
    system, and N x the measured peak (with 50 % headroom) within the memory left after
    `reserve_gib` for the system."""
    by_cpu = cores - 1
    by_memory = int((memory_gib - reserve_gib) / (1.5 * mem["rss_gib"]))
    return min(by_cpu, by_memory), by_cpu, by_memory


def start_loopback_cluster(tmp: Path, workers: int = 2, threads: int = 1) -> tuple[str, list]:
    """`dask scheduler` and `workers` x `dask worker` on 127.0.0.1 (free ports, no dashboard)."""
    import json
    import subprocess

    dask = str(Path(sys.executable).parent / "dask")
    info = tmp / "scheduler.json"
    common = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [
        subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard"]
            + ["--scheduler-file", str(info)],
            start_new_session=True,
            **common,
        )
    ]
    deadline = time.monotonic() + 60
    while not (info.is_file() and info.stat().st_size):
        if time.monotonic() > deadline:
            raise RuntimeError("the Dask scheduler did not start")
        time.sleep(0.2)
    address = json.loads(info.read_text())["address"]
    for i in range(workers):
        procs.append(
            subprocess.Popen(
                [dask, "worker", address, "--host", "127.0.0.1", "--nworkers", "1"]
                + ["--nthreads", str(threads), "--no-dashboard", "--local-directory"]
                + [str(tmp / f"w{i}")],
                start_new_session=True,
                **common,
            )
        )
    from distributed import Client

    with Client(address, timeout=30, set_as_default=False) as client:
        client.wait_for_workers(workers, timeout=120)
    return address, procs


def stop_loopback_cluster(procs: list) -> None:
    import signal

    for proc in reversed(procs):
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for proc in procs:
        proc.wait(timeout=30)


def _tree_cpu(procs: list) -> float:
    """CPU seconds of these processes and every descendant (finished ones included)."""
    import psutil

    total = 0.0
    for proc in procs:
        try:
            root = psutil.Process(proc.pid)
            for p in [root, *root.children(recursive=True)]:
                t = p.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            continue
    return total


def projection(cpu_per_notebook: float, students: int, machines: int, slots: int, eff: float):
    """Wall seconds = students x CPU s per notebook / (machines x slots x efficiency)."""
    return students * cpu_per_notebook / (machines * slots * eff)


def many_cores_and_machines(lesson: str, students: int) -> None:
    """--jobs 1 / --jobs 2 / Dask on loopback for the same class, memory per job, advice."""
    print(
        f"lesson {lesson}, {students} students, {_machine()}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    mem = memory_per_job(lesson)
    n, by_cpu, by_memory = advise_jobs(mem)
    print(
        f"one job (--jobs 1, {lesson}): peak RSS {mem['rss_gib']:.2f} GiB, PSS "
        f"{mem['pss_gib']:.2f} GiB over up to {mem['procs']} processes; "
        f"{mem['cpu_per_notebook']:.1f} CPU s and {mem['wall_per_notebook']:.1f} s wall a "
        f"notebook ({mem['busy']:.2f} cores busy)"
    )
    print(
        f"16 cores, 64 GB: --jobs {n} (cores allow {by_cpu}, memory {by_memory} at 1.5 x the "
        "peak RSS with 4 GB for the system)"
    )
    rounds = [
        graded_round(lesson, students, jobs=1),
        graded_round(lesson, students, jobs=2),
        graded_round(lesson, students, workers=2),
    ]
    _table(
        "run",
        "students",
        "wall (s)",
        "CPU (s)",
        "wall per student (s)",
        "speed-up over --jobs 1",
        "scores",
    )
    for r in rounds:
        print(
            f"| {r['name']} | {r['n']} | {r['wall']:.1f} | {r['cpu']:.1f} | "
            f"{r['wall'] / r['n']:.1f} | {rounds[0]['wall'] / r['wall']:.2f}x | "
            f"{' '.join(f'{x:g}' for x in r['scores'])} |"
        )
    same = all(r["records"] == rounds[0]["records"] for r in rounds[1:])
    print(f"records identical in the three runs (timings aside): {'yes' if same else 'NO'}")
    print(
        f"Dask on loopback against --jobs 2 (same 2 slots): {rounds[1]['wall'] / rounds[2]['wall']:.2f}x "
        f"wall; cluster start-up (not in the wall above): {rounds[2]['startup']:.1f} s"
    )
    eff = rounds[0]["wall"] / rounds[1]["wall"] / 2
    print(f"parallel efficiency of --jobs 2: {eff:.2f}")
    cpu = mem["cpu_per_notebook"]  # the solution notebook, graded alone
    for label, students_, machines in (("300 students", 300, 1), ("10,000 students", 10_000, 20)):
        wall = projection(cpu, students_, machines, n, min(eff, 1.0))
        print(
            f"{label}, {machines} x {n} jobs, {lesson} at {cpu:.1f} CPU s a notebook, "
            f"efficiency {min(eff, 1.0):.2f}: {wall / 60:.0f} min a lesson"
        )


def _grading_env(course: Path, home: Path) -> dict[str, str]:
    return run_setup.job_env(course, home)


def _timed(fn, *args, **kwargs):
    wall, cpu = time.perf_counter(), _cpu()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - wall, _cpu() - cpu


def _prepared_course(tmp: Path, lesson: str) -> Path:
    """A course copy whose per-run caches (reference times, in the notebook and in the
    re-check; base gradebook) are warm."""
    course = nbgrader_app.course_copy(REPO, tmp / "course", [lesson])
    grader = grading.Grader(course, lesson, tmp, quiet=True)
    grader.run_dir = tmp / "warm"
    grader.time_limits()
    grader.base_gradebook()
    return course


def plain_run(notebook: Path, env: dict[str, str]) -> None:
    """The notebook executed plainly with nbclient (a fresh kernel, every cell), as a student's
    "Run all" would, under the grading settings of `env`."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    with tempfile.TemporaryDirectory(prefix="bench-plain-") as folder:
        NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": folder}}
        ).execute(env=env)


def _plain(tmp: Path, course: Path, lesson: str) -> tuple[Path, float, float]:
    """The lesson's solution notebook and its plain nbclient execution under the grading
    settings: (notebook, wall s, CPU s)."""
    notebook = REPO / "solutions" / lesson / f"{lesson}.ipynb"
    _, wall, cpu = _timed(plain_run, notebook, _grading_env(course, tmp / "plain-home"))
    return notebook, wall, cpu


def _boxed_cpu(records: list[dict]) -> float:
    """The CPU seconds of the boxed students' processes, as each reported it (`cpu_timings`):
    bubblewrap does not hand its box's CPU time up to the grader, so `_cpu` misses it."""
    return sum(r.get("cpu_timings", {}).get("student", 0.0) for r in records)


def _submit(tmp: Path, lesson: str, name: str, nb) -> Path:
    import nbformat

    subs = tmp / f"subs-{name}"
    folder = subs / name / lesson
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{lesson}.ipynb")
    return subs


def cost(lessons: list[str], students: int) -> None:
    """Per notebook, a class of `students` copies of the solution graded (the student's process
    in its bubblewrap box; and with --no-sandbox), side by side with the plain nbclient execution
    of the notebook (median of 3); per-run caches (reference times, base gradebook) warm, as in
    a class. CPU: this process and every process it reaped (the worker and its jobs; unboxed
    students' processes), plus what each boxed student's process reported (`cpu_timings`)."""
    print(f"{students} students a run, {_machine()}")
    _table(
        "lesson",
        "grading",
        "plain wall / CPU (s, median of 3)",
        "graded wall / notebook (s)",
        "graded CPU / notebook (s)",
        "**ratio wall**",
        "**ratio CPU**",
        "full marks",
    )
    for lesson in lessons:
        with tempfile.TemporaryDirectory(prefix="bench-cost-") as tmp:
            tmp = Path(tmp)
            course = _prepared_course(tmp, lesson)
            plain = [_plain(tmp, course, lesson)[1:] for _ in range(3)]
            p_wall, p_cpu = (sorted(x[i] for x in plain)[1] for i in (0, 1))
            print(f"{lesson}: plain (wall, CPU) {plain}", flush=True)
            for label, isolate in (("bubblewrap box", True), ("--no-sandbox", False)):
                subs = _class(tmp / f"class-{isolate}", lesson, students)
                records, wall, cpu = _timed(
                    grade.grade, course, lesson, subs, quiet=True, force=True, isolate=isolate
                )
                if isolate:
                    cpu += _boxed_cpu(records)
                full = sum(r["score"] == r["max_score"] for r in records)
                print(
                    f"| {lesson} | {label} | {p_wall:.2f} / {p_cpu:.2f} | {wall / students:.2f} | "
                    f"{cpu / students:.2f} | {wall / students / p_wall:.2f} | "
                    f"{cpu / students / p_cpu:.2f} | {full}/{len(records)} |",
                    flush=True,
                )


def command_start() -> tuple[float, float]:
    """Wall and CPU seconds of a fresh `transformer-lab` process up to its arguments parsed
    (the interpreter and the command line's imports): what `first_grading`'s in-process
    grading has already paid. The median of 3."""
    runs = [
        _timed(
            subprocess.run,
            [sys.executable, "-m", "transformer_lab_grader.cli", "--help"],
            env=dict(os.environ, PYTHONPATH=f"{REPO / 'shared'}:{REPO / 'autograder'}"),
            capture_output=True,
            check=True,
        )[1:]
        for _ in range(3)
    ]
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def first_grading(lessons: list[str], students: int = 3, measure_too: bool = False) -> None:
    """An instructor's first grading: `students` solved notebooks, --jobs 1, on a fresh copy of
    the course (every fixed cost paid: the start, preparing the gradebook, and timing the
    reference solution where the course ships no times for it, `autograder/cell_times/`),
    against `students` plain nbclient runs of the same notebook, side by side."""
    print(f"{students} students, --jobs 1, a fresh course copy, {_machine()}")
    start_wall, start_cpu = command_start()
    print(f"the command's start (counted in each grading): {start_wall:.2f} s / {start_cpu:.2f} s")
    _table(
        "lesson",
        "plain x n: wall / CPU (s)",
        "first grading: wall / CPU (s)",
        "**ratio wall**",
        "**ratio CPU**",
        "full marks",
    )
    for lesson, shipped in [
        (x, s) for x in lessons for s in ((True, False) if measure_too else (True,))
    ]:
        with tempfile.TemporaryDirectory(prefix="bench-first-") as tmp:
            tmp = Path(tmp)
            course = nbgrader_app.course_copy(REPO, tmp / "course", [lesson])
            if not shipped:  # as a course that ships no reference times (before 2026-11-28)
                cell_limits.shipped_path(course, lesson).unlink(missing_ok=True)
            p_wall = p_cpu = 0.0
            for _ in range(students):
                _, wall, cpu = _plain(tmp, course, lesson)
                p_wall, p_cpu = p_wall + wall, p_cpu + cpu
            subs = _class(tmp / "class", lesson, students)
            records, g_wall, g_cpu = _timed(grade.grade, course, lesson, subs, quiet=True, jobs=1)
            g_wall, g_cpu = g_wall + start_wall, g_cpu + start_cpu + _boxed_cpu(records)
        full = sum(r["score"] == r["max_score"] for r in records)
        label = f"{lesson} ({'reference times shipped' if shipped else 'reference timed'})"
        print(
            f"| {label} | {p_wall:.1f} / {p_cpu:.1f} | {g_wall:.1f} / {g_cpu:.1f} | "
            f"{g_wall / p_wall:.2f} | {g_cpu / p_cpu:.2f} | {full}/{len(records)} |",
            flush=True,
        )


def hang(lesson: str) -> None:
    """What a hanging, a looping and a graded-function-looping student cost (derived limits)."""
    import nbformat

    notebook = REPO / "solutions" / lesson / f"{lesson}.ipynb"
    solution = nbformat.read(notebook, as_version=4)

    def inserted(source: str):
        nb = nbformat.from_dict(solution)
        new = nbformat.v4.new_code_cell(source)
        new["id"] = "student-scratch"
        nb.cells.insert(2, new)
        return nb

    looping_function = nbformat.from_dict(solution)
    for cell in looping_function.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        if cell.cell_type == "code" and grade_id.endswith("solution") and "def " in cell.source:
            head, _, rest = cell.source.partition("def ")
            name_line, _, body = rest.partition("\n")
            cell.source = f"{head}def {name_line}\n    while True:\n        pass\n{body}"
            looped = grade_id
            break
    cases = {
        "honest": solution,
        "hangs (time.sleep(10**6))": inserted("import time\ntime.sleep(10**6)"),
        "loops (while True: pass)": inserted("while True:\n    pass"),
        f"loops in graded code ({looped})": looping_function,
    }
    print(f"lesson {lesson}, load {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    _table("student", "wall (s)", "CPU (s)", "score", "reason")
    with tempfile.TemporaryDirectory(prefix="bench-hang-") as tmp:
        tmp = Path(tmp)
        course = _prepared_course(tmp, lesson)
        for i, (label, nb) in enumerate(cases.items()):
            subs = _submit(tmp, lesson, f"s{i:03d}", nb)
            records, wall, cpu = _timed(grade.grade, course, lesson, subs, quiet=True)
            r = next(r for r in records if r["student"] == f"s{i:03d}")
            cpu += _boxed_cpu([r])
            print(
                f"| {label} | {wall:.1f} | {cpu:.1f} | {r['score']:g}/{r['max_score']:g} | "
                f"{(r['reason'] or '')[:160]} |",
                flush=True,
            )


def _merge_oracle():
    """The record-by-record merge, from tests/grading/test_merge.py (kept there as the oracle)."""
    import importlib.util

    path = REPO / "tests" / "grading" / "test_merge.py"
    spec = importlib.util.spec_from_file_location("merge_oracle", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def merge_cost(students: int, lesson: str = "02_qkv_attention", new_only: bool = False) -> None:
    """Merging `students` synthetic records into the gradebook: record by record (before)
    against one pass (now), each into its own copy of one course, side by side, three rounds:
    every student new; the same records again; a tenth of them changed (`new_only`: the one-pass
    merge alone, for class sizes where the old one would take an hour)."""
    oracle = _merge_oracle()
    print(f"{students} records of {lesson}, load {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    _table(
        "round",
        "record by record: wall (s)",
        "CPU (s)",
        "one pass: wall (s)",
        "CPU (s)",
        "speed-up (wall)",
        "same rows",
    )
    with tempfile.TemporaryDirectory(prefix="bench-merge-") as tmp:
        tmp = Path(tmp)
        course = nbgrader_app.course_copy(REPO, tmp / "course", [lesson])
        gradebook.gradebook_assignments(course)  # nbgrader's imports, before the clocks
        old, new = tmp / "old", tmp / "new"
        shutil.copytree(course, old)
        shutil.copytree(course, new)
        names = [f"s{i:05d}" for i in range(students)]
        records = oracle.synthetic_records(course, names, seed=1)
        changed = oracle.synthetic_records(course, names[: max(students // 10, 1)], seed=2)
        rounds = [
            ("every student new", records),
            ("the same records again", records),
            ("a tenth changed", changed + records[len(changed) :]),
        ]
        for label, batch in rounds:
            if not new_only:
                _, o_wall, o_cpu = _timed(oracle.merge_one_by_one, old, batch)
            _, n_wall, n_cpu = _timed(gradebook_merge.merge_into_gradebook, new, batch)
            if new_only:
                before, speedup, same = "- | -", "-", "-"
            else:
                before, speedup = f"{o_wall:.2f} | {o_cpu:.2f}", f"{o_wall / n_wall:.0f}x"
                same = "yes" if oracle.gradebook_rows(old) == oracle.gradebook_rows(new) else "NO"
            print(
                f"| {label} | {before} | {n_wall:.2f} | {n_cpu:.2f} | {speedup} | {same} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lesson", default="02_qkv_attention")
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--per-lesson", action="store_true", help="one student, every lesson")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="--jobs 1, --jobs 2 and Dask on loopback (scheduler + 2 workers), memory per job",
    )
    parser.add_argument(
        "--cost", action="store_true", help="a class graded (box, --no-sandbox) against plain"
    )
    parser.add_argument(
        "--first", action="store_true", help="a first grading of 3 on a fresh course vs plain"
    )
    parser.add_argument("--lessons", nargs="*", help="for --cost/--first (default: --lesson)")
    parser.add_argument(
        "--measure-reference",
        action="store_true",
        help="--first: also as a course that ships no reference times (timed at grading)",
    )
    parser.add_argument("--hang", action="store_true", help="hanging and looping students")
    parser.add_argument("--merge", type=int, metavar="N", help="merge N records: before/after")
    parser.add_argument("--new-only", action="store_true", help="--merge: the one-pass merge only")
    args = parser.parse_args()
    if args.merge:
        merge_cost(args.merge, args.lesson, new_only=args.new_only)
        return
    if args.cost:
        cost(args.lessons or [args.lesson], args.students)
        return
    if args.first:
        first_grading(args.lessons or [args.lesson], measure_too=args.measure_reference)
        return
    if args.hang:
        hang(args.lesson)
        return
    if args.per_lesson:
        per_lesson()
        return
    if args.cluster:
        many_cores_and_machines(args.lesson, args.students)
        return
    print(f"lesson {args.lesson}, {args.students} students, {_machine()}")
    rounds = [one_round(args.lesson, args.students, jobs) for jobs in (1, 2)]
    _table("jobs", "students", "wall (s)", "CPU (s)", "wall per student (s)", "full marks")
    for r in rounds:
        print(
            f"| {r['jobs']} | {r['n']} | {r['wall']:.1f} | {r['cpu']:.1f} | "
            f"{r['wall'] / r['n']:.1f} | {r['full_marks']}/{r['n']} |"
        )
    speedup = rounds[0]["wall"] / rounds[1]["wall"]
    per_student = rounds[1]["wall"] / rounds[1]["n"]
    total_h = 300 * 11 * per_student / 3600
    print(f"speed-up of --jobs 2 over --jobs 1: {speedup:.2f}x (wall)")
    cpu_each = rounds[1]["cpu"] / rounds[1]["n"]
    print(
        f"CPU-bound projection (2 busy cores, {cpu_each:.1f} CPU s a notebook): "
        f"{300 * 11 * cpu_each / 2 / 3600:.1f} h for 300 x 11"
    )
    print(
        f"projection, 300 students x 11 lessons at --jobs 2: {total_h:.1f} h "
        f"({300 * per_student / 60:.0f} min a lesson); CPU per notebook {rounds[1]['cpu'] / rounds[1]['n']:.1f} s"
    )


if __name__ == "__main__":
    main()
