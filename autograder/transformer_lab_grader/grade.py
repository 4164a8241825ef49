"""Grade a class: repair each submission, autograde it in its own sandbox, keep one record each.

    grade(course, "02_qkv_attention", Path("submissions"), out=Path("grades.csv"), jobs=2)

For every student folder `<submissions>/<student>/<assignment>/` (nbgrader's layout; a zip or an
LMS download is collected into that layout first, see `collect`):

1. `submission.prepare_submission` (in the parent, which never runs student code): pick the
   notebook (rename a single misnamed one, ignore extra files), parse it (empty, invalid or
   truncated JSON -> ungradable with the reason), upgrade old nbformat, restore nbgrader metadata
   an editor stripped, note edited or deleted test cells (nbgrader puts them back from the
   gradebook).
2. One job per student (`job.run_job`, trusted code, outside any box) in a private course copy
   under a temporary folder (autograder/*.py, exercises/<assignment>, a copy of a gradebook
   prepared once per run, the student's folder): `nbgrader autograde` with nbgrader's Execute
   replaced by the judge (`judge`): the student's cells run once, in a process boxed by
   bubblewrap (`sandbox`) that sees none of the job's files, and every test cell runs in the
   job against the student's objects; then the scores are read from the private gradebook; the
   job hands back one JSON record through a pipe.
3. The parent validates the record (schema, known grade ids, 0 <= score <= points from the
   released notebook) and writes it atomically to
   `<course>/autograder/work/results/<assignment>/<student>.json`; then the CSV (both formats:
   `records`).

A job that crashes, times out or returns garbage gives status "ungradable" with the reason:
never a missing row, never a silent 0. Re-running skips students whose record exists for the
same submission bytes (`submission_sha256`) unless `force`; a run killed half-way resumes.
"""

from __future__ import annotations

from pathlib import Path

from .cluster import ClusterGrader
from .grading import Grader


def grade(
    course: Path,
    assignment: str,
    submissions: Path,
    out: Path | None = None,
    scheduler: str | None = None,
    **options,
) -> list[dict]:
    """Grade every submission of `assignment` (see the module docstring); returns the records.
    With `scheduler` (tcp://HOST:PORT) each student is graded on a Dask worker (`cluster`)."""
    if scheduler:
        grader = ClusterGrader(
            course, assignment, submissions, out=out, scheduler=scheduler, **options
        )
        return grader.run()
    return Grader(course, assignment, submissions, out=out, **options).run()
