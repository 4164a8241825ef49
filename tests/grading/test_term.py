"""An instructor's term around the grader (issue 28): who a student is, feedback back to students,
and the gaps between the commands. No notebook is graded here: records and collected folders
are made directly, so each test takes a second or two (the nbgrader ones: a few seconds).

Each check that today's behaviour failed keeps that behaviour as a mutant that must fail it.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import zipfile
from pathlib import Path

import nbformat
import pytest
from test_instructor_grade import NAME, TINY, _student_nb, _zip, copy_of, tiny_course  # noqa: F401

from transformer_lab.notebook_setup import SETUP_ID
from transformer_lab_grader import (
    collect,
    commands,
    export,
    feedback,
    identities,
    lms_feedback,
    maths_html,
    nbgrader_app,
)
from transformer_lab_grader import records as rec
from transformer_lab_grader.course import exchange_root
from transformer_lab_grader.submission import submission_sha256

REPO = Path(__file__).resolve().parents[2]
LESSON = "02_qkv_attention"


@pytest.fixture
def course(tiny_course, tmp_path) -> Path:  # noqa: F811
    """A fresh copy of the tiny course (records and registers of its own)."""
    return copy_of(tiny_course, tmp_path)


# ----------------------------------------------------------------------------------------------
# 1. Identity: the LMS's stable id, the name beside it, never two students in one.

NAMESAKES = {
    "smithjohn_111_901_02_qkv_attention.ipynb": b"first john",
    "smithjohn_222_902_02_qkv_attention.ipynb": b"second john",
    "smithjohn_LATE_333_903_02_qkv_attention-1.ipynb": b"third john, late",
}


def _namesakes_kept_apart(tmp_path: Path) -> None:
    got = collect.collect(_zip(tmp_path / "canvas.zip", NAMESAKES), LESSON, tmp_path / "out")
    assert sorted(got.students) == ["111", "222", "333"]
    for student, data in [("111", b"first john"), ("222", b"second john")]:
        path = tmp_path / "out" / student / LESSON / f"{LESSON}.ipynb"
        assert path.read_bytes() == data
    assert {s: who["name"] for s, who in got.identities.items()} == dict.fromkeys(
        ["111", "222", "333"], "smithjohn"
    )
    assert got.identities["333"]["late"] is True and got.identities["111"]["late"] is False
    assert got.identities["333"]["lms_file"] == "smithjohn_LATE_333_903_02_qkv_attention-1.ipynb"
    assert not got.problems


def test_two_canvas_students_of_the_same_name_stay_apart(tmp_path):
    _namesakes_kept_apart(tmp_path)


def test_keying_canvas_students_by_name_fails_the_namesake_check(tmp_path, monkeypatch):
    """Mutant: today's rule, a Canvas student is the name part of the file name."""
    real = collect.attribute

    def by_name(*args, **kwargs):
        found = real(*args, **kwargs)
        if isinstance(found, tuple) and found[2]["lms"] == "canvas":
            return found[2]["name"], found[1], found[2]
        return found

    monkeypatch.setattr(collect, "attribute", by_name)
    with pytest.raises(AssertionError):
        _namesakes_kept_apart(tmp_path)


