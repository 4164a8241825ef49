"""The grading core: repair, record validation, collect (LMS, exchange, zip safety), the CSV,
the sandbox, and whole runs on a tiny two-exercise course (idempotence, --force, resume after a
kill, an LMS zip as input, the gradebook merge).

The tiny course (`99_tiny`: `add` 2 points, `mul` 1 point, plain asserts) keeps runs to seconds;
its tests are plain asserts, run by the judge against the student's functions like any check.
The real lesson is graded in tests/grading/test_bad_submissions.py.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

from transformer_lab_grader import (
    collect,
    export,
    grade,
    grading,
    nbgrader_app,
    notebook_format,
    safe_zip,
    sandbox,
    submission,
)
from transformer_lab_grader import records as rec
from transformer_lab_grader.course import PACKAGE_REPO, course_root

REPO = Path(__file__).resolve().parents[2]
TINY = "99_tiny"
NAME = f"{TINY}.ipynb"
needs_namespaces = pytest.mark.skipif(
    sandbox.box_unavailable() is not None,
    reason=f"no bubblewrap box here: {sandbox.box_unavailable()}",
)


def _meta(grade_id, *, solution=False, points=None):
    meta = {
        "grade": points is not None,
        "grade_id": grade_id,
        "locked": points is not None,
        "schema_version": 3,
        "solution": solution,
        "task": False,
    }
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def tiny_source(add="return a + b", mul="return a * b") -> nbformat.NotebookNode:
    """The nbgrader source notebook of the tiny lesson (solutions in place)."""
    nb = nbformat.v4.new_notebook()
    cells = [
        nbformat.v4.new_markdown_cell("# Tiny lesson"),
        nbformat.v4.new_code_cell(
            f"def add(a, b):\n    ### BEGIN SOLUTION\n    {add}\n    ### END SOLUTION",
            metadata=_meta("add-solution", solution=True),
        ),
        nbformat.v4.new_code_cell(
            "assert add(1, 2) == 3\n### BEGIN HIDDEN TESTS\nassert add(-1, 1) == 0\n### END HIDDEN TESTS",
            metadata=_meta("add-test", points=2),
        ),
        nbformat.v4.new_code_cell(
            f"def mul(a, b):\n    ### BEGIN SOLUTION\n    {mul}\n    ### END SOLUTION",
            metadata=_meta("mul-solution", solution=True),
        ),
        nbformat.v4.new_code_cell("assert mul(2, 3) == 6", metadata=_meta("mul-test", points=1)),
    ]
    for i, cell in enumerate(cells):
        cell["id"] = f"c{i}"
    nb.cells = cells
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb


@pytest.fixture(scope="module")
def tiny_course(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tiny")
    (root / "solutions" / TINY).mkdir(parents=True)
    nbformat.write(tiny_source(), root / "solutions" / TINY / NAME)
    (root / "exercises").mkdir()
    (root / "autograder").mkdir()
    for path in (REPO / "autograder").glob("*.py"):
        shutil.copy(path, root / "autograder" / path.name)
    nbgrader_app.generate(root, [TINY], quiet=True)
    return root


def copy_of(tiny_course: Path, tmp_path: Path) -> Path:
    """A private copy of the tiny course, without its records and registers (`work/`)."""
    dest = tmp_path / "course"
    shutil.copytree(tiny_course, dest, ignore=shutil.ignore_patterns("work"))
    return dest.resolve()


@pytest.fixture(scope="module")
def released(tiny_course):
    return notebook_format.released_notebooks(tiny_course, TINY)


@pytest.fixture(scope="module")
def cells(released):
    return notebook_format.graded_cells(released)


def _student_nb(tiny_course, add="return a + b", mul="return a * b") -> nbformat.NotebookNode:
    """The released notebook with the student's answers filled in."""
    nb = nbformat.read(tiny_course / "exercises" / TINY / NAME, as_version=4)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid == "add-solution":
            cell.source = f"def add(a, b):\n    {add}"
        if gid == "mul-solution":
            cell.source = f"def mul(a, b):\n    {mul}"
    return nb


