"""Time limits that fit the work (`instructor.cell_limits`) and what a hanging student costs.

Unit half: the rule max(floor, factor x reference time), the instructor's override, the course's
settings, the cache of reference times (with mutants of the rule that must fail). Class half: a
lesson-02 class graded with the DERIVED limits (no --cell-timeout): a student whose scratch cell
hangs or loops keeps every point, one whose graded function loops keeps the other exercise's, each
graded within a generous bound, and the reason (record and CSV) names the cell and its limit; a
submission that plants modules in the job's folder cannot run code in the grading job.
"""

from __future__ import annotations

import csv
import json
import re
import time
from pathlib import Path

import nbformat
import pytest

from transformer_lab_grader import (
    cell_limits,
    grade,
    grading,
    judge,
    judge_cells,
    judge_limits,
    nbgrader_app,
    sandbox,
)
from transformer_lab_grader.cell_limits import CellLimits
from transformer_lab_grader.verify_cells import CELL_TIMED_OUT

REPO = Path(__file__).resolve().parents[2]
LESSON = "02_qkv_attention"
NAME = f"{LESSON}.ipynb"
FULL = 8.0
DEMOS = ("lookup", "variance", "saturate", "widget", "heatmap", "layer-demo", "progress")
FORWARD = "        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)\n"


# ----------------------------------------------------------------------------------------------
# The rule, with mutants.


def _follows_the_rule(derive) -> bool:
    """A limit per reference cell = max(floor, factor x its time); the floor for a cell the
    reference does not have; grade id first, then cell id."""
    limits = derive({"fast": 0.01, "slow": 2.0, "sdpa-test": 1.0}, 10.0, 20.0)
    return (
        limits.for_ids("fast", None) == 10.0
        and limits.for_ids(None, "slow") == 40.0
        and limits.for_ids("sdpa-test", "fast") == 20.0
        and limits.for_ids(None, "student-3") == 10.0
        and derive({"slow": 2.0}, 5.0, 3.0).for_ids(None, "slow") == 6.0
    )


MUTANTS = {
    "ignores the reference time": lambda t, floor, factor: CellLimits({}, floor),
    "no floor": lambda t, floor, factor: CellLimits({k: factor * v for k, v in t.items()}, floor),
    "factor ignored": lambda t, floor, factor: CellLimits(
        {k: max(floor, 20.0 * v) for k, v in t.items()}, floor
    ),
    "unknown cells unlimited": lambda t, floor, factor: CellLimits(
        {k: max(floor, factor * v) for k, v in t.items()}, 0.0
    ),
}


def test_derived_limits_follow_the_rule():
    assert _follows_the_rule(cell_limits.derive)


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_wrong_rule_is_caught(mutant):
    assert not _follows_the_rule(MUTANTS[mutant])


def test_limits_reject_nonsense():
    with pytest.raises(ValueError, match="positive"):
        cell_limits.derive({"a": 1.0}, 0.0, 20.0)
    with pytest.raises(ValueError, match="positive"):
        cell_limits.fixed(-1)


def test_a_cells_limit_is_found_by_grade_id_then_cell_id():
    limits = cell_limits.derive({"sdpa-test": 3.0, "setup": 1.0}, 10.0, 20.0)
    assert limits.for_ids("sdpa-test", "renamed") == 60.0
    assert limits.for_ids(None, "setup") == 20.0
    assert limits.for_ids(None, "student-7") == 10.0


# ----------------------------------------------------------------------------------------------
# Where the numbers come from: override, course settings, the cache of reference times.


@pytest.fixture()
def small_course(tmp_path) -> Path:
    course = tmp_path / "course"
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    first = nbformat.v4.new_code_cell("import time\ntime.sleep(0.6)")
    first["id"] = "slow"
    graded = nbformat.v4.new_code_cell("x = 1")
    graded["id"] = "cell-x"
    graded.metadata["nbgrader"] = {"grade_id": "x-test", "grade": True, "points": 1}
    nb.cells = [first, graded]
    (course / "solutions" / "L").mkdir(parents=True)
    nbformat.write(nb, course / "solutions" / "L" / "L.ipynb")
    (course / "autograder").mkdir()
    return course


