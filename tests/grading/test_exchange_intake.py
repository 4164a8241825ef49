"""What a student who controls only their own submission can do to the intake (red team B's
F2, F3, F4, F7), and that it no longer works: the exchange's inbound folder, which every student
may write in (`exchange`, `collect`), file sizes on every source, and names printed or stored
(`plain_text.shown`). Nothing is graded in a box: collect, the digest and the intake's messages
are run directly, so each test takes a second or less.

Each protection comes with a mutant: the fix weakened back to the old behaviour, which the same
attack beats (asserted), so that a test passing says the protection works, not that the attack
missed.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import pwd
from pathlib import Path

import nbformat
import pytest
from test_instructor_grade import NAME, TINY, _student_nb, copy_of, tiny_course  # noqa: F401

from transformer_lab_grader import (
    collect,
    commands,
    exchange,
    grading,
    identities,
    plain_text,
    submission,
    timing,
    untrusted,
)
from transformer_lab_grader.notebook_format import released_notebooks
from transformer_lab_grader.records import STUDENT_ID, ungradable

LESSON = "02_qkv_attention"
HONEST_STAMP = "2026-11-20 10:00:00.000000 UTC"
# red team B's a08: erase the line, a fake verdict in green, retitle the terminal, write the
# clipboard (OSC 52), hide what follows
PAYLOAD = (
    "\r\x1b[2K\x1b[32mmallory: graded 8\u22158\x1b[0m\x1b]0;pwned\x07"
    "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaAo=\x07\x1b[8m"
)


MIB = untrusted.size_text


def _no_control(text: str) -> bool:
    """No control character but the newlines that end the lines."""
    return plain_text.NAME_CONTROL.search(text.replace("\n", "")) is None


def _inbound(tmp_path: Path) -> Path:
    inbound = tmp_path / "exchange" / "transformer-lab" / "inbound"
    inbound.mkdir(parents=True)
    return inbound


def _submit(inbound: Path, student: str, files: dict[str, bytes], stamp: str = HONEST_STAMP):
    """What `nbgrader submit` leaves in the inbound folder, as the account running the test."""
    folder = inbound / f"{student}+{LESSON}+{stamp}+r{len(list(inbound.iterdir()))}"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def _collect(tmp_path: Path) -> collect.Collected:
    return collect.collect(tmp_path / "exchange", LESSON, tmp_path / "out")


def _everything_copied(tmp_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file())


# ----------------------------------------------------------------------------------------------
# F3: a link in the exchange is refused, never followed (a05: a folder linked to solutions/)


def _linked_submission(tmp_path: Path) -> None:
    """Alice hands in honestly; Mallory's folder is a link to the course's solutions."""
    inbound = _inbound(tmp_path)
    _submit(inbound, "alice", {f"{LESSON}.ipynb": b"alice's work"})
    solutions = tmp_path / "course" / "solutions" / LESSON
    solutions.mkdir(parents=True)
    (solutions / f"{LESSON}.ipynb").write_bytes(b"### BEGIN SOLUTION the reference")
    (inbound / f"mallory+{LESSON}+2026-11-20 12:00:00.000000 UTC+x").symlink_to(solutions)


def test_a_linked_exchange_folder_is_refused_and_listed(tmp_path, capsys):
    _linked_submission(tmp_path)
    got = _collect(tmp_path)
    assert sorted(got.students) == ["alice"]
    assert got.unattributed == [
        (f"mallory+{LESSON}+2026-11-20 12:00:00.000000 UTC+x", "a link (not followed)")
    ]
    assert b"BEGIN SOLUTION" not in _everything_copied(tmp_path)
    assert commands.collect(tmp_path, str(tmp_path / "exchange"), LESSON, None, None) == 1
    assert "a link (not followed)" in capsys.readouterr().out


def test_a_linked_folder_is_stopped_twice(tmp_path, monkeypatch):
    """Mutant 1: the folder's own check gone (`is_dir()` follows the link, as before): the copy
    still refuses every file, which lies outside the folder as opened. Mutant 2: that check gone
    too: Mallory is collected with the reference solution (the attack)."""
    _linked_submission(tmp_path)
    monkeypatch.setattr(Path, "lstat", Path.stat)  # the folder looks like a folder
    got = _collect(tmp_path)
    assert got.students["mallory"] == []
    assert all("through a linked folder" in why for _, why in got.unattributed)
    assert b"BEGIN SOLUTION" not in _everything_copied(tmp_path)
    monkeypatch.setattr(untrusted, "_opened_path", lambda fd, src: Path(src).absolute())
    got = _collect(tmp_path)
    assert got.students["mallory"] == [f"{LESSON}.ipynb"]
    assert b"BEGIN SOLUTION" in _everything_copied(tmp_path)


def _swapped_for_a_link(tmp_path: Path, monkeypatch) -> Path:
    """A file listed as a regular file, a link by the time it is opened (the race): here the
    link is already there, and `lstat` is made to answer as it did when the file was listed."""
    inbound = _inbound(tmp_path)
    folder = _submit(inbound, "mallory", {f"{LESSON}.ipynb": b"mine"})
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"another student's work")
    (folder / "notes.txt").symlink_to(secret)
    real_lstat = os.lstat
    monkeypatch.setattr(
        untrusted.os, "lstat", lambda p: real_lstat(secret if str(p).endswith("notes.txt") else p)
    )
    monkeypatch.setattr(untrusted.os.path, "islink", lambda p: False)
    return folder


def test_a_file_swapped_for_a_link_is_not_followed(tmp_path, monkeypatch):
    folder = _swapped_for_a_link(tmp_path, monkeypatch)
    got = _collect(tmp_path)
    assert got.students["mallory"] == [f"{LESSON}.ipynb"]
    assert (f"{folder.name}/notes.txt", "a link (not followed): not copied") in got.unattributed
    assert b"another student's work" not in _everything_copied(tmp_path)


def test_mutant_a_file_swapped_for_a_link_is_followed_without_o_nofollow(tmp_path, monkeypatch):
    """Mutant: opened following links, the opened file's place not checked: the link is read."""
    _swapped_for_a_link(tmp_path, monkeypatch)
    monkeypatch.setattr(untrusted.os, "O_NOFOLLOW", 0)
    monkeypatch.setattr(untrusted, "_opened_path", lambda fd, src: Path(src).absolute())
    got = _collect(tmp_path)
    assert "notes.txt" in got.students["mallory"]
    assert b"another student's work" in _everything_copied(tmp_path)


