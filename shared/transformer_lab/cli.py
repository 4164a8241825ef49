"""Course commands: ``python -m transformer_lab.cli <command>`` (or ``transformer-lab <command>``).

    generate [ASSIGNMENT ...]      regenerate exercises/ from solutions/ (all lessons by default)
    autograde ASSIGNMENT NB.ipynb  grade submitted notebook(s) for one student; prints the scores
    progress                       which parts of your own package are yours

Instructors (one command per step; see INSTRUCTORS.md):
    release ASSIGNMENT [--exchange DIR]           generate + hand out
    collect SOURCE ASSIGNMENT --out DIR            exchange / LMS zip or folder -> nbgrader layout
    grade ASSIGNMENT SUBMISSIONS --out grades.csv [--jobs N] [--force] [--students ...]
                                                   sandboxed, parallel, resumable autograding
    feedback ASSIGNMENT [--student S ...]          feedback HTML per student (no hidden tests)
    export [--out grades.csv] [--assignment A]     CSV of every result record
    report ASSIGNMENT [--out-dir DIR]              class report: distribution, pass rates, mistakes

nbgrader only finds its configuration in the current folder, so every nbgrader step runs with
``autograder/`` as its working directory; ``--course-dir`` grades a copy of the course instead
(the tests use it so parallel runs never share a gradebook).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat


def course_root(path: str | os.PathLike | None = None) -> Path:
    """The course folder: the given one, else the repository this package was installed from."""
    if path is not None:
        return Path(path).resolve()
    root = Path(__file__).resolve().parents[2]
    if not (root / "autograder" / "nbgrader_config.py").is_file():
        raise SystemExit(f"no autograder/nbgrader_config.py under {root}: pass --course-dir")
    return root


def _nbgrader(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run one nbgrader command with the course's configuration."""
    env = dict(os.environ, TRANSFORMER_LAB_COURSE_ROOT=str(root), PYTHONHASHSEED="0")
    # nbgrader runs `alembic` (its database migrations) from PATH: use this environment's.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    command = [sys.executable, "-m", "nbgrader", *args]
    result = subprocess.run(
        command, cwd=root / "autograder", env=env, capture_output=True, text=True
    )
    if check and result.returncode != 0:
        raise RuntimeError(
            f"`nbgrader {' '.join(args)}` failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


def assignments(root: Path) -> list[str]:
    """Every lesson in solutions/ (folders NN_topic holding NN_topic.ipynb)."""
    return sorted(
        p.parent.name for p in (root / "solutions").glob("*/*.ipynb") if p.stem == p.parent.name
    )


def generate(root: Path, names: list[str] | None = None, quiet: bool = False) -> list[Path]:
    """`nbgrader generate_assignment --force` for each lesson; output is byte-identical run to run."""
    written = []
    for name in names or assignments(root):
        _nbgrader(root, "generate_assignment", name, "--force")
        for nb_path in sorted((root / "exercises" / name).glob("*.ipynb")):
            _normalise(nb_path)
            written.append(nb_path)
        if not quiet:
            print(f"generated exercises/{name}")
    return written


def course_copy(source: Path, dest: Path, lessons: list[str], generate_them: bool = True) -> Path:
    """A course folder at `dest` holding only `lessons` (solutions, exercises and the autograder
    configuration of `source`), for trial grading runs that must not touch the real gradebook;
    with `generate_them` the lessons are generated, so its own gradebook knows them."""
    dest = Path(dest)
    for lesson in lessons:
        for part in ("solutions", "exercises"):
            shutil.copytree(Path(source) / part / lesson, dest / part / lesson)
    (dest / "autograder").mkdir(parents=True)
    for path in (Path(source) / "autograder").glob("*.py"):
        shutil.copy(path, dest / "autograder" / path.name)
    if generate_them:
        generate(dest, list(lessons), quiet=True)
    return dest


def _normalise(path: Path) -> None:
    """Write with nbformat's canonical formatting (sorted keys, one trailing newline)."""
    nb = nbformat.read(path, as_version=4)
    path.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")


def repair(submission: Path, released: Path) -> int:
    """Restore nbgrader metadata that an editor stripped, matching cells to the released notebook.

    Returns the number of cells repaired. Cells are matched by id, then by identical source.
    """
    nb = nbformat.read(submission, as_version=4)
    ref = nbformat.read(released, as_version=4)
    by_id = {c.get("id"): c for c in ref.cells if "nbgrader" in c.metadata}
    by_source = {c.source: c for c in ref.cells if "nbgrader" in c.metadata}
    repaired = 0
    for cell in nb.cells:
        if "nbgrader" in cell.metadata:
            continue
        match = by_id.get(cell.get("id")) or by_source.get(cell.source)
        if match is not None:
            cell.metadata["nbgrader"] = json.loads(json.dumps(match.metadata["nbgrader"]))
            repaired += 1
    if repaired:
        nbformat.write(nb, submission)
    return repaired


def submit(root: Path, assignment: str, notebooks: list[Path], student: str = "student") -> Path:
    """Place notebooks as `student`'s submission, restoring stripped nbgrader metadata."""
    _require_lesson(root, assignment)
    missing = [str(p) for p in notebooks if not Path(p).is_file()]
    if missing:
        raise SystemExit(f"no such notebook: {', '.join(missing)}")
    target = root / "autograder" / "work" / "submitted" / student / assignment
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for nb_path in notebooks:
        dest = target / Path(nb_path).name
        shutil.copyfile(nb_path, dest)
        released = root / "exercises" / assignment / Path(nb_path).name
        if released.is_file():
            repair(dest, released)
    return target


def _require_lesson(root: Path, assignment: str) -> str:
    lessons = assignments(root)
    if assignment not in lessons:
        raise SystemExit(
            f"no lesson named {assignment!r} in solutions/ (lessons: {', '.join(lessons)})"
        )
    return assignment


def _gradebook_assignments(root: Path) -> set[str]:
    from nbgrader.api import Gradebook

    db = root / "autograder" / "work" / "gradebook.db"
    if not db.exists():
        return set()
    with Gradebook(f"sqlite:///{db}") as gb:
        return {a.name for a in gb.assignments}


def autograde(root: Path, assignment: str = "*", student: str = "*") -> None:
    """Autograde every submission matching the assignment and student globs (one nbgrader run).

    A lesson the gradebook does not know yet (a fresh checkout) is generated first, so that its
    test cells and points are registered.
    """
    lessons = assignments(root)
    if assignment != "*" and assignment not in lessons:
        raise SystemExit(
            f"no lesson named {assignment!r} in solutions/ (lessons: {', '.join(lessons)})"
        )
    wanted = lessons if assignment == "*" else [assignment]
    unknown = [name for name in wanted if name not in _gradebook_assignments(root)]
    if unknown:
        generate(root, unknown, quiet=True)
    args = ["autograde", assignment, "--create", "--force"]
    if student != "*":
        args += ["--student", student]
    _nbgrader(root, *args)


def scores(root: Path, assignment: str, student: str) -> dict[str, tuple[float, float]]:
    from nbgrader.api import Gradebook

    url = f"sqlite:///{root / 'autograder' / 'work' / 'gradebook.db'}"
    with Gradebook(url) as gb:
        submission = gb.find_submission(assignment, student)
        return {nb.name: (float(nb.score), float(nb.max_score)) for nb in submission.notebooks}


def all_scores(root: Path) -> dict[tuple[str, str, str], tuple[float, float]]:
    """{(student, assignment, notebook): (score, max_score)} for every graded submission."""
    from nbgrader.api import Gradebook

    url = f"sqlite:///{root / 'autograder' / 'work' / 'gradebook.db'}"
    result = {}
    with Gradebook(url) as gb:
        for assignment in gb.assignments:
            for submission in assignment.submissions:
                for nb in submission.notebooks:
                    key = (submission.student.id, assignment.name, nb.name)
                    result[key] = (float(nb.score), float(nb.max_score))
    return result


def feedback(root: Path, assignment: str, student: str | None = None) -> list[Path]:
    args = ["generate_feedback", assignment, "--force"]
    if student:
        args += ["--student", student]
    _nbgrader(root, *args)
    return sorted((root / "autograder" / "work" / "feedback").glob(f"*/{assignment}/*.html"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="transformer-lab", description=__doc__.split("\n")[0])
    parser.add_argument("--course-dir", help="course folder (default: this repository)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("generate", help="regenerate exercises/ from solutions/")
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

    sub.add_parser("progress", help="which parts of your package are yours")

    p = sub.add_parser("release", help="generate an assignment and hand it out")
    p.add_argument("assignment")
    p.add_argument(
        "--exchange", type=Path, help="nbgrader exchange root (default: none, for an LMS)"
    )

    p = sub.add_parser("collect", help="exchange or LMS download -> <out>/<student>/<assignment>/")
    p.add_argument("source", type=Path, help="exchange root, inbound/ folder, LMS zip or folder")
    p.add_argument("assignment")
    p.add_argument("--out", type=Path, required=True, help="folder for the nbgrader layout")
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
    p.add_argument("--force", action="store_true", help="regrade students already graded")
    p.add_argument("--students", nargs="*", help="only these students")
    p.add_argument("--memory-gib", type=float, default=4.0, help="memory cap per job (default 4)")
    p.add_argument(
        "--wall-seconds", type=float, default=900.0, help="cap per notebook (default 900)"
    )
    p.add_argument("--cell-timeout", type=float, help="per-cell timeout (default: nbgrader_config)")
    p.add_argument("--no-sandbox", action="store_true", help="no namespaces (rlimits only)")
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the clean re-check (only for tests that are not transformer_lab checks)",
    )

    p = sub.add_parser("export", help="CSV of every graded submission")
    p.add_argument("--out", type=Path, default=Path("grades.csv"))
    p.add_argument("--assignment", help="only this assignment")

    p = sub.add_parser("report", help="class report for an assignment")
    p.add_argument("assignment")
    p.add_argument("--out-dir", type=Path, help="default: autograder/work/reports/ASSIGNMENT")

    args = parser.parse_args(argv)
    if args.command == "progress":
        from .student import progress

        progress()
        return 0
    root = course_root(args.course_dir)
    if args.command == "generate":
        generate(root, args.assignments or None)
    elif args.command == "autograde":
        student = args.student or ("student" if args.notebooks else "*")
        if args.notebooks:
            submit(root, args.assignment, args.notebooks, student)
        autograde(root, args.assignment, student)
        for (who, lesson, name), (score, max_score) in all_scores(root).items():
            if student in ("*", who):
                print(f"{who} {lesson}/{name}: {score:g} / {max_score:g}")
    elif args.command == "feedback":
        from .instructor.feedback import feedback as student_feedback

        for path in student_feedback(root, args.assignment, args.student or None):
            print(path)
    else:
        return _instructor(root, args)
    return 0


def _instructor(root: Path, args: argparse.Namespace) -> int:
    """The instructor's commands (modules imported only when used)."""
    if args.command == "release":
        from .instructor.release import release

        release(root, args.assignment, args.exchange)
    elif args.command == "collect":
        from .instructor.collect import collect

        result = collect(args.source, args.assignment, args.out, pattern=args.pattern)
        print(result.summary())
        return 1 if result.unattributed else 0
    elif args.command == "grade":
        from .instructor.grade import grade
        from .instructor.sandbox import GiB, Limits

        _require_lesson(root, args.assignment)
        limits = Limits(
            memory_bytes=int(args.memory_gib * GiB),
            wall_seconds=args.wall_seconds,
            cell_timeout=args.cell_timeout,
        )
        records = grade(
            root,
            args.assignment,
            args.submissions,
            out=args.out,
            jobs=args.jobs,
            force=args.force,
            students=args.students,
            limits=limits,
            isolate=not args.no_sandbox,
            verify=not args.no_verify,
        )
        bad = sum(r["status"] != "graded" for r in records)
        print(f"{len(records)} students in {args.out} ({bad} ungradable)")
    elif args.command == "export":
        from .instructor.export import export

        print(export(root, args.out, args.assignment))
    elif args.command == "report":
        from .instructor.report import build_report

        out_dir = args.out_dir or root / "autograder" / "work" / "reports" / args.assignment
        print(build_report(root, args.assignment, out_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
