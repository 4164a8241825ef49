"""The class report's numbers (`summarise`), read from the result records and the released
notebook; `report` writes them out.

Counting rules (all counts are *students*, never cells or lines of output):
- pass rate of a graded cell = graded students who passed it / graded students;
- pass rate of an exercise = graded students who passed every cell calling its check / graded;
- a *named mistake* is the catalogued mistake a failed check matched (the record's failure
  keeps its key, `failures`; the report shows the catalogue's sentence,
  ``transformer_lab.check.EXERCISES[name].mistake(key).sentence``); a student who makes it in
  several cells counts once;
- an *unnamed failure* is a failed cell whose failure names no catalogued mistake, grouped by its
  kind (the exception type; a failed check split into wrong shape, wrong values, wrong
  gradient, ...).
Ungradable students are counted apart (with their reasons) and left out of the scores and rates.
Students whose submissions are byte for byte the same (`identical_submissions`) are listed for
the instructor to look at, never scored differently. Records graded against another version of
the lesson (`records.stale_records`) are listed with why, to regrade with `--force`. A record file that cannot be read is listed under "Problems", never fatal.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from pathlib import Path

import nbformat

from . import failures
from .notebook_format import check_calls, is_graded, is_test_cell, nbgrader_meta

TOP_N = 5  # the mistakes listed per exercise (twice as many for the whole assignment)


# ----------------------------------------------------------------------------------------------
# Inputs: result records and the released notebook.


def released_cells(course: Path, assignment: str, catalogue: dict | None = None) -> dict:
    """{grade_id: {"max_score": points, "exercises": [check names], "by_hand": bool}} in
    notebook order.

    Read from the released notebook(s) in ``exercises/<assignment>/``: every cell with points,
    and the ``check.<name>(...)`` calls in its source (restricted to the catalogue when given);
    ``by_hand``: an answer graded by hand (not a test cell), which has no mistakes to count.
    """
    cells = {}
    for path in sorted((Path(course) / "exercises" / assignment).glob("*.ipynb")):
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception:  # a broken release is reported by the counts, not fatal here
            continue
        for cell in nb.cells:
            if not is_graded(cell):
                continue
            meta = nbgrader_meta(cell)
            names = check_calls(cell.source)
            if catalogue is not None:
                names = [n for n in names if n in catalogue]
            cells[meta["grade_id"]] = {
                "max_score": float(meta.get("points", 0) or 0),
                "exercises": names,
                "by_hand": not is_test_cell(cell),
            }
    return cells


def mistake_catalogue(assignment: str | None = None) -> dict[str, dict[str, str]]:
    """{exercise name: {mistake key: sentence}} from transformer_lab.check (all lessons)."""
    from transformer_lab import check

    return {name: {m.key: m.sentence for m in ex.mistakes} for name, ex in check.EXERCISES.items()}


def lesson_exercises(assignment: str) -> list[str]:
    """The check names registered for the assignment's lesson number (``02_x`` -> lesson "02")."""
    from transformer_lab import check

    number = assignment.split("_")[0]
    return [name for name, ex in check.EXERCISES.items() if ex.lesson == number]


# ----------------------------------------------------------------------------------------------
# Counting the failures the records keep (`failures`: fields, never a parsed output).


def _mistake(failure: dict, exercise: str, catalogue: dict) -> tuple[str, str] | None:
    """(exercise, sentence) of the catalogued mistake a failure names; the catalogue's sentence
    for its key (the one the report shows), else the sentence the failure kept."""
    if not failure or not failure.get("mistake"):
        return None
    sentence = catalogue.get(exercise, {}).get(failure["mistake"]) or failure.get("sentence")
    return (exercise, sentence) if sentence else None


def count_mistakes(records: dict, cells: dict, catalogue: dict, fallback: list[str]):
    """Students per named mistake and per unnamed failure kind, over the graded students.

    Returns (named, unnamed): named maps (exercise, sentence) -> set of students, unnamed maps
    (exercise or "-", kind) -> set of students. A student counts once per mistake, however many of
    their cells show it. A failure's exercise is the check that failed (a cell may call several);
    a failure that names none (a plain assert, a dead process) counts under the cell's exercise.
    """
    named: dict[tuple[str, str], set[str]] = defaultdict(set)
    unnamed: dict[tuple[str, str], set[str]] = defaultdict(set)
    for student, record in records.items():
        if record["status"] != "graded":
            continue
        for grade_id, cell in record["cells"].items():
            if cell["passed"] or cells.get(grade_id, {}).get("by_hand"):
                continue
            exercises = (
                cell["exercises"] or cells.get(grade_id, {}).get("exercises") or list(fallback)
            )
            failure = cell.get("failure")
            exercise = (failure or {}).get("exercise") or (
                exercises[0] if len(exercises) == 1 else "-"
            )
            mistake = _mistake(failure, exercise, catalogue)
            if mistake:
                named[mistake].add(student)
            else:
                unnamed[(exercise, failures.kind(failure))].add(student)
    return named, unnamed


def _reason_group(reason: str | None) -> str:
    """Ungradable reasons grouped by their first clause ("timeout: cell 3 ran 240 s" -> "timeout")."""
    text = (reason or "no reason recorded").strip()
    head = re.split(r"[:(\n]", text, maxsplit=1)[0].strip()
    return (head or text)[:80]


# ----------------------------------------------------------------------------------------------
# The summary (all numbers of the report).


