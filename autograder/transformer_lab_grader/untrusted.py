"""What the grader's parent does with what a student controls: the names of their files and the
files themselves, read before any box is made.

A name (or a message holding names) is printed and stored through `plain_text.shown`.
- `copy_regular`: copy one regular file, opened without following a link (`O_NOFOLLOW`; a FIFO
  does not block: `O_NONBLOCK`), only when the file as opened lies inside the folder it was
  listed in and is at most a given size. A linked folder swapped in after listing, a FIFO or a
  100 GiB sparse file are refused (`Refused`, whose message says why), never followed or read.
- `file_sha256`: a file's digest, read in chunks (a file's size never becomes memory).
- `foreign_owner`: the account that wrote a folder claiming to be another student's, where that
  student is an account of this machine (nbgrader's exchange `CollectApp.check_owner` compares
  the same, but only warns).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

CHUNK = 1 << 20


def size_text(n: int) -> str:
    """A size in MiB or GiB, as the limits are worded."""
    return f"{n / (1 << 30):.3g} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.3g} MiB"


class Refused(Exception):
    """A file not copied; the message is the reason, one phrase."""


def copy_regular(src: Path, dest: Path, root: Path, limit: int) -> int:
    """Copy the regular file `src` to the new file `dest`, keeping its modification time (the
    submitted-at time `timing.file_time` reads), when the file as opened lies inside `root` and
    holds at most `limit` bytes. `root`: the folder's path as it must be, no link in it (resolve
    it first, before a student can swap it). Returns the bytes copied; raises Refused."""
    try:
        if not stat.S_ISREG(os.lstat(src).st_mode):  # a link, FIFO, socket or device
            raise Refused("a link (not followed)" if os.path.islink(src) else "not a regular file")
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ELOOP:  # swapped for a link after it was listed
            raise Refused("a link (not followed)") from None
        raise Refused(f"unreadable ({error.strerror})") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused("not a regular file")
        if not _opened_path(fd, src).is_relative_to(root):
            raise Refused("outside the submission folder (through a linked folder)")
        if info.st_size > limit:
            raise Refused(f"larger than {size_text(limit)} ({size_text(info.st_size)})")
        copied = 0
        with open(dest, "xb") as out:
            try:
                while chunk := file.read(CHUNK):
                    copied += len(chunk)
                    if copied > limit:  # it grew while being copied
                        raise Refused(f"larger than {size_text(limit)}")
                    out.write(chunk)
            except BaseException:  # no partial copy left behind
                dest.unlink()
                raise
    os.utime(dest, ns=(info.st_atime_ns, info.st_mtime_ns))
    return copied


def _opened_path(fd: int, src: Path) -> Path:
    """Where the open file really is: Linux names it in /proc; elsewhere, `src` resolved."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return Path(src).resolve()


def file_sha256(path: Path) -> bytes:
    """The SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
    return digest.digest()


def foreign_owner(info: os.stat_result, student: str) -> str | None:
    """The account that owns a folder (`info`: its lstat) claiming to be `student`'s, when that
    is not `student`; None when it is, or when no account `student` exists here (an exchange
    whose students are not accounts of this machine, or a copy of one: nothing to compare)."""
    try:
        import pwd
    except ImportError:  # Windows
        return None
    try:
        if pwd.getpwnam(student).pw_uid == info.st_uid:
            return None
    except KeyError:
        return None
    try:
        return pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        return f"uid {info.st_uid}"
