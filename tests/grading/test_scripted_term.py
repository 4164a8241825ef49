"""Issue 28's acceptance test: a whole term on the tiny lesson, graded for real, run as
INSTRUCTORS.md tells an instructor to run it, command by command and in its order.

The class: seven students through nbgrader's exchange (one right, one half wrong, one who
hands in the untouched notebook and resubmits after a `--force` regrade, one who deleted a test
cell, one late within an extension, one late past the due date who copied another's file, one
who renamed the file), two Canvas students of the same name in an LMS zip (one of them late),
and a non-submitter on the roster. The written answer is graded by hand (`grade-manual`). Every
notebook is made from the released tiny notebook and graded by `grade` (each in its sandbox,
its tests in the judge), each once; the old folder graded again at the end is refused for the
resubmitted student and skipped for the others. The term ends with the exact long and wide
exports, the report's summary and the feedback zip.

`TRANSFORMER_LAB_SHOW_TERM=1 pytest -s tests/grading/test_scripted_term.py` prints the final
exports (for the issue's closing note).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
from test_instructor_grade import NAME, REPO, TINY, _student_nb, needs_namespaces, tiny_source
from test_manual import WHY, _formgrader, with_written_answer

from transformer_lab_grader import cli, gradebook
from transformer_lab_grader.course import exchange_root

pytestmark = [pytest.mark.slow, needs_namespaces]

HIDDEN = "assert add(-1, 1) == 0"  # the tiny lesson's hidden test: no page may show it
RIGHT = ("return a + b", "return a * b")
TERM_TOML = f"""
[due]
{TINY} = "2026-11-20T23:59:00+00:00"

[extensions.{TINY}]
erin = "2026-11-24T23:59:00+00:00"

[late]
percent_per_day = 10
cap_percent = 50

[roster]
file = "roster.csv"
missing = "zero"
"""
ROSTER = (
    "student,name\nalice,Alice Ames\nbob,Bob Burr\ncarol,Carol Cox\ndave,Dave Dunn\n"
    'erin,Erin Eck\nfrank,Frank Fox\ngina,Gina Gale\n111,"Smith, John"\n222,"Smith, John"\n'
    "hank,Hank Hill\n"
)


ROSTER_IDS = ["alice", "bob", "carol", "dave", "erin", "frank", "gina", "111", "222", "hank"]


def _notebook(course: Path, answer: tuple[str, str] | None, drop: str | None = None) -> bytes:
    """The released notebook, the student's code filled in (None: untouched), a cell dropped."""
    if answer is None:
        return (course / "exercises" / TINY / NAME).read_bytes()
    nb = _student_nb(course, *answer)
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != drop]
    return nbformat.writes(nb).encode()


def _submit(course: Path, student: str, files: dict[str, bytes], stamp: str) -> None:
    """What `nbgrader submit` leaves in the exchange's inbound folder."""
    inbound = exchange_root(course) / "transformer-lab" / "inbound"
    folder = inbound / f"{student}+{TINY}+2026-11-{stamp}.000000 UTC+{student}-x"
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / "timestamp.txt").write_text(f"2026-11-{stamp}.000000 UTC")
    (folder / "submission_secret.txt").write_text(f"secret-of-{student}")