def test_an_id_claimed_by_two_identities_is_placed_nowhere_and_named(tmp_path):
    archive = _zip(
        tmp_path / "mixed.zip",
        {
            "Ada Lovelace_123_assignsubmission_file_/02_qkv_attention.ipynb": b"moodle ada",
            "ada_lovelace/02_qkv_attention.ipynb": b"folder ada",
            "smithjohn_111_901_02_qkv_attention.ipynb": b"canvas 111",
            "111/02_qkv_attention.ipynb": b"a folder named 111",
            "bob/02_qkv_attention.ipynb": b"bob",
        },
    )
    got = collect.collect(archive, LESSON, tmp_path / "out")
    assert sorted(got.students) == ["bob"]
    named = dict(got.ambiguous)
    assert sorted(named) == [
        "111/02_qkv_attention.ipynb",
        "Ada Lovelace_123_assignsubmission_file_/02_qkv_attention.ipynb",
        "ada_lovelace/02_qkv_attention.ipynb",
        "smithjohn_111_901_02_qkv_attention.ipynb",
    ]
    assert (
        "also claimed by ada_lovelace/02_qkv_attention.ipynb"
        in named["Ada Lovelace_123_assignsubmission_file_/02_qkv_attention.ipynb"]
    )
    assert not (tmp_path / "out" / "ada_lovelace").exists()
    assert "AMBIGUOUS: 111/02_qkv_attention.ipynb" in got.summary()
    report = collect.read_report(tmp_path / "out")
    assert sorted(name for name, _ in report["ambiguous"]) == sorted(named)
    assert report["identities"]["bob"]["lms"] is None


def test_the_exchange_keeps_the_submitted_at_time(tmp_path):
    inbound = tmp_path / "exchange" / "transformer-lab" / "inbound"
    folder = inbound / "alice+02_qkv_attention+2026-11-21 09:00:00.000000 UTC+def"
    folder.mkdir(parents=True)
    (folder / "02_qkv_attention.ipynb").write_bytes(b"x")
    got = collect.collect(tmp_path / "exchange", LESSON, tmp_path / "out")
    assert got.identities["alice"]["lms"] == "exchange"
    assert got.identities["alice"]["submitted_at"] == "2026-11-21T09:00:00+00:00"


def _exchange_copies(course: Path, tmp_path: Path) -> tuple[dict[str, str], list[str]]:
    """Three students through the exchange: two hand in the same notebook, one the untouched
    release. Their digests, and the notes grading's intake makes for one of them."""
    from transformer_lab_grader.notebook_format import released_notebooks
    from transformer_lab_grader.submission import prepare_submission

    inbound = tmp_path / "exchange" / "transformer-lab" / "inbound"
    same = nbformat.writes(_student_nb(course)).encode()
    released = (course / "exercises" / TINY / NAME).read_bytes()
    for student, data, hour in [("amy", same, 9), ("ben", same, 10), ("cat", released, 11)]:
        stamp = f"2026-11-21 {hour:02d}:00:00.000000 UTC"
        folder = inbound / f"{student}+{TINY}+{stamp}+r"
        folder.mkdir(parents=True)
        (folder / NAME).write_bytes(data)
        (folder / "timestamp.txt").write_text(stamp)
        (folder / "submission_secret.txt").write_text(f"secret-of-{student}")
    collect.collect(tmp_path / "exchange", TINY, tmp_path / "out")
    digests = {s: submission_sha256(tmp_path / "out" / s / TINY) for s in ("amy", "ben", "cat")}
    digests["release"] = submission_sha256(course / "exercises" / TINY)
    notes, _ = prepare_submission(
        tmp_path / "out" / "amy" / TINY, released_notebooks(course, TINY), tmp_path / "prepared"
    )
    return digests, notes


def test_the_exchange_files_are_not_the_students_work(course, tmp_path):
    digests, notes = _exchange_copies(course, tmp_path)
    assert digests["amy"] == digests["ben"]  # the report lists them as identical
    assert digests["cat"] == digests["release"]  # the untouched release, not a copy
    assert notes == []  # timestamp.txt and submission_secret.txt are no "ignored extra files"


def test_digesting_the_exchange_files_fails_the_check(course, tmp_path, monkeypatch):
    """Mutant: the exchange's timestamp and secret digested as the student's files (before)."""
    from transformer_lab_grader import submission

    monkeypatch.setattr(submission, "exchange_bookkeeping", lambda folder: set())
    with pytest.raises(AssertionError):
        test_the_exchange_files_are_not_the_students_work(course, tmp_path)


def _cli(course: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    import sys

    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "transformer_lab_grader.cli", "--course-dir", str(course), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
    )


