"""What the grader knows about the course's notebook format, in one place.

- nbgrader's cell metadata: which cells are graded (``graded_cells``), which are test cells
  (``is_test_cell``), and the ``check.<name>(...)`` calls a cell makes;
- the hidden-test blocks of the source notebooks (between ``HIDDEN_TESTS_BEGIN`` and
  ``HIDDEN_TESTS_END``), which ``exercises/`` never holds;
- ``repair``: restoring the nbgrader metadata that an editor stripped from a submission.

Cells may be ``nbformat`` nodes or plain dicts (a notebook read as JSON).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import nbformat

from transformer_lab.notebook_cells import (  # noqa: F401 (re-exported: the grader's names for them)
    HIDDEN_TESTS_BEGIN,
    HIDDEN_TESTS_END,
    cell_source,
    hidden_tests,
    is_test_cell,
    nbgrader_meta,
    without_hidden_tests,
)

CHECK_CALL = re.compile(r"\bcheck\.([A-Za-z_]\w*)\s*\(")
RUN_METADATA = ("tags",)  # cell metadata that changes how a cell runs (skip-execution, ...)


# ----------------------------------------------------------------------------------------------
# Cells.


def is_graded(cell: dict) -> bool:
    """A cell that earns points (a test cell, or a graded solution cell)."""
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade")) and "grade_id" in meta


def python_source(src: str) -> str:
    """A code cell as Python: IPython magics and shell lines become calls of get_ipython()."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(src)
    except Exception:
        return "\n".join(
            "" if line.lstrip().startswith(("%", "!")) else line for line in src.splitlines()
        )


def check_calls(source: str) -> list[str]:
    """The check names a cell calls, ``check.<name>(...)``, in order of first call."""
    return list(dict.fromkeys(CHECK_CALL.findall(source)))


def released_notebooks(course: Path, assignment: str) -> dict[str, nbformat.NotebookNode]:
    """{notebook file name: released notebook} from exercises/<assignment>/."""
    folder = course / "exercises" / assignment
    paths = sorted(folder.glob("*.ipynb"))
    if not paths:
        lessons = sorted(p.name for p in (course / "exercises").glob("*") if p.is_dir())
        raise SystemExit(
            f"no released notebook in exercises/{assignment}/ (lessons: {', '.join(lessons)}); "
            "run `transformer-lab release` first"
        )
    return {p.name: nbformat.read(p, as_version=4) for p in paths}


def graded_cells(released: dict[str, nbformat.NotebookNode]) -> dict[str, dict]:
    """{grade_id: {"points", "notebook", "source", "exercises"}} for every graded cell."""
    cells = {}
    for name, nb in released.items():
        for cell in nb.cells:
            if is_graded(cell):
                meta = nbgrader_meta(cell)
                cells[meta["grade_id"]] = {
                    "points": float(meta.get("points", 0)),
                    "notebook": name,
                    "source": cell.source,
                    "exercises": sorted(set(check_calls(cell.source))),
                    "test": is_test_cell(cell),
                }
    return cells


# ----------------------------------------------------------------------------------------------
# Hidden tests.


def unmarked(source: str) -> str:
    """A source test cell with its hidden tests kept and the marker lines dropped (what the
    grader runs)."""
    markers = (HIDDEN_TESTS_BEGIN, HIDDEN_TESTS_END)
    return "\n".join(line for line in source.splitlines() if line.strip() not in markers)


# ----------------------------------------------------------------------------------------------
# Repair.


@dataclasses.dataclass
class Repair:
    """What `repair` did: notes for the record, flags for the instructor."""

    notes: list[str]
    flags: list[str]
    restored: int = 0
    dropped: int = 0
    retagged: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.restored or self.dropped or self.retagged)


def repair(nb: nbformat.NotebookNode, released: nbformat.NotebookNode) -> Repair:
    """Restore stripped nbgrader metadata from the release (cells matched by id, then by source);
    drop metadata naming grade ids the release does not have or that appear twice; restore the
    release's `RUN_METADATA` (tags) of graded cells, flagging a change (a test tagged
    skip-execution would not run); note test cells that are missing (nbgrader restores them)
    or flag them edited (nbgrader grades the released ones). Changes `nb` in place."""
    notes, flags = [], []
    ref = {
        c.metadata["nbgrader"].get("grade_id"): c
        for c in released.cells
        if "nbgrader" in c.metadata
    }
    by_id = {c.get("id"): c for c in ref.values()}
    by_source = {c.source: c for c in ref.values()}
    seen, restored, dropped = set(), 0, 0
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if isinstance(meta, dict) and meta.get("grade_id") in ref and meta["grade_id"] not in seen:
            seen.add(meta["grade_id"])
            continue
        if meta is not None:
            del cell.metadata["nbgrader"]
            dropped += 1
            flags.append(
                f"nbgrader metadata of cell {cell.get('id')!r} dropped (unknown or repeated grade id)"
            )
    for cell in nb.cells:
        if "nbgrader" in cell.metadata:
            continue
        match = by_id.get(cell.get("id")) or by_source.get(cell.source)
        if match is not None and match.metadata["nbgrader"]["grade_id"] not in seen:
            cell.metadata["nbgrader"] = json.loads(json.dumps(match.metadata["nbgrader"]))
            seen.add(match.metadata["nbgrader"]["grade_id"])
            restored += 1
    if restored:
        notes.append(f"repaired: {restored} cells' nbgrader metadata restored from the release")
    retagged = 0
    for grade_id, cell in ref.items():
        meta = cell.metadata["nbgrader"]
        mine = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
        if mine and is_graded(cell) and _restore_run_metadata(mine[0], cell):
            retagged += 1
            flags.append(
                f"the tags of graded cell {grade_id} were changed (graded with the released ones)"
            )
        if not (meta.get("grade") and meta.get("locked")):
            continue
        if not mine:
            notes.append(f"test cell {grade_id} was missing (restored from the release)")
        elif _tests_only(mine[0].source) != _tests_only(cell.source):
            flags.append(f"locked test cell {grade_id} was edited (graded with the released one)")
    return Repair(notes, flags, restored, dropped, retagged)


def _restore_run_metadata(cell, released) -> bool:
    """Give `cell` the released cell's `RUN_METADATA`; whether that changed anything."""
    changed = False
    for key in RUN_METADATA:
        if (cell.metadata.get(key) or None) == (released.metadata.get(key) or None):
            continue  # an empty list is no list
        changed = True
        if key in released.metadata:
            cell.metadata[key] = json.loads(json.dumps(released.metadata[key]))
        else:
            del cell.metadata[key]
    return changed


def _tests_only(source: str) -> str:
    """A test cell's visible tests (a solution notebook's copy has a hidden block too)."""
    return without_hidden_tests(source).strip()