# ----------------------------------------------------------------------------- repair


def _prepare(tmp_path, released, files: dict[str, bytes]):
    folder = tmp_path / "in"
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return submission.prepare_submission(folder, released, tmp_path / "out")


def test_graded_cells_come_from_the_release(cells):
    assert {gid: c["points"] for gid, c in cells.items()} == {"add-test": 2.0, "mul-test": 1.0}
    assert "HIDDEN" not in cells["add-test"]["source"]


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "is an empty file"),
        (b"  \n", "is an empty file"),
        (b'{"cells": [', "is not valid JSON (the file is truncated)"),
        (b'{"cells": ]', "is not valid JSON:"),
        (b"[1, 2]", "is JSON but not a notebook"),
        (
            b'{"cells": [], "nbformat": 4, "nbformat_minor": 5, "metadata": 7}',
            "not a readable notebook",
        ),
    ],
)
def test_unreadable_notebooks_are_ungradable_with_the_reason(tmp_path, released, data, reason):
    with pytest.raises(submission.Ungradable, match=reason.replace("(", r"\(").replace(")", r"\)")):
        _prepare(tmp_path, released, {NAME: data})


def test_a_truncated_notebook_is_not_called_truncated_when_the_error_is_early(tmp_path, released):
    with pytest.raises(submission.Ungradable) as info:
        _prepare(tmp_path, released, {NAME: b'{"cells": ], "metadata": {}, "nbformat": 4}'})
    assert "truncated" not in str(info.value)


def test_a_single_misnamed_notebook_is_renamed(tmp_path, released, tiny_course):
    data = nbformat.writes(_student_nb(tiny_course)).encode()
    notes, flags = _prepare(tmp_path, released, {"tiny (1).ipynb": data, "notes.txt": b"x"})
    assert notes == [f"renamed tiny (1).ipynb to {NAME}", "ignored extra files: notes.txt"]
    assert flags == []
    assert (tmp_path / "out" / NAME).is_file() and not (tmp_path / "out" / "notes.txt").exists()


def test_several_candidates_or_none_are_ungradable(tmp_path, released, tiny_course):
    data = nbformat.writes(_student_nb(tiny_course)).encode()
    with pytest.raises(
        submission.Ungradable, match=r"several other notebooks \(a.ipynb, b.ipynb\)"
    ):
        _prepare(tmp_path / "1", released, {"a.ipynb": data, "b.ipynb": data})
    with pytest.raises(submission.Ungradable, match=r"no notebook in the submission \(answer.py\)"):
        _prepare(tmp_path / "2", released, {"answer.py": b"print(1)"})


def test_stripped_metadata_is_restored_and_old_format_upgraded(tmp_path, released, tiny_course):
    nb = _student_nb(tiny_course)
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
    raw = json.loads(nbformat.writes(nb))
    raw["nbformat_minor"] = 0
    for cell in raw["cells"]:
        cell.pop("id")
    notes, flags = _prepare(tmp_path, released, {NAME: json.dumps(raw).encode()})
    # ids are gone, so only the unchanged (test) cells can be matched, by their source
    assert notes == [
        "upgraded from nbformat 4.0",
        "repaired: 2 cells' nbgrader metadata restored from the release",
    ]
    fixed = nbformat.read(tmp_path / "out" / NAME, as_version=4)
    nbformat.validate(fixed)
    assert fixed.nbformat_minor == 5 and all(c.get("id") for c in fixed.cells)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in fixed.cells]
    assert ids.count("add-test") == 1 and ids.count("mul-test") == 1


