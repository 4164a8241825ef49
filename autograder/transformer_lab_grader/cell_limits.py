"""Time limits that fit the work: each cell's limit from what the reference solution needs for it.

    limit(cell) = max(floor, factor x the reference solution's time for that cell)

with `floor` = 10 s and `factor` = 20 by default (`sandbox.Limits.cell_floor`, `cell_factor`, or
`autograder/cell_limits.json` with {"floor": s, "factor": x}). A cell is matched to the reference
by its nbgrader grade id (test and solution cells), else by its cell id (every released cell
keeps its id in a submission); a cell the reference does not have (a student's own scratch cell)
gets the floor. An instructor's fixed `--cell-timeout` (`Limits.cell_timeout`) replaces all this:
every cell then gets that limit, as before.

The reference times come from one execution of the source notebook (solutions/, hidden tests
included) the way a student's notebook is executed (`judge.time_notebook`: its cells in a process
of their own, its tests in the judge; quick mode, grading mode, one thread), timed per cell. They
are cached in `<course>/autograder/work/cell_times/<assignment>.json`, keyed by
the SHA-256 of the source notebooks and the quick-mode flag: a class graded in several runs (or a
resumed run) measures once; an edited solution is measured again. The cache sits beside the
gradebook, which no grading job ever sees. The course ships them too, in
`autograder/cell_times/<assignment>.json` (`transformer-lab time-reference`, same keying): an
instructor's first grading of an unchanged lesson then measures nothing. Times measured on the
grading machine (the cache) come first; a shipped file whose key does not match is ignored.

A timeout budget per notebook. A loop inside a graded function that many cells call would cost
the limit once per such cell. So the execution of a notebook keeps a `TimeoutBudget`, shared by
the student's cells and the tests: until a cell hits its limit every cell gets
its full limit (an honest but slow notebook is never shortened); after that a cell gets at most
what is left of the budget (`budget` = 20 s, `autograder/cell_limits.json` {"budget": s}), and
once the budget is spent a *short* limit, max(2 s, 3 x the reference's time). What a notebook's
looping cells cost is then at most max(first limit, budget) + cells x short limit. A cell or test
that hit its limit gets the short limit at once when a fresh student process runs it again.
Fixed limits (`--cell-timeout`, or the fallback when the reference cannot be timed) have no budget.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path

FLOOR = 10.0
FACTOR = 20.0
FALLBACK = 240.0  # every cell's limit when the reference solution cannot be timed
BUDGET = 20.0  # seconds a notebook may spend in cells that hit their limit before limits shrink
SHORT_FLOOR = 2.0  # once the budget is spent: max(SHORT_FLOOR, SHORT_FACTOR x reference time)
SHORT_FACTOR = 3.0
CONFIG = "cell_limits.json"
SETTINGS = ("floor", "factor", "budget")
# A test's time in the judge, keyed RECHECK + grade id: there every call of the student's code
# crosses a pipe, so a check that calls it thousands of times (a statistical property) takes many
# times what the same check takes in one process, and gets its limit from this time.
RECHECK = "recheck:"
RECHECK_FACTOR = 4.0  # its limit: max(floor, RECHECK_FACTOR x that time); the pipe's cost is
# most of that time and is steady, and a student whose code loops there must not cost 20 x it
CACHE_VERSION = "3"  # 3: every time measured by the judged execution (`judge`)


@dataclasses.dataclass
class CellLimits:
    """{grade id or cell id: seconds}, and the limit of a cell the reference does not have; the
    short limits that apply once the notebook's timeout `budget` is spent (None: no budget)."""

    seconds: dict[str, float]
    default: float
    short: dict[str, float] = dataclasses.field(default_factory=dict)
    short_default: float | None = None
    budget: float | None = None

    def for_ids(self, grade_id: str | None, cell_id: str | None) -> float:
        return _lookup(self.seconds, grade_id, cell_id, self.default)

    def pair(self, grade_id: str | None, cell_id: str | None) -> tuple[float, float]:
        """(full limit, short limit) of a cell; without a budget both are the full limit."""
        full = self.for_ids(grade_id, cell_id)
        if self.budget is None:
            return full, full
        short = _lookup(self.short, grade_id, cell_id, self.short_default or full)
        return full, min(full, short)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict | None) -> CellLimits | None:
        if not data:
            return None

        def seconds(table):
            return {str(k): float(v) for k, v in (table or {}).items()}

        def number(value):
            return None if value is None else float(value)

        return cls(
            seconds(data["seconds"]),
            float(data["default"]),
            seconds(data.get("short")),
            number(data.get("short_default")),
            number(data.get("budget")),
        )


