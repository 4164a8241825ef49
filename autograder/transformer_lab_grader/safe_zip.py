"""Unpack an LMS download (a zip of the whole class) safely, one student's bad upload costing only
that upload (`safe_extract`).

Archive-wide limits refuse the whole zip (`UnsafeZip`): more than `MAX_MEMBERS` members, or more
than `MAX_TOTAL_BYTES` unpacked in all (counted while unpacking: the sizes the zip claims are not
trusted). Everything else is one member's problem, and that member alone is skipped and listed
with the reason: an absolute path, a `..` part (with `/` or `\\` as the separator), a drive
letter, a link, more than `MAX_FILE_BYTES`, or a name the disk refuses (a file where a folder of
the same name is needed, a corrupt entry). A `\\` is kept as it is, a character of the name (a
Linux or macOS file name may hold one), never turned into a folder. A name part longer than the
disk allows (`NAME_MAX` bytes: Canvas's prefix plus a long non-Latin name) is shortened
(`short_name`): its start and extension kept, a digest of the whole part added, so two long
names never become one.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import stat
import zipfile
import zlib
from pathlib import Path, PurePosixPath

MAX_MEMBERS = 20_000
MAX_FILE_BYTES = 100 << 20
MAX_TOTAL_BYTES = 2 << 30
NAME_MAX = 255  # bytes in one part of a path, on every common Linux filesystem
SEPARATORS = re.compile(r"[\\/]")
MEMBER_ERRORS = (OSError, zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError)


class UnsafeZip(ValueError):
    """The whole archive is refused (an archive-wide limit)."""


class _Skip(Exception):
    """One member is skipped: (why, the bytes unpacked in all, its own counted)."""


def short_name(part: str) -> str:
    """`part` if the disk takes it, else its start, a digest of the whole and its extension, in
    at most `NAME_MAX` bytes."""
    raw = os.fsencode(part)
    if len(raw) <= NAME_MAX:
        return part
    stem, dot, ext = part.rpartition(".")
    if not dot or not stem or len(os.fsencode(ext)) > 16:
        stem, dot, ext = part, "", ""
    tail = f"-{hashlib.sha256(raw).hexdigest()[:16]}{dot}{ext}"
    head = os.fsencode(stem)[: NAME_MAX - len(tail.encode())]
    return head.decode("utf-8", "ignore") + tail


def member_parts(name: str) -> tuple[str, ...]:
    """A member's path parts: `/` separates them; a `\\` is part of a name."""
    return PurePosixPath(name).parts


def member_problem(info: zipfile.ZipInfo) -> str | None:
    """Why this member is never unpacked, or None."""
    name = info.filename
    if name.startswith(("/", "\\")) or ".." in SEPARATORS.split(name):
        return "unsafe path (absolute, or with a '..' part)"
    if re.match(r"^[A-Za-z]:", name):
        return "unsafe path (a drive letter)"
    if stat.S_ISLNK(info.external_attr >> 16):
        return "a link (not unpacked)"
    if info.file_size > MAX_FILE_BYTES:
        return f"larger than {MAX_FILE_BYTES >> 20} MiB (not unpacked)"
    return None


def safe_extract(archive: Path, dest: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """Unpack `archive` into `dest` (see the module). Returns (the names unpacked, relative to
    `dest`; [(member name, why)] of the members skipped). Raises UnsafeZip on an archive-wide
    limit."""
    names, skipped = [], []
    total = 0
    with zipfile.ZipFile(archive) as zf:
        members = zf.infolist()
        if len(members) > MAX_MEMBERS:
            raise UnsafeZip(f"{archive.name} has {len(members)} members (limit {MAX_MEMBERS})")
        for info in members:
            why = member_problem(info)
            if why is not None:
                skipped.append((info.filename, why))
                continue
            if info.is_dir():
                continue
            parts = [short_name(p) for p in member_parts(info.filename)]
            target = dest.joinpath(*parts)
            try:
                total = _unpack(zf, info, target, total, archive.name)
            except _Skip as skip:
                target.unlink(missing_ok=True)
                why, total = skip.args
                skipped.append((info.filename, why))
                continue
            except MEMBER_ERRORS as error:
                _remove(target)
                skipped.append((info.filename, f"could not be unpacked ({_error(error)})"))
                continue
            names.append("/".join(parts))
    return names, skipped


def _unpack(zf: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, total: int, zip_name: str):
    """One member into `target`, with its time; the bytes unpacked so far in all."""
    target.parent.mkdir(parents=True, exist_ok=True)
    size = 0
    with zf.open(info) as src, open(target, "wb") as out:
        while chunk := src.read(1 << 20):
            size += len(chunk)
            total += len(chunk)
            if total > MAX_TOTAL_BYTES:
                raise UnsafeZip(f"{zip_name}: more than {MAX_TOTAL_BYTES >> 30} GiB unpacked")
            if size > MAX_FILE_BYTES:
                raise _Skip(f"larger than {MAX_FILE_BYTES >> 20} MiB (not unpacked)", total)
            out.write(chunk)
    when = datetime.datetime(*info.date_time, tzinfo=datetime.timezone.utc).timestamp()
    os.utime(target, (when, when))  # the LMS's upload time: the submitted-at time
    return total


def _remove(target: Path) -> None:
    """A half-written member, if it is a file this member made."""
    try:
        if target.is_file() and not target.is_symlink():
            target.unlink()
    except OSError:
        pass


def _error(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return f"{type(error).__name__}: {error}"
