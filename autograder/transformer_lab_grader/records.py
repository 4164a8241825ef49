"""The grader's record formats: one JSON result record per (assignment, student), and the CSV.

A result record, ``<course>/autograder/work/results/<assignment>/<student>.json``::

    {"student", "assignment", "status": "graded" | "ungradable", "reason": str | None,
     "score", "max_score", "flags": [str], "submission_sha256", "seconds", "graded_at",
     "lesson_sha256", "cells": {grade_id: {"score", "max_score", "passed", "exercises": [check
     names], "output", "failure"}}, "submitted_at", "why", "history": [{"score", "max_score",
     "status", "submitted_at", "graded_at", "why"}]}

A failed cell's ``failure`` is what the judge caught, as data (`failures`: the exception type,
the exercise, the mistake's key and sentence, what differed, the case, the student's crash);
None when the cell passed. The report and the feedback read it; ``output`` (the cell's text, as
nbgrader's notebook has it) is kept for people to read.

``submitted_at``: when the graded submission was handed in (`timing`); ``why``: why it was graded
(first submission, new submission, changed lesson, --force); ``history``: the earlier gradings.

``lesson_sha256`` (`lesson_digest`) is the digest of what grading depended on in the lesson's
source (every nbgrader cell: ids, points, solutions, tests, hidden tests); `stale_records` lists
the records graded against another version of the lesson.

``grade`` writes them (``validate_record`` checks what a grading job hands back, ``ungradable``
makes the record of a submission that could not be graded); ``load_records`` reads them for the
CSV and ``load_class_records`` (lenient, every problem listed) for the report and the feedback.

CSV columns: student, assignment, score, max_score, status, reason, flags, then one column per
graded cell of each assignment, named `<assignment>/<grade_id>` (empty for another assignment's
rows). One row per (student, assignment) record; rows sorted by assignment, then student.
"""

from __future__ import annotations

import csv
import datetime
import hashlib
import io
import json
import os
import re
import threading
from pathlib import Path

import nbformat

from .failures import clean_failure
from .notebook_format import graded_cells, released_notebooks
from .plain_text import csv_cell, deep

RESULTS = Path("autograder") / "work" / "results"
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$")  # a record's file name
OUTPUT_CHARS = 4000
FIXED = ["student", "assignment", "score", "max_score", "status", "reason", "flags"]


def results_dir(course: Path, assignment: str) -> Path:
    return Path(course) / RESULTS / assignment