def _lookup(table: dict[str, float], grade_id, cell_id, default: float) -> float:
    if grade_id and grade_id in table:
        return table[grade_id]
    if cell_id and cell_id in table:
        return table[cell_id]
    return default


def fixed(seconds: float) -> CellLimits:
    """The instructor's override: the same limit for every cell (no budget)."""
    if not seconds or seconds <= 0:
        raise ValueError(f"a cell time limit must be positive, not {seconds!r}")
    return CellLimits({}, float(seconds))


def derive(
    times: dict[str, float],
    floor: float = FLOOR,
    factor: float = FACTOR,
    budget: float | None = BUDGET,
) -> CellLimits:
    """max(floor, factor x reference time) for every reference cell (a test's time in the
    judge: max(floor, RECHECK_FACTOR x it)); the floor for the rest; once `budget` is spent:
    max(SHORT_FLOOR, SHORT_FACTOR x reference time), never above the full limit (budget None:
    none)."""
    if floor <= 0 or factor <= 0:
        raise ValueError(f"floor and factor must be positive (floor {floor!r}, factor {factor!r})")
    if budget is not None and budget <= 0:
        raise ValueError(f"the timeout budget must be positive, not {budget!r}")
    full = {
        key: round(max(floor, (RECHECK_FACTOR if key.startswith(RECHECK) else factor) * t), 1)
        for key, t in times.items()
    }
    short = {
        key: min(full[key], round(max(SHORT_FLOOR, SHORT_FACTOR * t), 1))
        for key, t in times.items()
    }
    return CellLimits(
        full,
        float(floor),
        short if budget is not None else {},
        min(float(floor), SHORT_FLOOR) if budget is not None else None,
        None if budget is None else float(budget),
    )


def course_settings(course: Path) -> dict[str, float]:
    """The course's floor, factor and budget (`autograder/cell_limits.json`), if it sets them."""
    path = Path(course) / "autograder" / CONFIG
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
        out = {k: float(data[k]) for k in SETTINGS if k in data}
        if any(v <= 0 for v in out.values()):
            raise ValueError("every value must be positive")
    except (ValueError, TypeError) as error:
        raise SystemExit(
            f"{path}: expected {{'floor': seconds, 'factor': number, 'budget': seconds}} ({error})"
        ) from None
    unknown = set(data) - set(SETTINGS)
    if unknown:
        raise SystemExit(f"{path}: unknown keys {sorted(unknown)} ({', '.join(SETTINGS)})")
    return out


# ----------------------------------------------------------------------------------------------
# The timeout budget of one execution of a notebook.


@dataclasses.dataclass
class TimeoutBudget:
    """What one execution of a notebook spent in cells that hit their limit, and so the limit
    of its next cell: the full limit until a cell hits its limit, then at most what is left of
    the budget, and once the budget is spent the short limit. `seconds` None: no budget."""

    seconds: float | None
    spent: float = 0.0
    hits: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    spent_at: str | None = None  # the cell whose timeout spent the budget

    def limit(self, full: float, short: float) -> float:
        if self.seconds is None or not self.hits:
            return full
        return min(full, max(short, self.seconds - self.spent))

    def charge(self, cell: str, limit: float) -> None:
        """`cell` ran its whole `limit` and was stopped."""
        self.hits.append((cell, float(limit)))
        self.spent += float(limit)
        if self.spent_at is None and self.is_spent:
            self.spent_at = cell

    @property
    def is_spent(self) -> bool:
        return self.seconds is not None and self.spent >= self.seconds

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict | None) -> TimeoutBudget:
        data = data or {}
        seconds = data.get("seconds")
        budget = cls(None if seconds is None else float(seconds))
        for cell, limit in data.get("hits", []):
            budget.charge(str(cell), float(limit))
        return budget

    def note(self) -> str | None:
        """The reason's words once the budget is spent."""
        if self.spent_at is None:
            return None
        return (
            f"the notebook's timeout budget ({self.seconds:g} s) was spent by cell "
            f"{self.spent_at}: later cells got max({SHORT_FLOOR:g} s, {SHORT_FACTOR:g} x the "
            "reference solution's time)"
        )