def test_deleted_edited_duplicated_and_unknown_cells_are_noted_or_flagged(
    tmp_path, released, tiny_course
):
    nb = _student_nb(tiny_course)
    test_add = next(
        c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "add-test"
    )
    test_mul = next(
        c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "mul-test"
    )
    nb.cells.remove(test_mul)
    test_add.source = "pass"
    copy = nbformat.v4.new_code_cell(
        "print(1)", metadata=json.loads(json.dumps(dict(test_add.metadata)))
    )
    copy["id"] = "dup"
    stray = nbformat.v4.new_code_cell("print(2)", metadata=_meta("not-in-release", points=50))
    stray["id"] = "stray"
    nb.cells += [copy, stray]
    notes, flags = _prepare(tmp_path, released, {NAME: nbformat.writes(nb).encode()})
    assert notes == ["test cell mul-test was missing (restored from the release)"]
    assert flags == [
        "nbgrader metadata of cell 'dup' dropped (unknown or repeated grade id)",
        "nbgrader metadata of cell 'stray' dropped (unknown or repeated grade id)",
        "locked test cell add-test was edited (graded with the released one)",
    ]
    fixed = nbformat.read(tmp_path / "out" / NAME, as_version=4)
    assert [c.metadata.get("nbgrader", {}).get("grade_id") for c in fixed.cells].count(
        "add-test"
    ) == 1


def test_submission_digest_covers_names_and_bytes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.ipynb").write_bytes(b"1")
    first = submission.submission_sha256(tmp_path / "a")
    (tmp_path / "a" / "x.ipynb").write_bytes(b"2")
    second = submission.submission_sha256(tmp_path / "a")
    (tmp_path / "a" / "x.ipynb").rename(tmp_path / "a" / "y.ipynb")
    assert len({first, second, submission.submission_sha256(tmp_path / "a")}) == 3


# ----------------------------------------------------------------------------- records


def _record(**changes):
    record = {
        "student": "alice",
        "assignment": TINY,
        "status": "graded",
        "reason": None,
        "cells": {
            "add-test": {"score": 2.0, "passed": True, "output": ""},
            "mul-test": {"score": 0.0, "passed": False, "output": "AssertionError"},
        },
        "flags": [],
    }
    record.update(changes)
    return record


def test_a_valid_record_is_kept_and_its_totals_recomputed(cells):
    record = rec.validate_record(_record(score=99, max_score=99), "alice", TINY, cells)
    assert (record["score"], record["max_score"]) == (2.0, 3.0)
    assert (
        record["cells"]["add-test"]["exercises"] == []
        and record["cells"]["add-test"]["max_score"] == 2.0
    )


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"student": "bob"}, "does not match"),
        ({"status": "perfect"}, "unknown status"),
        ({"cells": {"add-test": {"score": 2.0}}}, "differ from the release"),
        ({"cells": {"add-test": {"score": 3.0}, "mul-test": {"score": 0}}}, r"outside \[0, 2\]"),
        ({"cells": {"add-test": {"score": -1}, "mul-test": {"score": 0}}}, "outside"),
        ({"cells": {"add-test": {"score": "2"}, "mul-test": {"score": 0}}}, "outside"),
        (
            {"cells": {"add-test": {"score": 2}, "mul-test": {"score": 0}, "bonus": {"score": 9}}},
            "differ",
        ),
        ({"flags": "tampered"}, "flags"),
        ({"reason": 5}, "reason"),
    ],
)
def test_a_forged_record_is_rejected(cells, changes, message):
    with pytest.raises(ValueError, match=message):
        rec.validate_record(_record(**changes), "alice", TINY, cells)


def test_an_ungradable_record_scores_zero_even_if_its_cells_claim_points(cells):
    record = rec.validate_record(_record(status="ungradable", reason="x"), "alice", TINY, cells)
    assert record["score"] == 0.0


def test_crash_reasons_are_named():
    limits = sandbox.Limits()
    assert (
        grading._crash_reason(-signal.SIGKILL, "", limits)
        == "the grading job was killed by SIGKILL"
    )
    assert grading._crash_reason(-signal.SIGXCPU, "", limits) == "CPU time limit reached"
    assert grading._crash_reason(1, "MemoryError", limits).startswith(
        "memory limit reached (4 GiB)"
    )