def record_path(course: Path, assignment: str, student: str) -> Path:
    return results_dir(course, assignment) / f"{student}.json"


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` atomically; no text makes it fail (a lone surrogate is written
    as its escape)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text, encoding="utf-8", errors="backslashreplace")
    os.replace(tmp, path)


def write_record(course: Path, record: dict) -> Path:
    """Write a record to its place under results/ (atomically), lone surrogates replaced."""
    path = record_path(course, record["assignment"], record["student"])
    write_atomic(path, json.dumps(deep(record), indent=1, sort_keys=True))
    return path


def lesson_digest(course: Path, assignment: str) -> str:
    """Digest of the lesson's nbgrader cells in solutions/ (grade ids, points, sources): a
    changed solution, test or points changes it; a changed explanation does not."""
    digest = hashlib.sha256()
    for path in sorted((Path(course) / "solutions" / assignment).glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        digest.update(path.name.encode() + b"\0")
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade") or meta.get("solution"):
                part = [meta.get("grade_id"), meta.get("points"), cell.get("source", "")]
                digest.update(json.dumps(part).encode() + b"\0")
    return digest.hexdigest()


def stale_records(course: Path, assignment: str, records: list[dict]) -> dict[str, str]:
    """{student: why} for the records of `assignment` graded against another version of the
    lesson: another `lesson_digest`, or (records from before the digest was kept) other points
    than the release's."""
    current = lesson_digest(course, assignment)
    total = sum(c["points"] for c in graded_cells(released_notebooks(course, assignment)).values())
    stale = {}
    for record in records:
        if record.get("assignment") != assignment:
            continue
        kept = record.get("lesson_sha256")
        if kept and kept != current:
            stale[record["student"]] = "the lesson's solution, tests or points changed since"
        elif not kept and float(record.get("max_score", 0)) != total:
            stale[record["student"]] = (
                f"graded out of {float(record.get('max_score', 0)):g}, the lesson now has {total:g}"
            )
    return stale


# ----------------------------------------------------------------------------------------------
# Writing: what grading produces.


def ungradable(
    student: str,
    assignment: str,
    cells: dict,
    reason: str,
    *,
    sha: str = "",
    flags: list[str] | None = None,
    seconds: float = 0.0,
) -> dict:
    """The record of a submission that could not be graded: score 0, every cell failed."""
    return {
        "student": student,
        "assignment": assignment,
        "status": "ungradable",
        "reason": reason,
        "score": 0.0,
        "max_score": sum(c["points"] for c in cells.values()),
        "cells": {
            gid: {
                "score": 0.0,
                "max_score": c["points"],
                "passed": False,
                "exercises": c["exercises"],
                "output": "",
                "failure": None,  # nothing ran: the record's `reason` says why
            }
            for gid, c in cells.items()
        },
        "flags": list(flags or []),
        "submission_sha256": sha,
        "seconds": round(seconds, 2),
        "graded_at": now(),
    }


def validate_record(raw: object, student: str, assignment: str, cells: dict) -> dict:
    """Check a record against the release; raises ValueError. Totals are recomputed here."""
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    if raw.get("student") != student or raw.get("assignment") != assignment:
        raise ValueError("student or assignment does not match the job")
    if raw.get("status") not in ("graded", "ungradable"):
        raise ValueError(f"unknown status {raw.get('status')!r}")
    got = raw.get("cells")
    if not isinstance(got, dict) or set(got) != set(cells):
        raise ValueError("graded cells differ from the release's")
    clean = {}
    for gid, cell in got.items():
        points = cells[gid]["points"]
        score = cell.get("score") if isinstance(cell, dict) else None
        if not isinstance(score, (int, float)) or not 0 <= score <= points:
            raise ValueError(f"cell {gid}: score {score!r} outside [0, {points:g}]")
        output = cell.get("output", "")
        clean[gid] = {
            "score": float(score),
            "max_score": points,
            "passed": bool(cell.get("passed")) and score == points,
            "exercises": cells[gid]["exercises"],
            "output": output[:OUTPUT_CHARS] if isinstance(output, str) else "",
            "failure": clean_failure(cell.get("failure")),
        }
    flags = raw.get("flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise ValueError("flags is not a list of strings")
    reason = raw.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise ValueError("reason is not text")
    record = dict(raw)
    record.update(
        cells=clean,
        flags=[f[:500] for f in flags[:50]],
        reason=reason[:2000] if reason else None,
        score=0.0 if raw["status"] == "ungradable" else sum(c["score"] for c in clean.values()),
        max_score=sum(c["points"] for c in cells.values()),
    )
    return record


def load_valid(path: Path, student: str, assignment: str, cells: dict) -> dict | None:
    """The record at `path` if it is valid against the release, else None."""
    try:
        return validate_record(
            json.loads(path.read_text(encoding="utf-8")), student, assignment, cells
        )
    except (OSError, ValueError, TypeError, AttributeError):
        return None


# ----------------------------------------------------------------------------------------------
# Reading: the CSV, the report and the feedback.


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
                records.append(deep(record))  # a lone surrogate saved by an older grader
    return sorted(records, key=lambda r: (r["assignment"], r["student"]))


def _number(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"not a number: {value!r}")
    return float(value)


def clean_record(record, assignment: str) -> dict:
    """A cleaned copy of one record (lone surrogates replaced); ValueError saying what is wrong
    with it."""
    if not isinstance(record, dict):
        raise ValueError(f"a record is a JSON object, not {type(record).__name__}")
    record = deep(record)
    status = record.get("status")
    if status not in ("graded", "ungradable"):
        raise ValueError(f"status is {status!r}, not 'graded' or 'ungradable'")
    if record.get("assignment", assignment) != assignment:
        raise ValueError(f"record is for assignment {record.get('assignment')!r}")
    cells = record.get("cells") or {}
    if not isinstance(cells, dict):
        raise ValueError("cells is not an object")
    clean_cells = {}
    for grade_id, cell in cells.items():
        if not isinstance(cell, dict):
            raise ValueError(f"cell {grade_id!r} is not an object")
        score = _number(cell.get("score", 0.0))
        max_score = _number(cell.get("max_score", 0.0))
        exercises = cell.get("exercises") or []
        if not isinstance(exercises, list):
            raise ValueError(f"cell {grade_id!r}: exercises is not a list")
        passed = cell.get("passed")
        clean_cells[str(grade_id)] = {
            "score": score,
            "max_score": max_score,
            "passed": bool(passed) if passed is not None else score >= max_score > 0,
            "exercises": [str(e) for e in exercises],
            "output": str(cell.get("output") or ""),
            "failure": clean_failure(cell.get("failure")),
        }
    flags = record.get("flags") or []
    if not isinstance(flags, list):
        raise ValueError("flags is not a list")
    return {
        "student": str(record.get("student", "")),
        "status": status,
        "reason": None if record.get("reason") is None else str(record["reason"]),
        "score": _number(record.get("score", 0.0)),
        "max_score": _number(record.get("max_score", 0.0)),
        "cells": clean_cells,
        "flags": [str(f) for f in flags],
        "submission_sha256": str(record.get("submission_sha256") or ""),
        "submitted_at": record.get("submitted_at"),
        "why": record.get("why"),
        "history": [h for h in record.get("history") or [] if isinstance(h, dict)],
    }


def load_class_records(course: Path, assignment: str) -> tuple[dict[str, dict], list[str]]:
    """({student: record}, [problem, ...]) from the results folder of one assignment.

    The student is the file's name (``alice.json`` -> ``alice``). Files that are not valid JSON or
    not a valid record are listed as problems and left out; half-written temporary files
    (hidden names, other suffixes) are ignored.
    """
    folder = results_dir(course, assignment)
    records, problems = {}, []
    if not folder.is_dir():
        return records, [f"no results folder {folder}: grade the assignment first"]
    for path in sorted(folder.glob("*.json")):
        if path.name.startswith("."):
            continue
        student = path.stem
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            record = clean_record(raw, assignment)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError) as error:
            problems.append(f"{path.name}: unreadable record ({type(error).__name__}: {error})")
            continue
        if record["student"] and record["student"] != student:
            problems.append(
                f"{path.name}: the record names student {record['student']!r}; counted as {student!r}"
            )
        record["student"] = student
        records[student] = record
    return records, problems


# ----------------------------------------------------------------------------------------------
# The CSV.


def _cell_columns(
    course: Path | None, records: list[dict], cells: dict | None
) -> list[tuple[str, str]]:
    columns = []
    for assignment in sorted({str(r.get("assignment")) for r in records} | set(cells or {})):
        ids = list((cells or {}).get(assignment, {}))
        if not ids and course is not None:
            try:
                ids = list(graded_cells(released_notebooks(course, assignment)))
            except SystemExit:
                ids = []
        for record in records:  # cells a record has that the release does not (renamed later)
            got = record.get("cells")
            if record.get("assignment") == assignment and isinstance(got, dict):
                ids += [gid for gid in got if gid not in ids]
        columns += [(assignment, gid) for gid in ids]
    return columns


def _csv_row(r: dict, columns: list[tuple[str, str]]) -> list:
    row = [
        r["student"],
        r["assignment"],
        "" if r.get("score", 0) is None else f"{float(r.get('score', 0)):g}",
        f"{float(r.get('max_score', 0)):g}",
        r["status"],
        r.get("reason") or "",
        " | ".join(r.get("flags") or []),
    ]
    for assignment, gid in columns:
        cell = r.get("cells", {}).get(gid) if assignment == r["assignment"] else None
        row.append(f"{float(cell['score']):g}" if cell else "")
    return row


def _bad_row(r, error: Exception) -> list:
    """The row of a record that cannot be written: who, and why (the other columns empty)."""
    get = r.get if isinstance(r, dict) else {}.get
    why = f"the grader could not write this record ({type(error).__name__}: {error})"
    return [get("student", "?"), get("assignment", "?"), "", "", "unreadable", why[:500], ""]


def write_csv(
    records: list[dict],
    out: Path,
    cells: dict | None = None,
    course: Path | None = None,
    more: tuple[list[str], object] | None = None,
) -> Path:
    """Write the grades CSV atomically; `cells` is {assignment: {grade_id: …}} for column order;
    `more`: (column names, record -> their values) appended after the cells' columns. A record
    whose score is None (a non-submitter left blank) has an empty score. Every cell is
    `plain_text.csv_cell` (no control characters, no formula); a record that cannot be written
    gets a row saying so, status "unreadable", and the other records are written."""
    columns = _cell_columns(course, records, cells)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(FIXED + [f"{a}/{gid}" for a, gid in columns] + (more[0] if more else []))
    for r in records:
        try:
            row = _csv_row(r, columns) + (more[1](r) if more else [])
        except Exception as error:  # noqa: BLE001 - one bad record is its student's, not the class's
            row = _bad_row(r, error)
        writer.writerow([csv_cell(value) for value in row])
    out = Path(out)
    write_atomic(out, buffer.getvalue())
    return out
