"""The instructor's report, feedback and release (transformer_lab_grader.{report,feedback,release}).

- report: synthetic result records (graded, ungradable, flagged, a corrupt file) for lesson 02,
  their failures made from real check failures (`failures.failure_of`); exact counts, pass rates
  (per student, never per cell), the top named mistake, a valid PNG; mutants of the counting
  (one re-parses the outputs' text, as the report once did) must fail the same assertions.
- feedback: real nbgrader grading (nbgrader_app.submit + nbgrader_app.autograde in a temporary copy of the course)
  of a passing, a failing, a crashing and a kernel-killing submission; no page shows hidden-test
  source or traceback lines of the hidden tests; every student gets a page.
- release: into a temporary nbgrader exchange, twice (idempotent), and without an exchange.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from collections import defaultdict
from pathlib import Path

import nbformat
import pytest

from transformer_lab import check
from transformer_lab.check import CheckFailed
from transformer_lab_grader import failures, nbgrader_app, report, report_summary
from transformer_lab_grader import feedback as fb
from transformer_lab_grader import records as rec
from transformer_lab_grader import release as rel

REPO = Path(__file__).resolve().parents[2]
LESSON = "02_qkv_attention"
SDPA_MISTAKES = check.EXERCISES["scaled_dot_product_attention"].mistakes
NO_SCALE, BY_D_K = SDPA_MISTAKES[0].sentence, SDPA_MISTAKES[1].sentence
SA_MISTAKE = check.EXERCISES["SelfAttention"].mistakes[0].sentence
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _course(tmp: Path, lessons=(LESSON,)) -> Path:
    """A minimal course folder: the lessons' solutions and exercises, the autograder config."""
    return nbgrader_app.course_copy(REPO, tmp / "course", list(lessons), generate_them=False)


def _cell(score, max_score, passed, exercises, output="", failure=None):
    return {
        "score": score,
        "max_score": max_score,
        "passed": passed,
        "exercises": exercises,
        "output": output,
        "failure": failure,
    }


def _record(student, status, score, cells, reason=None, flags=()):
    return {
        "student": student,
        "assignment": LESSON,
        "status": status,
        "reason": reason,
        "score": score,
        "max_score": 8.0,
        "cells": cells,
        "flags": list(flags),
        "submission_sha256": "0" * 64,
        "seconds": 1.0,
        "graded_at": "2026-11-22T05:00:00+00:00",
    }


def _failure(sentence: str) -> str:
    return (
        "✓ scaled_dot_product_attention: all 6 visible checks passed\n"
        "CheckFailed: scaled_dot_product_attention: output differs in 12 of 90 entries\n"
        "  case: q (2, 3, 5, 4) (float64 on cpu)\n"
        f"Likely mistake: {sentence}"
    )


def _check_failed(exercise: str, problem: str, mistake_index: int | None = None) -> dict:
    """The failure the judge keeps for a check that failed, from a real CheckFailed."""
    mistake = None if mistake_index is None else check.EXERCISES[exercise].mistakes[mistake_index]
    err = CheckFailed(
        exercise=exercise,
        problem=problem,
        case="q (2, 3, 5, 4) (float64 on cpu)",
        mistake=mistake and mistake.sentence,
        mistake_key=mistake and mistake.key,
    )
    return failures.failure_of(err)


def _mistaken(exercise: str, index: int, text: str) -> dict:
    """A cell that failed with the catalogued mistake `index` of `exercise`: output and failure."""
    return {"output": text, "failure": _check_failed(exercise, "output differs", index)}


SDPA_NO_SCALE = _mistaken("scaled_dot_product_attention", 0, _failure(NO_SCALE))


SDPA, SA = ["scaled_dot_product_attention"], ["SelfAttention"]
HOSTILE = "<script>x"

