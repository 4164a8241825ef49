"""One function per command of ``transformer-lab`` (``cli.py`` parses the arguments and calls
these): each takes the course folder and the parsed options, prints what the command reports and
returns the exit status."""

from __future__ import annotations

import sys
from pathlib import Path

from . import gradebook, nbgrader_app
from .course import collected_dir, course_root, exchange_root, require_lesson


def open_course(course_dir: str | None) -> Path:
    """The course a command works on (``--course-dir``, else the one it is run in), named in the
    command's first line of output."""
    root = course_root(course_dir)
    print(f"course: {root}", flush=True)
    return root


def generate(course: Path, assignments: list[str] | None) -> int:
    nbgrader_app.generate(course, assignments or None)
    return 0


def time_reference(course: Path, assignments: list[str] | None) -> int:
    """`time-reference`: time each lesson's reference solution as a student's notebook is run and
    write the times the course ships (`autograder/cell_times/<lesson>.json`), so that a first
    grading measures nothing. Run it after a solution changes (`make reference-times`)."""
    import tempfile

    from . import cell_limits
    from .course import assignments as all_assignments
    from .judge import time_notebook

    failures = 0
    for assignment in assignments or all_assignments(course):
        require_lesson(course, assignment)
        with tempfile.TemporaryDirectory(prefix="time-reference-") as tmp:

            def measure(notebook: Path) -> dict[str, float]:
                nonlocal failures
                times, failed = time_notebook(notebook, Path(tmp))
                if failed:
                    failures += 1
                    print(
                        f"error: the reference solution fails {', '.join(failed)}", file=sys.stderr
                    )
                return times

            path = cell_limits.ship_reference_times(course, assignment, measure)
        print(f"{assignment}: {path.relative_to(course)}", flush=True)
    return 1 if failures else 0


def autograde(course: Path, assignment: str, notebooks: list[Path], student: str | None) -> int:
    student = student or ("student" if notebooks else "*")
    if notebooks:
        nbgrader_app.submit(course, assignment, notebooks, student)
    nbgrader_app.autograde(course, assignment, student)
    for (who, lesson, name), (score, max_score) in gradebook.all_scores(course).items():
        if student in ("*", who):
            print(f"{who} {lesson}/{name}: {score:g} / {max_score:g}")
    return 0


def keep_manual_grades(course: Path, assignments: list[str]) -> None:
    """Take the manual grades formgrader wrote into the gradebook into the kept ones (`manual`),
    before a command reads the grades."""
    from . import manual

    for assignment in assignments:
        taken = manual.harvest(course, assignment)
        if taken:
            print(f"{assignment}: {taken} manual grades taken from formgrader")


def grade_manual(course: Path, assignment: str, table: Path) -> int:
    """`grade-manual`: manual scores and comments from a CSV (student,grade_id,score[,comment])."""
    from . import manual

    require_lesson(course, assignment)
    try:
        grades = manual.import_csv(course, assignment, table)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    n = sum(len(cells) for cells in grades.values())
    print(f"{manual.store_path(course, assignment)}: {n} manual grades kept")
    return 0


def feedback(
    course: Path, assignment: str, students: list[str] | None, lms_zip: Path | None = None
) -> int:
    from .feedback import feedback as student_feedback

    keep_manual_grades(course, [assignment])
    for path in student_feedback(course, assignment, students or None):
        print(path)
    if lms_zip is not None:
        from .lms_feedback import canvas_zip

        made = canvas_zip(course, assignment, lms_zip, students or None)
        print(f"{made.path}: {len(made.members)} pages for Canvas's bulk upload")
        for student, why in made.left_out:
            print(f"  not in the zip: {student}: {why}")
    return 0


EXCHANGE_WORD = "exchange"  # SOURCE / --exchange value meaning "the configured exchange"


def release(course: Path, assignment: str, exchange: str | None) -> int:
    from .release import release as release_assignment

    if exchange == EXCHANGE_WORD:
        exchange = exchange_root(course)
    release_assignment(course, assignment, None if exchange is None else Path(exchange))
    return 0


def collect(
    course: Path, source: str, assignment: str, out: Path | None, pattern: str | None
) -> int:
    from .collect import collect as collect_submissions

    where = exchange_root(course) if source == EXCHANGE_WORD else Path(source)
    result = collect_submissions(
        where, assignment, out or collected_dir(course, assignment), pattern=pattern
    )
    print(result.summary())
    return 1 if result.problems else 0


def _intake(course: Path, assignment: str, submissions: Path) -> tuple[Path, list]:
    """The folder to grade and the files placed nowhere: an LMS zip or download is collected
    first (into autograder/work/collected/); a folder `collect` made keeps its report."""
    from .collect import collect as collect_submissions
    from .collect import read_report
    from .plain_text import shown

    if submissions.is_file() or (
        submissions.is_dir() and not any(submissions.glob(f"*/{assignment}"))
    ):
        result = collect_submissions(submissions, assignment, collected_dir(course, assignment))
        print(result.summary(), flush=True)
        return result.out, result.problems
    report = read_report(submissions)
    problems = report["unattributed"] + report["ambiguous"] + report["not_placed"]
    for name, why in problems:  # the students' names: their control characters escaped
        print(shown(f"  NOT PLACED by collect: {name}: {why}"), flush=True)
    return submissions, problems


def grade(
    course: Path,
    assignment: str,
    submissions: Path,
    *,
    out: Path,
    jobs: int,
    force: bool,
    allow_older: bool = False,
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
    problems = []
    if submissions.exists():
        submissions, problems = _intake(course, assignment, submissions)
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
            allow_older=allow_older,
            students=students,
            limits=limits,
            isolate=isolate,
        )
    except SandboxUnavailable as error:  # nothing graded: say how to get a box
        print(f"error: {error}", file=sys.stderr)
        return 2
    bad = sum(r["status"] != "graded" for r in records)
    print(f"{len(records)} students in {out} ({bad} ungradable)")
    from .records import stale_records

    stale = stale_records(course, assignment, records)
    if stale:
        print(
            f"warning: {len(stale)} records were graded against another version of "
            f"{assignment}; regrade them with --force (release again first):"
        )
        for student, why in sorted(stale.items()):
            print(f"  stale: {student}: {why}")
    if problems:
        print(
            f"error: {len(problems)} files could not be attributed to one student or placed "
            "(listed above): place them by hand in <student>/<assignment>/ and grade again",
            file=sys.stderr,
        )
        return 1
    return 0


def export(course: Path, out: Path, assignment: str | None, wide: bool = False) -> int:
    from .export import export as export_csv
    from .export import export_wide
    from .records import load_records

    keep_manual_grades(
        course,
        [assignment] if assignment else sorted({r["assignment"] for r in load_records(course)}),
    )
    print((export_wide if wide else export_csv)(course, out, assignment))
    return 0


def report(course: Path, assignment: str, out_dir: Path | None) -> int:
    from .report import build_report

    keep_manual_grades(course, [assignment])
    out_dir = out_dir or course / "autograder" / "work" / "reports" / assignment
    print(build_report(course, assignment, out_dir))
    return 0