def _canvas_download(course: Path, path: Path) -> Path:
    """Canvas's Download Submissions zip: two students named John Smith, the second late."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, answer, when in [
            ("smithjohn_111_901", ("return a + b", "return a ** b"), (2026, 11, 20, 12, 0, 0)),
            ("smithjohn_LATE_222_902", ("return b + a", "return a * b"), (2026, 11, 21, 8, 0, 0)),
        ]:
            zf.writestr(zipfile.ZipInfo(f"{name}_{NAME}", when), _notebook(course, answer))
    return path


TIMES: list[tuple[str, float]] = []  # (command, wall seconds): shown with the exports


def _run(capsys, *argv: str, code: int = 0) -> str:
    """`transformer-lab ARGV` in the course folder; its output."""
    start = time.monotonic()
    assert cli.main(list(argv)) == code, capsys.readouterr()
    TIMES.append((" ".join(argv), time.monotonic() - start))
    out = capsys.readouterr().out
    assert out.startswith("course: ")
    return out


def _new_course(root: Path) -> Path:
    """The tiny lesson with its written answer (graded by hand), not yet released: the term's
    `release` generates it (one nbgrader run for the whole term)."""
    (root / "solutions" / TINY).mkdir(parents=True)
    nbformat.write(with_written_answer(tiny_source()), root / "solutions" / TINY / NAME)
    (root / "exercises").mkdir()
    (root / "autograder").mkdir()
    for path in (REPO / "autograder").glob("*.py"):
        shutil.copy(path, root / "autograder" / path.name)
    return root.resolve()


def _play_the_term(course: Path, tmp_path: Path, capsys) -> dict:
    # §7: the term's settings and the roster, created before the first grading
    (course / "autograder" / "work").mkdir(parents=True, exist_ok=True)
    (course / "autograder" / "work" / "term.toml").write_text(TERM_TOML)
    (course / "autograder" / "work" / "roster.csv").write_text(ROSTER)
    grade = ["grade", TINY, "submissions/99", "--out", "grades-99.csv"]

    # §2-§3: release through the configured exchange (the course's own here)
    _run(capsys, "release", TINY, "--exchange")
    assert (exchange_root(course) / "transformer-lab" / "outbound" / TINY / NAME).is_file()
    copied = _notebook(course, RIGHT)
    _submit(course, "alice", {NAME: copied}, "19 10:00:00")
    _submit(
        course, "bob", {NAME: _notebook(course, ("return a - b", "return a * b"))}, "19 11:00:00"
    )
    _submit(course, "carol", {NAME: _notebook(course, None)}, "19 12:00:00")
    _submit(course, "dave", {NAME: _notebook(course, RIGHT, drop="mul-test")}, "20 09:00:00")
    erin = _notebook(course, ("return b + a", "return b * a"))
    _submit(course, "erin", {NAME: erin}, "22 12:00:00")  # late, within her extension
    _submit(course, "frank", {NAME: copied}, "22 10:00:00")  # alice's file, 2 days late
    renamed = _notebook(course, ("return a + b", "return a + b"))
    _submit(course, "gina", {"tiny-final.ipynb": renamed}, "20 23:00:00")

    # §4-§5: collect, grade; the Canvas zip graded directly
    out = _run(capsys, "collect", "exchange", TINY, "--out", "submissions/99")
    assert "collected 7 students (exchange)" in out
    out = _run(capsys, *grade, "--jobs", "2")
    assert "7 students in grades-99.csv (0 ungradable)" in out
    out = _run(capsys, "grade", TINY, str(_canvas_download(course, tmp_path / "canvas.zip")),
               "--out", "grades-99.csv", "--jobs", "2")  # fmt: skip
    assert "collected 2 students (lms)" in out and "9 students in grades-99.csv" in out

    # §5, written answers graded by hand: in formgrader (alice), and from a CSV (222)
    with gradebook._gradebook(course) as gb:  # grading leaves the written answer to a person
        assert gb.find_grade(WHY, TINY, TINY, "alice").manual_score is None
    _formgrader(course, "alice", 2.0, "Clear.")
    Path("grades-99-manual.csv").write_text(
        f'student,grade_id,score,comment\n222,{WHY},1,"Say why waiting is slow."\n'
    )
    _run(capsys, "grade-manual", TINY, "grades-99-manual.csv")

    # §5, regrade a few with --force (a test was fixed): formgrader's score stays
    out = _run(capsys, *grade, "--students", "alice", "carol", "--force")
    assert "alice: graded 3/5" in out and "carol: graded 0/5" in out
    with gradebook._gradebook(course) as gb:
        assert gb.find_grade(WHY, TINY, TINY, "alice").manual_score == 2.0
        assert gb.find_comment(WHY, TINY, TINY, "alice").manual_comment == "Clear."

    # carol resubmits after that regrade; §5 "New submissions": the same command, a new folder
    _submit(course, "carol", {NAME: _notebook(course, ("return a + b", "return b * a"))},
            "20 20:00:00")  # fmt: skip
    out = _run(capsys, "collect", "exchange", TINY, "--out", "submissions/99-resubmitted")
    out = _run(capsys, "grade", TINY, "submissions/99-resubmitted", "--out", "grades-99.csv",
               "--jobs", "2")  # fmt: skip
    assert "carol: graded 3/5" in out and "bob: already graded (1/5), skipped" in out

    # the old folder again (as `make grade` on an old collected folder): the newer one stays
    out = _run(capsys, *grade, "--jobs", "2")
    assert (
        "carol: this submission (2026-11-19T12:00:00+00:00) is older than the one on record "
        "(2026-11-20T20:00:00+00:00), kept the newer" in out
    )

    # §6-§8: feedback (+ the Canvas zip), report, export (long and wide)
    out = _run(capsys, "feedback", TINY, "--lms-zip", "feedback-99.zip")
    _run(capsys, "report", TINY)
    _run(capsys, "export", "--out", "grades.csv")
    _run(capsys, "export", "--wide", "--out", "grades-wide.csv")
    pages = sorted((course / "autograder" / "work" / "feedback").glob(f"*/{TINY}/*.html"))
    with zipfile.ZipFile("feedback-99.zip") as zf:
        zipped = {name: zf.read(name).decode() for name in sorted(zf.namelist())}
    summary = course / "autograder" / "work" / "reports" / TINY / "summary.json"
    return {
        "long": Path("grades.csv").read_text(),
        "wide": Path("grades-wide.csv").read_text(),
        "report": json.loads(summary.read_text()),
        "pages": {p.parent.parent.name: p.read_text() for p in pages},
        "zip": zipped,
        "feedback": out,
    }


T = TINY
D = "2026-11-{}:00+00:00".format
DUE = D("20T23:59")
LONG = [
    ["student", "assignment", "score", "max_score", "status", "reason", "flags",
     f"{T}/add-test", f"{T}/mul-test", f"{T}/why-answer",
     "submitted_at", "due", "days_late", "penalty_percent", "penalised_score"],
    ["111", T, "2", "5", "graded", "", "", "2", "0", "0", D("20T12:00"), DUE, "0", "0", "2"],
    ["222", T, "4", "5", "graded", "", "", "2", "1", "1", D("21T08:00"), DUE, "1", "10", "3.6"],
    ["alice", T, "5", "5", "graded", "", "", "2", "1", "2", D("19T10:00"), DUE, "0", "0", "5"],
    ["bob", T, "1", "5", "graded", "", "", "0", "1", "0", D("19T11:00"), DUE, "0", "0", "1"],
    ["carol", T, "3", "5", "graded", "", "", "2", "1", "0", D("20T20:00"), DUE, "0", "0", "3"],
    ["dave", T, "3", "5", "graded", "test cell mul-test was missing (restored from the release)",
     "", "2", "1", "0", D("20T09:00"), DUE, "0", "0", "3"],
    ["erin", T, "3", "5", "graded", "", "", "2", "1", "0",
     D("22T12:00"), D("24T23:59"), "0", "0", "3"],
    ["frank", T, "3", "5", "graded", "", "", "2", "1", "0", D("22T10:00"), DUE, "2", "20", "2.4"],
    ["gina", T, "2", "5", "graded", f"renamed tiny-final.ipynb to {NAME}", "", "2", "0", "0",
     D("20T23:00"), DUE, "0", "0", "2"],
    ["hank", T, "0", "5", "missing", "no submission", "", "", "", "", "", DUE, "", "", "0"],
]  # fmt: skip
WIDE = [
    ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", T],
    ["Points Possible", "", "", "", "", "5"],
    ["Alice Ames", "", "", "alice", "", "5"],
    ["Bob Burr", "", "", "bob", "", "1"],
    ["Carol Cox", "", "", "carol", "", "3"],
    ["Dave Dunn", "", "", "dave", "", "3"],
    ["Erin Eck", "", "", "erin", "", "3"],
    ["Frank Fox", "", "", "frank", "", "2.4"],
    ["Gina Gale", "", "", "gina", "", "2"],
    ["Hank Hill", "", "", "hank", "", "0"],
    ["Smith, John", "111", "", "", "", "2"],
    ["Smith, John", "222", "", "", "", "3.6"],
]  # fmt: skip


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_the_scripted_term(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TRANSFORMER_LAB_EXCHANGE", raising=False)
    course = _new_course(tmp_path / "course")
    monkeypatch.chdir(course)  # INSTRUCTORS.md: every command from the course folder
    term = _play_the_term(course, tmp_path, capsys)
    if os.environ.get("TRANSFORMER_LAB_SHOW_TERM"):
        with capsys.disabled():
            print("\n--- grades.csv\n" + term["long"] + "--- grades-wide.csv\n" + term["wide"])
            print("\n".join(f"{seconds:6.1f} s  {command}" for command, seconds in TIMES))
    assert _rows(term["long"]) == LONG
    assert _rows(term["wide"]) == WIDE
    report = term["report"]
    assert report["scores"] == {
        "111": 2.0, "222": 4.0, "alice": 5.0, "bob": 1.0, "carol": 3.0, "dave": 3.0,
        "erin": 3.0, "frank": 3.0, "gina": 2.0,
    }  # fmt: skip
    changes = {
        c["student"]: (c["before"], c["after"], c["why"], c["gradings"]) for c in report["changes"]
    }
    assert changes == {
        "alice": (3.0, 5.0, "--force", 2),  # before: the autograded record; now with the hand's 2
        "carol": (0.0, 3.0, "new submission", 3),
    }
    assert report["roster"]["missing"] == ["hank"]
    assert report["roster"]["enrolled"] == 10
    assert report["identical"] == [["alice", "frank"]]  # carol's untouched file is no copy
    assert report["stale"] == {} and report["problems"] == []
    assert sorted(term["zip"]) == [
        f"smithjohn_111_901_{TINY}_feedback.html",
        f"smithjohn_LATE_222_902_{TINY}_feedback.html",
    ]
    assert (
        "not in the zip: alice: no Canvas file name on record (source: exchange)"
        in (term["feedback"])
    )
    assert sorted(term["pages"]) == ["111", "222", *sorted(ROSTER_IDS[:7])]
    for text in [*term["pages"].values(), *term["zip"].values()]:
        assert HIDDEN not in text
    assert "graded by hand: Clear." in term["pages"]["alice"]