def _grader(course: Path, tmp_path: Path, **limits) -> grading.Grader:
    grader = grading.Grader.__new__(grading.Grader)  # no released notebook needed for the limits
    grader.course, grader.assignment, grader.quiet = course, "L", True
    grader.limits = sandbox.Limits(**limits)
    grader.run_dir = tmp_path / "run"
    return grader


def test_reference_times_are_measured_once_and_remeasured_when_the_solution_changes(
    small_course, tmp_path, monkeypatch
):
    calls = []

    def fake(path):
        calls.append(path.name)
        return {"slow": 0.6 * len(calls), "x-test": 0.1}

    first = cell_limits.reference_times(small_course, "L", say=lambda m: None, measure=fake)
    again = cell_limits.reference_times(small_course, "L", say=lambda m: None, measure=fake)
    assert first == again == {"slow": 0.6, "x-test": 0.1} and calls == ["L.ipynb"]
    source = small_course / "solutions" / "L" / "L.ipynb"
    source.write_text(source.read_text().replace("0.6", "0.7"))
    changed = cell_limits.reference_times(small_course, "L", say=lambda m: None, measure=fake)
    assert changed["slow"] == 1.2 and len(calls) == 2
    cache = small_course / "autograder" / "work" / "cell_times" / "L.json"
    assert json.loads(cache.read_text())["times"] == changed


def _ship(course: Path, times: dict, digest: str | None = None) -> Path:
    path = cell_limits.shipped_path(course, "L")
    path.parent.mkdir(parents=True, exist_ok=True)
    key = digest or cell_limits.source_digest(course, "L")
    path.write_text(json.dumps({"sha256": key, "times": times}))
    return path


def test_times_shipped_with_the_course_are_used_without_measuring(small_course):
    # an instructor's first grading of an unchanged lesson (`transformer-lab time-reference`)
    calls, said = [], []
    _ship(small_course, {"slow": 0.5, "x-test": 0.2})
    times = cell_limits.reference_times(
        small_course, "L", say=said.append, measure=lambda p: calls.append(p) or {}
    )
    assert times == {"slow": 0.5, "x-test": 0.2} and calls == []
    assert "come with the course" in said[0]


def test_shipped_times_of_another_solution_are_ignored(small_course):
    calls = []
    _ship(small_course, {"slow": 0.5}, digest="0" * 64)  # measured on an older solution

    def fake(path):
        calls.append(path.name)
        return {"slow": 0.9}

    assert cell_limits.reference_times(small_course, "L", say=lambda m: None, measure=fake) == {
        "slow": 0.9
    }
    assert calls == ["L.ipynb"]


def test_times_measured_on_this_machine_come_before_the_shipped_ones(small_course):
    fake = lambda path: {"slow": 0.9}  # noqa: E731
    measured = cell_limits.reference_times(small_course, "L", say=lambda m: None, measure=fake)
    _ship(small_course, {"slow": 0.5})
    again = cell_limits.reference_times(small_course, "L", say=lambda m: None, measure=None)
    assert measured == again == {"slow": 0.9}


def test_time_reference_writes_the_shipped_times_a_grading_then_reads(small_course, monkeypatch):
    from transformer_lab_grader import commands

    monkeypatch.setattr(judge, "time_notebook", lambda nb, workdir: ({"slow": 0.4}, []))
    assert commands.time_reference(small_course, ["L"]) == 0
    shipped = cell_limits.shipped_path(small_course, "L")
    assert json.loads(shipped.read_text())["times"] == {"slow": 0.4}
    times = cell_limits.reference_times(small_course, "L", say=lambda m: None, measure=None)
    assert times == {"slow": 0.4}
    monkeypatch.setattr(judge, "time_notebook", lambda nb, workdir: ({"slow": 0.4}, ["x-test"]))
    assert commands.time_reference(small_course, ["L"]) == 1  # a failing reference solution


