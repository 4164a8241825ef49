"""Parallel grading: the same N submissions graded with --jobs 1, then --jobs 2, in one run.

    .venv/bin/python benchmarks/bench_grading.py [--lesson 02_qkv_attention] [--students 4]
    .venv/bin/python benchmarks/bench_grading.py --per-lesson     # one student, every lesson


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lesson", default="02_qkv_attention")
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--per-lesson", action="store_true", help="one student, every lesson")
    args = parser.parse_args()
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
