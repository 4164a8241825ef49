"""nbgrader's gradebook (``<course>/autograder/work/gradebook.db``): the scores it holds, the
merge of the grader's records into it, and the grades given by hand in formgrader.
"""

from __future__ import annotations

import warnings
from pathlib import Path


def gradebook_path(course: Path) -> Path:
    return Path(course) / "autograder" / "work" / "gradebook.db"


def _gradebook(course: Path):
    from nbgrader.api import Gradebook

    return Gradebook(f"sqlite:///{gradebook_path(course)}")


def gradebook_assignments(root: Path) -> set[str]:
    """The assignments the course's gradebook knows (none when it does not exist yet)."""
    if not gradebook_path(root).exists():
        return set()
    with _gradebook(root) as gb:
        return {a.name for a in gb.assignments}


def all_scores(root: Path) -> dict[tuple[str, str, str], tuple[float, float]]:
    """{(student, assignment, notebook): (score, max_score)} for every graded submission."""
    result = {}
    with _gradebook(root) as gb:
        for assignment in gb.assignments:
            for submission in assignment.submissions:
                for nb in submission.notebooks:
                    key = (submission.student.id, assignment.name, nb.name)
                    result[key] = (float(nb.score), float(nb.max_score))
    return result


def cell_scores(course: Path, assignment: str, student: str, cells: dict) -> dict[str, float]:
    """{grade_id: score} of one student's graded cells ({grade_id: {"notebook": ...}})."""
    scores = {}
    with _gradebook(course) as gb:
        for gid, cell in cells.items():
            row = gb.find_grade(gid, Path(cell["notebook"]).stem, assignment, student)
            scores[gid] = float(row.score or 0.0)
    return scores


def manual_grades(course: Path, assignment: str) -> dict[tuple[str, str], tuple[float, str]]:
    """{(student, grade_id): (manual score, manual comment)} of every cell formgrader scored
    by hand in the course's gradebook."""
    from nbgrader.api import Comment

    found = {}
    with warnings.catch_warnings(), _gradebook(course) as gb:
        warnings.simplefilter("ignore")
        known = {a.name: a for a in gb.assignments}
        if assignment not in known:
            return found
        for (student, _notebook, gid), row in _grade_rows(gb.db, known[assignment]).items():
            if row.manual_score is None:
                continue
            comment = gb.db.query(Comment).filter(
                Comment.notebook_id == row.notebook_id, Comment.cell.has(name=gid)
            )
            text = next((c.manual_comment for c in comment if c.manual_comment), "")
            found[(student, gid)] = (float(row.manual_score), text or "")
    return found


def write_manual_grades(
    course: Path, assignment: str, grades: list[tuple[str, str, float, str]]
) -> int:
    """Write manual scores and comments (student, grade_id, score, comment) into the gradebook
    rows that exist (formgrader then shows them); returns how many were written."""
    from nbgrader.api import Comment

    written = 0
    with warnings.catch_warnings(), _gradebook(course) as gb:
        warnings.simplefilter("ignore")
        known = {a.name: a for a in gb.assignments}
        if assignment not in known:
            return 0
        rows = {
            (s, gid): row for (s, _nb, gid), row in _grade_rows(gb.db, known[assignment]).items()
        }
        for student, gid, score, comment in grades:
            row = rows.get((student, gid))
            if row is None:
                continue
            row.manual_score = float(score)
            for note in gb.db.query(Comment).filter(
                Comment.notebook_id == row.notebook_id, Comment.cell.has(name=gid)
            ):
                note.manual_comment = comment
            written += 1
        gb.db.commit()
    return written


def _grade_rows(db, assignment) -> dict[tuple[str, str, str], object]:
    """{(student, notebook, cell name): Grade} of every submission of the assignment, in one
    query; a grade cell wins over a task cell of the same name (as in `find_grade`)."""
    from nbgrader.api import (
        BaseCell,
        Grade,
        Notebook,
        SubmittedAssignment,
        SubmittedNotebook,
    )

    query = (
        db.query(Grade, BaseCell.name, BaseCell.type, Notebook.name, SubmittedAssignment.student_id)
        .join(BaseCell, BaseCell.id == Grade.cell_id)
        .join(SubmittedNotebook, SubmittedNotebook.id == Grade.notebook_id)
        .join(Notebook, Notebook.id == SubmittedNotebook.notebook_id)
        .join(SubmittedAssignment, SubmittedAssignment.id == SubmittedNotebook.assignment_id)
        .filter(
            SubmittedAssignment.assignment_id == assignment.id,
            BaseCell.type.in_(("GradeCell", "TaskCell")),
        )
    )
    rows: dict[tuple[str, str, str], object] = {}
    for grade, cell, kind, notebook, student in query:
        key = (student, notebook, cell)
        if kind == "GradeCell" or key not in rows:
            rows[key] = grade
    return rows