def test_the_course_ships_fresh_reference_times_for_every_lesson(monkeypatch):
    # stale after a solution changes: `make reference-times` measures them again
    monkeypatch.setenv("TRANSFORMER_LAB_QUICK", "1")  # what grading runs in
    stale = []
    for solution in sorted((REPO / "solutions").iterdir()):
        if not solution.is_dir():
            continue
        path = cell_limits.shipped_path(REPO, solution.name)
        digest = cell_limits.source_digest(REPO, solution.name)
        if not path.is_file() or json.loads(path.read_text()).get("sha256") != digest:
            stale.append(solution.name)
    assert not stale, f"run `make reference-times LESSONS='{' '.join(stale)}'`: {stale}"


def test_a_course_copy_takes_the_shipped_times_along(tmp_path):
    course = nbgrader_app.course_copy(REPO, tmp_path / "c", [LESSON], generate_them=False)
    assert cell_limits.shipped_path(course, LESSON).read_bytes() == (
        cell_limits.shipped_path(REPO, LESSON).read_bytes()
    )


def test_override_floor_factor_and_course_settings(small_course, tmp_path, monkeypatch):
    monkeypatch.setattr(grading.Grader, "_measure", lambda self, p: {"slow": 1.0})
    fixed = _grader(small_course, tmp_path, cell_timeout=7)._derive_limits()
    assert (fixed.for_ids(None, "slow"), fixed.for_ids(None, "other")) == (7.0, 7.0)
    default = _grader(small_course, tmp_path)._derive_limits()
    assert (default.for_ids(None, "slow"), default.default) == (20.0, 10.0)
    own = _grader(small_course, tmp_path, cell_floor=3, cell_factor=2)._derive_limits()
    assert (own.for_ids(None, "slow"), own.default) == (3.0, 3.0)
    (small_course / "autograder" / "cell_limits.json").write_text('{"floor": 4, "factor": 50}')
    configured = _grader(small_course, tmp_path)._derive_limits()
    assert (configured.for_ids(None, "slow"), configured.default) == (50.0, 4.0)
    (small_course / "autograder" / "cell_limits.json").write_text('{"flor": 4}')
    with pytest.raises(SystemExit, match="unknown keys"):
        _grader(small_course, tmp_path)._derive_limits()


@pytest.mark.slow
def test_the_reference_is_timed_cell_by_cell_as_a_students_notebook_runs(small_course, tmp_path):
    notebook = small_course / "solutions" / "L" / "L.ipynb"
    times, failed = judge.time_notebook(notebook, tmp_path / "ref")
    assert set(times) == {"slow", "recheck:x-test"} and failed == []
    assert 0.6 <= times["slow"] < 30 and times["recheck:x-test"] < times["slow"]


# ----------------------------------------------------------------------------------------------
# A class graded with the derived limits.


def _solution() -> nbformat.NotebookNode:
    nb = nbformat.read(REPO / "solutions" / LESSON / NAME, as_version=4)
    nb.cells = [c for c in nb.cells if c.get("id") not in DEMOS]
    return nb


def _insert_after(nb, cell_id: str, source: str):
    index = next(i for i, c in enumerate(nb.cells) if c.get("id") == cell_id) + 1
    new = nbformat.v4.new_code_cell(source)
    new["id"] = f"student-{index}"
    nb.cells.insert(index, new)
    return nb