def test_links_and_fifos_inside_a_submission_are_listed_and_never_block(tmp_path):
    folder = _submit(_inbound(tmp_path), "mallory", {f"{LESSON}.ipynb": b"mine"})
    (folder / "passwd").symlink_to("/etc/passwd")
    os.mkfifo(folder / "pipe")
    got = _collect(tmp_path)
    assert got.students["mallory"] == [f"{LESSON}.ipynb"]
    assert sorted(got.unattributed) == [
        (f"{folder.name}/passwd", "a link (not followed): not copied"),
        (f"{folder.name}/pipe", "not a regular file: not copied"),
    ]


# ----------------------------------------------------------------------------------------------
# F2: a folder in a classmate's name (a02), and timestamps nobody can have written


def _accounts() -> tuple[str, str]:
    """This account's name, and another account of this machine usable as a student id."""
    me = pwd.getpwuid(os.getuid()).pw_name
    others = [
        a.pw_name for a in pwd.getpwall() if a.pw_uid != os.getuid() and STUDENT_ID.match(a.pw_name)
    ]
    if not STUDENT_ID.match(me) or not others:
        pytest.skip("needs this account and another one usable as student ids")
    return me, sorted(others)[0]


def _impersonation(tmp_path: Path) -> tuple[str, str]:
    """The running account hands in as itself, and writes a folder in a classmate's name."""
    me, victim = _accounts()
    inbound = _inbound(tmp_path)
    _submit(inbound, me, {f"{LESSON}.ipynb": b"my own work"})
    _submit(inbound, victim, {f"{LESSON}.ipynb": b"the untouched release"})
    return me, victim


def test_a_folder_another_account_wrote_in_a_students_name_is_refused(tmp_path, capsys):
    me, victim = _impersonation(tmp_path)
    got = _collect(tmp_path)
    assert sorted(got.students) == [me]  # the owner's own folder is collected
    [(folder, why)] = got.unattributed
    assert folder.startswith(f"{victim}+") and why == (
        f"written by the account {me!r}, not by {victim!r}: not collected"
    )
    assert not (tmp_path / "out" / victim).exists()
    assert commands.collect(tmp_path, str(tmp_path / "exchange"), LESSON, None, None) == 1
    assert f"NOT ATTRIBUTED: {folder}: written by the account" in capsys.readouterr().out


