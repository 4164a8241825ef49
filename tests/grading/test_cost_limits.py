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
import signal
import time
from pathlib import Path

import nbformat
import pytest

from transformer_lab.instructor import cell_limits, grade, nbgrader_app, sandbox, verify
from transformer_lab.instructor.cell_limits import CellLimits

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


def test_nbclient_timeout_func_reads_grade_id_then_cell_id():
    limits = cell_limits.derive({"sdpa-test": 3.0, "setup": 1.0}, 10.0, 20.0)
    test_cell = nbformat.v4.new_code_cell("pass")
    test_cell["id"] = "renamed"
    test_cell.metadata["nbgrader"] = {"grade_id": "sdpa-test", "grade": True}
    setup = nbformat.v4.new_code_cell("pass")
    setup["id"] = "setup"
    scratch = nbformat.v4.new_code_cell("pass")
    scratch["id"] = "student-7"
    assert [limits(c) for c in (test_cell, setup, scratch)] == [60.0, 20.0, 10.0]


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


def _grader(course: Path, tmp_path: Path, **limits) -> grade.Grader:
    grader = grade.Grader.__new__(grade.Grader)  # no released notebook needed for the limits
    grader.course, grader.assignment, grader.quiet = course, "L", True
    grader.verify = False  # its tests are not transformer_lab checks: no re-check to time
    grader.limits = sandbox.Limits(**limits)
    grader.run_dir = tmp_path / "run"
    return grader


def test_reference_times_are_measured_once_and_remeasured_when_the_solution_changes(
    small_course, tmp_path, monkeypatch
):
    calls = []

    def fake(path, env, timeout=600.0):
        calls.append(path.name)
        return {"slow": 0.6 * len(calls), "x-test": 0.1}

    monkeypatch.setattr(cell_limits, "time_cells", fake)
    env = {}
    first = cell_limits.reference_times(small_course, "L", env, say=lambda m: None)
    again = cell_limits.reference_times(small_course, "L", env, say=lambda m: None)
    assert first == again == {"slow": 0.6, "x-test": 0.1} and calls == ["L.ipynb"]
    source = small_course / "solutions" / "L" / "L.ipynb"
    source.write_text(source.read_text().replace("0.6", "0.7"))
    changed = cell_limits.reference_times(small_course, "L", env, say=lambda m: None)
    assert changed["slow"] == 1.2 and len(calls) == 2
    cache = small_course / "autograder" / "work" / "cell_times" / "L.json"
    assert json.loads(cache.read_text())["times"] == changed