def _planter() -> str:
    """A cell that writes modules named like what a grading job imports after nbgrader ran
    (sqlalchemy for the gradebook, torch for the re-check) into the job's working folder; each,
    if ever imported there, hands back full marks through every descriptor."""
    record = {
        "student": "plants_modules",
        "assignment": LESSON,
        "status": "graded",
        "reason": None,
        "flags": [],
        "cells": {
            "sdpa-test": {"score": 5, "passed": True, "output": ""},
            "self-attention-test": {"score": 3, "passed": True, "output": ""},
        },
    }
    payload = (
        "import json, os\n"
        f"data = json.dumps({record!r}).encode()\n"
        "for fd in range(3, 256):\n"
        "    try:\n"
        "        os.write(fd, data)\n"
        "    except OSError:\n"
        "        pass\n"
        "os._exit(0)\n"
    )
    return (
        "import os, pathlib\n"
        "folder = pathlib.Path(os.environ['TRANSFORMER_LAB_COURSE_ROOT']) / 'autograder'\n"
        f"payload = {payload!r}\n"
        "for name in ('torch', 'sqlalchemy'):\n"
        "    (folder / f'{name}.py').write_text(payload)\n"
        "print('planted in', folder)\n"
    )


@pytest.fixture(scope="module")
def derived_run(tmp_path_factory):
    course = nbgrader_app.course_copy(REPO, tmp_path_factory.mktemp("c") / "course", [LESSON])
    graded_loop = _solution()
    cell = next(c for c in graded_loop.cells if c.get("id") == "self-attention-solution")
    assert FORWARD in cell.source
    cell.source = cell.source.replace(FORWARD, "        while True:\n            pass\n" + FORWARD)
    released = nbformat.read(REPO / "exercises" / LESSON / NAME, as_version=4)
    many = nbformat.from_dict(graded_loop)  # the student tries the looping layer in 4 cells
    where = next(i for i, c in enumerate(many.cells) if c.get("id") == "self-attention-solution")
    for k in range(TRIES):
        tried = nbformat.v4.new_code_cell("SelfAttention(8)(torch.randn(1, 3, 8))")
        tried["id"] = f"try-{k}"
        many.cells.insert(where + 1 + k, tried)
    cases = {
        "hangs": _insert_after(_solution(), "setup", "import time\ntime.sleep(10**6)"),
        "loops": _insert_after(_solution(), "setup", "while True:\n    pass"),
        "loop_in_graded_function": graded_loop,
        "loop_in_many_cells": many,
        "plants_modules": _insert_after(released, "setup", _planter()),
        "slow_scratch": _insert_after(_solution(), "setup", BURN),
    }
    submissions = tmp_path_factory.mktemp("subs")
    for student, nb in cases.items():
        (submissions / student / LESSON).mkdir(parents=True)
        nbformat.write(nb, submissions / student / LESSON / NAME)
    out = tmp_path_factory.mktemp("out") / "grades.csv"
    start = time.monotonic()
    records = grade.grade(course, LESSON, submissions, out=out, jobs=2, quiet=True)
    with open(out, newline="") as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    times = cell_limits.reference_times(course, LESSON, say=lambda m: None)  # cached or shipped
    return {
        "records": {r["student"]: r for r in records},
        "csv": rows,
        "limits": cell_limits.derive(times),
        "wall": time.monotonic() - start,
    }


TRIES = 4
BURN_SECONDS = 4.0
BURN = f"import time\n_t0 = time.process_time()\nwhile time.process_time() - _t0 < {BURN_SECONDS}:\n    pass"
BOUND = 150.0  # seconds per student: generous (2 busy cores); the benchmark measures the cost


@pytest.mark.slow
@pytest.mark.parametrize("student", ["hangs", "loops"])
def test_a_hanging_or_looping_scratch_cell_costs_seconds_and_no_points(derived_run, student):
    record = derived_run["records"][student]
    assert (record["status"], record["score"]) == ("graded", FULL), record
    assert record["seconds"] < BOUND, record["seconds"]
    limit = derived_run["limits"].default
    assert limit == cell_limits.FLOOR
    assert re.fullmatch(
        rf"cell \d+ \(id student-\d+\) hit the per-cell timeout of {limit:g} s", record["reason"]
    ), record["reason"]
    assert derived_run["csv"][student]["reason"] == record["reason"]


