"""When a submission was handed in, and which of two submissions is the latest.

The submitted-at time of a student's folder, best source first:

1. the exchange's ``timestamp.txt`` (nbgrader's own, e.g. ``2026-11-20 10:00:00.000000 UTC``);
2. the time `collect` read from the source (an exchange folder name's timestamp);
3. the newest modification time of the folder's files (an LMS zip keeps each file's upload
   time, which `collect` keeps on the files it places).

All times are ISO 8601 in UTC, so they compare as text and as times alike.

An exchange folder's name and its ``timestamp.txt`` are written by the student's own account, so
`collect` takes them only where `claimed_time` finds them possible: not in the future, nor later
than the folder's change time (its ctime, which the kernel sets and nobody can set back).
"""

from __future__ import annotations

import datetime
from pathlib import Path


def iso(when: datetime.datetime) -> str:
    """A time as ISO 8601 in UTC, to the second (a naive time is taken as UTC)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc).isoformat(timespec="seconds")


def parse(text: str) -> datetime.datetime:
    """An ISO time or nbgrader's timestamp format; ValueError when it is neither."""
    from nbgrader.utils import parse_utc

    return parse_utc(text.strip()).replace(tzinfo=datetime.timezone.utc)


EXCHANGE_STAMP = "timestamp.txt"  # what nbgrader's submit writes beside the notebooks
SLACK_SECONDS = 300  # a hub's clock and its file server's may differ this much


def claimed_time(
    claimed: datetime.datetime, changed: float, now: float
) -> tuple[datetime.datetime, str | None]:
    """The time to use for a folder whose name claims `claimed`, `changed` its ctime, `now` the
    time (both epoch seconds): `claimed`, or the change time with why the claim was not taken."""
    claimed = claimed if claimed.tzinfo else claimed.replace(tzinfo=datetime.timezone.utc)
    at = datetime.datetime.fromtimestamp(changed, datetime.timezone.utc)
    if claimed.timestamp() > now + SLACK_SECONDS:
        return (
            at,
            f"its timestamp {iso(claimed)} is in the future: the folder's time {iso(at)} is used",
        )
    if claimed.timestamp() > changed + SLACK_SECONDS:
        return at, (
            f"its timestamp {iso(claimed)} is later than the folder was written: the folder's "
            f"time {iso(at)} is used"
        )
    return claimed, None


def read_stamp(path: Path) -> datetime.datetime | None:
    """The time an exchange's timestamp file says (None: unreadable)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return parse(file.read(200))
    except (OSError, ValueError, TypeError, OverflowError):
        return None


def file_time(folder: Path) -> str | None:
    """The newest modification time of the files under `folder` (None when it has none)."""
    times = [p.stat().st_mtime for p in Path(folder).rglob("*") if p.is_file()]
    if not times:
        return None
    return iso(datetime.datetime.fromtimestamp(max(times), datetime.timezone.utc))


def submitted_at(folder: Path, who: dict) -> str | None:
    """The folder's submitted-at time (see module); `who`: its identity (`identities.read`)."""
    for key in ("timestamp", "submitted_at"):
        if who.get(key):
            try:
                return iso(parse(str(who[key])))
            except (ValueError, TypeError, OverflowError):
                continue
    return file_time(folder)


def older(at: str | None, than: str | None) -> bool:
    """`at` is known to be before `than` (two ISO times; unknown is never older)."""
    return bool(at and than) and parse(at) < parse(than)
