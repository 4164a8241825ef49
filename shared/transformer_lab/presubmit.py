"""Before you submit: run your notebook as the grader will, and say whether it will grade.

    transformer-lab presubmit NOTEBOOK [--release EXERCISE.ipynb] [--cell-timeout S]

or the last cell of every exercise, ``presubmit.run("NN_topic.ipynb")``. A student's tool: it
needs only the course package, nbformat and nbclient (JupyterLab and Colab have both), never the
grader.

The notebook, as saved, runs top to bottom in a fresh kernel in a temporary folder, with the
grading settings: quick mode, grading mode (earlier lessons on the reference, nothing saved into
your package), one thread, no progress bars. Each test cell runs as released (the grader
overwrites an edited one), and only its visible checks: a hidden-test block is cut out before
anything runs, and the report never shows a test's text. A cell is stopped at `cell_timeout`;
once one has been stopped, later cells get the grader's floor (10 s), so a loop that many cells
call costs little.

The report, in a few lines: whether it will grade; the cells that raise or run too long; test
cells missing, edited or stripped of their nbgrader metadata (compared with the released
exercise, found in the course folder: ``exercises/*/*.ipynb``, else ``solutions/*/*.ipynb``);
the file name the notebook must have; which visible checks pass. The grader gives a cell
max(10 s, 20 x the reference solution's time for it): presubmit cannot know the reference's
time, so a cell that finishes but takes over 10 s gets a note saying so.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .notebook_cells import is_test_cell, nbgrader_meta, without_hidden_tests
from .notebook_setup import SETUP_ID
from .registry import GRADING_SETTINGS, grading_mode

PRESUBMIT_ENV = "TRANSFORMER_LAB_PRESUBMIT"  # set in presubmit's own kernel: the last cell skips
PRESUBMIT_ID = "presubmit"  # the id of the last cell of every exercise (dropped from the run)
CELL_TIMEOUT = 60.0  # seconds a cell may run here before it is stopped
GRADER_FLOOR = 10.0  # the least time the grader gives any cell (instructor cell_limits.FLOOR)
GRADER_FACTOR = 20.0  # ... and otherwise this many times the reference solution's time for it
TIMEOUT_ENAME = "CellTimeoutError"  # the error nbgrader records for a cell stopped at its limit
SHOWN_ERRORS = 3  # the first errors named; later ones often follow from the first
# What the kernel runs under: the grader's settings, quick mode and presubmit's flag.
RUN_ENV = {**GRADING_SETTINGS, "TRANSFORMER_LAB_QUICK": "1", PRESUBMIT_ENV: "1"}


@dataclasses.dataclass
class Report:
    """What presubmit found. `problems` decide whether the notebook will grade; `checks` is
    {test cell grade id: None when its visible checks pass, else why not}."""

    notebook: str
    expected: str | None
    problems: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    checks: dict[str, str | None] = dataclasses.field(default_factory=dict)

    @property
    def will_grade(self) -> bool:
        return not self.problems

    def text(self) -> str:
        if self.will_grade:
            lines = [f"presubmit: {self.notebook} will grade."]
        else:
            lines = [f"presubmit: {self.notebook} will NOT grade as it is:"]
            lines += [f"  ✗ {problem}" for problem in self.problems]
        if self.expected and self.expected == self.notebook:
            lines.append(f"file name: {self.expected} (right)")
        lines += [f"  note: {note}" for note in self.notes]
        if self.checks:
            passed = [gid for gid, why in self.checks.items() if why is None]
            lines.append(f"visible checks: {len(passed)} of {len(self.checks)} pass")
            lines += [
                f"  {'✓' if why is None else '✗'} {gid}" + ("" if why is None else f": {why}")
                for gid, why in self.checks.items()
            ]
        lines.append(
            "Hidden tests run only when the notebook is graded; nothing was saved into your package."
        )
        return "\n".join(lines)


@dataclasses.dataclass
class CellRun:
    """One executed cell: its time, its limit, and its error (None: it ran cleanly)."""

    seconds: float
    limit: float
    error: tuple[str, str] | None = None  # (ename, first line of evalue)

    @property
    def timed_out(self) -> bool:
        return self.error is not None and self.error[0] == TIMEOUT_ENAME


# ----------------------------------------------------------------------------------------------
# The released exercise, and what the notebook lost or changed of it.


def course_roots(notebook: Path) -> list[Path]:
    """Folders that may hold the course's exercises/: above the notebook, and this package's
    repository (a course used from its checkout)."""
    here = notebook.resolve().parent
    roots = [here, *here.parents, Path(__file__).resolve().parents[2]]
    return [r for r in dict.fromkeys(roots) if (r / "exercises").is_dir()]


def find_release(notebook: Path, nb) -> Path | None:
    """The released exercise this notebook was made from: the one sharing the most graded cells
    (by grade id or cell id, so a renamed file or stripped metadata still matches it). A student
    who works in exercises/ itself edits the release: then its nbgrader source in solutions/
    stands in for it (its test cells less their hidden tests are the released ones)."""
    import nbformat

    mine = {nbgrader_meta(c).get("grade_id") for c in nb.cells} | {c.get("id") for c in nb.cells}
    mine.discard(None)
    best, best_score = None, 0
    for root in course_roots(notebook):
        candidates = [*root.glob("exercises/*/*.ipynb"), *root.glob("solutions/*/*.ipynb")]
        for path in candidates:  # exercises first: on a tie, the release itself
            if path.resolve() == notebook.resolve():
                continue
            try:
                release = nbformat.read(path, as_version=4)
            except Exception:  # a broken file in the course is not the student's problem
                continue
            graded = [c for c in release.cells if nbgrader_meta(c).get("grade_id")]
            score = sum(
                bool({nbgrader_meta(c)["grade_id"], c.get("id")} & mine) for c in graded
            ) + (path.name == notebook.name)
            if score > best_score:
                best, best_score = path, score
        if best is not None:
            return best
    return None


def compare(nb, release) -> tuple[list[str], dict[int, tuple[str, str]], list[str]]:
    """(problems, {cell index: (grade id, released source) of a test cell}, missing test ids).

    A released graded cell is found in `nb` by its grade id, else (metadata stripped) by its cell
    id or its text. Test cells run as released; a missing one cannot run."""
    by_grade_id: dict[str, int] = {}
    by_id, by_source = {}, {}
    for i, cell in enumerate(nb.cells):
        by_grade_id.setdefault(nbgrader_meta(cell).get("grade_id"), i)
        by_id.setdefault(cell.get("id"), i)
        by_source.setdefault(cell.source.strip(), i)
    stripped, edited, missing, tests = [], [], [], {}
    for ref in release.cells:
        gid = nbgrader_meta(ref).get("grade_id")
        if not gid:
            continue
        released = without_hidden_tests(ref.source)  # a source notebook's test cell as released
        i = by_grade_id.get(gid)
        if i is None:
            i = by_id.get(ref.get("id"), by_source.get(released.strip()))
            if i is not None and not nbgrader_meta(nb.cells[i]):
                stripped.append(gid)
            else:
                i = None
        if not is_test_cell(ref):
            continue
        if i is None:
            missing.append(gid)
            continue
        if without_hidden_tests(nb.cells[i].source).strip() != released.strip():
            edited.append(gid)
        tests[i] = (gid, released)
    problems = [
        f"test cell {gid} is missing: copy it back from the released exercise, unchanged"
        for gid in missing
    ]
    problems += [
        f"test cell {gid} was edited: the grader runs the released one (undo your change)"
        for gid in edited
    ]
    if stripped:
        problems.append(
            f"the nbgrader metadata of {len(stripped)} cells is gone ({', '.join(stripped)}): "
            "save the notebook from JupyterLab or Colab, or copy your code into a fresh copy of "
            "the exercise"
        )
    return problems, tests, missing


# ----------------------------------------------------------------------------------------------
# The run.


class _Limits:
    """nbclient's `timeout_func`: `first` for every cell until one is stopped, then the grader's
    floor (never more than `first`)."""

    def __init__(self, first: float):
        self.first = float(first)
        self.stopped = False

    def __call__(self, cell) -> float:
        return self.first if not self.stopped else min(self.first, GRADER_FLOOR)


def execute(nb, cell_timeout: float = CELL_TIMEOUT) -> tuple[dict[int, CellRun], str | None]:
    """Run `nb` (changed in place) in a fresh kernel, in a temporary folder, under RUN_ENV.
    Returns ({cell index: CellRun}, None) or, when the kernel died or did not start, what
    happened."""
    try:
        from nbclient import NotebookClient
        from nbclient.exceptions import DeadKernelError
    except ImportError:
        raise SystemExit(
            "presubmit needs nbclient: `pip install nbclient` (JupyterLab and Colab have it)"
        ) from None
    limits = _Limits(cell_timeout)
    runs: dict[int, CellRun] = {}
    started: dict[int, float] = {}

    def on_execute(cell, cell_index, **_):
        started[cell_index] = time.monotonic()

    def on_executed(cell, cell_index, execute_reply=None, **_):
        content = (execute_reply or {}).get("content", {})
        error = None
        if content.get("status") == "error":
            evalue = str(content.get("evalue", "")).strip().splitlines()
            error = (str(content.get("ename", "Error")), evalue[0][:160] if evalue else "")
        run = CellRun(time.monotonic() - started[cell_index], limits(cell), error)
        runs[cell_index] = run
        limits.stopped = limits.stopped or run.timed_out

    with tempfile.TemporaryDirectory(prefix="transformer-lab-presubmit-") as tmp:
        env = {**os.environ, **RUN_ENV, "TRANSFORMER_LAB_STUDENT_DIR": str(Path(tmp, "package"))}
        client = NotebookClient(
            nb,
            kernel_name="python3",
            timeout_func=limits,
            interrupt_on_timeout=True,
            error_on_timeout={"ename": TIMEOUT_ENAME, "evalue": "stopped", "traceback": []},
            allow_errors=True,
            resources={"metadata": {"path": tmp}},
            on_cell_execute=on_execute,
            on_cell_executed=on_executed,
        )
        try:
            client.execute(env=env, stderr=subprocess.DEVNULL)  # no kernel log lines
        except DeadKernelError:
            dead = max(set(started) - set(runs), default=None)
            where = f"cell {_name(nb.cells[dead], dead)}" if dead is not None else "a cell"
            return runs, f"the Python kernel died in {where} (out of memory, or the code exited)"
        except Exception as error:  # a kernel that cannot start, or nbclient itself failing
            return runs, f"the notebook could not be run: {type(error).__name__}: {error}"
    return runs, None


def _name(cell, index: int) -> str:
    """How the report names a cell: its number, and its grade id or cell id and first line."""
    gid = nbgrader_meta(cell).get("grade_id")
    if gid:
        return f"{index + 1} ({gid})"
    first = next((ln.strip() for ln in cell.source.splitlines() if ln.strip()), "")
    first = first if len(first) <= 40 else first[:37] + "..."
    return f"{index + 1} (id {cell.get('id', '?')}: {first})"


# ----------------------------------------------------------------------------------------------
# The whole check.


def presubmit(
    notebook: str | Path,
    release: str | Path | None = None,
    cell_timeout: float = CELL_TIMEOUT,
    name: str | None = None,
    expected: str | None = None,
) -> Report:
    """Check `notebook` (a saved .ipynb) against its released exercise (`release`, else found in
    the course folder) by running it as the grader will; `name`: the file name to judge, when
    `notebook` is a copy (the notebook that Colab holds); `expected`: the name it must have when
    no release is found (the last cell knows it)."""
    import nbformat

    notebook = Path(notebook)
    shown = name or notebook.name
    if cell_timeout <= 0:
        raise ValueError(f"cell_timeout must be positive, not {cell_timeout!r}")
    try:
        nb = nbformat.read(notebook, as_version=4)
    except FileNotFoundError:
        raise SystemExit(f"presubmit: no file {notebook}") from None
    except Exception as error:  # nbformat raises many kinds on a broken file
        return Report(shown, None, [f"it is not a readable notebook ({type(error).__name__})"])
    release = Path(release) if release else find_release(notebook, nb)
    report = Report(shown, release.name if release else expected)
    if report.expected and shown != report.expected:
        report.problems.append(
            f"the file is named {shown!r}: it must be named {report.expected!r} "
            "(the grader looks for that name)"
        )
    missing: list[str] = []
    if release is None:
        report.notes.append(
            "the released exercise was not found (run presubmit inside the course folder, or "
            "pass --release): test cells were not compared with it"
        )
        tests = {}
    else:
        found, tests, missing = compare(nb, nbformat.read(release, as_version=4))
        report.problems += found
    _run(nb, tests, cell_timeout, report)
    for gid in missing:
        report.checks[gid] = "its test cell is missing"
    return report


def _run(nb, tests: dict[int, tuple[str, str]], cell_timeout: float, report: Report) -> None:
    """Execute the notebook as graded (test cells as released, hidden tests and the presubmit
    cell left out) and add what happened to `report`."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.outputs = []
            cell.source = tests[i][1] if i in tests else without_hidden_tests(cell.source)
            if cell.get("id") in (PRESUBMIT_ID, SETUP_ID):
                # nbclient skips an empty cell: no recursion, and no Colab setup (a no-op where
                # the grader runs; in Colab presubmit's kernel is no Colab front end)
                cell.source = ""
    runs, failure = execute(nb, cell_timeout)
    errors = []
    for i, run in sorted(runs.items()):
        cell = nb.cells[i]
        test = i in tests or is_test_cell(cell)
        if test:
            gid = tests[i][0] if i in tests else nbgrader_meta(cell)["grade_id"]
            report.checks[gid] = None if run.error is None else _why(run)
        if run.timed_out:
            report.problems.append(
                f"cell {_name(cell, i)} ran past {run.limit:g} s and was stopped: the grader "
                f"stops a cell after max({GRADER_FLOOR:g} s, {GRADER_FACTOR:g} x the reference "
                "solution's time)"
            )
        elif run.error is not None and not test:
            errors.append(f"cell {_name(cell, i)} raised {_why(run)}")
        elif run.seconds > GRADER_FLOOR:
            report.notes.append(
                f"cell {_name(cell, i)} took {run.seconds:.0f} s (the grader allows a cell "
                f"{GRADER_FLOOR:g} s, or {GRADER_FACTOR:g} x the reference solution's time when "
                "that is longer)"
            )
    report.problems += errors[:SHOWN_ERRORS]
    if len(errors) > SHOWN_ERRORS:
        report.problems.append(
            f"... and {len(errors) - SHOWN_ERRORS} more cells raised (fix the first one first)"
        )
    if failure:
        report.problems.append(failure)


