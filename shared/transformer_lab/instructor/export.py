"""Grades out: the CSV over all result records, in two shapes.

- long (`export`, the default): one row per (student, assignment) record, every detail (its
  columns: `records`);
- wide (`export_wide`, ``--wide``): one row per student and one column per lesson, the shape of
  Canvas's own gradebook export, which its gradebook import takes as it is: ``Student`` (the
  display name), ``ID`` (the Canvas user id, by which Canvas matches the row), ``SIS User ID``,
  ``SIS Login ID`` (the student id here when it is not a Canvas id: an exchange or hub login),
  ``Section``, then one column per lesson; a second row ``Points Possible`` gives each lesson's
  points. An ungradable record scores 0; a lesson with no record for the student is blank.
  Identities come from `identities` (what `collect` read from the LMS's file names).

Both shapes count the manual grades (`manual.overlay`).

The scores also reach nbgrader's gradebook (`nbgrader_app.merge_into_gradebook`, called by
`grade`), so that nbgrader's own tools see them.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from . import identities, manual
from .records import load_records, write_atomic, write_csv

WIDE_FIXED = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]


def export(course: Path, out: Path, assignment: str | None = None) -> Path:
    """The CSV over every record of the course (or of one assignment)."""
    records = manual.overlay_all(course, load_records(course, assignment))
    return write_csv(records, out, course=Path(course))


def wide_rows(course: Path, records: list[dict]) -> list[list[str]]:
    """The wide table (header, points row, one row per student) of `records`."""
    register = identities.load(course)
    lessons = sorted({r["assignment"] for r in records})
    points = {r["assignment"]: float(r.get("max_score", 0)) for r in records}
    scores: dict[str, dict[str, str]] = {}
    for r in records:
        score = 0.0 if r["status"] != "graded" else float(r.get("score", 0))
        scores.setdefault(r["student"], {})[r["assignment"]] = f"{score:g}"
    rows = [WIDE_FIXED + lessons, ["Points Possible", "", "", "", ""]]
    rows[1] += [f"{points[lesson]:g}" for lesson in lessons]
    for student in sorted(scores, key=lambda s: (identities.of(register, s)["name"].lower(), s)):
        who = identities.of(register, student)
        canvas = who.get("lms") == "canvas"
        row = [who["name"], who["lms_id"] if canvas else "", "", "" if canvas else student, ""]
        rows.append(row + [scores[student].get(lesson, "") for lesson in lessons])
    return rows


def export_wide(course: Path, out: Path, assignment: str | None = None) -> Path:
    """Write the wide CSV (see module) atomically."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(
        wide_rows(course, manual.overlay_all(course, load_records(course, assignment)))
    )
    write_atomic(Path(out), buffer.getvalue())
    return Path(out)