def test_mutant_without_the_owner_check_the_classmate_is_replaced(tmp_path, monkeypatch):
    """Mutant: nbgrader's `check_owner` at most warns: the forged folder becomes the victim's."""
    me, victim = _impersonation(tmp_path)
    monkeypatch.setattr(exchange, "foreign_owner", lambda info, student: None)
    got = _collect(tmp_path)
    assert sorted(got.students) == sorted([me, victim]) and not got.problems
    copied = tmp_path / "out" / victim / LESSON / f"{LESSON}.ipynb"
    assert copied.read_bytes() == b"the untouched release"


def test_no_owner_is_compared_for_students_who_are_no_account_here():
    """An exchange copied from a hub, or a hub whose students are no accounts of this machine."""
    info = os.stat(".")
    assert untrusted.foreign_owner(info, "no-such-account-x7") is None
    assert untrusted.foreign_owner(info, pwd.getpwuid(info.st_uid).pw_name) is None


def _forged_times(tmp_path: Path) -> Path:
    """a02's forged folder: its name in 2099 (always the latest), its timestamp.txt before the
    deadline (never late)."""
    return _submit(
        _inbound(tmp_path),
        "alice",
        {f"{LESSON}.ipynb": b"x", "timestamp.txt": b"2026-11-19 09:00:00.000000 UTC"},
        stamp="2099-01-01 00:00:00.000000 UTC",
    )


def _submitted_at(tmp_path: Path) -> str | None:
    folder = tmp_path / "out" / "alice" / LESSON
    return timing.submitted_at(
        folder, identities.read(tmp_path / "out", {"alice": folder})["alice"]
    )


def test_a_timestamp_nobody_can_have_written_is_not_taken(tmp_path):
    folder = _forged_times(tmp_path)
    written = datetime.datetime.fromtimestamp(folder.lstat().st_ctime, datetime.timezone.utc)
    got = _collect(tmp_path)
    assert got.identities["alice"]["submitted_at"] == timing.iso(written)
    assert _submitted_at(tmp_path) == timing.iso(written)  # neither 2099 nor 2026-11-19
    assert "timestamp.txt" not in got.students["alice"]
    assert got.notes == [
        f"{folder.name}: its timestamp 2099-01-01T00:00:00+00:00 is in the future: the "
        f"folder's time {timing.iso(written)} is used",
        f"{folder.name}: its timestamp.txt is not used (it does not say the time taken, "
        f"{timing.iso(written)})",
    ]
    assert "note: " in got.summary()


def test_mutants_the_forged_times_are_taken(tmp_path, monkeypatch):
    """Mutant 1: the name's time taken as it is: the folder is dated 2099 (the latest of any).
    Mutant 2: the copied timestamp.txt kept: the submission is dated before the deadline."""
    _forged_times(tmp_path)
    monkeypatch.setattr(exchange, "claimed_time", lambda claimed, changed, now: (claimed, None))
    assert _collect(tmp_path).identities["alice"]["submitted_at"].startswith("2099-01-01")
    monkeypatch.setattr(exchange, "distrust_stamp_file", lambda copied, submission: None)
    _collect(tmp_path)
    assert _submitted_at(tmp_path) == "2026-11-19T09:00:00+00:00"


def test_a_timestamp_later_than_the_folder_was_written_is_not_taken():
    written = datetime.datetime(2026, 11, 20, 10, tzinfo=datetime.timezone.utc).timestamp()
    later = datetime.datetime(2026, 11, 20, 12)  # claimed; "now" is a day after
    when, why = timing.claimed_time(later, written, written + 86400)
    assert when.timestamp() == written and "later than the folder was written" in why
    honest = datetime.datetime(2026, 11, 20, 9, 59, 59)
    assert timing.claimed_time(honest, written, written + 86400) == (
        honest.replace(tzinfo=datetime.timezone.utc),
        None,
    )


def test_an_honest_exchange_submission_keeps_its_time_and_timestamp_file(tmp_path):
    _submit(
        _inbound(tmp_path),
        "alice",
        {f"{LESSON}.ipynb": b"x", "timestamp.txt": HONEST_STAMP.encode(), "sub/data.csv": b"1"},
    )
    got = _collect(tmp_path)
    assert got.students["alice"] == [f"{LESSON}.ipynb", "sub/data.csv", "timestamp.txt"]
    assert not got.notes and not got.problems
    assert _submitted_at(tmp_path) == "2026-11-20T10:00:00+00:00"


