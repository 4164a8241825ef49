"""Grades out: the CSV over all result records, and the scores merged into nbgrader's gradebook.

CSV columns: student, assignment, score, max_score, status, reason, flags, then one column per
graded cell of each assignment, named `<assignment>/<grade_id>` (empty for another assignment's
rows). One row per (student, assignment) record; rows sorted by assignment, then student.
"""

from __future__ import annotations

import csv
import io
import json
import os
import warnings
from pathlib import Path

from .grade import RESULTS, graded_cells, released_notebooks

FIXED = ["student", "assignment", "score", "max_score", "status", "reason", "flags"]


def load_records(course: Path, assignment: str | None = None) -> list[dict]:
    """Every record under autograder/work/results/ (of one assignment if given), sorted."""
    root = Path(course) / RESULTS
    folders = [root / assignment] if assignment else sorted(p for p in root.glob("*") if p.is_dir())
    records = []
    for folder in folders:
        for path in sorted(folder.glob("*.json")):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # a half-written file cannot exist (atomic writes); skip foreign junk
            if isinstance(record, dict) and {"student", "assignment", "status"} <= set(record):
                records.append(record)
    return sorted(records, key=lambda r: (r["assignment"], r["student"]))


def _cell_columns(
    course: Path | None, records: list[dict], cells: dict | None
) -> list[tuple[str, str]]:
    columns = []
    for assignment in sorted({r["assignment"] for r in records} | set(cells or {})):
        ids = list((cells or {}).get(assignment, {}))
        if not ids and course is not None:
            try:
                ids = list(graded_cells(released_notebooks(course, assignment)))
            except SystemExit:
                ids = []
        for record in records:  # cells a record has that the release does not (renamed later)
            if record["assignment"] == assignment:
                ids += [gid for gid in record.get("cells", {}) if gid not in ids]
        columns += [(assignment, gid) for gid in ids]
    return columns


def write_csv(
    records: list[dict], out: Path, cells: dict | None = None, course: Path | None = None
) -> Path:
    """Write the grades CSV atomically; `cells` is {assignment: {grade_id: …}} for column order."""
    columns = _cell_columns(course, records, cells)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(FIXED + [f"{a}/{gid}" for a, gid in columns])
    for r in records:
        row = [
            r["student"],
            r["assignment"],
            f"{float(r.get('score', 0)):g}",
            f"{float(r.get('max_score', 0)):g}",
            r["status"],
            r.get("reason") or "",
            " | ".join(r.get("flags") or []),
        ]
        for assignment, gid in columns:
            cell = r.get("cells", {}).get(gid) if assignment == r["assignment"] else None
            row.append(f"{float(cell['score']):g}" if cell else "")
        writer.writerow(row)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(buffer.getvalue(), encoding="utf-8")
    os.replace(tmp, out)
    return out


def export(course: Path, out: Path, assignment: str | None = None) -> Path:
    """The CSV over every record of the course (or of one assignment)."""
    records = load_records(course, assignment)
    return write_csv(records, out, course=Path(course))


def merge_into_gradebook(course: Path, records: list[dict]) -> int:
    """Write the records' cell scores into autograder/work/gradebook.db as auto scores, so
    nbgrader's own tools (formgrader, `nbgrader export`) see them. Only ever called by the
    parent process (one writer). An assignment the gradebook does not know yet is registered
    first (`generate`, which rewrites exercises/ byte-identically).
    Returns the number of submissions written."""
    from nbgrader.api import Gradebook, MissingEntry

    from .. import cli

    db = Path(course) / "autograder" / "work" / "gradebook.db"
    wanted = {r["assignment"] for r in records}
    unknown = sorted(wanted - cli._gradebook_assignments(Path(course)))
    if unknown:  # register the assignment's cells and points (byte-identical regeneration)
        cli.generate(Path(course), unknown, quiet=True)
    written = 0
    with warnings.catch_warnings(), Gradebook(f"sqlite:///{db}") as gb:
        warnings.simplefilter("ignore")  # SQLAlchemy's autoflush notes from nbgrader's api
        known = {a.name for a in gb.assignments}
        for record in records:
            assignment = record["assignment"]
            if assignment not in known:
                continue
            cells = graded_cells(released_notebooks(Path(course), assignment))
            gb.update_or_create_student(record["student"])
            try:
                gb.find_submission(assignment, record["student"])
            except MissingEntry:
                gb.add_submission(assignment, record["student"])
            for gid, cell in record.get("cells", {}).items():
                if gid not in cells:
                    continue
                try:
                    row = gb.find_grade(
                        gid, Path(cells[gid]["notebook"]).stem, assignment, record["student"]
                    )
                except MissingEntry:
                    continue
                row.auto_score = float(cell["score"])
                row.manual_score = None
            gb.db.commit()
            written += 1
    return written