def test_collect_names_its_course_defaults_to_the_ignored_folder_and_fails_when_ambiguous(
    course, tmp_path
):
    archive = _zip(
        tmp_path / "dl.zip",
        {
            "smithjohn_111_901_99_tiny.ipynb": b"a",
            "111/99_tiny.ipynb": b"b",
            "zoe_5_6_99_tiny.ipynb": b"c",
        },
    )
    result = _cli(course, "collect", str(archive), TINY)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == f"course: {course}"
    assert "AMBIGUOUS: 111/99_tiny.ipynb" in result.stdout
    placed = course / "autograder" / "work" / "collected" / TINY / "5" / TINY / "99_tiny.ipynb"
    assert placed.read_bytes() == b"c"


def _graded_record(course: Path, student: str, score: float, **extra) -> dict:
    cells = {"add-test": (2.0, score >= 2), "mul-test": (1.0, score in (1.0, 3.0))}
    record = {
        "student": student,
        "assignment": TINY,
        "status": "graded",
        "reason": None,
        "score": score,
        "max_score": 3.0,
        "flags": [],
        "graded_at": "2026-11-22T10:00:00+00:00",
        "lesson_sha256": rec.lesson_digest(course, TINY),
        "cells": {
            gid: {"score": points if ok else 0.0, "max_score": points, "passed": ok}
            for gid, (points, ok) in cells.items()
        },
        **extra,
    }
    rec.write_record(course, record)
    return record


def _layout(root: Path, students: dict[str, bytes]) -> Path:
    for student, data in students.items():
        (root / student / TINY).mkdir(parents=True, exist_ok=True)
        (root / student / TINY / NAME).write_bytes(data)
    return root


def _skip_all(course: Path, subs: Path) -> None:
    """Records for every student of `subs` with their current digest: grade skips them all."""
    for folder in sorted(subs.iterdir()):
        if folder.is_dir():
            _graded_record(
                course, folder.name, 3.0, submission_sha256=submission_sha256(folder / TINY)
            )


def _grade(course: Path, subs: Path, out: Path, force: bool = False) -> int:
    options = dict(
        out=out,
        jobs=1,
        force=force,
        students=None,
        memory_gib=4.0,
        wall_seconds=60.0,
        cell_timeout=None,
        isolate=False,
    )
    return commands.grade(course, TINY, subs, **options)


def test_grade_fails_on_a_folder_whose_collect_left_files_unplaced(course, tmp_path, capsys):
    subs = _layout(tmp_path / "subs", {"amy": nbformat.writes(_student_nb(course)).encode()})
    _skip_all(course, subs)
    assert _grade(course, subs, tmp_path / "g.csv") == 0
    (subs / collect.REPORT).write_text(
        json.dumps({"ambiguous": [["111/99_tiny.ipynb", "student id '111' is also claimed"]]})
    )
    assert _grade(course, subs, tmp_path / "g.csv") == 1
    out = capsys.readouterr()
    assert "NOT PLACED by collect: 111/99_tiny.ipynb" in out.out
    assert "could not be attributed" in out.err


# ----------------------------------------------------------------------------------------------
# A lesson that changed after grading: which records are stale.