RECORDS = {
    "ada": _record(
        "ada",
        "graded",
        8.0,
        {"sdpa-test": _cell(5, 5, True, SDPA), "self-attention-test": _cell(3, 3, True, SA)},
    ),
    # the no-√d_k mistake, in the sdpa cell only
    "ben": _record(
        "ben",
        "graded",
        3.0,
        {
            "sdpa-test": _cell(0, 5, False, SDPA, **SDPA_NO_SCALE),
            "self-attention-test": _cell(3, 3, True, SA),
        },
    ),
    # the same mistake in TWO cells (its self-attention cell calls both checks): counts once
    "cy": _record(
        "cy",
        "graded",
        0.0,
        {
            "sdpa-test": _cell(0, 5, False, SDPA, **SDPA_NO_SCALE),
            "self-attention-test": _cell(0, 3, False, SA + SDPA, **SDPA_NO_SCALE),
        },
    ),
    # a shape error (unnamed) and a not-attempted cell whose output quotes an sdpa sentence (a
    # print): its failure names no mistake, so it is not counted under sdpa
    "dee": _record(
        "dee",
        "graded",
        0.0,
        {
            "sdpa-test": _cell(
                0,
                5,
                False,
                SDPA,
                "CheckFailed: scaled_dot_product_attention: weights has shape (2, 3) ...",
                _check_failed(
                    "scaled_dot_product_attention",
                    "weights has shape (2, 3) but should have shape (3, 2)",
                ),
            ),
            "self-attention-test": _cell(
                0,
                3,
                False,
                SA,
                f"print: {NO_SCALE}\nNotImplementedError: ",
                failures.failure_named("NotImplementedError", ""),
            ),
        },
        flags=["monkeypatched torch.allclose"],
    ),
    # the other sdpa mistake and a SelfAttention mistake; an exception inside the student's code
    "eve": _record(
        "eve",
        "graded",
        0.0,
        {
            "sdpa-test": _cell(0, 5, False, SDPA, **_mistaken(SDPA[0], 1, _failure(BY_D_K))),
            "self-attention-test": _cell(0, 3, False, SA, **_mistaken(SA[0], 0, "")),
        },
    ),
    HOSTILE: _record(
        HOSTILE,
        "graded",
        3.0,
        {
            "sdpa-test": _cell(
                0,
                5,
                False,
                SDPA,
                "ZeroDivisionError: division by zero",
                failures.failure_of(ZeroDivisionError("division by zero")),
            ),
            "self-attention-test": _cell(3, 3, True, SA),
        },
        flags=["called F.scaled_dot_product_attention | refused"],
    ),
    "fay": _record("fay", "ungradable", 0.0, {}, reason="timeout: grading took longer than 600 s"),
    "gus": _record("gus", "ungradable", 0.0, {}, reason="timeout: cell sdpa-test ran past 240 s"),
    "hal": _record(
        "hal",
        "ungradable",
        0.0,
        {},
        reason="invalid notebook: truncated JSON",
        flags=["wrote into the gradebook folder"],
    ),
}
GRADED = ["ada", "ben", "cy", "dee", "eve", HOSTILE]


def _write_records(course: Path, records: dict) -> Path:
    folder = rec.results_dir(course, LESSON)
    folder.mkdir(parents=True, exist_ok=True)
    for student, record in records.items():
        (folder / f"{student}.json").write_text(json.dumps(record), encoding="utf-8")
    (folder / "broken.json").write_text('{"student": "broken", "status": "gra', encoding="utf-8")
    (folder / "alist.json").write_text("[1, 2]", encoding="utf-8")
    (folder / ".zed.json.tmp").write_text("half-written", encoding="utf-8")
    return folder


@pytest.fixture
def course(tmp_path) -> Path:
    return _course(tmp_path)


@pytest.fixture
def built(course, tmp_path):
    _write_records(course, RECORDS)
    main = report.build_report(course, LESSON, tmp_path / "report")
    return main, json.loads((tmp_path / "report" / "summary.json").read_text(encoding="utf-8"))


