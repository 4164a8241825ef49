"""The nbgrader exchange's inbound folder, as `collect` reads it: which folder is each student's
latest submission, and when it was handed in.

Every student may write in ``inbound/`` (nbgrader's design), so nothing in it is taken on its
word (`scan`):

- a link is refused, never followed (it could point at ``solutions/`` or a classmate's home);
- a folder named for a student is refused when another account of this machine wrote it
  (`untrusted.foreign_owner`; where the student is no account here, nothing can be compared);
- the timestamp in a folder's name orders the submissions only where it is possible
  (`timing.claimed_time`: not in the future, not later than the folder was written); else the
  folder's change time does, and a note says so. Its ``timestamp.txt``, which `timing`
  prefers, is kept only where it says the time taken (`distrust_stamp_file`).

What was refused is listed as (folder, why), as files nobody can be given are.
"""

from __future__ import annotations

import dataclasses
import datetime
import stat
import time
from pathlib import Path

from .records import STUDENT_ID
from .timing import EXCHANGE_STAMP, claimed_time, iso, parse, read_stamp
from .untrusted import foreign_owner

SHAPE = "not <student>+<assignment>+<timestamp>[+<random>]"


@dataclasses.dataclass
class Submission:
    folder: Path
    when: datetime.datetime  # the submitted-at time taken
    named: bool  # `when` is the time in the folder's name (not its change time)


@dataclasses.dataclass
class Scan:
    latest: dict[str, Submission] = dataclasses.field(default_factory=dict)  # student ->
    refused: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (folder, why)
    ignored: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)  # times not taken


def scan(inbound: Path, assignment: str) -> Scan:
    """Each student's latest submission of `assignment` in `inbound` (see module)."""
    inbound, now, found = Path(inbound).resolve(), time.time(), Scan()
    for folder in sorted(inbound.iterdir()):
        try:
            info = folder.lstat()
        except OSError:  # gone since it was listed
            continue
        if stat.S_ISLNK(info.st_mode):
            found.refused.append((folder.name, "a link (not followed)"))
            continue
        if not stat.S_ISDIR(info.st_mode):
            continue
        parts = folder.name.split("+")
        if len(parts) < 3:
            found.refused.append((folder.name, SHAPE))
            continue
        student, name, stamp = parts[0], parts[1], parts[2]
        if name != assignment:
            found.ignored.append(folder.name)
            continue
        if not STUDENT_ID.match(student):
            found.refused.append((folder.name, f"{student!r} is not a usable student id"))
            continue
        owner = foreign_owner(info, student)
        if owner is not None:
            why = f"written by the account {owner!r}, not by {student!r}: not collected"
            found.refused.append((folder.name, why))
            continue
        try:
            when, doubt = claimed_time(parse(stamp), info.st_ctime, now)
        except Exception:  # dateutil raises several kinds
            found.refused.append((folder.name, f"unreadable timestamp {stamp!r}"))
            continue
        if doubt:
            found.notes.append(f"{folder.name}: {doubt}")
        old = found.latest.get(student)
        if old is None or when > old.when:
            if old is not None:
                found.ignored.append(f"{old.folder.name} (older submission)")
            found.latest[student] = Submission(folder, when, doubt is None)
        else:
            found.ignored.append(f"{folder.name} (older submission)")
    return found


def distrust_stamp_file(copied: Path, submission: Submission) -> str | None:
    """Remove the copy's ``timestamp.txt`` unless it says the time taken from the folder's name;
    the note saying so (None: kept, or there was none)."""
    path = Path(copied) / EXCHANGE_STAMP
    if not path.is_file() or (submission.named and read_stamp(path) == submission.when):
        return None
    path.unlink()
    return (
        f"{submission.folder.name}: its {EXCHANGE_STAMP} is not used (it does not say the time "
        f"taken, {iso(submission.when)})"
    )