def test_a_changed_lesson_makes_its_records_stale_and_grade_says_which(course, tmp_path, capsys):
    subs = _layout(tmp_path / "subs", {"amy": b"{}", "ben": b"{ }"})
    _skip_all(course, subs)
    assert rec.stale_records(course, TINY, rec.load_records(course, TINY)) == {}
    # the points of a test change, and the lesson is released again
    source = course / "solutions" / TINY / NAME
    nb = nbformat.read(source, as_version=4)
    nb.cells[4].metadata["nbgrader"]["points"] = 2
    nbformat.write(nb, source)
    nbgrader_app.generate(course, [TINY], quiet=True)
    stale = rec.stale_records(course, TINY, rec.load_records(course, TINY))
    assert sorted(stale) == ["amy", "ben"]
    # a record from before the digest was kept: judged by its points
    old = rec.load_records(course, TINY)[0]
    old.pop("lesson_sha256")
    assert rec.stale_records(course, TINY, [old]) == {
        "amy": "graded out of 3, the lesson now has 4"
    }
    assert _grade(course, subs, tmp_path / "g.csv") == 0
    printed = capsys.readouterr().out
    assert "already graded" in printed
    assert "warning: 2 records were graded against another version of 99_tiny" in printed
    assert "stale: amy: the lesson's solution, tests or points changed since" in printed
    from transformer_lab_grader.report import build_report

    build_report(course, TINY, tmp_path / "report")  # the class report lists them too
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["stale"] == dict.fromkeys(
        ["amy", "ben"], "the lesson's solution, tests or points changed since"
    )
    assert "Stale records" in (tmp_path / "report" / "report.md").read_text()


def test_an_explanation_changed_in_the_lesson_leaves_its_records_fresh(course):
    before = rec.lesson_digest(course, TINY)
    source = course / "solutions" / TINY / NAME
    nb = nbformat.read(source, as_version=4)
    nb.cells[0].source += "\n\nA clearer explanation."
    nbformat.write(nb, source)
    assert rec.lesson_digest(course, TINY) == before
    nb.cells[1].source = nb.cells[1].source.replace("a + b", "b + a")  # the solution
    nbformat.write(nb, source)
    assert rec.lesson_digest(course, TINY) != before


# ----------------------------------------------------------------------------------------------
# 2. Feedback back to students: the exchange, and Canvas's bulk upload.


def test_the_exchange_is_set_in_one_place_with_a_course_local_default(course, monkeypatch):
    monkeypatch.delenv("TRANSFORMER_LAB_EXCHANGE", raising=False)
    local = course / "autograder" / "work" / "exchange"
    assert exchange_root(course) == local and local.is_dir()
    result = nbgrader_app.run_nbgrader(course, "--help-all", check=False)  # loads the config
    assert result.returncode == 0
    code = (
        "from traitlets.config.loader import PyFileConfigLoader as L; "
        "print(L('nbgrader_config.py', path='.').load_config().Exchange.root)"
    )
    import sys

    shown = subprocess.run(
        [sys.executable, "-c", code], cwd=course / "autograder", capture_output=True, text=True
    )
    assert shown.stdout.strip() == str(local), shown.stderr
    monkeypatch.setenv("TRANSFORMER_LAB_EXCHANGE", str(course / "hub-exchange"))
    assert exchange_root(course) == course / "hub-exchange"


def _exchange_class(course: Path, tmp_path: Path) -> dict[str, str]:
    """Two students submit through the exchange; collected and registered as grade does."""
    inbound = exchange_root(course) / "transformer-lab" / "inbound"
    secrets = {}
    for student, stamp in [
        ("dave", "2026-11-21 09:00:00.000000 UTC"),
        ("erin", "2026-11-21 10:00:00.000000 UTC"),
    ]:
        folder = inbound / f"{student}+{TINY}+{stamp}+x1"
        folder.mkdir(parents=True)
        nbformat.write(_student_nb(course), folder / NAME)
        (folder / "timestamp.txt").write_text(stamp)
        secrets[student] = f"secret-of-{student}"
        (folder / "submission_secret.txt").write_text(secrets[student])
    got = collect.collect(exchange_root(course), TINY, tmp_path / "collected")
    found = {s: tmp_path / "collected" / s / TINY for s in got.students}
    identities.keep(course, TINY, identities.read(tmp_path / "collected", found))
    for student in found:
        _graded_record(course, student, 3.0)
    return secrets


def _released_pages(course: Path) -> list[Path]:
    return sorted((exchange_root(course) / "transformer-lab" / "feedback").glob("*.html"))