# ----------------------------------------------------------------------------- collect


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_canvas_moodle_folder_and_named_files_are_attributed(tmp_path):
    archive = _zip(
        tmp_path / "download.zip",
        {
            "alice_12345_67890_02_qkv_attention.ipynb": b"a",
            "bob_LATE_222_333_02_qkv_attention-1.ipynb": b"b",
            "Carol Smith_4444_assignsubmission_file_/02_qkv_attention.ipynb": b"c",
            "dave/02_qkv_attention.ipynb": b"d",
            "dave/data.csv": b"d2",
            "erin.ipynb": b"e",
            "__MACOSX/._erin.ipynb": b"junk",
            "README for the course.ipynb": b"?",
        },
    )
    got = collect.collect(archive, "02_qkv_attention", tmp_path / "out")
    assert got.kind == "lms"
    assert got.students == {  # Canvas students by their Canvas user id, the name beside it
        "12345": ["02_qkv_attention.ipynb"],
        "222": ["02_qkv_attention-1.ipynb"],
        "carol_smith": ["02_qkv_attention.ipynb"],
        "dave": ["02_qkv_attention.ipynb", "data.csv"],
        "erin": ["erin.ipynb"],
    }
    assert [name for name, _ in got.unattributed] == ["README for the course.ipynb"]
    assert got.ignored == ["__MACOSX/._erin.ipynb"]
    assert got.identities["12345"] == {
        "name": "alice",
        "lms": "canvas",
        "lms_id": "12345",
        "lms_file": "alice_12345_67890_02_qkv_attention.ipynb",
        "late": False,
    }
    assert got.identities["222"]["late"] is True and got.identities["222"]["name"] == "bob"
    assert got.identities["carol_smith"]["lms"] == "moodle"
    assert got.identities["carol_smith"]["lms_id"] == "4444"
    assert got.identities["dave"] == {"name": "dave", "lms": None, "lms_id": None}
    assert (
        tmp_path / "out" / "carol_smith" / "02_qkv_attention" / "02_qkv_attention.ipynb"
    ).read_bytes() == b"c"
    report = json.loads((tmp_path / "out" / ".collect_report.json").read_text())
    assert report["unattributed"][0][0] == "README for the course.ipynb"


def test_moodle_namesakes_are_kept_apart_by_their_participant_id(tmp_path):
    archive = _zip(
        tmp_path / "download.zip",
        {
            "Ada Lovelace_123_assignsubmission_file_/02_qkv_attention.ipynb": b"first",
            "Ada Lovelace_456_assignsubmission_file_/02_qkv_attention.ipynb": b"second",
            "Alan Turing_789_assignsubmission_file_/02_qkv_attention.ipynb": b"third",
        },
    )
    got = collect.collect(archive, "02_qkv_attention", tmp_path / "out")
    assert sorted(got.students) == ["ada_lovelace_123", "ada_lovelace_456", "alan_turing"]
    for student, data in [("ada_lovelace_123", b"first"), ("ada_lovelace_456", b"second")]:
        path = tmp_path / "out" / student / "02_qkv_attention" / "02_qkv_attention.ipynb"
        assert path.read_bytes() == data


def test_an_instructor_pattern_wins(tmp_path):
    folder = tmp_path / "dl"
    folder.mkdir()
    (folder / "s1234567-attempt.ipynb").write_bytes(b"x")
    (folder / "unknown.txt").write_bytes(b"y")
    got = collect.collect(
        folder, "02_qkv_attention", tmp_path / "out", pattern=r"^(?P<student>s\d{7})-"
    )
    assert got.students == {"s1234567": ["s1234567-attempt.ipynb"]}
    assert got.unattributed[0][0] == "unknown.txt"
    with pytest.raises(SystemExit, match="named group"):
        collect.collect(folder, "02_qkv_attention", tmp_path / "o2", pattern=r"s\d+")