def summarise(
    assignment: str,
    records: dict,
    cells: dict,
    catalogue: dict,
    problems: list[str] | None = None,
    fallback: list[str] | None = None,
    untouched: str = "",
) -> dict:
    """Every number of the report as plain JSON-ready data. `untouched`: the digest of the
    released notebook handed in as it is (students who submitted that are not duplicates)."""
    problems = list(problems or [])
    graded = {s: r for s, r in records.items() if r["status"] == "graded"}
    ungradable = {s: r for s, r in records.items() if r["status"] == "ungradable"}
    max_score = sum(c["max_score"] for c in cells.values()) if cells else 0.0
    if not max_score and records:
        max_score = max(r["max_score"] for r in records.values())
    for student, record in records.items():
        if cells and record["max_score"] != max_score:
            problems.append(
                f"{student}: max_score {record['max_score']:g} differs from the released "
                f"notebook's {max_score:g}"
            )
    scores = sorted(r["score"] for r in graded.values())
    n = len(graded)

    # Cells: those of the released notebook in order, then any only the records know.
    cell_ids = list(cells)
    for record in graded.values():
        cell_ids += [g for g in record["cells"] if g not in cell_ids]
    cell_rows = []
    for grade_id in cell_ids:
        passed = sum(1 for r in graded.values() if r["cells"].get(grade_id, {}).get("passed"))
        exercises = cells.get(grade_id, {}).get("exercises") or sorted(
            {e for r in graded.values() for e in r["cells"].get(grade_id, {}).get("exercises", [])}
        )
        cell_rows.append(
            {
                "grade_id": grade_id,
                "exercises": list(exercises),
                "max_score": cells.get(grade_id, {}).get("max_score"),
                "passed": passed,
                "graded": n,
                "pass_rate": passed / n if n else None,
            }
        )

    # Exercises: passed when every cell calling its check passed.
    exercise_cells: dict[str, list[str]] = defaultdict(list)
    for row in cell_rows:
        for exercise in row["exercises"]:
            exercise_cells[exercise].append(row["grade_id"])
    named, unnamed = count_mistakes(records, cells, catalogue, fallback or [])
    exercise_rows = []
    for exercise, ids in exercise_cells.items():
        passed = sum(
            1 for r in graded.values() if all(r["cells"].get(g, {}).get("passed") for g in ids)
        )
        mistakes = sorted(
            ((len(who), sentence) for (ex, sentence), who in named.items() if ex == exercise),
            key=lambda item: (-item[0], item[1]),
        )
        exercise_rows.append(
            {
                "exercise": exercise,
                "cells": ids,
                "passed": passed,
                "graded": n,
                "pass_rate": passed / n if n else None,
                "top_mistakes": [{"sentence": s, "students": c} for c, s in mistakes[:TOP_N]],
            }
        )

    top = sorted(
        (
            {"exercise": ex, "sentence": sentence, "students": len(who)}
            for (ex, sentence), who in named.items()
        ),
        key=lambda item: (-item["students"], item["exercise"], item["sentence"]),
    )
    unnamed_rows = sorted(
        (
            {"exercise": ex, "kind": kind, "students": len(who)}
            for (ex, kind), who in unnamed.items()
        ),
        key=lambda item: (-item["students"], item["exercise"], item["kind"]),
    )
    reasons = Counter(_reason_group(r["reason"]) for r in ungradable.values())
    return {
        "assignment": assignment,
        "max_score": max_score,
        "students": len(records),
        "graded": n,
        "ungradable": len(ungradable),
        "ungradable_reasons": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        "ungradable_students": {s: r["reason"] for s, r in sorted(ungradable.items())},
        "mean": statistics.fmean(scores) if scores else None,
        "median": statistics.median(scores) if scores else None,
        "full_marks": sum(1 for s in scores if max_score and s >= max_score),
        "scores": {s: r["score"] for s, r in sorted(graded.items())},
        "cells": cell_rows,
        "exercises": exercise_rows,
        "top_mistakes": top[: 2 * TOP_N],
        "unnamed_failures": unnamed_rows,
        "flagged": {s: r["flags"] for s, r in sorted(records.items()) if r["flags"]},
        "identical": identical_submissions(records, untouched),
        "problems": problems,
        "changes": regrades(records),
    }


def enrolled_class(summary: dict, roster: dict[str, str], records: dict) -> dict:
    """Pass rates over the enrolled class (the roster): who has no record, and per exercise how
    many of the enrolled passed."""
    missing = [student for student in roster if student not in records]
    n = len(roster)
    return {
        "enrolled": n,
        "missing": missing,
        "exercises": [
            {
                "exercise": e["exercise"],
                "passed": e["passed"],
                "pass_rate": e["passed"] / n if n else None,
            }
            for e in summary["exercises"]
        ],
    }


def regrades(records: dict) -> list[dict]:
    """Every student graded more than once: the previous score, the score now, and why."""
    changes = []
    for student, record in sorted(records.items()):
        if record.get("history"):
            before = record["history"][-1]
            changes.append(
                {
                    "student": student,
                    "before": before.get("score"),
                    "after": record["score"],
                    "why": record.get("why") or "not recorded",
                    "submitted_at": record.get("submitted_at"),
                    "gradings": len(record["history"]) + 1,
                }
            )
    return changes


def identical_submissions(records: dict, untouched: str = "") -> list[list[str]]:
    """Groups of students (sorted) whose submissions are byte for byte the same (the same
    `submission_sha256`: every file, names and bytes), the untouched release left out. Listed for
    the instructor to look at; scores are never changed for it."""
    by_digest: dict[str, list[str]] = {}
    for student, record in sorted(records.items()):
        digest = record.get("submission_sha256") or ""
        if digest and digest != untouched:
            by_digest.setdefault(digest, []).append(student)
    return sorted(group for group in by_digest.values() if len(group) > 1)
