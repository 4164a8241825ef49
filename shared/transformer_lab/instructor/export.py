"""Grades out: the CSV over all result records (its columns: `records`).

The scores also reach nbgrader's gradebook (`nbgrader_app.merge_into_gradebook`, called by
`grade`), so that nbgrader's own tools see them.
"""

from __future__ import annotations

from pathlib import Path

from .records import load_records, write_csv


def export(course: Path, out: Path, assignment: str | None = None) -> Path:
    """The CSV over every record of the course (or of one assignment)."""
    records = load_records(course, assignment)
    return write_csv(records, out, course=Path(course))