@pytest.mark.slow
def test_a_loop_in_graded_code_costs_that_exercise_only_and_names_its_limit(derived_run):
    record = derived_run["records"]["loop_in_graded_function"]
    assert (record["status"], record["score"]) == ("graded", 5.0), record
    assert record["cells"]["sdpa-test"]["passed"]
    assert not record["cells"]["self-attention-test"]["passed"]
    assert record["seconds"] < BOUND, record["seconds"]
    limit = derived_run["limits"].for_ids("self-attention-test", "self-attention-test")
    assert limit >= cell_limits.FLOOR
    assert f"cell self-attention-test hit the per-cell timeout of {limit:g} s" in record["reason"]
    assert not [f for f in record["flags"] if "withheld" in f or "tampering" in f], record["flags"]


@pytest.mark.slow
def test_a_slow_cell_runs_once(derived_run):
    """One execution: the slow cell's CPU is paid in the judged autograde, and no other phase."""
    record = derived_run["records"]["slow_scratch"]
    assert (record["status"], record["score"]) == ("graded", FULL), record
    assert set(record["cpu_timings"]) == {"imports", "autograde", "results", "student"}, record
    assert record["cpu_timings"]["student"] >= BURN_SECONDS, record["cpu_timings"]


@pytest.mark.slow
def test_modules_planted_in_the_job_folder_never_run_in_the_job(derived_run):
    record = derived_run["records"]["plants_modules"]
    assert (record["status"], record["score"]) == ("graded", 0.0), record
    assert "NotImplementedError" in record["cells"]["sdpa-test"]["output"]


# ----------------------------------------------------------------------------------------------
# The timeout budget per notebook (unit half), with mutants.


def _execute(limits: judge_limits.Limits, names, loops) -> list[float]:
    """The judge's arithmetic over the cells `names`, run in order: each cell's limit as the
    student's process gets it; a cell in `loops` runs until stopped at it."""
    given = []
    for index, name in enumerate(names):
        cell = judge_cells.Cell(index, "f()", cell_id=name)
        limit = limits.given(cell)
        given.append(limit)
        if name in loops:
            assert limits.learn(cell, limit, f"{CELL_TIMED_OUT}{limit:g} s")
    return given


def _limits_with_budget():
    """floor 10, factor 20, budget 20: 'slow' needs 3 s (full 60 s, short 9 s)."""
    return cell_limits.derive({"slow": 3.0, "a": 0.01, "b": 0.01}, 10.0, 20.0, 20.0)


def _follows_the_budget(budget_class) -> bool:
    """No timeout: full limits (a slow honest cell keeps its 60 s). After a timeout: at most
    what is left of the budget. Budget spent: the short limits (2 s, or 3 x reference)."""
    limits = _limits_with_budget()

    def judged():
        made = judge_limits.Limits(limits)
        made.budget = budget_class(limits.budget)
        return made

    honest = _execute(judged(), ["a", "slow", "b"], loops=set())
    names = ["a", "b", "x", "y", "slow", "z"]
    looping = _execute(judged(), names, loops={"a", "b", "x", "y", "z"})
    one = _execute(judged(), ["a", "slow", "b"], loops={"a"})
    return (
        honest == [10.0, 60.0, 10.0]
        and looping == [10.0, 10.0, 2.0, 2.0, 9.0, 2.0]
        and one == [10.0, 10.0, 10.0]
    )


class _NeverApplied(cell_limits.TimeoutBudget):
    def limit(self, full, short):
        return full


class _AppliedBeforeAnyTimeout(cell_limits.TimeoutBudget):
    def limit(self, full, short):
        return min(full, max(short, self.seconds - self.spent))


class _ShortAtOnce(cell_limits.TimeoutBudget):
    def limit(self, full, short):
        return short if self.hits else full