def test_override_floor_factor_and_course_settings(small_course, tmp_path, monkeypatch):
    monkeypatch.setattr(cell_limits, "time_cells", lambda p, env, timeout=600.0: {"slow": 1.0})
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
def test_time_cells_times_each_cell_by_grade_id_and_id(small_course, tmp_path):
    env = grade._env(small_course, tmp_path / "home")
    times = cell_limits.time_cells(small_course / "solutions" / "L" / "L.ipynb", env)
    assert set(times) == {"slow", "cell-x", "x-test"}
    assert 0.6 <= times["slow"] < 30 and times["x-test"] == times["cell-x"] < times["slow"]


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
    times = json.loads(
        (course / "autograder" / "work" / "cell_times" / f"{LESSON}.json").read_text()
    )
    return {
        "records": {r["student"]: r for r in records},
        "csv": rows,
        "limits": cell_limits.derive(times["times"]),
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
def test_a_slow_cell_no_test_needs_runs_once_not_again_in_the_recheck(derived_run):
    """nbgrader's run times it (over a second), so the re-check leaves it out (`cell_needs`)."""
    record = derived_run["records"]["slow_scratch"]
    assert (record["status"], record["score"]) == ("graded", FULL), record
    assert record["cpu_timings"]["autograde"] >= BURN_SECONDS, record["cpu_timings"]
    assert record["cpu_timings"]["recheck"] < BURN_SECONDS, record["cpu_timings"]


@pytest.mark.slow
def test_modules_planted_in_the_job_folder_never_run_in_the_job(derived_run):
    record = derived_run["records"]["plants_modules"]
    assert (record["status"], record["score"]) == ("graded", 0.0), record
    assert "NotImplementedError" in record["cells"]["sdpa-test"]["output"]


# ----------------------------------------------------------------------------------------------
# The timeout budget per notebook (unit half), with mutants.


def _cell(cell_id: str, grade_id: str | None = None) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell("f()")
    cell["id"] = cell_id
    if grade_id:
        cell.metadata["nbgrader"] = {"grade_id": grade_id, "grade": True, "points": 1}
    return cell


def _execute(kernel, cells, loops) -> list[float]:
    """What nbclient does with `timeout_func` over `cells`: ask each cell's limit just before
    running it; a cell in `loops` runs until stopped (nbgrader's CellTimeoutError output)."""
    given = []
    for cell in cells:
        limit = kernel(cell)
        given.append(limit)
        cell.outputs = []
        if cell["id"] in loops:
            cell.outputs = [nbformat.v4.new_output("error", ename="CellTimeoutError", evalue="")]
    return given


def _limits_with_budget():
    """floor 10, factor 20, budget 20: 'slow' needs 3 s (full 60 s, short 9 s)."""
    return cell_limits.derive({"slow": 3.0, "a": 0.01, "b": 0.01}, 10.0, 20.0, 20.0)


def _follows_the_budget(budget_class) -> bool:
    """No timeout: full limits (a slow honest cell keeps its 60 s). After a timeout: at most
    what is left of the budget. Budget spent: the short limits (2 s, or 3 x reference)."""
    limits = _limits_with_budget()

    def kernel():
        made = cell_limits.KernelLimits(limits)
        made.budget = budget_class(limits.budget)
        return made

    honest = _execute(kernel(), [_cell("a"), _cell("slow"), _cell("b")], loops=set())
    names = ["a", "b", "x", "y", "slow", "z"]
    looping = _execute(kernel(), [_cell(n) for n in names], loops={"a", "b", "x", "y", "z"})
    one = _execute(kernel(), [_cell("a"), _cell("slow"), _cell("b")], loops={"a"})
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
    looping = _execute(cell_limits.KernelLimits(fixed), [_cell(n) for n in "abcd"], set("abcd"))
    assert looping == [7.0] * 4  # an instructor's --cell-timeout keeps its meaning
    assert cell_limits.CellLimits.from_json(limits.to_json()) == limits
    with pytest.raises(ValueError, match="positive"):
        cell_limits.derive({"a": 1.0}, 10.0, 20.0, 0.0)


def test_the_record_replays_the_kernels_limits_and_names_the_budget():
    limits = _limits_with_budget()
    cells = [_cell("a", "a-test"), _cell("b"), _cell("x"), _cell("slow")]
    live = _execute(cell_limits.KernelLimits(limits), cells, loops={"a", "b", "x"})
    markdown = nbformat.v4.new_markdown_cell("text")
    empty = nbformat.v4.new_code_cell("  ")  # nbclient neither runs it nor asks its limit
    replay = cell_limits.KernelLimits(limits)
    given = replay.replay([markdown, *cells[:2], empty, *cells[2:]])
    assert list(given.values()) == live == [10.0, 10.0, 2.0, 9.0]
    assert replay.budget.hits == [("a-test", 10.0), ("3 (id b)", 10.0), ("5 (id x)", 2.0)]
    note = replay.budget.note()
    assert note.startswith("the notebook's timeout budget (20 s) was spent by cell 3 (id b)")


def test_the_recheck_child_spends_the_same_budget_as_the_parent_counts(monkeypatch):
    """The child's cells under the budget (really looping), and the parent's replay of them."""
    from transformer_lab.instructor import verify, verify_child

    monkeypatch.setattr(cell_limits, "SHORT_FLOOR", 0.2)  # a budget of seconds, not minutes
    limits = cell_limits.derive({"a": 0.05, "b": 0.05, "c": 0.05, "d": 0.01}, 1.0, 20.0, 1.5)
    nb = {"cells": [{"cell_type": "code", "id": n, "metadata": {}} for n in "abcd"]}
    code = [(0, "while True: pass"), (1, "while True: pass"), (2, "while True: pass")]
    code.append((3, "done = 1"))
    recheck = verify.RecheckLimits(nb, limits, None)
    spec = recheck.child_spec(code)
    assert [c[2:] for c in spec["cells"]] == [[1.0, 0.2], [1.0, 0.2], [1.0, 0.2], [1.0, 0.2]]
    import matplotlib.pyplot  # noqa: F401 - run_cells closes figures at the end: not timed here

    handler = signal.getsignal(signal.SIGALRM)
    start = time.monotonic()
    try:
        ns, errors = verify_child.run_cells({**spec, "cell_timeout": None})
    finally:
        signal.signal(signal.SIGALRM, handler)  # run_cells sets its own, as the child does
    spent = time.monotonic() - start
    assert ns["done"] == 1 and sorted(errors) == ["0", "1", "2"]
    assert [errors[k] for k in "012"] == [
        f"{verify_child.CELL_TIMED_OUT}{s} s" for s in ("1", "0.5", "0.2")
    ]
    assert 1.6 < spent < 2.9  # 1 + 0.5 + 0.2 s, not 3 x 1 s
    recheck.learn_from_child(code, {int(k): v for k, v in errors.items()})
    assert recheck.budget.spent == pytest.approx(1.7) and recheck.budget.is_spent
    assert recheck.test_limit("a-test") == (0.2, 1.0)  # the tests get the short limit now
    again = recheck.child_spec(code)  # a restarted child: the cells that looped start short
    assert [c[2:] for c in again["cells"][:3]] == [[0.2, 0.2]] * 3
    assert [list(h) for h in again["budget"]["hits"]] == [["1", 1.0], ["2", 0.5], ["3", 0.2]]


def test_the_recheck_gives_cells_that_hit_their_limit_in_the_kernel_the_short_limit():
    from transformer_lab.instructor import verify

    limits = _limits_with_budget()
    nb = {"cells": [{"cell_type": "code", "id": n, "metadata": {}} for n in ("a", "slow")]}
    recheck = verify.RecheckLimits(nb, limits, None, kernel_timeouts={"a", "sdpa-test"})
    assert [c[2:] for c in recheck.child_spec([(0, "x"), (1, "y")])["cells"]] == [
        [2.0, 2.0],
        [60.0, 9.0],
    ]
    assert recheck.test_limit("sdpa-test") == (2.0, 2.0)
    assert recheck.test_limit("other-test") == (10.0, 10.0)  # nothing timed out here yet
    fixed = verify.RecheckLimits(nb, cell_limits.fixed(7), None, kernel_timeouts={"a"})
    assert fixed.child_spec([(0, "x")])["cells"][0][2:] == [7.0, 7.0]


def test_the_budget_comes_from_the_course_settings_or_the_override(
    small_course, tmp_path, monkeypatch
):
    monkeypatch.setattr(cell_limits, "time_cells", lambda p, env, timeout=600.0: {"slow": 1.0})
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
    get the full 10 s, the rest the short limit; the re-check gives all of them the short limit
    at once (they hit their limit in the kernel). Before: 10 s each, in the kernel and again in
    the re-check (>= 100 s of waiting). The sdpa exercise keeps its points."""
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
    short = limits.pair("self-attention-test", None)[1]
    assert given[2:] == [2.0] * (TRIES - 2) + [short], record["reason"]
    assert sum(given) <= limits.budget + TRIES * short < (TRIES + 1) * limits.default
    spent = f"the notebook's timeout budget ({limits.budget:g} s) was spent by cell {cells[1]}"
    notes = record["reason"].split("; ")
    assert notes[2].startswith(spent), notes  # right after that cell's note: never cut off
    assert derived_run["csv"]["loop_in_many_cells"]["reason"] == record["reason"]
    # the re-check: 5 x 2 s of timeouts at most, against >= 50 s of them before
    assert record["timings"]["recheck"] < 40, record["timings"]
    assert record["seconds"] < BOUND, record["seconds"]


STARTS: list[float] = []  # when nbclient asked each cell's limit (outside the copied config)


class _TimedKernelLimits(cell_limits.KernelLimits):
    def __call__(self, cell, index=None):
        STARTS.append(time.monotonic())
        return super().__call__(cell, index)


@pytest.mark.slow
def test_nbgraders_kernel_run_applies_the_budget(monkeypatch):
    """nbgrader's Execute preprocessor (as `autograde` configures it: the timeout_func goes
    through traitlets' config, which copies it) with 4 looping cells: 1 s, 0.5 s (what is left
    of the 1.5 s budget), then 0.2 s each, and the cell after them runs."""
    from nbgrader.preprocessors import Execute
    from traitlets.config import Config

    monkeypatch.setattr(cell_limits, "SHORT_FLOOR", 0.2)
    limits = cell_limits.derive({}, 1.0, 20.0, 1.5)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell("while True:\n    pass") for _ in range(4)]
    nb.cells.append(nbformat.v4.new_code_cell("print('after the loops')"))
    config = Config()
    config.Execute.timeout_func = _TimedKernelLimits(limits)
    config.Execute.iopub_timeout = 60
    STARTS.clear()
    Execute(config=config).preprocess(nb, {"metadata": {"path": "."}})
    took = [b - a for a, b in zip(STARTS, STARTS[1:])]
    assert [cell_limits.hit_its_limit(c) for c in nb.cells] == [True] * 4 + [False]
    assert "after the loops" in nb.cells[-1].outputs[0]["text"]
    for seconds, limit in zip(took, [1.0, 0.5, 0.2, 0.2]):
        assert limit <= seconds < limit + 2.0, took
    assert max(took[2:4]) < 1.0 and sum(took) < 3.9, took  # without the budget: 4 x 1 s
    replay = cell_limits.KernelLimits(limits)
    assert list(replay.replay(nb.cells).values()) == [1.0, 0.5, 0.2, 0.2, 0.2]


def test_the_recheck_skips_only_tests_that_timed_out_with_0_points_in_the_kernel(monkeypatch):
    """A test stopped at its limit in nbgrader's run scored 0 there, which the re-check can only
    confirm: it is not run again. One that carries a CellTimeoutError but got points (a student's
    own exception of that name after a faked result) is re-checked like any other."""
    from transformer_lab.instructor import job

    spec = {
        "student": "s",
        "assignment": LESSON,
        "cells": {"a-test": {"points": 2}, "b-test": {"points": 2}, "c-test": {"points": 1}},
    }
    scores = {"a-test": 0.0, "b-test": 2.0, "c-test": 0.0}
    asked = []

    def cell_scores(course, assignment, student, cells):
        asked.append(sorted(cells))
        return {gid: scores[gid] for gid in cells}

    monkeypatch.setattr(job.nbgrader_app, "cell_scores", cell_scores)
    timeouts = {"a-test", "b-test", "student-3"}
    assert job._settled(Path("."), spec, timeouts) == {"a-test"}
    assert asked == [["a-test", "b-test"]]
    assert job._settled(Path("."), spec, set()) == set() and len(asked) == 1


def test_a_test_gets_its_recheck_limit_from_its_time_in_the_recheck():
    """Lesson 10's rotation test takes 0.3 s in the notebook and ~9 s in the re-check (3,500
    calls across the pipe): its re-check limit comes from the 9 s, not from the 0.3 s (the
    mutant: the notebook cell's limit, 10 s, which an honest student's re-check ran past on a
    loaded machine and lost the exercise)."""
    times = {"rot": 0.3, cell_limits.RECHECK + "rot": 8.7, "other": 0.3}
    limits = cell_limits.derive(times)
    recheck = verify.RecheckLimits({"cells": []}, limits, None)
    assert recheck.test_limit("rot") == (34.8, 34.8)  # max(10, 4 x 8.7): not 20 x
    assert recheck.test_limit("other") == (10.0, 10.0)  # not timed in the re-check: the cell's
    known = verify.RecheckLimits({"cells": []}, limits, None, kernel_timeouts={"rot"})
    assert known.test_limit("rot") == (26.1, 26.1)  # hit its limit in the kernel: the short one
    assert "tests in the re-check 34.8-34.8 s" in cell_limits.describe(limits)
