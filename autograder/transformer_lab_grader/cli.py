"""Course commands: ``transformer-lab <command>`` (or ``python -m transformer_lab_grader.cli <command>``).

    generate [ASSIGNMENT ...]      regenerate exercises/ from solutions/ (all lessons by default)
    autograde ASSIGNMENT NB.ipynb  grade submitted notebook(s) for one student; prints the scores
    progress                       which parts of your own package are yours
    presubmit NOTEBOOK.ipynb       before you submit: run it as the grader will; will it grade?

Instructors (one command per step; see INSTRUCTORS.md):
    release ASSIGNMENT [--exchange [DIR]]         generate + hand out
    collect SOURCE ASSIGNMENT [--out DIR]          exchange / LMS zip or folder -> nbgrader layout
    grade ASSIGNMENT SUBMISSIONS --out grades.csv [--jobs N] [--force] [--allow-older]
          [--students ...]
          [--scheduler tcp://HOST:PORT]            sandboxed, parallel, resumable autograding
                                                   (on Dask workers with --scheduler)
    feedback ASSIGNMENT [--student S ...] [--lms-zip Z]  feedback HTML per student (no hidden
                                                   tests); a zip for Canvas's bulk upload
    export [--out grades.csv] [--assignment A] [--wide]  CSV of every result record (--wide:
                                                   a row per student, a column per lesson)
    report ASSIGNMENT [--out-dir DIR]              class report: distribution, pass rates, mistakes
    grade-manual ASSIGNMENT CSV                    manual scores and comments
                                                   (student,grade_id,score[,comment]) that last

This module only parses the arguments: each command is one function of
``transformer_lab_grader.commands``; the students' commands (progress, presubmit) are
``transformer_lab.cli``'s, run from here too. A command works on the course it is run in (the current
folder, or the nearest folder above it holding ``autograder/nbgrader_config.py``) or on
``--course-dir``, and names it in its first line of output (``course: PATH``). nbgrader only finds its configuration in the current
folder, so every nbgrader step runs with ``autograder/`` as its working directory (see
``nbgrader_app.py``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from transformer_lab.cli import STUDENT_COMMANDS, add_student_commands, run_student


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="transformer-lab", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--course-dir",
        help="course folder (default: the current folder, or the nearest one above it)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("generate", help="regenerate exercises/ from solutions/")
    p.add_argument("assignments", nargs="*", help="lessons, e.g. 02_qkv_attention (default: all)")

    p = sub.add_parser(
        "time-reference", help="time the reference solutions; write autograder/cell_times/"
    )
    p.add_argument("assignments", nargs="*", help="lessons, e.g. 02_qkv_attention (default: all)")

    p = sub.add_parser(
        "autograde", help="autograde submissions (optionally submit notebooks first)"
    )
    p.add_argument("assignment", help="lesson, or '*' for every submitted lesson")
    p.add_argument("notebooks", nargs="*", type=Path, help="notebooks to submit as --student")
    p.add_argument(
        "--student", default=None, help="student id (default: all; 'student' when submitting)"
    )

    p = sub.add_parser("feedback", help="feedback HTML per student (hidden tests never shown)")
    p.add_argument("assignment")
    p.add_argument("--student", nargs="*", help="only these students (default: all graded)")
    p.add_argument(
        "--lms-zip", type=Path, help="also write the pages into this zip for Canvas's bulk upload"
    )

    add_student_commands(sub)

    p = sub.add_parser("release", help="generate an assignment and hand it out")
    p.add_argument("assignment")
    p.add_argument(
        "--exchange",
        nargs="?",
        const="exchange",
        help="nbgrader exchange root; alone: the one autograder/nbgrader_config.py sets "
        "(default: none, for an LMS)",
    )

    p = sub.add_parser("collect", help="exchange or LMS download -> <out>/<student>/<assignment>/")
    p.add_argument(
        "source",
        help="'exchange' (the configured one), an exchange root, inbound/ folder, LMS zip or folder",
    )
    p.add_argument("assignment")
    p.add_argument(
        "--out", type=Path, help="folder for the layout (default: autograder/work/collected/A)"
    )
    p.add_argument(
        "--pattern", help="regex with a group (?P<student>…) (and optionally (?P<file>…))"
    )

    p = sub.add_parser("grade", help="grade every submission in a sandbox; write grades.csv")
    p.add_argument("assignment")
    p.add_argument(
        "submissions", type=Path, help="folder <student>/<assignment>/*.ipynb, or an LMS zip"
    )
    p.add_argument("--out", type=Path, default=Path("grades.csv"), help="CSV (default grades.csv)")
    p.add_argument("--jobs", type=int, default=1, help="students graded at once (default 1)")
    p.add_argument(
        "--scheduler",
        metavar="tcp://HOST:PORT",
        help="grade on the workers of this Dask scheduler instead of here (--jobs is then unused)",
    )
    p.add_argument("--force", action="store_true", help="regrade students already graded")
    p.add_argument(
        "--allow-older",
        action="store_true",
        help="grade a submission older than the one on record (it replaces the newer one)",
    )
    p.add_argument("--students", nargs="*", help="only these students")
    p.add_argument("--memory-gib", type=float, default=4.0, help="memory cap per job (default 4)")
    p.add_argument(
        "--wall-seconds", type=float, default=900.0, help="cap per notebook (default 900)"
    )
    p.add_argument("--cell-timeout", type=float, help="per-cell timeout (default: nbgrader_config)")
    p.add_argument(
        "--no-sandbox",
        action="store_true",
        help="grade without the bubblewrap box (rlimits only; every record is flagged)",
    )

    p = sub.add_parser("export", help="CSV of every graded submission")
    p.add_argument("--out", type=Path, default=Path("grades.csv"))
    p.add_argument("--assignment", help="only this assignment")
    p.add_argument(
        "--wide", action="store_true", help="one row per student, one column per lesson (LMS)"
    )

    p = sub.add_parser("report", help="class report for an assignment")
    p.add_argument("assignment")
    p.add_argument("--out-dir", type=Path, help="default: autograder/work/reports/ASSIGNMENT")

    p = sub.add_parser("grade-manual", help="manual scores and comments from a CSV")
    p.add_argument("assignment")
    p.add_argument("csv", type=Path, help="columns student,grade_id,score[,comment]")

    args = parser.parse_args(argv)
    if args.command in STUDENT_COMMANDS:
        return run_student(args)
    from . import commands

    root = commands.open_course(args.course_dir)
    if args.command == "collect":
        return commands.collect(root, args.source, args.assignment, args.out, args.pattern)
    if args.command == "generate":
        return commands.generate(root, args.assignments)
    if args.command == "time-reference":
        return commands.time_reference(root, args.assignments)
    if args.command == "autograde":
        return commands.autograde(root, args.assignment, args.notebooks, args.student)
    if args.command == "feedback":
        return commands.feedback(root, args.assignment, args.student, args.lms_zip)
    if args.command == "release":
        return commands.release(root, args.assignment, args.exchange)
    if args.command == "grade":
        return commands.grade(
            root,
            args.assignment,
            args.submissions,
            out=args.out,
            jobs=args.jobs,
            scheduler=args.scheduler,
            force=args.force,
            allow_older=args.allow_older,
            students=args.students,
            memory_gib=args.memory_gib,
            wall_seconds=args.wall_seconds,
            cell_timeout=args.cell_timeout,
            isolate=not args.no_sandbox,
        )
    if args.command == "grade-manual":
        return commands.grade_manual(root, args.assignment, args.csv)
    if args.command == "export":
        return commands.export(root, args.out, args.assignment, args.wide)
    return commands.report(root, args.assignment, args.out_dir)


if __name__ == "__main__":
    raise SystemExit(main())
