"""One function per command of ``transformer-lab`` (``cli.py`` parses the arguments and calls
these): each takes the course folder and the parsed options, prints what the command reports and
returns the exit status."""

from __future__ import annotations

import sys
from pathlib import Path

from . import nbgrader_app
from .course import course_root, require_lesson


def open_course(course_dir: str | None) -> Path:
    """The course a command works on (``--course-dir``, else the one it is run in), named in the
    command's first line of output."""
    root = course_root(course_dir)
    print(f"course: {root}", flush=True)
    return root


def generate(course: Path, assignments: list[str] | None) -> int:
    nbgrader_app.generate(course, assignments or None)
    return 0


def autograde(course: Path, assignment: str, notebooks: list[Path], student: str | None) -> int:
    student = student or ("student" if notebooks else "*")
    if notebooks:
        nbgrader_app.submit(course, assignment, notebooks, student)
    nbgrader_app.autograde(course, assignment, student)
    for (who, lesson, name), (score, max_score) in nbgrader_app.all_scores(course).items():
        if student in ("*", who):
            print(f"{who} {lesson}/{name}: {score:g} / {max_score:g}")
    return 0


def feedback(course: Path, assignment: str, students: list[str] | None) -> int:
    from .feedback import feedback as student_feedback

    for path in student_feedback(course, assignment, students or None):
        print(path)
    return 0


def release(course: Path, assignment: str, exchange: Path | None) -> int:
    from .release import release as release_assignment

    release_assignment(course, assignment, exchange)
    return 0


def collect(source: Path, assignment: str, out: Path, pattern: str | None) -> int:
    from .collect import collect as collect_submissions

    result = collect_submissions(source, assignment, out, pattern=pattern)
    print(result.summary())
    return 1 if result.unattributed else 0


def grade(
    course: Path,
    assignment: str,
    submissions: Path,
    *,
    out: Path,
    jobs: int,
    force: bool,
    scheduler: str | None = None,
    students: list[str] | None,
    memory_gib: float,
    wall_seconds: float,
    cell_timeout: float | None,
    isolate: bool,
) -> int:
    from .grade import grade as grade_class
    from .sandbox import GiB, Limits, SandboxUnavailable

    require_lesson(course, assignment)
    limits = Limits(
        memory_bytes=int(memory_gib * GiB), wall_seconds=wall_seconds, cell_timeout=cell_timeout
    )
    try:
        records = grade_class(
            course,
            assignment,
            submissions,
            out=out,
            jobs=jobs,
            scheduler=scheduler,
            force=force,
            students=students,
            limits=limits,
            isolate=isolate,
        )
    except SandboxUnavailable as error:  # nothing graded: say how to get a box
        print(f"error: {error}", file=sys.stderr)
        return 2
    bad = sum(r["status"] != "graded" for r in records)
    print(f"{len(records)} students in {out} ({bad} ungradable)")
    return 0


def export(course: Path, out: Path, assignment: str | None) -> int:
    from .export import export as export_csv

    print(export_csv(course, out, assignment))
    return 0


def report(course: Path, assignment: str, out_dir: Path | None) -> int:
    from .report import build_report

    out_dir = out_dir or course / "autograder" / "work" / "reports" / assignment
    print(build_report(course, assignment, out_dir))
    return 0