@pytest.mark.parametrize(
    "name",
    [
        "../evil.ipynb",
        "/abs/evil.ipynb",
        "a/../../evil.ipynb",
        "C:/evil.ipynb",
        "a\\..\\evil.ipynb",
    ],
)
def test_zip_path_traversal_is_refused(tmp_path, name):
    """The unsafe member alone is skipped and listed; the rest of the class is collected."""
    archive = _zip(tmp_path / "bad.zip", {"alice/ok.ipynb": b"1", name: b"2"})
    got = collect.collect(archive, "02_qkv_attention", tmp_path / "out")
    assert got.students == {"alice": ["ok.ipynb"]}
    assert [n for n, _ in got.not_placed] == [name]
    assert "unsafe path" in got.not_placed[0][1]
    assert not list(tmp_path.rglob("evil.ipynb"))


def test_zip_links_and_big_files_are_skipped_and_bombs_refused(tmp_path, monkeypatch):
    archive = tmp_path / "link.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        info = zipfile.ZipInfo("alice/link.ipynb")
        info.external_attr = 0o120777 << 16
        zf.writestr(info, "/etc/passwd")
        zf.writestr("bob/x.ipynb", "b")
    got = collect.collect(archive, "x", tmp_path / "o1")
    assert got.students == {"bob": ["x.ipynb"]}
    assert got.not_placed == [("alice/link.ipynb", "student alice's file: a link (not unpacked)")]
    big = _zip(tmp_path / "big.zip", {"alice/big.ipynb": b"0" * 5000, "bob/x.ipynb": b"b"})
    monkeypatch.setattr(safe_zip, "MAX_FILE_BYTES", 4096)
    got = collect.collect(big, "x", tmp_path / "o2")
    assert got.students == {"bob": ["x.ipynb"]}
    assert got.not_placed == [
        ("alice/big.ipynb", "student alice's file: larger than 0 MiB (not unpacked)")
    ]
    monkeypatch.setattr(safe_zip, "MAX_FILE_BYTES", 1 << 20)
    monkeypatch.setattr(safe_zip, "MAX_TOTAL_BYTES", 6000)
    two = _zip(tmp_path / "two.zip", {"a/x.ipynb": b"0" * 4000, "b/x.ipynb": b"0" * 4000})
    with pytest.raises(SystemExit, match="unpacked"):
        collect.collect(two, "x", tmp_path / "o3")
    monkeypatch.setattr(safe_zip, "MAX_MEMBERS", 1)
    with pytest.raises(SystemExit, match="members"):
        collect.collect(big, "x", tmp_path / "o4")


def test_the_exchange_gives_each_students_latest_submission(tmp_path):
    inbound = tmp_path / "exchange" / "transformer-lab" / "inbound"
    for folder, data in {
        "alice+02_qkv_attention+2026-11-20 10:00:00.000000 UTC+abc": b"old",
        "alice+02_qkv_attention+2026-11-21 09:00:00.000000 UTC+def": b"new",
        "alice+03_multihead_attention+2026-11-22 09:00:00.000000 UTC+x": b"other",
        "bob+02_qkv_attention+2026-11-21 08:00:00.000000 UTC": b"bob",
        "garbage": b"?",
    }.items():
        (inbound / folder).mkdir(parents=True)
        (inbound / folder / "02_qkv_attention.ipynb").write_bytes(data)
    got = collect.collect(tmp_path / "exchange", "02_qkv_attention", tmp_path / "out")
    assert got.kind == "exchange" and sorted(got.students) == ["alice", "bob"]
    assert (
        tmp_path / "out" / "alice" / "02_qkv_attention" / "02_qkv_attention.ipynb"
    ).read_bytes() == b"new"
    assert got.unattributed == [("garbage", "not <student>+<assignment>+<timestamp>[+<random>]")]


# ----------------------------------------------------------------------------- export