@pytest.mark.slow
def test_release_feedback_returns_each_page_under_the_students_own_secret(
    course, tmp_path, monkeypatch
):
    monkeypatch.delenv("TRANSFORMER_LAB_EXCHANGE", raising=False)
    secrets = _exchange_class(course, tmp_path)
    pages = feedback.feedback(course, TINY)
    assert [p.parent.parent.name for p in pages] == ["dave", "erin"]
    stamp = (pages[0].parent / "timestamp.txt").read_text()
    assert stamp == "2026-11-21 09:00:00.000000 UTC"
    nbgrader_app.run_nbgrader(course, "release_feedback", TINY)
    from nbgrader.utils import notebook_hash

    expected = {notebook_hash(secret=s, notebook_id=TINY) for s in secrets.values()}
    assert {p.stem for p in _released_pages(course)} == expected  # what fetch_feedback finds


@pytest.mark.slow
def test_release_feedback_without_the_exchange_files_fails_as_today(course, tmp_path, monkeypatch):
    """Mutant: no timestamp.txt and secret beside the pages (today): nbgrader fails."""
    monkeypatch.delenv("TRANSFORMER_LAB_EXCHANGE", raising=False)
    monkeypatch.setattr(feedback, "exchange_files", lambda *args: None)
    _exchange_class(course, tmp_path)
    feedback.feedback(course, TINY)
    with pytest.raises(RuntimeError, match="timestamp.txt"):
        nbgrader_app.run_nbgrader(course, "release_feedback", TINY)


def canvas_reads(name: str) -> tuple[str, str] | None:
    """(user id, attachment id) as Canvas's Re-Upload Submissions reads a file name: the first
    two all-digit parts between underscores (canvas-lms, Assignment#infer_comment_context_from_filename)."""
    digits = [part for part in name.split("_") if re.fullmatch(r"\d+", part)]
    return (digits[0], digits[1]) if len(digits) >= 2 else None


def _canvas_zip_matches(course: Path, tmp_path: Path) -> None:
    got = collect.collect(_zip(tmp_path / "canvas.zip", NAMESAKES), TINY, tmp_path / "out")
    found = {s: tmp_path / "out" / s / TINY for s in got.students}
    identities.keep(course, TINY, identities.read(tmp_path / "out", found))
    for student in found:
        _graded_record(course, student, 1.0)
    (course / "autograder" / "work" / "feedback" / "dave" / TINY).mkdir(parents=True)  # exchange
    (course / "autograder" / "work" / "feedback" / "dave" / TINY / f"{TINY}.html").write_text("x")
    feedback.feedback(course, TINY, ["111", "222", "333"])
    made = lms_feedback.canvas_zip(course, TINY, tmp_path / "feedback.zip")
    with zipfile.ZipFile(made.path) as zf:
        names = sorted(zf.namelist())
        assert all(b"feedback for" in zf.read(n) or b"points" in zf.read(n) for n in names)
    wanted = {"111": ("111", "901"), "222": ("222", "902"), "333": ("333", "903")}
    assert {made.members[n]: canvas_reads(n) for n in names} == wanted
    assert [s for s, _ in made.left_out] == ["dave"]


def test_the_canvas_zip_names_each_page_as_canvas_matches_it(course, tmp_path):
    _canvas_zip_matches(course, tmp_path)


def test_pages_named_by_student_id_alone_fail_the_canvas_check(course, tmp_path, monkeypatch):
    """Mutant: pages named `<student>_<lesson>.html` (what our folders hold)."""
    monkeypatch.setattr(
        lms_feedback, "canvas_name", lambda who, page: f"{who['lms_id']}_{page.name}"
    )
    with pytest.raises(AssertionError):
        _canvas_zip_matches(course, tmp_path)


