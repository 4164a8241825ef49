"""The merge of the grader's records into nbgrader's gradebook, in one pass per assignment: the
records' cell scores become auto scores, so that formgrader and `nbgrader export` show them;
the scores a person gave by hand stay.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from .gradebook import (
    _grade_rows,
    _gradebook,
    gradebook_assignments,
)
from .nbgrader_app import generate
from .notebook_format import graded_cells, released_notebooks
from .records import load_records

# The merge as a grading run's last job (`run_setup.RunSetup.merge`), forked from the run's
# pre-imported worker, so that the grader's own process never imports nbgrader (about 3.7 CPU s,
# benchmarks/history/journal.md §38): sys.argv[1:] are the course and the assignment.
MERGE_JOB = (
    "import sys; from transformer_lab_grader.gradebook_merge import merge_assignment; "
    "merge_assignment(sys.argv[1], sys.argv[2])"
)


def merge_assignment(course: str | Path, assignment: str) -> int:
    """Every record of `assignment` kept in the course, merged (`merge_into_gradebook`)."""
    return merge_into_gradebook(Path(course), load_records(Path(course), assignment))


def merge_into_gradebook(course: Path, records: list[dict]) -> int:
    """Write the records' cell scores into autograder/work/gradebook.db as auto scores, so
    nbgrader's own tools (formgrader, `nbgrader export`) see them. One writer: a grading run
    calls it once, at its end, in its last job (`run_setup.RunSetup.merge`, while the run
    waits) or in its own process where no worker serves. An assignment the gradebook does not
    know yet is registered first (`generate`, which rewrites exercises/ byte-identically).

    One pass per assignment: its released cells read once, its students and submissions created
    in bulk where missing (as nbgrader's `add_submission` does), its grade rows loaded with one
    query, only the scores that differ written, one commit. The same rows as nbgrader's own
    `update_or_create_student`, `add_submission` and `find_grade` record by record.
    Returns the number of submissions merged."""
    wanted = {r["assignment"] for r in records}
    unknown = sorted(wanted - gradebook_assignments(Path(course)))
    if unknown:  # register the assignment's cells and points (byte-identical regeneration)
        generate(Path(course), unknown, quiet=True)
    by_assignment: dict[str, list[dict]] = {}
    for record in records:
        by_assignment.setdefault(record["assignment"], []).append(record)
    merged = 0
    with warnings.catch_warnings(), _gradebook(course) as gb:
        warnings.simplefilter("ignore")  # SQLAlchemy's autoflush notes from nbgrader's api
        known = {a.name: a for a in gb.assignments}
        for name, group in by_assignment.items():
            if name in known:
                cells = graded_cells(released_notebooks(Path(course), name))
                merged += _merge_assignment(gb.db, known[name], cells, group)
        gb.db.commit()
    return merged


def _merge_assignment(db, assignment, cells: dict, records: list[dict]) -> int:
    """The records of one assignment into the open session (no commit)."""
    from nbgrader.api import SubmittedAssignment

    students = {r["student"] for r in records}
    _add_missing_students(db, students)
    have = {
        student
        for (student,) in db.query(SubmittedAssignment.student_id).filter(
            SubmittedAssignment.assignment_id == assignment.id
        )
    }
    for student in sorted(students - have):
        _add_submission(db, assignment, student)
    db.flush()
    rows = _grade_rows(db, assignment)
    for record in records:
        for gid, cell in record.get("cells", {}).items():
            if gid not in cells:
                continue
            row = rows.get((record["student"], Path(cells[gid]["notebook"]).stem, gid))
            if row is not None and row.auto_score != float(cell["score"]):
                row.auto_score = float(cell["score"])  # a manual score (formgrader's) stays
    return len(records)


def _add_missing_students(db, students: set[str]) -> None:
    from nbgrader.api import Student

    have = {sid for (sid,) in db.query(Student.id).filter(Student.id.in_(students))}
    db.add_all(Student(id=sid) for sid in sorted(students - have))


def _add_submission(db, assignment, student: str) -> None:
    """What nbgrader's `Gradebook.add_submission` creates (a submitted notebook per notebook, a
    grade per grade or task cell, a comment per solution or task cell), without its commit."""
    from nbgrader.api import Comment, Grade, SubmittedAssignment, SubmittedNotebook, new_uuid

    submission = SubmittedAssignment(id=new_uuid(), assignment_id=assignment.id, student_id=student)
    db.add(submission)
    for notebook in assignment.notebooks:
        nb = SubmittedNotebook(id=new_uuid(), notebook_id=notebook.id, assignment_id=submission.id)
        db.add(nb)
        graded = [*notebook.grade_cells, *notebook.task_cells]
        commented = [*notebook.solution_cells, *notebook.task_cells]
        db.add_all(Grade(cell_id=cell.id, notebook_id=nb.id) for cell in graded)
        db.add_all(Comment(cell_id=cell.id, notebook_id=nb.id) for cell in commented)