def _assert_summary(s: dict) -> None:
    """Everything the synthetic records imply; shared by the real report and its mutants."""
    assert s["students"] == 9 and s["graded"] == 6 and s["ungradable"] == 3
    assert s["max_score"] == 8.0
    assert s["mean"] == pytest.approx(14 / 6) and s["median"] == pytest.approx(1.5)
    assert s["full_marks"] == 1
    assert s["ungradable_reasons"] == {"timeout": 2, "invalid notebook": 1}
    cells = {c["grade_id"]: c for c in s["cells"]}
    assert list(cells) == ["sdpa-test", "self-attention-test"]  # the released notebook's order
    assert (cells["sdpa-test"]["passed"], cells["sdpa-test"]["graded"]) == (1, 6)
    assert cells["self-attention-test"]["passed"] == 3
    assert cells["self-attention-test"]["pass_rate"] == pytest.approx(0.5)
    exercises = {e["exercise"]: e for e in s["exercises"]}
    assert exercises["scaled_dot_product_attention"]["passed"] == 1
    assert exercises["SelfAttention"]["pass_rate"] == pytest.approx(0.5)
    named = {(m["exercise"], m["sentence"]): m["students"] for m in s["top_mistakes"]}
    assert named == {
        ("scaled_dot_product_attention", NO_SCALE): 2,
        ("scaled_dot_product_attention", BY_D_K): 1,
        ("SelfAttention", SA_MISTAKE): 1,
    }
    top = s["top_mistakes"][0]
    assert (top["exercise"], top["sentence"], top["students"]) == (
        "scaled_dot_product_attention",
        NO_SCALE,
        2,
    )
    sdpa_top = exercises["scaled_dot_product_attention"]["top_mistakes"]
    assert sdpa_top[0] == {"sentence": NO_SCALE, "students": 2}
    unnamed = {(u["exercise"], u["kind"]): u["students"] for u in s["unnamed_failures"]}
    assert unnamed == {
        ("scaled_dot_product_attention", "CheckFailed: wrong shape"): 1,
        ("scaled_dot_product_attention", "ZeroDivisionError"): 1,
        ("SelfAttention", "NotImplementedError (not attempted)"): 1,
    }
    assert s["flagged"] == {
        "dee": ["monkeypatched torch.allclose"],
        "hal": ["wrote into the gradebook folder"],
        HOSTILE: ["called F.scaled_dot_product_attention | refused"],
    }
    problems = "\n".join(s["problems"])
    assert "broken.json" in problems and "alist.json" in problems and "zed" not in problems


def test_report_counts_rates_and_top_mistake(built, tmp_path):
    main, summary = built
    assert main == tmp_path / "report" / "report.html"
    _assert_summary(summary)
    for name in report.REPORT_FILES:
        assert (tmp_path / "report" / name).is_file(), name