def _setup_notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    setup = nbformat.v4.new_code_cell("# Colab setup\n!pip install transformer-lab")
    setup["id"] = SETUP_ID
    lesson = nbformat.v4.new_markdown_cell(
        "# The lesson\n\n$$\\mathrm{softmax}(QK^T/\\sqrt{d_k})V$$"
    )
    lesson["id"] = "intro"
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"), setup, lesson]
    for i, cell in enumerate(nb.cells):
        cell.setdefault("id", f"c{i}")
    return nb


def test_feedback_pages_start_at_the_lesson_without_the_setup_cell(course, tmp_path):
    notebook = tmp_path / f"{TINY}.ipynb"
    nbformat.write(_setup_notebook(), notebook)
    page = feedback._render_autograded(course, notebook)
    assert "The lesson" in page and "pip install transformer-lab" not in page
    maths = re.search(r'<math [^>]*display="block".*?</math>', page, re.S)
    assert maths and "<msqrt>" in maths[0] and "softmax" not in page.split("<math", 1)[0][-50:]
    assert "$$" not in page.split("The lesson", 1)[1]  # drawn as MathML, not left as TeX


def test_maths_become_mathml_outside_code_only():
    text = "Cost $O(n^2 d)$ and $$\\frac{a}{b}$$; `echo $HOME $x$` stays.\n```\n$y$\n```"
    out = maths_html.markdown_with_mathml(text)
    assert out.count("<math") == 2 and "`echo $HOME $x$`" in out and "\n$y$\n" in out
    assert maths_html.markdown_with_mathml("$\\notacommand{$") == "$\\notacommand{$"


# ----------------------------------------------------------------------------------------------
# 3. Smaller gaps: example paths stay out of git; the documented files exist.


def _example_paths() -> list[str]:
    text = (REPO / "INSTRUCTORS.md").read_text()
    found = re.findall(r"--(?:out|lms-zip)\s+([\w./-]+)", text)
    found += re.findall(r"(?<![\w/])(submissions/[\w./-]*)", text)
    return sorted(p for p in set(found) if not p.isupper())  # not the placeholders (DIR)


def test_every_example_path_in_instructors_md_is_ignored_by_git():
    paths = _example_paths()
    assert "grades-02.csv" in paths and any(p.startswith("submissions/") for p in paths)
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    result = subprocess.run(
        ["git", "check-ignore", "--no-index", "--verbose", "--non-matching", *paths],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    unignored = [
        line.split("\t")[-1] for line in result.stdout.splitlines() if line.startswith("::")
    ]
    assert unignored == []


def test_instructors_md_names_only_files_that_exist_or_says_to_create_them():
    text = (REPO / "INSTRUCTORS.md").read_text()
    named = set(re.findall(r"`(autograder/[\w./-]+\.(?:json|py))`", text))
    for name in sorted(n for n in named if not n.startswith("autograder/work/")):  # made later
        if not (REPO / name).exists():
            assert re.search(rf"[Cc]reate `{re.escape(name)}`", text), name


# ----------------------------------------------------------------------------------------------
# The long export stays as it was; the CSV reader used by the tests above.


def test_the_long_export_keeps_its_columns(course, tmp_path):
    _graded_record(course, "amy", 3.0)
    rows = list(csv.reader(io.StringIO(export.export(course, tmp_path / "all.csv").read_text())))
    assert rows[0][:7] == rec.FIXED and rows[1][:3] == ["amy", TINY, "3"]


# ----------------------------------------------------------------------------------------------
# 4. The export an LMS takes: a row per student, a column per lesson, the LMS id.


def _wide_term(course: Path, tmp_path: Path) -> list[list[str]]:
    got = collect.collect(_zip(tmp_path / "canvas.zip", NAMESAKES), TINY, tmp_path / "out")
    found = {s: tmp_path / "out" / s / TINY for s in got.students}
    found["dave"] = tmp_path / "out" / "dave" / TINY  # from the exchange, say
    identities.keep(course, TINY, identities.read(tmp_path / "out", found))
    _graded_record(course, "111", 3.0)
    _graded_record(course, "222", 1.0)
    _graded_record(course, "dave", 2.0)
    rec.write_record(
        course,
        {**_graded_record(course, "333", 3.0), "status": "ungradable", "reason": "empty file"},
    )
    other = {"student": "111", "assignment": "98_other", "status": "graded", "score": 4.0}
    rec.write_record(course, {**other, "max_score": 5.0, "cells": {}, "flags": []})
    out = export.export_wide(course, tmp_path / "wide.csv")
    return list(csv.reader(io.StringIO(out.read_text())))


WIDE = [
    ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "98_other", TINY],
    ["Points Possible", "", "", "", "", "5", "3"],
    ["dave", "", "", "dave", "", "", "2"],
    ["smithjohn", "111", "", "", "", "4", "3"],
    ["smithjohn", "222", "", "", "", "", "1"],
    ["smithjohn", "333", "", "", "", "", "0"],
]