def test_csv_has_one_row_per_record_and_one_column_per_graded_cell(tmp_path, cells):
    records = [
        {**_record(), "score": 2.0, "max_score": 3.0, "flags": ["a", "b"]},
        {
            **_record(student="bob", status="ungradable", reason="empty file"),
            "score": 0.0,
            "max_score": 3.0,
        },
    ]
    out = rec.write_csv(records, tmp_path / "g.csv", {TINY: cells})
    rows = list(csv.reader(io.StringIO(out.read_text())))
    assert rows == [
        [
            "student",
            "assignment",
            "score",
            "max_score",
            "status",
            "reason",
            "flags",
            f"{TINY}/add-test",
            f"{TINY}/mul-test",
        ],
        ["alice", TINY, "2", "3", "graded", "", "a | b", "2", "0"],
        ["bob", TINY, "0", "3", "ungradable", "empty file", "", "2", "0"],
    ]


# ----------------------------------------------------------------------------- sandbox


@needs_namespaces
def test_the_sandbox_hides_protects_and_disconnects(tmp_path):
    secret = tmp_path / "course" / "solutions"
    secret.mkdir(parents=True)
    (secret / "answer.txt").write_text("42")
    job = tmp_path / "run" / "jobs" / "1"
    other = tmp_path / "run" / "jobs" / "2"
    job.mkdir(parents=True)
    other.mkdir(parents=True)
    (other / "theirs.txt").write_text("x")
    script = (
        "import os, socket, sys\n"
        f"print('secret', os.listdir({str(secret)!r}))\n"
        f"print('other', os.path.exists({str(other / 'theirs.txt')!r}))\n"
        "try:\n"
        f"    open({str(tmp_path / 'course' / 'new.txt')!r}, 'w')\n"
        "    print('course writable')\n"
        "except OSError as e:\n"
        "    print('course', e.errno)\n"
        f"open({str(job / 'mine.txt')!r}, 'w').write('ok')\n"
        "s = socket.socket()\n"
        "try:\n"
        "    s.connect(('127.0.0.1', 22)); print('net yes')\n"
        "except OSError as e:\n"
        "    print('net no')\n"
        "os.write(int(os.environ['TRANSFORMER_LAB_RESULT_FD']), b'done')\n"
    )
    result = sandbox.run(
        [sys.executable, "-c", script],
        cwd=job,
        env={"PATH": os.environ["PATH"]},
        limits=sandbox.Limits(wall_seconds=60),
        hide=[secret, tmp_path / "run"],
        readonly=[tmp_path / "course"],
        keep=job,
    )
    assert result.isolated and result.warning is None, result
    assert result.stdout.splitlines() == ["secret []", "other False", "course 30", "net no"], (
        result.stderr
    )
    assert result.record == b"done"
    assert (job / "mine.txt").read_text() == "ok" and (secret / "answer.txt").exists()
    assert not (tmp_path / "course" / "new.txt").exists()


@needs_namespaces
def test_the_wall_clock_cap_kills_the_job_and_its_daemons(tmp_path):
    marker = tmp_path / "job" / "alive"
    (tmp_path / "job").mkdir()
    script = f"(setsid sh -c 'sleep 4; touch {marker}' &) ; sleep 100"
    result = sandbox.run(
        ["sh", "-c", script],
        cwd=tmp_path / "job",
        env={"PATH": os.environ["PATH"]},
        limits=sandbox.Limits(wall_seconds=2),
        keep=tmp_path / "job",
    )
    assert result.timed_out and result.returncode is None
    time.sleep(4)
    assert not marker.exists()


def test_the_memory_cap_applies_with_or_without_namespaces(tmp_path):
    script = "import os\ntry:\n    b = bytearray(3 * 2**30)\n    print('big')\nexcept MemoryError:\n    print('capped')\n"
    result = sandbox.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        limits=sandbox.Limits(memory_bytes=1 << 30, wall_seconds=60),
        keep=tmp_path,
        isolate=False,
    )
    assert result.stdout.strip() == "capped"
    assert result.warning.startswith("graded without a sandbox (--no-sandbox)")


# ----------------------------------------------------------------------------- whole runs


def _submissions(root: Path, tiny_course, answers: dict[str, tuple[str, str] | bytes]) -> Path:
    for student, answer in answers.items():
        folder = root / student / TINY
        folder.mkdir(parents=True, exist_ok=True)
        data = (
            answer
            if isinstance(answer, bytes)
            else nbformat.writes(_student_nb(tiny_course, *answer)).encode()
        )
        (folder / NAME).write_bytes(data)
    return root


