"""One student's upload never stops the class's collect (red team B, F5 and F6).

F5: file names the disk refuses used to end `collect` (and so `grade`) for everyone: a file and a
folder of one name once the lesson folder is dropped (`stu/<lesson>/notes` and `stu/notes/x.txt`:
FileExistsError in `collect._place`), and a name over 255 bytes (Canvas's prefix plus a long
non-Latin name: ENAMETOOLONG in `safe_zip.safe_extract`). Now such a file is listed as not placed,
with its student and the reason, and an over-long name is shortened (start, digest, extension).

F6: one bad member refused the whole LMS zip (a file over 100 MiB, a `..` path written with
backslashes). Now only that member is skipped and listed; the archive-wide limits still refuse
the zip; and a `\\` stays a character of the name, so it cannot move a file to another student id.

Each attack is collected from a zip, and beats a mutant: the fix weakened back.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from transformer_lab_grader import collect, safe_zip

LESSON = "02_qkv_attention"
NB = f"{LESSON}.ipynb"
LONG = "注意力机制的实现" * 11 + ".ipynb"  # 88 CJK characters: 264 bytes, over NAME_MAX alone


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


# ---------------------------------------------------------------------------------------------
# F5: a file and a folder of one name.

COLLIDING = {
    f"stu/{LESSON}/{NB}": b"nb",
    f"stu/{LESSON}/notes": b"a file",
    "stu/notes/x.txt": b"in a folder of the same name",
    f"ok/{LESSON}/{NB}": b"ok",
}


def test_a_file_and_a_folder_of_one_name_are_listed_not_a_crash(tmp_path):
    got = collect.collect(_zip(tmp_path / "c.zip", COLLIDING), LESSON, tmp_path / "out")
    assert got.students == {"ok": [NB], "stu": [NB, "notes"]}
    assert got.not_placed == [
        (
            "stu/notes/x.txt",
            "student stu's file: could not be placed: "
            "one of the student's files has the name of one of their folders",
        )
    ]
    assert got.problems == got.not_placed  # listed, and collect's exit is non-zero
    assert (tmp_path / "out" / "ok" / LESSON / NB).read_bytes() == b"ok"
    report = collect.read_report(tmp_path / "out")
    assert [n for n, _ in report["not_placed"]] == ["stu/notes/x.txt"]
    assert "NOT PLACED: stu/notes/x.txt: student stu's file" in got.summary()


def test_mutant_placing_without_catching_crashes_the_class(tmp_path, monkeypatch):
    place = collect._place
    monkeypatch.setattr(collect, "_place", lambda dest, files, failed=None: place(dest, files))
    with pytest.raises(OSError):
        collect.collect(_zip(tmp_path / "c.zip", COLLIDING), LESSON, tmp_path / "out")


# ---------------------------------------------------------------------------------------------
# F5: a name over 255 bytes.


def test_short_name_keeps_short_names_and_shortens_long_ones_apart():
    assert safe_zip.short_name(NB) == NB
    one, two = (safe_zip.short_name(f"x_1_2_{LONG[:-6]}{end}.ipynb") for end in ("a", "b"))
    for name in (one, two):
        assert len(name.encode()) <= safe_zip.NAME_MAX
        assert name.startswith("x_1_2_注意力") and name.endswith(".ipynb")
    assert one != two
    assert safe_zip.short_name(one) == one


def _long_canvas(tmp_path: Path) -> Path:
    return _zip(
        tmp_path / "canvas.zip",
        {
            f"mallory_1002_5002_{LONG}": b"long",
            f"mallory_1002_5003_{LONG[:-7]}2.ipynb": b"long 2",
            f"alice_1001_5001_{NB}": b"alice",
        },
    )


def test_a_name_over_255_bytes_is_shortened_and_collected(tmp_path):
    got = collect.collect(_long_canvas(tmp_path), LESSON, tmp_path / "out")
    assert got.not_placed == [] and got.problems == []
    assert got.students["1001"] == [NB]
    names = got.students["1002"]
    assert len(names) == 2 and len(set(names)) == 2
    assert all(n.startswith("注意力") and n.endswith(".ipynb") for n in names)
    folder = tmp_path / "out" / "1002" / LESSON
    assert sorted(p.read_bytes() for p in folder.iterdir()) == [b"long", b"long 2"]


def test_mutant_without_shortening_lists_the_file_and_without_catching_crashes(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(safe_zip, "short_name", lambda part: part)
    got = collect.collect(_long_canvas(tmp_path), LESSON, tmp_path / "o1")
    assert "1002" not in got.students and got.students["1001"] == [NB]
    assert all("File name too long" in why for _, why in got.not_placed)
    assert all(why.startswith("student 1002's file") for _, why in got.not_placed)
    monkeypatch.setattr(safe_zip, "MEMBER_ERRORS", ())
    with pytest.raises(OSError, match="File name too long"):
        collect.collect(_long_canvas(tmp_path), LESSON, tmp_path / "o2")


# ---------------------------------------------------------------------------------------------
# F6: one bad member, not the whole zip.


def _class_with_bad_uploads(tmp_path: Path) -> Path:
    return _zip(
        tmp_path / "lms.zip",
        {
            f"alice_1001_5001_{NB}": b"alice",
            f"bob_1002_5002_{NB}": b"bob",
            "bob_1002_5003_model.bin": b"0" * 5000,  # "over 100 MiB" (the limit is lowered)
            "mallory_1003_5004_a\\..\\..\\x.ipynb": b"backslashes",
            f"mallory_1003_5005_{NB}": b"mallory",
        },
    )


def test_a_big_file_or_a_backslash_traversal_costs_only_that_file(tmp_path, monkeypatch):
    monkeypatch.setattr(safe_zip, "MAX_FILE_BYTES", 4096)
    got = collect.collect(_class_with_bad_uploads(tmp_path), LESSON, tmp_path / "out")
    assert got.students == {"1001": [NB], "1002": [NB], "1003": [NB]}
    assert got.not_placed == [
        ("bob_1002_5003_model.bin", "student 1002's file: larger than 0 MiB (not unpacked)"),
        (
            "mallory_1003_5004_a\\..\\..\\x.ipynb",
            "student 1003's file: unsafe path (absolute, or with a '..' part)",
        ),
    ]
    assert not list(tmp_path.rglob("x.ipynb"))


def test_a_file_bigger_than_the_zip_claims_is_skipped_while_unpacking(tmp_path, monkeypatch):
    monkeypatch.setattr(safe_zip, "MAX_FILE_BYTES", 4096)
    honest = safe_zip.member_problem  # the zip lies: the big member claims to be small
    monkeypatch.setattr(
        safe_zip, "member_problem", lambda info: None if ".bin" in info.filename else honest(info)
    )
    got = collect.collect(_class_with_bad_uploads(tmp_path), LESSON, tmp_path / "out")
    assert got.students["1002"] == [NB]
    assert ("bob_1002_5003_model.bin", "student 1002's file: larger than 0 MiB (not unpacked)") in (
        got.not_placed
    )


def test_mutant_refusing_the_zip_for_one_member_grades_nobody(tmp_path, monkeypatch):
    monkeypatch.setattr(safe_zip, "MAX_FILE_BYTES", 4096)
    honest = safe_zip.member_problem

    def refuse(info):
        why = honest(info)
        if why is not None:
            raise safe_zip.UnsafeZip(f"{info.filename!r}: {why}")

    monkeypatch.setattr(safe_zip, "member_problem", refuse)
    with pytest.raises(SystemExit, match="refusing the zip"):
        collect.collect(_class_with_bad_uploads(tmp_path), LESSON, tmp_path / "out")


def test_a_backslash_is_part_of_the_name_and_keeps_the_canvas_id(tmp_path):
    archive = _zip(tmp_path / "b.zip", {f"mallory_1002_5002_x\\{NB}": b"m"})
    got = collect.collect(archive, LESSON, tmp_path / "out")
    assert got.students == {"1002": [f"x\\{NB}"]}
    assert got.identities["1002"]["lms"] == "canvas"


def test_mutant_turning_backslashes_into_folders_loses_the_canvas_id(tmp_path, monkeypatch):
    parts = safe_zip.member_parts
    monkeypatch.setattr(safe_zip, "member_parts", lambda name: parts(name.replace("\\", "/")))
    archive = _zip(tmp_path / "b.zip", {f"mallory_1002_5002_x\\{NB}": b"m"})
    got = collect.collect(archive, LESSON, tmp_path / "out")
    assert got.students == {"mallory_1002_5002_x": [NB]}


def test_the_bytes_of_a_skipped_member_count_toward_the_archive_limit(tmp_path, monkeypatch):
    """Many lying members, each skipped once past the per-file limit, still end at the total."""
    monkeypatch.setattr(safe_zip, "MAX_FILE_BYTES", 4096)
    monkeypatch.setattr(safe_zip, "MAX_TOTAL_BYTES", 9000)
    monkeypatch.setattr(safe_zip, "member_problem", lambda info: None)  # every size is a lie
    members = {f"s{i}/big.bin": b"0" * 5000 for i in range(3)}
    with pytest.raises(SystemExit, match="unpacked"):
        collect.collect(_zip(tmp_path / "lies.zip", members), LESSON, tmp_path / "out")