def test_the_wide_export_has_a_row_per_student_and_the_canvas_id(course, tmp_path):
    assert _wide_term(course, tmp_path) == WIDE


def test_a_wide_export_without_the_lms_identities_fails_the_check(course, tmp_path, monkeypatch):
    """Mutant: no identities kept (today): rows without the names and the Canvas ids."""
    monkeypatch.setattr(identities, "load", lambda course, assignment=None: {})
    assert _wide_term(course, tmp_path) != WIDE


# ----------------------------------------------------------------------------------------------
# 5. Duplicates flagged: byte-identical submissions listed in the report, scores unchanged.


def _class_with_copies(course: Path, tmp_path: Path) -> dict:
    from transformer_lab_grader.report import build_report

    untouched = submission_sha256(course / "exercises" / TINY)
    for student, score, sha in [
        ("amy", 3.0, "a" * 64),
        ("ben", 3.0, "a" * 64),  # amy's bytes
        ("cat", 0.0, untouched),  # the release handed in as it is
        ("dan", 0.0, untouched),
        ("eve", 1.0, "e" * 64),
    ]:
        _graded_record(course, student, score, submission_sha256=sha)
    build_report(course, TINY, tmp_path / "report")
    return json.loads((tmp_path / "report" / "summary.json").read_text())


def test_identical_submissions_are_listed_and_scored_as_they_are(course, tmp_path):
    summary = _class_with_copies(course, tmp_path)
    assert summary["identical"] == [["amy", "ben"]]
    assert summary["scores"]["ben"] == 3.0
    assert "Identical submissions" in (tmp_path / "report" / "report.md").read_text()


def test_counting_the_untouched_release_as_copies_fails_the_check(course, tmp_path, monkeypatch):
    """Mutant: every blank submission listed as a copy of the others."""
    from transformer_lab_grader import report_summary

    real = report_summary.identical_submissions
    monkeypatch.setattr(
        report_summary, "identical_submissions", lambda records, untouched="": real(records)
    )
    assert _class_with_copies(course, tmp_path)["identical"] != [["amy", "ben"]]


def test_release_and_collect_use_the_configured_exchange(course, monkeypatch, tmp_path):
    monkeypatch.setenv("TRANSFORMER_LAB_EXCHANGE", str(tmp_path / "hub"))
    handed = []
    import transformer_lab_grader.release as release_module

    monkeypatch.setattr(release_module, "release", lambda c, a, exchange: handed.append(exchange))
    assert commands.release(course, TINY, "exchange") == 0
    assert commands.release(course, TINY, None) == 0  # an LMS upload: no exchange
    assert handed == [(tmp_path / "hub").resolve(), None]
    folder = (
        tmp_path / "hub" / "transformer-lab" / "inbound" / f"amy+{TINY}+2026-11-21 09:00:00 UTC"
    )
    folder.mkdir(parents=True)
    (folder / NAME).write_bytes(b"{}")
    assert commands.collect(course, "exchange", TINY, None, None) == 0
    assert (course / "autograder" / "work" / "collected" / TINY / "amy" / TINY / NAME).is_file()
