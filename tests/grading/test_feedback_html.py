"""nbgrader's feedback HTML shows the same short rendering a student sees in the notebook.

A trial course (lesson 03 only) grades two submissions with real nbgrader: one with a catalogued
mistake in `split_heads`, one whose `split_heads` crashes. `nbgrader generate_feedback` (through
`nbgrader_app.generate_feedback`, with the course's HideHiddenTests filter) must show the named mistake, the case
and the student's own failing line, and no hidden test, engine frame or test-cell source.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import nbformat
import pytest

from transformer_lab_grader import feedback as fb
from transformer_lab_grader import gradebook
from transformer_lab_grader import nbgrader_app as app

REPO = Path(__file__).resolve().parents[2]
LESSON = "03_multihead_attention"

pytestmark = pytest.mark.slow

WRONG = (
    "def split_heads(x, n_heads):\n"
    "    B, L, d_model = x.shape\n"
    "    return x.reshape(B, n_heads, L, d_model // n_heads)\n"
)
CRASHING = (  # crashes on the first visible case only (the notebook's own cells run fine)
    "def split_heads(x, n_heads):\n"
    "    B, L, d_model = x.shape\n"
    "    d_k = d_model // n_heads + (1 if (L, n_heads) == (3, 2) else 0)\n"
    "    heads = x.view(B, L, n_heads, d_k)  # my crashing line\n"
    "    return heads.transpose(1, 2)\n"
)


def _submission(course: Path, source: str, folder: Path) -> Path:
    nb = nbformat.read(course / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    [cell] = [c for c in nb.cells if c.get("id") == "split-heads-solution"]
    cell.source = source
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{LESSON}.ipynb")
    return folder / f"{LESSON}.ipynb"


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("feedback_html")
    course = app.course_copy(REPO, tmp / "course", [LESSON])
    for student, source in (("mistaken", WRONG), ("crashing", CRASHING)):
        app.submit(course, LESSON, [_submission(course, source, tmp / student)], student)
    app.autograde(course, LESSON)
    paths = app.generate_feedback(course, LESSON)
    out = {p.parent.parent.name: p.read_text(encoding="utf-8") for p in paths}
    out["_hidden"] = "\n".join(fb.hidden_test_lines(course, LESSON))
    out["_scores"] = gradebook.all_scores(course)
    out["_course"] = course
    return out


def _text(page: str) -> str:
    page = re.sub(r"<(style|script)\b.*?</\1>", "", page, flags=re.S | re.I)
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def _assert_clean(page: str, hidden: list[str]) -> None:
    assert hidden and not fb.leaks(page, hidden)
    text = _text(page)
    for marker in (
        "thorough=True",
        "exercise.py",
        "lesson03.py",
        "Traceback (most recent",
        "---->",
    ):
        assert marker not in text, marker


def test_feedback_shows_the_named_mistake_and_the_case(pages):
    text = _text(pages["mistaken"])
    assert "✗ split_heads: check failed" in text
    assert "Likely mistake: you reshaped (B, L, d_model) straight to (B, h, L, d_k)" in text
    assert "Case: x (2, 3, 8), n_heads=2 (float64 on cpu)" in text
    _assert_clean(pages["mistaken"], pages["_hidden"].splitlines())


def test_feedback_shows_the_students_crashing_line(pages):
    text = _text(pages["crashing"])
    assert "Your code raised RuntimeError" in text
    assert "# my crashing line" in text and ", in split_heads" in text
    _assert_clean(pages["crashing"], pages["_hidden"].splitlines())


def test_nbgrader_records_the_failed_check_cell(pages):
    """The short rendering changes only the lines shown: the kernel still sends an error output
    (ename CheckFailed), so nbgrader gives the test cell no points."""
    for student in ("mistaken", "crashing"):
        score, top = pages["_scores"][(student, LESSON, LESSON)]
        assert score < top, (student, score, top)
        path = pages["_course"] / f"autograder/work/autograded/{student}/{LESSON}/{LESSON}.ipynb"
        nb = nbformat.read(path, as_version=4)
        [cell] = [c for c in nb.cells if c.get("id") == "split-heads-test"]
        [error] = [o for o in cell.outputs if o.output_type == "error"]
        assert error.ename == "CheckFailed" and error.evalue.startswith("split_heads: ")
        assert error.traceback[0].endswith("split_heads: check failed\x1b[0m")