# ----------------------------------------------------------------------------------------------
# F4: the zip's size limits on every source (a07: a sparse file costs nothing to hand in)


@pytest.fixture
def small_limits(monkeypatch):
    monkeypatch.setattr(collect, "MAX_FILE_BYTES", 4096)
    monkeypatch.setattr(collect, "MAX_TOTAL_BYTES", 6000)


def _sparse(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as file:
        file.truncate(size)


def test_files_past_the_limits_are_listed_not_copied_from_the_exchange(tmp_path, small_limits):
    folder = _submit(
        _inbound(tmp_path), "mallory", {f"{LESSON}.ipynb": b"n" * 3000, "a.txt": b"a" * 3500}
    )
    _sparse(folder / "big.bin", 5000)
    got = _collect(tmp_path)
    assert got.students["mallory"] == [f"{LESSON}.ipynb"]
    assert sorted(got.unattributed) == [
        (f"{folder.name}/a.txt", f"the student's files pass {MIB(6000)} in all: not copied"),
        (f"{folder.name}/big.bin", f"larger than {MIB(4096)} ({MIB(5000)}): not copied"),
    ]


def test_mutant_without_limits_the_exchange_copies_everything(tmp_path, small_limits, monkeypatch):
    folder = _submit(_inbound(tmp_path), "mallory", {f"{LESSON}.ipynb": b"n"})
    _sparse(folder / "big.bin", 5000)
    monkeypatch.setattr(collect, "_too_much", lambda size, total: None)
    copy = untrusted.copy_regular
    monkeypatch.setattr(collect, "copy_regular", lambda s, d, r, limit: copy(s, d, r, 1 << 40))
    assert "big.bin" in _collect(tmp_path).students["mallory"]


def test_files_past_the_limits_are_listed_not_copied_from_a_folder(
    tmp_path, small_limits, monkeypatch
):
    source = tmp_path / "download"
    (source / "mallory" / LESSON).mkdir(parents=True)
    (source / "mallory" / LESSON / NAME).write_bytes(b"n")
    _sparse(source / "mallory" / LESSON / "big.bin", 5000)
    got = collect.collect(source, LESSON, tmp_path / "out")
    assert got.students["mallory"] == [NAME]
    assert got.unattributed == [
        (f"mallory/{LESSON}/big.bin", f"larger than {MIB(4096)} ({MIB(5000)}): not copied")
    ]
    monkeypatch.setattr(collect, "_too_much", lambda size, total: None)  # mutant: no limit
    assert "big.bin" in collect.collect(source, LESSON, tmp_path / "o2").students["mallory"]


def _read_while_digesting(folder: Path, monkeypatch) -> list[str]:
    """The files the digest reads (none is read here: the names are noted)."""
    read = []
    monkeypatch.setattr(submission, "file_sha256", lambda p: read.append(p.name) or b"")
    submission.submission_sha256(folder)
    return read


def test_the_digest_never_reads_a_file_past_the_limits(tmp_path, monkeypatch):
    """Graded straight from a folder (no collect): a 3 GiB sparse file is counted by its size,
    not read (a07: 2.1 GB of the grader's memory). Mutant: every file read."""
    folder = tmp_path / "mallory" / LESSON
    folder.mkdir(parents=True)
    (folder / NAME).write_bytes(b"{}")
    _sparse(folder / "big.bin", 3 << 30)
    assert _read_while_digesting(folder, monkeypatch) == [NAME]
    assert submission.oversize(folder) == {folder / "big.bin": 3 << 30}
    monkeypatch.setattr(submission, "oversize", lambda folder: {})
    assert _read_while_digesting(folder, monkeypatch) == [NAME, "big.bin"]


def test_an_honest_digest_is_unchanged(tmp_path):
    """The digest decides what is graded again: files within the limits digest as before."""
    folder = tmp_path / "s"
    (folder / "data").mkdir(parents=True)
    for name, data in {NAME: b"{}", "data/x.csv": b"1,2", "timestamp.txt": b"t"}.items():
        (folder / name).write_bytes(data)
    before = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "timestamp.txt"):
        before.update(str(path.relative_to(folder)).encode() + b"\0")
        before.update(hashlib.sha256(path.read_bytes()).digest())
    assert submission.submission_sha256(folder) == before.hexdigest()


# ----------------------------------------------------------------------------------------------
# F7: a student's file names reach the terminal and the records escaped (a08)