ANSWERS = {
    "amy": ("return a + b", "return a * b"),
    "ben": ("return a - b", "return a * b"),  # add wrong: 1/3
    "cat": ("return a + b", "return a + b"),  # mul wrong: 2/3
    "dan": b"{broken",
}
EXPECTED = {"amy": 3.0, "ben": 1.0, "cat": 2.0, "dan": 0.0}


def _scores(records):
    return {r["student"]: r["score"] for r in records}


@pytest.mark.slow
def test_a_class_is_graded_then_skipped_then_forced(tiny_course, tmp_path):
    subs = _submissions(tmp_path / "subs", tiny_course, ANSWERS)
    out = tmp_path / "grades.csv"
    records = grade.grade(tiny_course, TINY, subs, out=out, jobs=2, quiet=True)
    assert _scores(records) == EXPECTED
    by = {r["student"]: r for r in records}
    assert by["dan"]["status"] == "ungradable" and "not valid JSON" in by["dan"]["reason"]
    assert by["cat"]["cells"]["mul-test"]["passed"] is False
    assert "AssertionError" in by["cat"]["cells"]["mul-test"]["output"]
    assert by["amy"]["flags"] == [], by["amy"]["flags"]
    first = out.read_bytes()
    # a re-run grades nothing: same CSV, same records
    again = grade.grade(tiny_course, TINY, subs, out=out, jobs=2, quiet=True)
    assert again == records and out.read_bytes() == first
    # a changed submission is regraded; --force regrades everyone
    _submissions(subs, tiny_course, {"ben": ("return a + b", "return a * b")})
    again = grade.grade(tiny_course, TINY, subs, out=out, jobs=2, quiet=True)
    assert _scores(again) == {**EXPECTED, "ben": 3.0}
    assert {r["student"] for r in again if r["graded_at"] != by[r["student"]]["graded_at"]} <= {
        "ben"
    }
    forced = grade.grade(
        tiny_course,
        TINY,
        subs,
        out=out,
        jobs=1,
        force=True,
        quiet=True,
        students=["amy"],
    )
    assert _scores(forced)["amy"] == 3.0
    rows = list(csv.DictReader(out.open()))
    assert sorted(r["student"] for r in rows) == ["amy", "ben", "cat", "dan"]
    # the course gradebook holds the same scores, for nbgrader's own tools
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{tiny_course / 'autograder' / 'work' / 'gradebook.db'}") as gb:
        assert {s.student.id: s.score for s in gb.find_assignment(TINY).submissions} == {
            **EXPECTED,
            "ben": 3.0,
        }
    # export covers every record of the course
    exported = list(csv.DictReader(export.export(tiny_course, tmp_path / "all.csv").open()))
    assert {r["student"]: float(r["score"]) for r in exported} == {**EXPECTED, "ben": 3.0}


