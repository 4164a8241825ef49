"""The judge's view of a notebook: its code cells in order (`cells_of`), each the student's or a
graded test (`Cell`), and how a note names one (`label`).
"""

from __future__ import annotations

import dataclasses

from .cell_limits import cell_key
from .notebook_format import cell_source, is_test_cell, nbgrader_meta, python_source, unmarked


@dataclasses.dataclass
class Cell:
    """A code cell of the notebook: the student's (`test` None) or a graded test (its grade id)."""

    index: int
    source: str
    test: str | None = None
    grade_id: str | None = None
    cell_id: str | None = None


def label(cell: Cell) -> str:
    """How a note names a cell: its grade id, else its number and id."""
    return cell.grade_id or cell_key({"id": cell.cell_id or "?"}, cell.index)


def cells_of(nb) -> list[Cell]:
    """The notebook's code cells in order: every graded test cell (its hidden tests kept, the
    marker lines dropped), whatever its tags say, and the student's cells (IPython magics as
    Python) that have some source and are not tagged skip-execution. A test cell is never
    skipped: a skipped test would have no error output, which nbgrader scores as passed."""
    cells = []
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell_source(cell)
        meta = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        skipped = not source.strip() or "skip-execution" in (meta.get("tags") or [])
        if skipped and not is_test_cell(cell):
            continue  # what nbclient does not run either
        gid = nbgrader_meta(cell).get("grade_id")
        gid = gid if isinstance(gid, str) else None
        cell_id = cell.get("id") if isinstance(cell.get("id"), str) else None
        if is_test_cell(cell):
            cells.append(Cell(i, unmarked(source), test=gid, grade_id=gid, cell_id=cell_id))
        else:
            cells.append(Cell(i, python_source(source), grade_id=gid, cell_id=cell_id))
    return cells