def test_shown_escapes_c0_del_c1_and_undecodable_bytes_only():
    assert plain_text.shown("a\x1b[2K\r\n\t\x07\x7f\x9b" + os.fsdecode(b"\xff")) == (
        "a\\x1b[2K\\x0d\\x0a\\x09\\x07\\x7f\\x9b\\xff"
    )
    for plain in ("notes.txt", "李明 — résumé (1).ipynb", "a\\x1b"):
        assert plain_text.shown(plain) == plain


def _hostile_names(tmp_path: Path) -> Path:
    """a08: a student's extra file and a stray folder in the exchange named with the payload,
    and a file whose name is no UTF-8 (it crashed the digest and printing)."""
    inbound = _inbound(tmp_path)
    folder = _submit(inbound, "mallory", {f"{LESSON}.ipynb": b"{}", f"notes{PAYLOAD}.txt": b"x"})
    (inbound / f"x{PAYLOAD}").mkdir()
    (folder / os.fsdecode(b"bad\xff.txt")).write_bytes(b"y")
    return folder


def test_hostile_names_are_escaped_in_collect_grade_and_the_records(
    tiny_course,  # noqa: F811
    tmp_path,
    capsys,
):
    _hostile_names(tmp_path)
    got = _collect(tmp_path)
    summary = got.summary()
    assert _no_control(summary) and "x\\x0d\\x1b[2K\\x1b[32mmallory: graded 8\u22158" in summary
    summary.encode("utf-8")  # printable: the undecodable byte is shown as \xff
    collected = tmp_path / "out" / "mallory" / LESSON
    submission.submission_sha256(collected)  # no UnicodeEncodeError
    # grade on a collected folder prints what collect could not place
    commands._intake(tmp_path, LESSON, tmp_path / "out")
    out = capsys.readouterr().out
    assert "NOT PLACED by collect: x\\x0d\\x1b[2K" in out and _no_control(out)
    # the record's reason, and the line `grade` prints for the student
    (collected / f"{LESSON}.ipynb").unlink()
    nbformat.write(_student_nb(tiny_course), collected / NAME)
    course = copy_of(tiny_course, tmp_path)
    notes, _ = submission.prepare_submission(
        collected, released_notebooks(course, TINY), tmp_path / "prepared"
    )
    [extra] = [n for n in notes if n.startswith("ignored extra files")]
    assert _no_control(extra) and "bad\\xff.txt" in extra and "notes\\x0d\\x1b[2K" in extra
    printed = _graded_line(course, tmp_path, f"ignored extra files: notes{PAYLOAD}.txt", capsys)
    assert printed.startswith("mallory: ungradable 0/") and _no_control(printed)


def _graded_line(course: Path, tmp_path: Path, reason: str, capsys) -> str:
    """What `grade` prints for a student whose record has this reason."""
    grader = grading.Grader(course, TINY, tmp_path / "out", worker=False)
    grader._grade = lambda student, folder, sha: ungradable(student, TINY, grader.cells, reason)
    capsys.readouterr()
    grader._one("mallory", tmp_path, "sha")
    return capsys.readouterr().out.rstrip("\n")


def test_mutant_unescaped_names_reach_the_terminal(tiny_course, tmp_path, capsys, monkeypatch):  # noqa: F811
    """Mutant: `shown` a no-op everywhere (and `grade`'s own printable line, the second layer, off
    too): the payload reaches the terminal raw."""
    for module in (collect, submission, grading, plain_text):
        monkeypatch.setattr(module, "shown", str)
    monkeypatch.setattr(grading, "printable", str)
    folder = _hostile_names(tmp_path)
    (folder / os.fsdecode(b"bad\xff.txt")).unlink()  # else printing it raises
    assert PAYLOAD in _collect(tmp_path).summary()
    commands._intake(tmp_path, LESSON, tmp_path / "out")
    assert PAYLOAD in capsys.readouterr().out
    course = copy_of(tiny_course, tmp_path)
    assert PAYLOAD in _graded_line(course, tmp_path, f"ignored extra files: {PAYLOAD}", capsys)


def test_mutant_a_name_that_is_no_utf8_crashes_the_digest(tmp_path, monkeypatch):
    """Mutant: names encoded as text (before): the whole class stopped on one file's name."""
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / os.fsdecode(b"bad\xff.txt")).write_bytes(b"y")
    submission.submission_sha256(folder)
    monkeypatch.setattr(submission.os, "fsencode", lambda p: str(p).encode())
    with pytest.raises(UnicodeEncodeError):
        submission.submission_sha256(folder)
