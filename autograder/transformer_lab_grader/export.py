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

Both shapes count the manual grades (`manual.overlay`) and the term's settings (`term`): the
long CSV adds ``submitted_at``, ``due``, ``days_late``, ``penalty_percent`` and
``penalised_score`` after the cells (the raw score stays in ``score``); the wide CSV gives the
penalised score, the one the LMS keeps. With a roster, every enrolled student without a record
has a row with status ``missing`` (score 0 or blank, as the roster section says).

The scores also reach nbgrader's gradebook (`gradebook_merge.merge_into_gradebook`, run by
`grade` at the end of each run), so that nbgrader's own tools see them.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from . import identities, manual, term
from .plain_text import csv_cell
from .records import load_records, write_atomic, write_csv

WIDE_FIXED = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]


LATE_COLUMNS = ["submitted_at", "due", "days_late", "penalty_percent", "penalised_score"]


def class_records(course: Path, assignment: str | None, settings: term.Term) -> list[dict]:
    """Every record (manual grades over them), the lateness of each, and with a roster a
    ``missing`` record for each enrolled student without one, sorted as `load_records` sorts."""
    records = manual.overlay_all(course, load_records(course, assignment))
    for r in records:
        days, penalty = term.lateness(
            settings, r["assignment"], r["student"], r.get("submitted_at")
        )
        score = 0.0 if r["status"] != "graded" else float(r.get("score") or 0)
        r.update(days_late=days, penalty_percent=penalty, final=term.penalised(score, penalty))
    if settings.roster is not None:
        lessons = [assignment] if assignment else sorted({r["assignment"] for r in records})
        have = {(r["student"], r["assignment"]) for r in records}
        blank = settings.missing == "blank"
        for lesson in lessons:
            points = next((r["max_score"] for r in records if r["assignment"] == lesson), 0.0)
            for student in settings.roster:
                if (student, lesson) not in have:
                    records.append(
                        {
                            "student": student,
                            "assignment": lesson,
                            "status": "missing",
                            "reason": "no submission",
                            "score": None if blank else 0.0,
                            "max_score": points,
                            "flags": [],
                            "cells": {},
                            "final": None if blank else 0.0,
                        }
                    )
    return sorted(records, key=lambda r: (r["assignment"], r["student"]))


def _late_values(settings: term.Term):
    def values(r: dict) -> list[str]:
        due = settings.due_for(r["assignment"], r["student"]) or ""
        final = r.get("final")
        return [
            r.get("submitted_at") or "",
            due,
            str(r.get("days_late", 0)) if r["status"] != "missing" else "",
            f"{r.get('penalty_percent', 0.0):g}" if r["status"] != "missing" else "",
            "" if final is None else f"{final:g}",
        ]

    return values


def export(course: Path, out: Path, assignment: str | None = None) -> Path:
    """The CSV over every record of the course (or of one assignment)."""
    settings = term.load(course)
    records = class_records(course, assignment, settings)
    return write_csv(records, out, course=Path(course), more=(LATE_COLUMNS, _late_values(settings)))


def wide_rows(
    course: Path, records: list[dict], settings: term.Term | None = None
) -> list[list[str]]:
    """The wide table (header, points row, one row per student) of `records` (`class_records`)."""
    register = identities.load(course)
    roster = (settings.roster if settings else None) or {}
    lessons = sorted({r["assignment"] for r in records})
    points = {r["assignment"]: float(r.get("max_score", 0)) for r in records}
    scores: dict[str, dict[str, str]] = {}
    for r in records:
        final = r.get("final", 0.0 if r["status"] != "graded" else float(r.get("score", 0)))
        scores.setdefault(r["student"], {})[r["assignment"]] = "" if final is None else f"{final:g}"

    def name(student: str) -> str:
        return roster.get(student) or identities.of(register, student)["name"]

    rows = [WIDE_FIXED + lessons, ["Points Possible", "", "", "", ""]]
    rows[1] += [f"{points[lesson]:g}" for lesson in lessons]
    for student in sorted(scores, key=lambda s: (name(s).lower(), s)):
        who = identities.of(register, student)
        canvas = who.get("lms") == "canvas" or (student.isdigit() and student in roster)
        lms_id = who["lms_id"] if who.get("lms") == "canvas" else student
        row = [name(student), lms_id if canvas else "", "", "" if canvas else student, ""]
        rows.append(row + [scores[student].get(lesson, "") for lesson in lessons])
    return rows


def export_wide(course: Path, out: Path, assignment: str | None = None) -> Path:
    """Write the wide CSV (see module) atomically, every cell `plain_text.csv_cell` (a name
    from an LMS is text its student chose)."""
    settings = term.load(course)
    buffer = io.StringIO()
    rows = wide_rows(course, class_records(course, assignment, settings), settings)
    csv.writer(buffer, lineterminator="\n").writerows([map(csv_cell, row) for row in rows])
    write_atomic(Path(out), buffer.getvalue())
    return Path(out)
