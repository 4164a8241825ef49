"""Each student cell's and each test's time limit during one judged execution (`Limits`): the
limits `cell_limits` derived from the reference solution, shortened for a cell or test that
already hit its limit, and the notebook's timeout budget that the student's process and the
tests share.
"""

from __future__ import annotations

from .cell_limits import RECHECK, TimeoutBudget
from .judge_cells import Cell, label
from .verify_cells import CELL_TIMED_OUT


class Limits:
    """Each student cell's and each test's time limit, with the notebook's timeout budget
    (`cell_limits.TimeoutBudget`, shared by the student's process and the tests). Without
    `cell_limits`: `cell_timeout` everywhere, no budget."""

    def __init__(self, cell_limits=None, cell_timeout: float | None = None):
        self.cell_limits, self.cell_timeout = cell_limits, cell_timeout
        self.known: set[str] = set()  # cells and tests that hit their limit: the short one now
        self.budget = TimeoutBudget(cell_limits.budget if cell_limits is not None else None)

    def pair(self, grade_id=None, cell_id=None) -> tuple[float | None, float | None]:
        """(full, short) limit of a cell or test."""
        if self.cell_limits is None:
            return self.cell_timeout, self.cell_timeout
        full, short = self.cell_limits.pair(grade_id, cell_id)
        if (grade_id or cell_id) in self.known:
            return short, short
        return full, short

    def cell_spec(self, cells: list[Cell]) -> list[list]:
        """The student's cells as the student's process runs them: [index, source, full, short]."""
        return [[c.index, c.source, *self.pair(c.grade_id, c.cell_id)] for c in cells]

    def given(self, cell: Cell) -> float | None:
        """The limit the student's process gives `cell` now (the same arithmetic as there)."""
        full, short = self.pair(cell.grade_id, cell.cell_id)
        return self.budget.limit(full, short) if full else full

    def learn(self, cell: Cell, limit: float | None, error: str) -> bool:
        """Charge the budget as the student's process did; True if the cell hit its limit."""
        if not (limit and error.startswith(CELL_TIMED_OUT)):
            return False
        self.budget.charge(label(cell), limit)
        self.known.add(cell.grade_id or cell.cell_id or "")
        return True

    def test_limit(self, grade_id: str) -> tuple[float | None, float | None]:
        """(this test's limit, its full limit): from the reference solution's time for this test
        in the judge (`cell_limits.RECHECK`), where it was measured; else the cell's."""
        timed = self.cell_limits is not None and RECHECK + grade_id in self.cell_limits.seconds
        full, short = self.pair(RECHECK + grade_id if timed else grade_id)
        if grade_id in self.known:
            full = short
        limit = self.budget.limit(full, short) if full else full
        return limit, full

    def test_timed_out(self, grade_id: str, limit: float) -> None:
        self.budget.charge(grade_id, limit)
        self.known.add(grade_id)