def _why(run: CellRun) -> str:
    ename, evalue = run.error
    if run.timed_out:
        return f"stopped after {run.limit:g} s"
    return f"{ename}: {evalue}" if evalue else ename


# ----------------------------------------------------------------------------------------------
# The last cell of every exercise.


def run(name: str, cell_timeout: float = CELL_TIMEOUT) -> None:
    """The exercise's last cell: presubmit this notebook, as saved (`name`: the file name it must
    have). Does nothing while grading or inside presubmit's own run."""
    if grading_mode() or os.environ.get(PRESUBMIT_ENV):
        print("presubmit: skipped (this notebook is being graded or checked)")
        return
    path, shown = this_notebook(name)
    if path is None:
        print(
            f"presubmit: no {name} in {Path.cwd()}: save this notebook (Ctrl-S) under that name, "
            f"or run `transformer-lab presubmit YOUR_NOTEBOOK.ipynb` in a terminal"
        )
        return
    saved = time.strftime("%H:%M:%S", time.localtime(path.stat().st_mtime))
    print(f"presubmit: running {path.name} as saved at {saved} (save first: Ctrl-S) ...")
    command = [sys.executable, "-m", "transformer_lab.cli", "presubmit", str(path)]
    command += ["--cell-timeout", str(cell_timeout), "--expected", name]
    command += ["--name", shown] if shown else []
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as p:
        for line in p.stdout:  # a separate process: a fresh kernel, not this one's event loop
            print(line, end="")
    if shown:  # the copy of Colab's notebook
        shutil.rmtree(path.parent, ignore_errors=True)


