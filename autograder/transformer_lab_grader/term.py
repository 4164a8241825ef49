"""The term's settings in one small file: due dates, extensions, the late policy and the roster.

``<course>/autograder/work/term.toml`` (git-ignored: it names students), every part optional::

    [due]                       # when each lesson is due (ISO 8601; no zone means UTC)
    02_qkv_attention = "2026-11-20T23:59:00+00:00"

    [extensions.02_qkv_attention]   # a later due date for some students
    "111" = "2026-11-23T23:59:00+00:00"

    [late]                      # the penalty: a percentage per started day late, up to a cap
    percent_per_day = 10
    cap_percent = 50

    [roster]                    # the enrolled class: a CSV with columns student,name
    file = "roster.csv"         # relative to term.toml
    missing = "zero"            # a non-submitter's score: "zero" or "blank"

`lateness` gives a record's days late and penalty; `enrolled` reads the roster. The export keeps
the raw score and the penalised one side by side (`export`); the report counts pass rates over
the enrolled class.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

from . import timing

CONFIG = Path("autograder") / "work" / "term.toml"
MISSING = ("zero", "blank")


@dataclasses.dataclass
class Term:
    due: dict[str, str]
    extensions: dict[str, dict[str, str]]
    percent_per_day: float = 0.0
    cap_percent: float = 100.0
    roster: dict[str, str] | None = None  # student -> name, in the roster's order
    missing: str = "zero"

    def due_for(self, assignment: str, student: str) -> str | None:
        return self.extensions.get(assignment, {}).get(student) or self.due.get(assignment)


def load(course: Path) -> Term:
    """The course's term settings (none set: no due dates, no penalty, no roster); SystemExit
    saying what is wrong with the file."""
    path = Path(course) / CONFIG
    if not path.is_file():
        return Term({}, {})
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        late, roster = data.get("late", {}), data.get("roster", {})
        term = Term(
            due={str(a): str(d) for a, d in data.get("due", {}).items()},
            extensions={
                str(a): {str(s): str(d) for s, d in given.items()}
                for a, given in data.get("extensions", {}).items()
            },
            percent_per_day=float(late.get("percent_per_day", 0.0)),
            cap_percent=float(late.get("cap_percent", 100.0)),
            missing=str(roster.get("missing", "zero")),
        )
        dates = [(f"due.{a}", d) for a, d in term.due.items()]
        dates += [
            (f"extensions.{a}.{s}", d) for a, e in term.extensions.items() for s, d in e.items()
        ]
        for where, when in dates:
            _check_date(where, when)
        if term.missing not in MISSING:
            raise ValueError(f"roster.missing is {term.missing!r}, not one of {MISSING}")
        if not (0 <= term.percent_per_day and 0 <= term.cap_percent <= 100):
            raise ValueError("late.percent_per_day must be >= 0 and late.cap_percent in [0, 100]")
        if "file" in roster:
            term.roster = read_roster(path.parent / str(roster["file"]))
    except (OSError, ValueError, TypeError, AttributeError, tomllib.TOMLDecodeError) as error:
        raise SystemExit(f"{path}: {error}") from None
    return term


def _check_date(where: str, when: str) -> None:
    try:
        timing.parse(when)
    except (ValueError, OverflowError):
        raise ValueError(
            f"{where} = {when!r} is not a date (ISO 8601, e.g. 2026-11-20T23:59)"
        ) from None


def read_roster(path: Path) -> dict[str, str]:
    """{student: name} from a CSV with columns student,name (ValueError naming the problem)."""
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if "student" not in (reader.fieldnames or []):
            raise ValueError(f"{path}: the roster needs a 'student' column (and 'name')")
        roster = {}
        for line, row in enumerate(reader, start=2):
            student = (row["student"] or "").strip()
            if not student or student in roster:
                raise ValueError(f"{path}:{line}: empty or repeated student {student!r}")
            roster[student] = (row.get("name") or student).strip()
    return roster


def lateness(term: Term, assignment: str, student: str, submitted_at: str | None):
    """(days late, penalty in percent): whole started days after the student's due date."""
    due = term.due_for(assignment, student)
    if not due or not submitted_at or not timing.older(due, submitted_at):
        return 0, 0.0
    seconds = (timing.parse(submitted_at) - timing.parse(due)).total_seconds()
    days = math.ceil(seconds / 86400)
    return days, min(days * term.percent_per_day, term.cap_percent)


def penalised(score: float, penalty: float) -> float:
    return round(score * (1 - penalty / 100), 4)
