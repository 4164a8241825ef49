"""Every nbgrader command, run with the course's configuration (its gradebook: `gradebook`).

nbgrader only finds its configuration in the current folder, so every nbgrader command runs with
``<course>/autograder/`` as its working directory; the gradebook is
``<course>/autograder/work/gradebook.db``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from . import cell_limits
from .course import assignments, require_lesson
from .gradebook import gradebook_assignments, gradebook_path
from .notebook_format import repair

# ----------------------------------------------------------------------------------------------
# nbgrader's commands.


def run_nbgrader(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run one nbgrader command with the course's configuration."""
    return _run(root, ["-m", "nbgrader", *args], f"nbgrader {' '.join(args)}", check)


def run_python(root: Path, code: str, *args: str) -> subprocess.CompletedProcess:
    """Run `code` (which drives nbgrader itself) as nbgrader's commands run."""
    return _run(root, ["-c", code, *args], f"nbgrader for {' '.join(args)}", True)


def _run(root: Path, argv: list[str], what: str, check: bool) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRANSFORMER_LAB_COURSE_ROOT=str(root), PYTHONHASHSEED="0")
    # nbgrader runs `alembic` (its database migrations) from PATH: use this environment's.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    result = subprocess.run(
        [sys.executable, *argv], cwd=root / "autograder", env=env, capture_output=True, text=True
    )
    if check and result.returncode != 0:
        raise RuntimeError(
            f"`{what}` failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


GENERATE = (
    "import sys; from transformer_lab_grader.nbgrader_app import generate_here; "
    "[generate_here(name) for name in sys.argv[1:]]"
)


def generate(root: Path, names: list[str] | None = None, quiet: bool = False) -> list[Path]:
    """`nbgrader generate_assignment --force` for each lesson, all in one nbgrader process
    (`generate_here`: no `alembic heads` subprocess, nbgrader imported once, not once a lesson);
    output is byte-identical run to run."""
    names = list(names or assignments(root))
    written = []
    if names:
        run_python(root, GENERATE, *names)
    for name in names:
        for nb_path in sorted((root / "exercises" / name).glob("*.ipynb")):
            normalise(nb_path)
            written.append(nb_path)
        if not quiet:
            print(f"generated exercises/{name}")
    return written


def normalise(path: Path) -> None:
    """Write with nbformat's canonical formatting (sorted keys, one trailing newline)."""
    nb = nbformat.read(path, as_version=4)
    path.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")


def course_copy(source: Path, dest: Path, lessons: list[str], generate_them: bool = True) -> Path:
    """A course folder at `dest` holding only `lessons` (solutions, exercises, the autograder
    configuration of `source` and the reference times it ships), for trial grading runs that
    must not touch the real gradebook; with `generate_them` the lessons are generated, so its own
    gradebook knows them."""
    dest = Path(dest)
    for lesson in lessons:
        for part in ("solutions", "exercises"):
            shutil.copytree(Path(source) / part / lesson, dest / part / lesson)
    (dest / "autograder").mkdir(parents=True)
    for path in (Path(source) / "autograder").glob("*.py"):
        shutil.copy(path, dest / "autograder" / path.name)
    for lesson in lessons:  # the reference times the course ships (`time-reference`)
        shipped, copied = (cell_limits.shipped_path(c, lesson) for c in (source, dest))
        if shipped.is_file():
            copied.parent.mkdir(exist_ok=True)
            shutil.copy(shipped, copied)
    if generate_them:
        generate(dest, list(lessons), quiet=True)
    return dest


def submit(root: Path, assignment: str, notebooks: list[Path], student: str = "student") -> Path:
    """Place notebooks as `student`'s submission, restoring stripped nbgrader metadata."""
    require_lesson(root, assignment)
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
            nb = nbformat.read(dest, as_version=4)
            if repair(nb, nbformat.read(released, as_version=4)).changed:
                nbformat.write(nb, dest)
    return target


def autograde(root: Path, assignment: str = "*", student: str = "*") -> None:
    """Autograde every submission matching the assignment and student globs (one nbgrader run).

    A lesson the gradebook does not know yet (a fresh checkout) is generated first, so that its
    test cells and points are registered.
    """
    lessons = assignments(root)
    if assignment != "*":
        require_lesson(root, assignment)
    wanted = lessons if assignment == "*" else [assignment]
    unknown = [name for name in wanted if name not in gradebook_assignments(root)]
    if unknown:
        generate(root, unknown, quiet=True)
    args = ["autograde", assignment, "--create", "--force"]
    if student != "*":
        args += ["--student", student]
    run_nbgrader(root, *args)


def generate_feedback(root: Path, assignment: str, student: str | None = None) -> list[Path]:
    """`nbgrader generate_feedback` (the course's HideHiddenTests filter); returns the pages."""
    args = ["generate_feedback", assignment, "--force"]
    if student:
        args += ["--student", student]
    run_nbgrader(root, *args)
    return sorted((root / "autograder" / "work" / "feedback").glob(f"*/{assignment}/*.html"))


def release_assignment(root: Path, assignment: str, exchange: Path, course_id: str) -> None:
    """`nbgrader release_assignment` into `<exchange>/<course_id>/outbound/<assignment>`."""
    run_nbgrader(
        root,
        "release_assignment",
        assignment,
        "--force",
        f"--Exchange.root={exchange}",
        f"--CourseDirectory.course_id={course_id}",
    )


# The base gradebook's `generate_assignment`, run as a grading job is (`run_setup.RunSetup._launch`:
# forked from the pre-imported worker where there is one): sys.argv[1] is the assignment.
PREPARE = (
    "import sys; from transformer_lab_grader.nbgrader_app import generate_here; "
    "generate_here(sys.argv[1])"
)


def prepare_gradebook(course: Path, assignment: str, base: Path, run) -> Path:
    """A fresh gradebook under `base` with the assignment registered (`generate_assignment` on
    a copy of the autograder configuration and the source notebook); returns its path.
    `run(command, cwd)` runs the command and gives (exit code, output)."""
    (base / "autograder").mkdir(parents=True)
    for path in (course / "autograder").glob("*.py"):
        shutil.copy(path, base / "autograder" / path.name)
    source = course / "solutions" / assignment
    if not source.is_dir():
        raise SystemExit(f"no solutions/{assignment}/: grading needs the source notebook")
    shutil.copytree(source, base / "solutions" / assignment)
    (base / "exercises").mkdir()
    code, output = run([sys.executable, "-c", PREPARE, assignment], base / "autograder")
    db = gradebook_path(base)
    if code != 0 or not db.is_file():
        raise RuntimeError(f"could not prepare the gradebook (exit {code}):\n{output}")
    return db


def generate_here(assignment: str) -> None:
    """`nbgrader generate_assignment --force` in this process (its folder: the autograder/ of a
    course copy), the new gradebook stamped with nbgrader's migration head read here
    (`alembic_head`) instead of by nbgrader's `alembic heads` subprocess: a fresh interpreter
    that imports nbgrader, about 6 CPU s (benchmarks/history/journal.md §29). Only for a process
    of its own: it replaces `nbgrader.api.get_alembic_version` there."""
    from nbgrader import api
    from nbgrader.apps.generateassignmentapp import GenerateAssignmentApp
    from nbgrader.apps.nbgraderapp import NbGraderApp

    api.get_alembic_version = alembic_head
    try:
        NbGraderApp.launch_instance(argv=["generate_assignment", assignment, "--force"])
    except SystemExit as stop:
        if stop.code not in (None, 0):
            raise
    finally:  # the next lesson in this process gets apps of its own
        GenerateAssignmentApp.clear_instance()
        NbGraderApp.clear_instance()


def alembic_head() -> str:
    """The head revision of nbgrader's gradebook migrations, what `alembic heads` prints first."""
    return migrations().get_current_head()


def migrations():
    """nbgrader's gradebook migrations (an alembic `ScriptDirectory`), read in this process."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    config = Config()
    config.set_main_option("script_location", ALEMBIC_DIR)
    return ScriptDirectory.from_config(config)


def autograde_in_job(course: Path, assignment: str, student: str, job: Path, log) -> int:
    """`nbgrader autograde` of one student inside a grading job, in this process, with
    `JudgedExecute` in place of nbgrader's Execute (`job`: the job's judge settings, JSON).
    nbgrader's log goes to `log`. Returns nbgrader's exit code."""
    from nbgrader.apps.nbgraderapp import NbGraderApp

    folder = course / "autograder"
    config = autograde_config(folder, job)
    args = ["autograde", assignment, "--student", student, "--create", "--force"]
    with _working_folder(folder), contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        try:
            NbGraderApp.launch_instance(argv=args, config=config)
        except SystemExit as stop:
            return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        finally:
            NbGraderApp.clear_instance()
    return 0


@contextlib.contextmanager
def _working_folder(folder: Path):
    """nbgrader finds the course's configuration in its working folder."""
    old = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(old)