@pytest.mark.slow
def test_a_run_killed_half_way_resumes(tiny_course, tmp_path):
    course = tmp_path / "course"
    shutil.copytree(tiny_course, course, ignore=shutil.ignore_patterns("results", "autograded"))
    names = [f"s{i}" for i in range(4)]
    subs = _submissions(tmp_path / "subs", tiny_course, {n: ANSWERS["amy"] for n in names})
    out = tmp_path / "grades.csv"
    code = (
        "import sys; from pathlib import Path; from transformer_lab_grader.grade import grade; "
        f"grade(Path({str(course)!r}), {TINY!r}, Path({str(subs)!r}), out=Path({str(out)!r}), jobs=1)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    results = course / "autograder" / "work" / "results" / TINY
    deadline = time.monotonic() + 300
    while not list(results.glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = sorted(p.stem for p in results.glob("*.json"))
    assert 1 <= len(done) < len(names), done
    records = grade.grade(course, TINY, subs, out=out, jobs=2, quiet=True)
    assert _scores(records) == dict.fromkeys(names, 3.0)
    rows = list(csv.DictReader(out.open()))
    assert sorted(r["student"] for r in rows) == names
    assert not list(results.glob(".*.tmp"))


@pytest.mark.slow
def test_an_lms_zip_is_collected_and_graded_via_the_cli(tiny_course, tmp_path):
    course = tmp_path / "course"
    shutil.copytree(tiny_course, course, ignore=shutil.ignore_patterns("results", "autograded"))
    good = nbformat.writes(_student_nb(tiny_course)).encode()
    archive = _zip(
        tmp_path / "canvas.zip",
        {
            "zoe_11_22_99_tiny.ipynb": good,
            "yan_LATE_33_44_99_tiny-1.ipynb": good,
            "mystery.ipynb.bak": b"?",
        },
    )
    out = tmp_path / "grades.csv"
    argv = [
        "--course-dir",
        str(course),
        "grade",
        TINY,
        str(archive),
        "--out",
        str(out),
        "--jobs",
        "2",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-m", "transformer_lab_grader.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
    )
    # the others are graded, but a file placed nowhere fails the command, as in `collect`
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.startswith(f"course: {course}")
    assert "NOT ATTRIBUTED: mystery.ipynb.bak" in result.stdout
    assert "could not be attributed" in result.stderr
    rows = {r["student"]: r for r in csv.DictReader(out.open())}
    assert sorted(rows) == ["11", "33"]  # Canvas user ids
    assert rows["33"]["reason"].startswith(f"renamed 99_tiny-1.ipynb to {NAME}")
    assert rows["11"]["score"] == "3" and rows["11"]["status"] == "graded"


# ----------------------------------------------------------------------------------------------
# Which course a command works on.


def _bare_course(folder: Path) -> Path:
    """A course folder with its nbgrader configuration and one result record (no lessons)."""
    (folder / "autograder").mkdir(parents=True)
    shutil.copy(REPO / "autograder" / "nbgrader_config.py", folder / "autograder")
    record = {
        "student": "ann",
        "assignment": TINY,
        "status": "graded",
        "reason": None,
        "score": 3.0,
        "max_score": 3.0,
        "flags": [],
        "cells": {"t1": {"score": 3.0, "max_score": 3.0, "passed": True}},
    }
    rec.write_record(folder, record)
    return folder.resolve()


def _check_course_rules(find, tmp_path: Path) -> None:
    course = _bare_course(tmp_path / "term2")
    inside = course / "exercises" / TINY
    inside.mkdir(parents=True)
    assert find(cwd=course) == course
    assert find(cwd=inside) == course  # the nearest course folder above
    assert find(course, cwd=tmp_path) == course  # --course-dir wins
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(SystemExit, match="no course in .*elsewhere or above it"):
        find(cwd=elsewhere)
    with pytest.raises(SystemExit, match="not a course folder"):
        find(elsewhere)


def test_the_course_is_the_folder_the_command_runs_in(tmp_path):
    _check_course_rules(course_root, tmp_path)


def test_the_course_rules_fail_the_old_rule(tmp_path):
    """Mutant: the course is wherever the package was installed from (the rule before)."""

    def installed_from(path=None, cwd=None):
        return Path(path).resolve() if path is not None else PACKAGE_REPO

    with pytest.raises((AssertionError, pytest.fail.Exception)):
        _check_course_rules(installed_from, tmp_path)


def test_a_command_names_its_course_first_and_works_on_it(tmp_path):
    """`export` run inside a copy of the course exports the copy's records, not those of the
    checkout the package was installed from, and says so in its first line."""
    course = _bare_course(tmp_path / "term2")
    inside = course / "exercises"
    inside.mkdir()
    out = tmp_path / "grades.csv"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "transformer_lab_grader.cli", "export", "--out", str(out)]
    result = subprocess.run(command, cwd=inside, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"course: {course}"
    assert [r["student"] for r in csv.DictReader(out.open())] == ["ann"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env)
    assert result.returncode != 0
    assert "no course in" in result.stderr and "--course-dir" in result.stderr