def this_notebook(name: str) -> tuple[Path | None, str | None]:
    """(the saved file of the running notebook, the name to judge it by when that is not the
    file's own): the notebook Colab holds, written to a temporary file; in JupyterLab the path
    of this kernel's session ($JPY_SESSION_NAME); else `name` in the working folder."""
    try:
        from google.colab import _message  # type: ignore[import-not-found]
    except ImportError:
        _message = None
    if _message is not None:
        import nbformat

        data = _message.blocking_request("get_ipynb", timeout_sec=60)["ipynb"]
        shown = (data.get("metadata", {}).get("colab", {}) or {}).get("name") or name
        path = Path(tempfile.mkdtemp(prefix="transformer-lab-presubmit-")) / "notebook.ipynb"
        nbformat.write(nbformat.from_dict(data), path)
        return path, shown
    session = os.environ.get("JPY_SESSION_NAME", "")
    if session.endswith(".ipynb") and Path(session).is_file():
        return Path(session), None
    return (Path(name), None) if Path(name).is_file() else (None, None)


def main(args) -> int:
    """The CLI command (`args`: its parsed arguments): print the report; exit status 0 when the
    notebook will grade."""
    limit = CELL_TIMEOUT if args.cell_timeout is None else args.cell_timeout
    report = presubmit(args.notebook, args.release, limit, args.name, args.expected)
    print(report.text())
    return 0 if report.will_grade else 1