def course_config(folder: Path):
    """The course's nbgrader_config.py in `folder` (nbgrader's working folder), as a traitlets
    Config (empty: no such file, or one nbgrader will report as broken itself). The config
    passed to nbgrader's app below takes precedence over the file's, so what the file sets for
    the same settings must be carried into it."""
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    if not (folder / "nbgrader_config.py").is_file():
        return Config()
    try:
        return PyFileConfigLoader("nbgrader_config.py", path=str(folder)).load_config()
    except Exception:  # noqa: BLE001 - nbgrader reports a broken config file itself
        return Config()


EXECUTE_NAMES = ("nbgrader.preprocessors.Execute", "nbgrader.preprocessors.execute.Execute")


def autograde_config(folder: Path, job: Path):
    """The config nbgrader's app gets in a grading job (`folder`: its working folder, with the
    course's nbgrader_config.py): the course's autograde preprocessors with
    `judged_execute.JudgedExecute` in place of nbgrader's Execute, told where the job's settings
    are."""
    from nbgrader.converters import Autograde

    own = course_config(folder)
    config = type(own)()
    configured = own.Autograde.get("autograde_preprocessors")
    if configured is None:
        configured = Autograde.class_traits()["autograde_preprocessors"].default()
    from .judged_execute import JudgedExecute

    judged = JudgedExecute
    config.Autograde.autograde_preprocessors = [judged if _is_execute(p) else p for p in configured]
    config.JudgedExecute.job = str(job)
    return config


def _is_execute(preprocessor) -> bool:
    from nbgrader.preprocessors import Execute

    return preprocessor is Execute or preprocessor in EXECUTE_NAMES
