"""Parallel grading: the same N submissions graded with --jobs 1, then --jobs 2, in one run.

    .venv/bin/python benchmarks/bench_grading.py [--lesson 02_qkv_attention] [--students 4]
    .venv/bin/python benchmarks/bench_grading.py --per-lesson     # one student, every lesson
    .venv/bin/python benchmarks/bench_grading.py --cost [--lessons 02_qkv_attention 03_...]
    .venv/bin/python benchmarks/bench_grading.py --breakdown [--lesson 02_qkv_attention]
    .venv/bin/python benchmarks/bench_grading.py --hang [--lesson 02_qkv_attention]

--cost: per lesson, side by side in one run, the plain nbclient execution of the solution notebook
(grading settings: quick mode, one thread) and the grading of that notebook as one student's
submission (sandbox, nbgrader, clean re-check, record, CSV, gradebook merge), with the per-run
set-up (reference times, base gradebook) cached as in a class; prints the ratio.
--breakdown: where one graded notebook's time goes (the job's own phases, and the parts it is
made of, each timed alone). --hang: the cost of a hanging, a looping and a graded-function-looping
student with the derived per-cell limits.


Each round grades N copies of the lesson's solution notebook in a fresh temporary copy of the
course (full pipeline: repair, sandbox, nbgrader autograde, verify, records, CSV, gradebook
merge). Prints wall and CPU seconds (CPU = this process and its children), the speed-up of
--jobs 2 over --jobs 1, and a projection for 300 students x 11 lessons at the measured rate
(every lesson assumed to cost what this one costs: an estimate, the training lessons 08-11 cost
more per notebook than 02).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "shared"))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from transformer_lab.instructor import grade, nbgrader_app, sandbox  # noqa: E402


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
    print("| lesson | wall (s) | CPU (s) | full marks |")
    print("|---|---|---|---|")
    total_cpu = 0.0
    for lesson in lessons:
        r = one_round(lesson, 1, 1)
        total_cpu += r["cpu"]
        print(f"| {lesson} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['full_marks']}/{r['n']} |")
    print(
        f"CPU for one student's {len(lessons)} lessons: {total_cpu:.0f} s; 300 students on 2 busy "
        f"cores: {300 * total_cpu / 2 / 3600:.1f} h (each extra core divides it)"
    )


def _grading_env(course: Path, home: Path) -> dict[str, str]:
    return grade._env(course, home)


def _timed(fn, *args, **kwargs):
    wall, cpu = time.perf_counter(), _cpu()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - wall, _cpu() - cpu


def _prepared_course(tmp: Path, lesson: str) -> Path:
    """A course copy whose per-run caches (reference times, base gradebook) are warm."""
    from transformer_lab.instructor import cell_limits

    course = nbgrader_app.course_copy(REPO, tmp / "course", [lesson])
    cell_limits.reference_times(course, lesson, _grading_env(course, tmp / "ref"), say=lambda m: 0)
    grader = grade.Grader(course, lesson, tmp, quiet=True)
    grader.run_dir = tmp / "warm"
    grader.base_gradebook()
    return course


def _submit(tmp: Path, lesson: str, name: str, nb) -> Path:
    import nbformat

    subs = tmp / f"subs-{name}"
    folder = subs / name / lesson
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{lesson}.ipynb")
    return subs


def cost(lessons: list[str]) -> None:
    """Grading one notebook against plainly executing it, side by side, per lesson."""
    import nbformat

    from transformer_lab.instructor import cell_limits

    print(
        f"load {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs, sandbox: "
        f"{sandbox.namespaces_unavailable() or 'namespaces'}"
    )
    print(
        "| lesson | plain wall (s) | plain CPU (s) | graded wall (s) | graded CPU (s) "
        "| ratio wall | ratio CPU | score |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for lesson in lessons:
        with tempfile.TemporaryDirectory(prefix="bench-cost-") as tmp:
            tmp = Path(tmp)
            course = _prepared_course(tmp, lesson)
            notebook = REPO / "solutions" / lesson / f"{lesson}.ipynb"
            env = _grading_env(course, tmp / "plain-home")
            _, p_wall, p_cpu = _timed(cell_limits.time_cells, notebook, env)
            subs = _submit(tmp, lesson, "s000", nbformat.read(notebook, as_version=4))
            records, g_wall, g_cpu = _timed(
                grade.grade, course, lesson, subs, out=tmp / "g.csv", quiet=True
            )
        r = records[0]
        print(
            f"| {lesson} | {p_wall:.1f} | {p_cpu:.1f} | {g_wall:.1f} | {g_cpu:.1f} | "
            f"{g_wall / p_wall:.2f} | {g_cpu / p_cpu:.2f} | {r['score']:g}/{r['max_score']:g} |",
            flush=True,
        )


def breakdown(lesson: str) -> None:
    """Where one graded notebook's time goes."""
    import subprocess

    import nbformat

    from transformer_lab.instructor import cell_limits

    py = sys.executable
    print(f"lesson {lesson}, load {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    rows = []

    def run(label, argv):
        _, wall, cpu = _timed(subprocess.run, argv, check=True, capture_output=True)
        rows.append((label, wall, cpu))

    run("python start-up (`python -c pass`)", [py, "-c", "pass"])
    run(
        "nbgrader app imports (`import nbgrader.apps.nbgraderapp`)",
        [py, "-c", "import nbgrader.apps.nbgraderapp"],
    )
    run(
        "torch + checks imports (`python -I`, as a re-check child did)",
        [py, "-I", "-c", "import torch; from transformer_lab import check"],
    )
    with tempfile.TemporaryDirectory(prefix="bench-breakdown-") as tmp:
        tmp = Path(tmp)
        env = _grading_env(REPO, tmp / "home")
        kernel_only = nbformat.v4.new_notebook()
        kernel_only.cells = [
            nbformat.v4.new_code_cell("import torch\nfrom transformer_lab import check")
        ]
        kernel_only.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
        nbformat.write(kernel_only, tmp / "k.ipynb")
        _, wall, cpu = _timed(cell_limits.time_cells, tmp / "k.ipynb", env)
        rows.append(("kernel start + torch + checks imports (nbclient)", wall, cpu))
        notebook = REPO / "solutions" / lesson / f"{lesson}.ipynb"
        _, wall, cpu = _timed(cell_limits.time_cells, notebook, env)
        rows.append(("**plain execution of the solution notebook (nbclient)**", wall, cpu))
        limits = sandbox.Limits()
        keep = tmp / "box"
        keep.mkdir()
        result, wall, cpu = _timed(
            sandbox.run, [py, "-c", "pass"], cwd=keep, env=env, limits=limits, keep=keep
        )
        rows.append(
            (
                f"sandbox around `python -c pass` ({'namespaces' if result.isolated else 'no namespaces'})",
                wall,
                cpu,
            )
        )
        course = nbgrader_app.course_copy(REPO, tmp / "course", [lesson])
        grader = grade.Grader(course, lesson, tmp, quiet=True)
        grader.run_dir = tmp / "run"
        _, wall, cpu = _timed(grader.base_gradebook)
        rows.append(
            ("per run: base gradebook (nbgrader generate_assignment; cached after)", wall, cpu)
        )
        _, wall, cpu = _timed(grader.time_limits)
        rows.append(("per run: reference times (one plain execution; cached after)", wall, cpu))
        subs = _submit(tmp, lesson, "s000", nbformat.read(notebook, as_version=4))
        records, wall, cpu = _timed(
            grade.grade, course, lesson, subs, out=tmp / "g.csv", quiet=True
        )
        record = records[0]
        job, job_cpu = record.get("timings", {}), record.get("cpu_timings", {})
        rows.append(("**grading the notebook, caches warm (whole `grade` call)**", wall, cpu))
        rows.append(
            (
                "  job, as the grader saw it (repair, copies, sandbox, record)",
                record["seconds"],
                None,
            )
        )
        for key, label in (
            ("imports", "  in the job: interpreter + trusted imports (torch, checks, nbgrader)"),
            ("autograde", "  in the job: nbgrader autograde (fork: kernel start, cells, tests)"),
            ("results", "  in the job: scores from the gradebook, outputs"),
            ("recheck", "  in the job: clean re-check (forked child runs the cells, judge)"),
        ):
            if key in job:
                rows.append((label, job[key], job_cpu.get(key)))
        rest = wall - record["seconds"]
        rows.append(("  outside the job: records, CSV, gradebook merge", rest, None))
    print("| part | wall (s) | CPU (s) |")
    print("|---|---|---|")
    for label, wall, cpu in rows:
        print(f"| {label} | {wall:.2f} | {'' if cpu is None else f'{cpu:.2f}'} |")


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
    print("| student | wall (s) | CPU (s) | score | reason |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="bench-hang-") as tmp:
        tmp = Path(tmp)
        course = _prepared_course(tmp, lesson)
        for i, (label, nb) in enumerate(cases.items()):
            subs = _submit(tmp, lesson, f"s{i:03d}", nb)
            records, wall, cpu = _timed(grade.grade, course, lesson, subs, quiet=True)
            r = next(r for r in records if r["student"] == f"s{i:03d}")
            print(
                f"| {label} | {wall:.1f} | {cpu:.1f} | {r['score']:g}/{r['max_score']:g} | "
                f"{(r['reason'] or '')[:160]} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lesson", default="02_qkv_attention")
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--per-lesson", action="store_true", help="one student, every lesson")
    parser.add_argument("--cost", action="store_true", help="graded against plain, per lesson")
    parser.add_argument("--lessons", nargs="*", help="for --cost (default: every lesson)")
    parser.add_argument("--breakdown", action="store_true", help="where one notebook's time goes")
    parser.add_argument("--hang", action="store_true", help="hanging and looping students")
    args = parser.parse_args()
    if args.cost:
        every = sorted(p.name for p in (REPO / "solutions").iterdir() if p.is_dir())
        cost(args.lessons or every)
        return
    if args.breakdown:
        breakdown(args.lesson)
        return
    if args.hang:
        hang(args.lesson)
        return
    if args.per_lesson:
        per_lesson()
        return
    print(
        f"lesson {args.lesson}, {args.students} students, load {os.getloadavg()[0]:.1f}, "
        f"{os.cpu_count()} CPUs, sandbox: {sandbox.namespaces_unavailable() or 'namespaces'}"
    )
    rounds = [one_round(args.lesson, args.students, jobs) for jobs in (1, 2)]
    print("| jobs | students | wall (s) | CPU (s) | wall per student (s) | full marks |")
    print("|---|---|---|---|---|---|")
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