BUDGET_MUTANTS = {
    "budget never applied": _NeverApplied,
    "applied before any timeout": _AppliedBeforeAnyTimeout,
    "short limit after the first timeout": _ShortAtOnce,
}


def test_the_timeout_budget_shrinks_later_limits_only_after_timeouts():
    assert _follows_the_budget(cell_limits.TimeoutBudget)


@pytest.mark.parametrize("mutant", sorted(BUDGET_MUTANTS))
def test_a_wrong_budget_is_caught(mutant):
    assert not _follows_the_budget(BUDGET_MUTANTS[mutant])


def test_derived_short_limits_and_fixed_limits_have_no_budget():
    limits = _limits_with_budget()
    assert limits.pair("slow", None) == (60.0, 9.0)
    assert limits.pair(None, "a") == (10.0, 2.0)
    assert limits.pair(None, "student-9") == (10.0, 2.0)
    fixed = cell_limits.fixed(7)
    looping = _execute(judge_limits.Limits(fixed), list("abcd"), set("abcd"))
    assert looping == [7.0] * 4  # an instructor's --cell-timeout keeps its meaning
    assert cell_limits.CellLimits.from_json(limits.to_json()) == limits
    with pytest.raises(ValueError, match="positive"):
        cell_limits.derive({"a": 1.0}, 10.0, 20.0, 0.0)


@pytest.mark.slow
def test_the_students_process_spends_the_budget_the_judge_counts_and_names(monkeypatch, tmp_path):
    """Three really looping cells in the student's process: 1 s, then 0.5 s (what is left of
    the 1.5 s budget), then the short 0.2 s; the cell after them runs, the test after it passes,
    and the notes name each cell, its limit and where the budget was spent."""
    monkeypatch.setattr(cell_limits, "SHORT_FLOOR", 0.2)  # a budget of seconds, not minutes
    limits = cell_limits.derive({"a": 0.05, "b": 0.05, "c": 0.05, "d": 0.01}, 1.0, 20.0, 1.5)
    cells = [judge_cells.Cell(i, "while True: pass", cell_id=n) for i, n in enumerate("abc")]
    cells += [
        judge_cells.Cell(3, "done = 1", cell_id="d"),
        judge_cells.Cell(4, "assert done == 1", "t", "t"),
    ]
    start = time.monotonic()
    outcome = judge.Judge(
        tmp_path, deadline=time.monotonic() + 120, limits=judge_limits.Limits(limits)
    ).run(cells)
    assert outcome.verdicts["t"]["passed"], outcome.verdicts
    assert outcome.notes == [
        "cell 1 (id a) hit the per-cell timeout of 1 s",
        "cell 2 (id b) hit the per-cell timeout of 0.5 s",
        "the notebook's timeout budget (1.5 s) was spent by cell 2 (id b): later cells got "
        "max(0.2 s, 3 x the reference solution's time)",
        "cell 3 (id c) hit the per-cell timeout of 0.2 s",
    ]
    assert [o[-1]["ename"] for o in (outcome.outputs[i] for i in range(3))] == [
        judge.TIMEOUT_ENAME
    ] * 3
    assert time.monotonic() - start < 30  # 1 + 0.5 + 0.2 s of loops, not 3 x 1 s


def test_a_cell_or_test_that_hit_its_limit_gets_the_short_limit_next_time():
    limits = judge_limits.Limits(_limits_with_budget())
    a = judge_cells.Cell(0, "x", cell_id="a")
    assert limits.learn(a, 10.0, f"{CELL_TIMED_OUT}10 s")
    assert limits.pair(None, "a") == (2.0, 2.0) and limits.pair(None, "slow") == (60.0, 9.0)
    assert limits.test_limit("sdpa-test") == (10.0, 10.0)  # 10 s of the 20 s budget are left
    limits.test_timed_out("sdpa-test", 10.0)
    assert limits.test_limit("sdpa-test") == (2.0, 2.0)  # hit its limit, budget spent
    fixed = judge_limits.Limits(cell_limits.fixed(7))
    assert fixed.learn(a, 7.0, f"{CELL_TIMED_OUT}7 s") and fixed.pair(None, "a") == (7.0, 7.0)
    assert not fixed.learn(a, 7.0, "ZeroDivisionError: division by zero")


