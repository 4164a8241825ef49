"""Students' commands: ``python -m transformer_lab.cli <command>`` (or ``transformer-lab <command>``).

    progress                       which parts of your own package are yours
    presubmit NOTEBOOK.ipynb       before you submit: run it as the grader will; will it grade?

The instructors' commands (generate, autograde, release, collect, grade, feedback, export, report,
grade-manual) belong to the grader, ``autograder/transformer_lab_grader``:
``transformer-lab <command>`` or ``python -m transformer_lab_grader.cli <command>``. Its CLI
offers these student commands too (`add_student_commands`, `run_student`); nothing here imports
the grader.

This module only parses the arguments: each command is one function of the package.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

STUDENT_COMMANDS = ("progress", "presubmit")


def add_student_commands(sub) -> None:
    """The students' subcommands, added to an argparse subparsers object `sub`."""
    sub.add_parser("progress", help="which parts of your package are yours")

    p = sub.add_parser("presubmit", help="run a notebook as the grader will: will it grade?")
    p.add_argument("notebook", type=Path, help="your exercise notebook, as saved")
    p.add_argument("--release", type=Path, help="the released exercise (default: found)")
    p.add_argument("--cell-timeout", type=float, help="seconds a cell may run (default 60)")
    p.add_argument("--name", help=argparse.SUPPRESS)  # the name of a copy (Colab's notebook)
    p.add_argument("--expected", help=argparse.SUPPRESS)  # the name it must have (the last cell)


def run_student(args: argparse.Namespace) -> int:
    """Run the student command `args.command` (one of STUDENT_COMMANDS); its exit status."""
    if args.command == "progress":
        from .student import progress

        progress()
        return 0
    if args.command == "presubmit":
        from .presubmit import main as presubmit

        return presubmit(args)
    raise ValueError(f"not a student command: {args.command!r} (one of {STUDENT_COMMANDS})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m transformer_lab.cli",
        description=__doc__.split("\n")[0],
        epilog="Instructors: `transformer-lab --help` (python -m transformer_lab_grader.cli).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    add_student_commands(sub)
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command is not None and command not in STUDENT_COMMANDS:
        parser.error(
            f"{command!r} is not a student command ({', '.join(STUDENT_COMMANDS)}); an "
            f"instructor's command runs as `transformer-lab {command} ...` or "
            f"`python -m transformer_lab_grader.cli {command} ...`"
        )
    return run_student(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
