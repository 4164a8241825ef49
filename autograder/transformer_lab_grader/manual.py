"""Manual grades that last: scores and comments given by hand, kept apart from the result records.

A manual grade comes from formgrader (nbgrader's ``manual_score`` and comment in
``autograder/work/gradebook.db``, read by `harvest`) or from a CSV (`import_csv`, the
``grade-manual`` command; columns ``student,grade_id,score[,comment]``). Both are kept in
``<course>/autograder/work/manual/<assignment>.json``::

    {student: {grade_id: {"score", "comment", "source", "at", "submission_sha256"}}}

Autograding never writes this file, so no ``grade`` run (``--force`` included) erases a manual
grade; and ``gradebook_merge.merge_into_gradebook`` leaves formgrader's manual scores in place.
`overlay` puts the manual grades over the records that export, report and feedback read: the
cell's score becomes the manual one, the record's score is recomputed, and the cell says it was
graded by hand (with the comment). A manual grade given for another submission than the one on
record is kept and marked ``outdated``, for the instructor to look at again.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from .notebook_format import graded_cells, released_notebooks
from .records import now, write_atomic

FOLDER = Path("autograder") / "work" / "manual"
CSV_COLUMNS = ("student", "grade_id", "score")


def store_path(course: Path, assignment: str) -> Path:
    return Path(course) / FOLDER / f"{assignment}.json"


def load(course: Path, assignment: str) -> dict[str, dict[str, dict]]:
    """{student: {grade_id: manual grade}} of one assignment (empty when none was given)."""
    path = store_path(course, assignment)
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def _save(course: Path, assignment: str, grades: dict) -> None:
    write_atomic(
        store_path(course, assignment), json.dumps(grades, indent=1, sort_keys=True) + "\n"
    )


def _record_sha(course: Path, assignment: str, student: str) -> str:
    from .records import record_path

    path = record_path(course, assignment, student)
    try:
        return str(json.loads(path.read_text(encoding="utf-8")).get("submission_sha256") or "")
    except (OSError, ValueError, AttributeError):
        return ""


def put(course: Path, assignment: str, given: list[tuple[str, str, float, str]], source: str):
    """Keep manual grades (student, grade_id, score, comment); checked against the release:
    a grade id it does not have, or a score outside [0, points], is a ValueError naming it."""
    cells = graded_cells(released_notebooks(Path(course), assignment))
    for student, grade_id, score, _ in given:
        if grade_id not in cells:
            raise ValueError(
                f"{student}: {assignment} has no graded cell {grade_id!r} "
                f"(it has: {', '.join(sorted(cells))})"
            )
        if not 0 <= score <= cells[grade_id]["points"]:
            raise ValueError(
                f"{student}: {grade_id} score {score:g} outside [0, {cells[grade_id]['points']:g}]"
            )
    grades = load(course, assignment)
    for student, grade_id, score, comment in given:
        grades.setdefault(student, {})[grade_id] = {
            "score": float(score),
            "comment": comment,
            "source": source,
            "at": now(),
            "submission_sha256": _record_sha(course, assignment, student),
        }
    _save(course, assignment, grades)
    return grades


def read_csv(path: Path) -> list[tuple[str, str, float, str]]:
    """The rows of a manual-grades CSV; ValueError naming the line that is wrong."""
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in CSV_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(
                f"{path}: missing column(s) {', '.join(missing)} "
                f"(expected {','.join(CSV_COLUMNS)}[,comment])"
            )
        rows = []
        for line, row in enumerate(reader, start=2):
            student, grade_id = (row["student"] or "").strip(), (row["grade_id"] or "").strip()
            try:
                score = float(row["score"])
            except (TypeError, ValueError):
                raise ValueError(f"{path}:{line}: score {row['score']!r} is not a number") from None
            if not student or not grade_id:
                raise ValueError(f"{path}:{line}: student and grade_id are required")
            rows.append((student, grade_id, score, (row.get("comment") or "").strip()))
    return rows


def import_csv(course: Path, assignment: str, path: Path) -> dict:
    """`grade-manual`: the CSV's grades kept, and written to the gradebook for formgrader."""
    rows = read_csv(Path(path))
    grades = put(course, assignment, rows, source=f"csv:{Path(path).name}")
    from . import gradebook

    if gradebook.gradebook_path(course).exists():
        gradebook.write_manual_grades(course, assignment, rows)
    return grades


def harvest(course: Path, assignment: str) -> int:
    """Keep the manual grades formgrader wrote into the gradebook that are not kept yet (or
    that changed there). Returns how many were taken."""
    from . import gradebook

    if not gradebook.gradebook_path(course).exists():
        return 0
    kept = load(course, assignment)
    new = [
        (student, gid, score, comment)
        for (student, gid), (score, comment) in gradebook.manual_grades(course, assignment).items()
        if kept.get(student, {}).get(gid, {}).get("score") != score
        or kept.get(student, {}).get(gid, {}).get("comment") != comment
    ]
    if new:
        put(course, assignment, new, source="formgrader")
    return len(new)


def overlay(course: Path, assignment: str, records) -> None:
    """Put the manual grades over `records` (an iterable of one assignment's records; changed
    in place): see module."""
    grades = load(course, assignment)
    for record in records:
        mine = grades.get(record["student"], {})
        cells = record.get("cells", {})
        for grade_id, grade in mine.items():
            if grade_id not in cells:
                continue
            cell = cells[grade_id]
            cell.update(
                score=grade["score"],
                passed=grade["score"] >= float(cell.get("max_score") or 0) > 0,
                manual=True,
                comment=grade.get("comment", ""),
            )
            if grade.get("submission_sha256", "") != record.get("submission_sha256", ""):
                cell["outdated"] = True
        if mine and record["status"] == "graded":
            record["score"] = sum(float(c["score"]) for c in cells.values())
        record["manual"] = sorted(g for g in mine if g in cells)


def overlay_all(course: Path, records: list[dict]) -> list[dict]:
    """`overlay` over records of any assignments (each names its own); returns them."""
    for assignment in sorted({r["assignment"] for r in records}):
        overlay(course, assignment, [r for r in records if r["assignment"] == assignment])
    return records


def outdated(records: dict[str, dict]) -> list[str]:
    """A line per manual grade given for another submission than the one on record
    ({student: overlaid record})."""
    return [
        f"{student}: {grade_id} was graded by hand for another submission than the one on "
        "record; look at it again (`grade-manual` or formgrader)"
        for student, record in sorted(records.items())
        for grade_id, cell in record.get("cells", {}).items()
        if cell.get("outdated")
    ]