def test_the_budget_comes_from_the_course_settings_or_the_override(
    small_course, tmp_path, monkeypatch
):
    monkeypatch.setattr(grading.Grader, "_measure", lambda self, p: {"slow": 1.0})
    assert _grader(small_course, tmp_path)._derive_limits().budget == cell_limits.BUDGET
    assert _grader(small_course, tmp_path, cell_budget=5)._derive_limits().budget == 5.0
    assert _grader(small_course, tmp_path, cell_timeout=7)._derive_limits().budget is None
    (small_course / "autograder" / "cell_limits.json").write_text('{"budget": 45}')
    assert _grader(small_course, tmp_path)._derive_limits().budget == 45.0
    (small_course / "autograder" / "cell_limits.json").write_text('{"budget": -1}')
    with pytest.raises(SystemExit, match="positive"):
        _grader(small_course, tmp_path)._derive_limits()


@pytest.mark.slow
def test_a_loop_that_many_cells_run_costs_the_budget_not_the_limit_per_cell(derived_run):
    """A looping SelfAttention called by 4 scratch cells and the test: the first two timeouts
    get the full 10 s, the rest the short limit (before the budget: 10 s each, >= 50 s of
    waiting). The sdpa exercise keeps its points."""
    record = derived_run["records"]["loop_in_many_cells"]
    limits = derived_run["limits"]
    assert (record["status"], record["score"]) == ("graded", 5.0), record
    assert record["cells"]["sdpa-test"]["passed"], record
    assert not [f for f in record["flags"] if "withheld" in f or "tampering" in f], record["flags"]
    named = re.findall(r"cell (.+?) hit the per-cell timeout of ([\d.]+) s", record["reason"])
    cells = [cell for cell, _ in named]
    given = [float(limit) for _, limit in named]
    assert len(cells) == TRIES + 1 and cells[-1] == "self-attention-test", record["reason"]
    assert given[:2] == [limits.default] * 2, record["reason"]
    short = limits.pair(cell_limits.RECHECK + "self-attention-test", None)[1]
    assert given[2:] == [2.0] * (TRIES - 2) + [short], record["reason"]
    assert sum(given) <= limits.budget + TRIES * short < (TRIES + 1) * limits.default
    spent = f"the notebook's timeout budget ({limits.budget:g} s) was spent by cell {cells[1]}"
    notes = record["reason"].split("; ")
    assert notes[2].startswith(spent), notes  # right after that cell's note: never cut off
    assert derived_run["csv"]["loop_in_many_cells"]["reason"] == record["reason"]
    assert record["seconds"] < BOUND, record["seconds"]


def test_a_test_gets_its_recheck_limit_from_its_time_in_the_recheck():
    """Lesson 10's rotation test takes 0.3 s in the notebook and ~9 s in the re-check (3,500
    calls across the pipe): its re-check limit comes from the 9 s, not from the 0.3 s (the
    mutant: the notebook cell's limit, 10 s, which an honest student's re-check ran past on a
    loaded machine and lost the exercise)."""
    times = {"rot": 0.3, cell_limits.RECHECK + "rot": 8.7, "other": 0.3}
    limits = cell_limits.derive(times)
    judged = judge_limits.Limits(limits)
    assert judged.test_limit("rot") == (34.8, 34.8)  # max(10, 4 x 8.7): not 20 x
    assert judged.test_limit("other") == (10.0, 10.0)  # not timed in the judge: the cell's
    judged.known.add("rot")
    assert judged.test_limit("rot") == (26.1, 26.1)  # hit its limit before: the short one
    assert "tests 34.8-34.8 s" in cell_limits.describe(limits)