def test_report_plot_is_a_valid_png(built, tmp_path):
    import matplotlib.image

    path = tmp_path / "report" / "score_distribution.png"
    assert path.read_bytes()[:8] == PNG_MAGIC
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_report_html_and_markdown_show_the_tables_escaped(built, tmp_path):
    page = (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    assert html.escape(NO_SCALE) in page and "score_distribution.png" in page
    assert "&lt;script&gt;x" in page and "<script>x" not in page
    assert "broken.json" in page and "monkeypatched torch.allclose" in page
    text = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert f"| 2 | scaled_dot_product_attention | {NO_SCALE} |" in text
    assert "called F.scaled_dot_product_attention \\| refused" in text  # pipes escaped
    assert "| sdpa-test | 5 | scaled_dot_product_attention | 1 / 6 | 17% |" in text


def test_report_without_records_or_with_only_corrupt_ones_does_not_crash(course, tmp_path):
    main = report.build_report(course, LESSON, tmp_path / "empty")
    summary = json.loads((tmp_path / "empty" / "summary.json").read_text())
    assert main.is_file() and summary["students"] == 0 and summary["mean"] is None
    assert "no results folder" in summary["problems"][0]
    assert (tmp_path / "empty" / "score_distribution.png").read_bytes()[:8] == PNG_MAGIC
    _write_records(course, {})
    report.build_report(course, LESSON, tmp_path / "corrupt")
    summary = json.loads((tmp_path / "corrupt" / "summary.json").read_text())
    assert summary["students"] == 0 and len(summary["problems"]) == 2


def test_records_with_wrong_fields_are_problems_not_crashes(course):
    bad = {
        "s1": {**_record("s1", "graded", 1.0, {}), "score": "ten"},
        "s2": {**_record("s2", "finished", 1.0, {})},
        "s3": {**_record("s3", "graded", 1.0, {"c": "not a cell"})},
        "s4": {**_record("s4", "graded", 1.0, {}), "assignment": "03_multihead_attention"},
        "s5": {**_record("someone-else", "graded", 8.0, {})},
    }
    _write_records(course, bad)
    records, problems = rec.load_class_records(course, LESSON)
    assert list(records) == ["s5"]  # counted under its file name, with a note
    joined = "\n".join(problems)
    for needle in ("s1.json", "s2.json", "s3.json", "s4.json", "'someone-else'"):
        assert needle in joined, needle


@pytest.mark.parametrize(
    ("error", "problem", "kind"),
    [
        (
            "CheckFailed",
            "output has shape (2,) but should have shape (3,)",
            "CheckFailed: wrong shape",
        ),
        (
            "CheckFailed",
            "the gradient with respect to `q` differs in 3 of 4",
            "CheckFailed: wrong gradient",
        ),
        ("CheckFailed", "output differs in 3 of 4 entries", "CheckFailed: wrong values"),
        (
            "CheckFailed",
            "output has dtype torch.float32 but should have dtype torch.float64",
            "CheckFailed: wrong dtype",
        ),
        ("ValueError", "bad", "ValueError"),
        ("ImplementThisYourself", "F.scaled_dot_product_attention", "ImplementThisYourself"),
        ("OutOfMemoryError", "CUDA out of memory", "OutOfMemoryError"),
        ("NotImplementedError", "", "NotImplementedError (not attempted)"),
        ("AssertionError", "", "AssertionError: wrong values"),
    ],
)
def test_failure_kinds_come_from_the_fields(error, problem, kind):
    assert failures.kind_of(error, problem) == kind
    assert failures.kind(failures.failure_named(error, problem)) == kind


def test_a_crash_and_a_record_without_failures_have_their_own_kinds():
    err = CheckFailed(exercise="f", problem="your function raised", cause=RuntimeError("x"))
    assert failures.kind(failures.failure_of(err)) == "CheckFailed: your code raised RuntimeError"
    assert failures.kind(None) == failures.NOT_RECORDED


# Mutants of the counting: each must break _assert_summary.


def _count_per_cell(records, cells, catalogue, fallback):
    """Mutant: counts failing cells instead of students."""
    named, unnamed = defaultdict(list), defaultdict(list)
    for student, record in records.items():
        if record["status"] != "graded":
            continue
        for cell in record["cells"].values():
            failure = cell["failure"]
            if cell["passed"] or not failure:
                continue
            if failure["mistake"]:
                named[(failure["exercise"], failure["sentence"])].append(student)
            else:
                unnamed[(cell["exercises"][0], failure["kind"])].append(student)
    return named, unnamed


def _count_from_the_output_text(records, cells, catalogue, fallback):
    """Mutant: the report that re-parsed text: a named mistake is any catalogued sentence found
    in a failed cell's output."""
    named, unnamed = _REAL_COUNT(records, cells, catalogue, fallback)
    for student, record in records.items():
        for cell in record["cells"].values():
            for exercise, sentences in catalogue.items():
                for sentence in sentences.values():
                    if not cell["passed"] and sentence in cell["output"]:
                        named[(exercise, sentence)].add(student)
    return named, unnamed


def _count_without_the_mistake_key(records, cells, catalogue, fallback):
    """Mutant: failures that lost their mistake key (a judge that drops it)."""
    for record in records.values():
        for cell in record["cells"].values():
            if cell["failure"]:
                cell["failure"]["mistake"] = None
    return _REAL_COUNT(records, cells, catalogue, fallback)


def _count_ungradable_too(records, cells, catalogue, fallback):
    """Mutant: lets ungradable students into the mistake counts (as 'no error message')."""
    named, unnamed = _REAL_COUNT(records, cells, catalogue, fallback)
    for student, record in records.items():
        if record["status"] == "ungradable":
            unnamed[("-", "no error message")].add(student)
    return named, unnamed


_REAL_COUNT = report_summary.count_mistakes


@pytest.mark.parametrize(
    "mutant",
    [
        _count_per_cell,
        _count_from_the_output_text,
        _count_without_the_mistake_key,
        _count_ungradable_too,
    ],
)
def test_counting_mutants_fail_the_report_test(course, tmp_path, monkeypatch, mutant):
    _write_records(course, RECORDS)
    monkeypatch.setattr(report_summary, "count_mistakes", mutant)
    report.build_report(course, LESSON, tmp_path / "mutant")
    summary = json.loads((tmp_path / "mutant" / "summary.json").read_text())
    with pytest.raises(AssertionError):
        _assert_summary(summary)


def test_pass_rate_mutant_over_all_students_fails(course, tmp_path, monkeypatch):
    """Mutant: ungradable students counted as graded (status rewritten on load)."""
    _write_records(course, RECORDS)
    real = rec.clean_record

    def everyone_graded(raw, assignment):
        record = real(raw, assignment)
        record["status"] = "graded"
        return record

    monkeypatch.setattr(rec, "clean_record", everyone_graded)
    report.build_report(course, LESSON, tmp_path / "mutant")
    with pytest.raises(AssertionError):
        _assert_summary(json.loads((tmp_path / "mutant" / "summary.json").read_text()))


# ---------------------------------------------------------------------------------------------
# Feedback.


def _hidden_lines(course: Path) -> list[str]:
    """The hidden-test source lines of the lesson, read independently of the module under test."""
    lines = []
    nb = nbformat.read(course / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    for cell in nb.cells:
        for block in re.findall(
            r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", cell.source, re.S
        ):
            lines += [line.strip() for line in block.splitlines() if line.strip()]
    assert lines
    return lines


def _visible_text(page: str) -> str:
    page = re.sub(r"<(style|script)\b.*?</\1>", "", page, flags=re.S | re.I)
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def _assert_no_hidden(page: str, hidden: list[str]) -> None:
    text = _visible_text(page)
    squashed = "".join(text.split())
    for line in hidden:
        assert "".join(line.split()) not in squashed, f"hidden test shown: {line!r}"
    for marker in (
        "HIDDEN TESTS",
        "thorough=True",
        "Traceback (most recent call last)",
        "lesson02.py",
        "exercise.py",
        "_SDPA_EX",
        "----> ",
    ):
        assert marker not in text, f"feedback shows {marker!r}"


def _solution_with(
    course: Path, inject: str, folder: Path, replace: tuple[str, str] = ("", "")
) -> Path:
    """The solution notebook with code injected at the start of the sdpa solution (or replaced)."""
    nb = nbformat.read(course / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.get("id") == "sdpa-solution":
            old = cell.source
            cell.source = cell.source.replace(
                "    d_k = q.shape[-1]\n", inject + "    d_k = q.shape[-1]\n"
            )
            if replace[0]:
                cell.source = cell.source.replace(*replace)
            assert cell.source != old
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{LESSON}.ipynb")
    return folder / f"{LESSON}.ipynb"


def _records_from_autograde(course: Path, students: list[str]) -> None:
    """Result records from nbgrader's autograded notebooks, the way the grader writes them."""
    folder = rec.results_dir(course, LESSON)
    folder.mkdir(parents=True, exist_ok=True)
    points = report_summary.released_cells(course, LESSON)
    for student in students:
        path = course / f"autograder/work/autograded/{student}/{LESSON}/{LESSON}.ipynb"
        if not path.is_file():
            record = _record(student, "ungradable", 0.0, {}, reason="the kernel died (os._exit)")
        else:
            cells = {}
            for cell in nbformat.read(path, as_version=4).cells:
                gid = cell.metadata.get("nbgrader", {}).get("grade_id")
                if gid not in points:
                    continue
                errors = [o for o in cell.outputs if o.output_type == "error"]
                text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
                text += "".join(f"{o.ename}: {o.evalue}\n" for o in errors)
                top = points[gid]["max_score"]
                cells[gid] = _cell(
                    0.0 if errors else top, top, not errors, points[gid]["exercises"], text
                )
            score = sum(c["score"] for c in cells.values())
            record = _record(student, "graded", score, cells)
        (folder / f"{student}.json").write_text(json.dumps(record), encoding="utf-8")


@pytest.fixture(scope="module")
def graded_course(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("feedback")
    course = _course(tmp)
    subs = tmp / "subs"
    notebooks = {
        "passing": course / "solutions" / LESSON / f"{LESSON}.ipynb",
        # passes the visible checks, fails a hidden one (d_k = 1)
        "failing": _solution_with(
            course, "    if q.shape[-1] == 1:\n        q = q * 2\n", subs / "f"
        ),
        # raises inside the student's code during the hidden tests
        "crashing": _solution_with(
            course,
            '    if q.shape[-2] == 1:\n        raise ZeroDivisionError("boom")\n',
            subs / "c",
        ),
        # kills the kernel during the hidden tests: nbgrader cannot grade it
        "dying": _solution_with(
            course, "    if q.shape[-2] == 1:\n        import os; os._exit(1)\n", subs / "d"
        ),
    }
    for student, path in notebooks.items():
        nbgrader_app.submit(course, LESSON, [path], student)
    try:
        nbgrader_app.autograde(course, LESSON)
    except RuntimeError as error:  # nbgrader reports the dead kernel and grades the others
        assert "dying" in str(error)
    shutil.rmtree(course / "autograder/work/autograded/dying", ignore_errors=True)
    _records_from_autograde(course, list(notebooks))
    return course


@pytest.mark.slow
def test_feedback_pages_never_show_hidden_tests(graded_course):
    course = graded_course
    pages = fb.feedback(course, LESSON)
    by_student = {p.parent.parent.name: p for p in pages}
    assert set(by_student) == {"passing", "failing", "crashing", "dying"}
    hidden = _hidden_lines(course)
    texts = {s: p.read_text(encoding="utf-8") for s, p in by_student.items()}
    for page in texts.values():
        _assert_no_hidden(page, hidden)
    assert "8 / 8 points" in texts["passing"]
    assert "3 / 8 points" in texts["failing"] and "d_k = 1" in texts["failing"]
    assert "boom" in texts["crashing"] and "0 / 8 points" in texts["crashing"]
    assert "could not be graded" in texts["dying"] and "kernel died" in texts["dying"]
    # the graded students get nbgrader's page (their notebook), with the hidden block replaced
    assert "hidden tests run here when grading" in texts["failing"]
    assert "scaled_dot_product_attention(scaled_dot_product_attention)" in _visible_text(
        texts["failing"]
    )


@pytest.mark.slow
def test_the_hidden_test_assertion_catches_an_unfiltered_page(graded_course):
    """Mutant: the autograded notebook rendered without HideHiddenTests must fail the check."""
    from nbconvert import HTMLExporter

    path = graded_course / f"autograder/work/autograded/crashing/{LESSON}/{LESSON}.ipynb"
    page, _ = HTMLExporter(template_name="classic").from_notebook_node(
        nbformat.read(path, as_version=4)
    )
    with pytest.raises(AssertionError):
        _assert_no_hidden(page, _hidden_lines(graded_course))
    assert fb.leaks(page, fb.hidden_test_lines(graded_course, LESSON))


@pytest.mark.slow
def test_feedback_for_named_students_and_the_ungradable_page(graded_course):
    pages = fb.feedback(graded_course, LESSON, ["failing", "dying", "nobody"])
    names = sorted(p.parent.parent.name for p in pages)
    assert names == ["dying", "failing", "nobody"]
    nobody = next(p for p in pages if p.parent.parent.name == "nobody").read_text()
    assert "No graded submission" in nobody


def test_feedback_rejects_unsafe_student_ids(course):
    with pytest.raises(SystemExit, match="not a student id"):
        fb.feedback(course, LESSON, ["../escape"])


def test_feedback_replaces_a_leaking_page_by_the_record_page(course, monkeypatch, capsys):
    """The last line of defence: a page that shows a hidden line is never kept."""
    record = _record(
        "leaky",
        "graded",
        3.0,
        {
            "sdpa-test": _cell(0, 5, False, SDPA, _failure(NO_SCALE)),
            "self-attention-test": _cell(3, 3, True, SA),
        },
    )
    folder = rec.results_dir(course, LESSON)
    folder.mkdir(parents=True)
    (folder / "leaky.json").write_text(json.dumps(record))
    (course / f"autograder/work/autograded/leaky/{LESSON}").mkdir(parents=True)
    hidden = _hidden_lines(course)

    def leaking_feedback(root, assignment, student=None):
        out = root / f"autograder/work/feedback/leaky/{assignment}/{assignment}.html"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(f"<html><body><pre>{html.escape(hidden[0])}</pre></body></html>")
        return [out]

    monkeypatch.setattr(nbgrader_app, "generate_feedback", leaking_feedback)
    [page] = fb.feedback(course, LESSON)
    text = page.read_text()
    _assert_no_hidden(text, hidden)
    assert "3 / 8 points" in text and "Likely mistake" in text and html.escape(NO_SCALE) in text
    assert "showed hidden-test text" in capsys.readouterr().err


def _assert_eve_sees_her_failed_check(course: Path) -> None:
    """A failed check as the student saw it in the notebook, from the record's fields: eve's
    SelfAttention cell kept no output text at all, only its failure."""
    page = course / f"autograder/work/feedback/eve/{LESSON}/{LESSON}.html"
    eve = fb.page_text(page.read_text())
    assert "✗ SelfAttention: check failed\nLikely mistake: " in eve
    assert "What differs: output differs\nCase: q (2, 3, 5, 4) (float64 on cpu)" in eve
    assert " ".join(SA_MISTAKE.split()) in " ".join(eve.split())


def test_a_record_page_made_from_the_output_text_fails_the_check(course, monkeypatch):
    """Mutant: the record page that read the cell's output text (as it once did)."""
    monkeypatch.setattr(fb, "failure_text", lambda failure, output="", limit=1200: output[-limit:])
    _write_records(course, RECORDS)
    fb.feedback(course, LESSON, ["eve"])
    with pytest.raises(AssertionError):
        _assert_eve_sees_her_failed_check(course)


def test_feedback_without_autograded_notebooks_uses_the_records(course):
    """The grader may keep only its records: every student still gets a page."""
    _write_records(course, RECORDS)
    pages = fb.feedback(course, LESSON)
    assert len(pages) == len(RECORDS)
    hidden = _hidden_lines(course)
    for page in pages:
        _assert_no_hidden(page.read_text(), hidden)
    ben = (course / f"autograder/work/feedback/ben/{LESSON}/{LESSON}.html").read_text()
    assert "3 / 8 points" in ben and html.escape(NO_SCALE) in ben
    _assert_eve_sees_her_failed_check(course)
    fay = (course / f"autograder/work/feedback/fay/{LESSON}/{LESSON}.html").read_text()
    assert "timeout: grading took longer than 600 s" in fay


@pytest.mark.slow
def test_grade_then_feedback_and_report_end_to_end(tmp_path):
    """With the grading core (instructor.grade): real records, real check output, real mistakes."""
    grade = pytest.importorskip("transformer_lab_grader.grade")
    course = _course(tmp_path)
    subs = tmp_path / "subs"
    (subs / "passing" / LESSON).mkdir(parents=True)
    shutil.copy(course / "solutions" / LESSON / f"{LESSON}.ipynb", subs / "passing" / LESSON)
    unscaled = ("q @ k.transpose(-2, -1) / math.sqrt(d_k)", "q @ k.transpose(-2, -1)")
    _solution_with(course, "", subs / "unscaled" / LESSON, replace=unscaled)
    grade.grade(course, LESSON, subs, out=tmp_path / "grades.csv", jobs=2, quiet=True)

    report.build_report(course, LESSON, tmp_path / "report")
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    # the unscaled attention costs its own 5 points only: SelfAttention is graded with the course's
    # attention in its place (verify_earlier), so its 3 points stay
    assert summary["graded"] == 2 and summary["scores"] == {"passing": 8.0, "unscaled": 3.0}
    assert {
        "exercise": "scaled_dot_product_attention",
        "sentence": NO_SCALE,
        "students": 1,
    } in summary["top_mistakes"]
    assert {c["grade_id"]: c["passed"] for c in summary["cells"]} == {
        "sdpa-test": 1,
        "self-attention-test": 2,
    }

    pages = {p.parent.parent.name: p.read_text() for p in fb.feedback(course, LESSON)}
    assert set(pages) == {"passing", "unscaled"}
    for page in pages.values():
        _assert_no_hidden(page, _hidden_lines(course))
    assert "8 / 8 points" in pages["passing"]
    assert "3 / 8 points" in pages["unscaled"] and html.escape(NO_SCALE) in pages["unscaled"]


# ---------------------------------------------------------------------------------------------
# Release.


@pytest.mark.slow
def test_release_to_an_exchange_and_for_an_lms(course, tmp_path, capsys):
    exchange = tmp_path / "exchange"
    released = rel.release(course, LESSON, exchange)
    assert released == exchange / "transformer-lab" / "outbound" / LESSON
    notebook = released / f"{LESSON}.ipynb"
    assert notebook.read_bytes() == (REPO / "exercises" / LESSON / f"{LESSON}.ipynb").read_bytes()
    assert (exchange / "transformer-lab" / "inbound").is_dir()  # where students submit
    assert rel.release(course, LESSON, exchange) == released  # again: replaces, no error
    assert sorted(p.name for p in released.iterdir()) == [f"{LESSON}.ipynb"]
    capsys.readouterr()
    assert rel.release(course, LESSON) == course / "exercises" / LESSON
    assert str(course / "exercises" / LESSON / f"{LESSON}.ipynb") in capsys.readouterr().out


def test_release_rejects_an_unknown_lesson(course, tmp_path):
    with pytest.raises(SystemExit, match="no lesson named '99_nope'"):
        rel.release(course, "99_nope", tmp_path / "exchange")