def cell_key(cell, index: int | None = None) -> str:
    """How a reason names a cell: its grade id, else its number and id."""
    meta = (cell.get("metadata") or {}).get("nbgrader") or {}
    if meta.get("grade_id"):
        return meta["grade_id"]
    number = "?" if index is None else index + 1
    return f"{number} (id {cell.get('id', '?')})"


# ----------------------------------------------------------------------------------------------
# The reference times.


def source_digest(course: Path, assignment: str) -> str:
    digest = hashlib.sha256(os.environ.get("TRANSFORMER_LAB_QUICK", "1").encode())
    digest.update(CACHE_VERSION.encode())
    for path in sorted((Path(course) / "solutions" / assignment).glob("*.ipynb")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def shipped_path(course: Path, assignment: str) -> Path:
    """Where the course ships `assignment`'s reference times (`transformer-lab time-reference`)."""
    return Path(course) / "autograder" / "cell_times" / f"{assignment}.json"


def _read_times(path: Path, digest: str) -> dict[str, float] | None:
    """The times stored at `path` if they were measured on these source notebooks, else None."""
    try:
        data = json.loads(path.read_text())
        if data.get("sha256") == digest:
            return {str(k): float(v) for k, v in data["times"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return None


def _write_times(path: Path, digest: str, times: dict[str, float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"sha256": digest, "times": times}, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def measure_reference(course: Path, assignment: str, measure, say=print) -> dict[str, float]:
    """Every source notebook of `assignment` through `measure(notebook)`, timed once."""
    times: dict[str, float] = {}
    start = time.monotonic()
    for path in sorted((Path(course) / "solutions" / assignment).glob("*.ipynb")):
        times.update(measure(path))
    say(f"timed the reference solution of {assignment} ({time.monotonic() - start:.1f} s)")
    return times


def reference_times(course: Path, assignment: str, say=print, measure=None) -> dict[str, float]:
    """The reference solution's per-cell times: measured on this machine before (the cache), else
    shipped with the course, else measured now (then cached). `measure(notebook)` runs one source
    notebook as a student's would run and gives {grade id or cell id: seconds} of its cells and
    {RECHECK + grade id: seconds} of its tests."""
    course = Path(course)
    cache = course / "autograder" / "work" / "cell_times" / f"{assignment}.json"
    digest = source_digest(course, assignment)
    times = _read_times(cache, digest)
    if times is not None:
        return times
    shipped = shipped_path(course, assignment)
    times = _read_times(shipped, digest)
    if times is not None:
        say(f"the reference solution's times come with the course ({shipped.relative_to(course)})")
        return times
    times = measure_reference(course, assignment, measure, say)
    _write_times(cache, digest, times)
    say(f"(cached in {cache.relative_to(course)})")
    return times


def ship_reference_times(course: Path, assignment: str, measure, say=print) -> Path:
    """Measure `assignment`'s reference solution and write the times the course ships."""
    path = shipped_path(course, assignment)
    times = measure_reference(course, assignment, measure, say)
    _write_times(path, source_digest(course, assignment), times)
    return path


def describe(limits: CellLimits) -> str:
    if not limits.seconds:
        return f"{limits.default:g} s per cell (fixed)"
    values = sorted({t for key, t in limits.seconds.items() if not key.startswith(RECHECK)})
    recheck = sorted({t for key, t in limits.seconds.items() if key.startswith(RECHECK)})
    tests = f"; tests {recheck[0]:g}-{recheck[-1]:g} s" if recheck else ""
    budget = (
        f"; once {limits.budget:g} s are spent in cells that hit their limit, "
        f"max({SHORT_FLOOR:g} s, {SHORT_FACTOR:g} x the reference)"
        if limits.budget is not None
        else ""
    )
    return (
        f"per-cell limits {values[0]:g}-{values[-1]:g} s from the reference solution "
        f"(a cell it does not have: {limits.default:g} s){tests}{budget}"
    )
