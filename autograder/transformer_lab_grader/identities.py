"""Who each graded student is: the course's register of identities, one file per assignment.

``<course>/autograder/work/identities/<assignment>.json`` maps each student id (the folder name
grading uses, the key of the result records) to the identity `collect` found for it
(`collect.identity`: display name, LMS, LMS id, the LMS's file name, late tag, submitted-at time)
plus, for an exchange submission, nbgrader's ``submission_secret.txt`` (feedback goes back to
the student under a name made from it). A student id `collect` did not name (a folder laid out
by hand) is its own display name, with no LMS.

``grade`` registers every student it finds (`read`, then `keep`), so the register always
covers the records; a student graded from another folder later keeps one entry, the latest.
``export`` (the LMS's id beside each row) and ``feedback`` (release through the exchange, the LMS
zip) read it with `load`.
"""

from __future__ import annotations

import json
from pathlib import Path

from .collect import identity, read_report
from .records import write_atomic
from .timing import EXCHANGE_STAMP

FOLDER = Path("autograder") / "work" / "identities"
EXCHANGE_FILES = {"timestamp": EXCHANGE_STAMP, "submission_secret": "submission_secret.txt"}


def register_path(course: Path, assignment: str) -> Path:
    return Path(course) / FOLDER / f"{assignment}.json"


def load(course: Path, assignment: str | None = None) -> dict[str, dict]:
    """{student: identity} of one assignment, or merged over every assignment (later lessons'
    entries win for the same student); {} where nothing is registered."""
    paths = (
        [register_path(course, assignment)]
        if assignment
        else sorted((Path(course) / FOLDER).glob("*.json"))
    )
    merged: dict[str, dict] = {}
    for path in paths:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            merged.update({s: who for s, who in data.items() if isinstance(who, dict)})
    return merged


def of(register: dict[str, dict], student: str) -> dict:
    """The student's identity; a student nobody registered is their own name, with no LMS."""
    return register.get(student) or identity(student)


def read(submissions: Path, found: dict[str, Path]) -> dict[str, dict]:
    """{student: identity} of the students `grade` found in `submissions` ({student: folder}):
    what `collect` read, plus the exchange's files in the folder."""
    report = read_report(submissions)
    whos = {}
    for student, folder in found.items():
        who = dict(report["identities"].get(student) or identity(student))
        for key, name in EXCHANGE_FILES.items():
            path = Path(folder) / name
            if path.is_file():
                who[key] = path.read_text(encoding="utf-8", errors="replace").strip()
        whos[student] = who
    return whos


def keep(course: Path, assignment: str, whos: dict[str, dict]) -> None:
    """Register these identities ({student: identity}), replacing the students' old entries."""
    register = load(course, assignment)
    register.update(whos)
    write_atomic(register_path(course, assignment), json.dumps(register, indent=1, sort_keys=True))
