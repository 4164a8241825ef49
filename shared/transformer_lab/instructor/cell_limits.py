"""Time limits that fit the work: each cell's limit from what the reference solution needs for it.

    limit(cell) = max(floor, factor x the reference solution's time for that cell)

with `floor` = 10 s and `factor` = 20 by default (`sandbox.Limits.cell_floor`, `cell_factor`, or
`autograder/cell_limits.json` with {"floor": s, "factor": x}). A cell is matched to the reference
by its nbgrader grade id (test and solution cells), else by its cell id (every released cell
keeps its id in a submission); a cell the reference does not have (a student's own scratch cell)
gets the floor. An instructor's fixed `--cell-timeout` (`Limits.cell_timeout`) replaces all this:
every cell then gets that limit, as before.

The reference times come from one plain execution of the source notebook (solutions/, hidden
tests included) under the grading settings (quick mode, grading mode, one thread), timed per cell
with nbclient. They are cached in `<course>/autograder/work/cell_times/<assignment>.json`, keyed by
the SHA-256 of the source notebooks and the quick-mode flag: a class graded in several runs (or a
resumed run) measures once; an edited solution is measured again. The cache sits beside the
gradebook, which no grading job ever sees.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import nbformat

FLOOR = 10.0
FACTOR = 20.0
FALLBACK = 240.0  # every cell's limit when the reference solution cannot be timed
CONFIG = "cell_limits.json"


@dataclasses.dataclass
class CellLimits:
    """{grade id or cell id: seconds}, and the limit of a cell the reference does not have."""

    seconds: dict[str, float]
    default: float

    def for_ids(self, grade_id: str | None, cell_id: str | None) -> float:
        if grade_id and grade_id in self.seconds:
            return self.seconds[grade_id]
        if cell_id and cell_id in self.seconds:
            return self.seconds[cell_id]
        return self.default

    def __call__(self, cell) -> float:
        """nbclient's `timeout_func`: the limit of one notebook cell."""
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        return self.for_ids(meta.get("grade_id"), cell.get("id"))

    def to_json(self) -> dict:
        return {"seconds": self.seconds, "default": self.default}

    @classmethod
    def from_json(cls, data: dict | None) -> CellLimits | None:
        if not data:
            return None
        return cls({str(k): float(v) for k, v in data["seconds"].items()}, float(data["default"]))


def fixed(seconds: float) -> CellLimits:
    """The instructor's override: the same limit for every cell."""
    if not seconds or seconds <= 0:
        raise ValueError(f"a cell time limit must be positive, not {seconds!r}")
    return CellLimits({}, float(seconds))


def derive(times: dict[str, float], floor: float = FLOOR, factor: float = FACTOR) -> CellLimits:
    """max(floor, factor x reference time) for every reference cell; the floor for the rest."""
    if floor <= 0 or factor <= 0:
        raise ValueError(f"floor and factor must be positive (floor {floor!r}, factor {factor!r})")
    seconds = {key: max(floor, factor * t) for key, t in times.items()}
    return CellLimits({k: round(v, 1) for k, v in seconds.items()}, float(floor))


def course_settings(course: Path) -> dict[str, float]:
    """The course's floor and factor (`autograder/cell_limits.json`), if it sets them."""
    path = Path(course) / "autograder" / CONFIG
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
        out = {k: float(data[k]) for k in ("floor", "factor") if k in data}
    except (ValueError, TypeError) as error:
        raise SystemExit(
            f"{path}: expected {{'floor': seconds, 'factor': number}} ({error})"
        ) from None
    unknown = set(data) - {"floor", "factor"}
    if unknown:
        raise SystemExit(f"{path}: unknown keys {sorted(unknown)} (floor, factor)")
    return out


# ----------------------------------------------------------------------------------------------
# The reference times.


def source_digest(course: Path, assignment: str) -> str:
    digest = hashlib.sha256(os.environ.get("TRANSFORMER_LAB_QUICK", "1").encode())
    for path in sorted((Path(course) / "solutions" / assignment).glob("*.ipynb")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def time_cells(notebook: Path, env: dict[str, str], timeout: float = 600.0) -> dict[str, float]:
    """Execute `notebook` plainly with nbclient; {grade id or cell id: seconds} of each code cell
    (both keys for an nbgrader cell). Raises RuntimeError if a cell fails."""
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    started: dict[int, float] = {}
    times: dict[str, float] = {}

    def on_execute(cell, cell_index, **_):
        started[cell_index] = time.monotonic()

    def on_complete(cell, cell_index, **_):
        seconds = time.monotonic() - started.get(cell_index, time.monotonic())
        meta = cell.get("metadata", {}).get("nbgrader", {})
        for key in (meta.get("grade_id"), cell.get("id")):
            if key:
                times[key] = round(seconds, 3)

    with tempfile.TemporaryDirectory(prefix="transformer-lab-reference-") as tmp:
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": tmp}},
            on_cell_execute=on_execute,
            on_cell_executed=on_complete,
        )
        try:
            client.execute(env=env)
        except Exception as error:
            raise RuntimeError(
                f"the reference solution {notebook.name} failed while timing its cells: "
                f"{type(error).__name__}: {str(error)[-500:]}"
            ) from None
    return times


def reference_times(
    course: Path, assignment: str, env: dict[str, str], say=print
) -> dict[str, float]:
    """The reference solution's per-cell times, from the cache or measured (then cached)."""
    course = Path(course)
    cache = course / "autograder" / "work" / "cell_times" / f"{assignment}.json"
    digest = source_digest(course, assignment)
    try:
        data = json.loads(cache.read_text())
        if data.get("sha256") == digest:
            return {str(k): float(v) for k, v in data["times"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    times: dict[str, float] = {}
    start = time.monotonic()
    for path in sorted((course / "solutions" / assignment).glob("*.ipynb")):
        times.update(time_cells(path, env))
    say(
        f"timed the reference solution of {assignment} once ({time.monotonic() - start:.1f} s; "
        f"cached in {cache.relative_to(course)})"
    )
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(json.dumps({"sha256": digest, "times": times}, indent=1, sort_keys=True))
    tmp.replace(cache)
    return times


def describe(limits: CellLimits) -> str:
    if not limits.seconds:
        return f"{limits.default:g} s per cell (fixed)"
    values = sorted(set(limits.seconds.values()))
    return (
        f"per-cell limits {values[0]:g}-{values[-1]:g} s from the reference solution "
        f"(a cell it does not have: {limits.default:g} s)"
    )
