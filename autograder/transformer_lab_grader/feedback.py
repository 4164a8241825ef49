"""Feedback for students: one HTML page per student, never showing the hidden tests.

``feedback(course, assignment, students=None)`` writes
``<course>/autograder/work/feedback/<student>/<assignment>/<notebook>.html`` for every student with
a result record or an autograded notebook (or only the students named), and returns the pages:

- a graded student gets nbgrader's feedback (``nbgrader generate_feedback`` via
  ``nbgrader_app.generate_feedback``, whose ``HideHiddenTests`` filter clears hidden tests and cuts test-cell
  tracebacks to their last line), with a banner on top giving the final score of the result
  record (which may be lower than nbgrader's when the grader's verification refused a cell);
- an ungradable student gets a short page with the reason, and what to do about it;
- where nbgrader cannot make the page (no autograded notebook in the gradebook, e.g.), the
  autograded notebook is rendered with the same filter, or else a page is made from the record.
Every page is checked before it is kept: if it contains a line of the hidden tests (read from
``solutions/``), it is replaced by the page made from the record and a warning is printed.

Beside each student's pages go ``timestamp.txt`` and ``submission_secret.txt`` (`exchange_files`),
which ``nbgrader release_feedback`` reads to return the pages through the exchange: the
student's own from their exchange submission (`identities`), else a fresh secret (a student who
did not submit through the exchange cannot fetch it there; the LMS zip, `lms_feedback`, serves
them).
"""

from __future__ import annotations

import html
import importlib.util
import re
import secrets
import shutil
import sys
from pathlib import Path

import nbformat

from . import identities, manual, nbgrader_app
from .course import autograded_dir, require_lesson
from .notebook_format import (
    HIDDEN_TESTS_BEGIN,
    HIDDEN_TESTS_END,
    hidden_tests,
    without_hidden_tests,
)
from .records import load_class_records, now
from .report_summary import released_cells

TAGS = re.compile(r"<[^>]+>")
BLOCKS = re.compile(r"<(style|script)\b.*?</\1>", re.S | re.I)
STYLE = (
    "<style>.tl-feedback{font-family:sans-serif;max-width:60em;margin:1em auto;padding:.8em 1.2em;"
    "border:2px solid #4c72b0;border-radius:6px;background:#f5f8ff}"
    ".tl-feedback table{border-collapse:collapse}"
    ".tl-feedback td,.tl-feedback th{border:1px solid #ccc;padding:.2em .6em;text-align:left}"
    ".tl-feedback pre{white-space:pre-wrap}</style>"
)


def feedback_dir(course: Path, student: str, assignment: str) -> Path:
    return Path(course) / "autograder" / "work" / "feedback" / student / assignment


# ----------------------------------------------------------------------------------------------
# What must never be shown.


def _squash(text: str) -> str:
    return "".join(text.split())


def hidden_test_lines(course: Path, assignment: str) -> list[str]:
    """Every line of the hidden tests in solutions/<assignment>/ that a page must not contain.

    Lines that also appear outside the hidden blocks (visible to students anyway) and very short
    lines (a lone bracket) are left out, so that they cannot make false alarms.
    """
    hidden, visible = set(), set()
    for path in sorted((Path(course) / "solutions" / assignment).glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            for block in hidden_tests(cell.source):
                hidden.update(_squash(line) for line in block.splitlines())
            outside = without_hidden_tests(cell.source)
            visible.update(_squash(line) for line in outside.splitlines())
    return sorted(line for line in hidden - visible if len(line) >= 8)


def page_text(page: str) -> str:
    """The visible text of an HTML page (styles and scripts removed, tags stripped)."""
    return html.unescape(TAGS.sub("", BLOCKS.sub("", page)))


def leaks(page: str, hidden: list[str]) -> list[str]:
    """The hidden-test lines (and markers) that an HTML page shows; [] when it is clean."""
    text = _squash(page_text(page))
    found = [line for line in hidden if line in text]
    markers = (HIDDEN_TESTS_BEGIN, HIDDEN_TESTS_END)  # without their "###": stricter
    found += [m for m in (_squash(m.lstrip("# ")) for m in markers) if m in text]
    return found


# ----------------------------------------------------------------------------------------------
# Pages.


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title>{STYLE}</head><body>\n{body}\n</body></html>\n"
    )


def failure_text(failure: dict | None, output: str = "", limit: int = 1200) -> str:
    """What a failed cell's page says: a failed check as the student saw it in the notebook
    (`transformer_lab.check.feedback.render_failure`, from the record's fields), another error
    as its type and message; a record without a failure (graded before they were kept) shows
    the end of the cell's output."""
    from transformer_lab.check.feedback import render_failure, strip_ansi

    if failure is None:
        return "\n".join(strip_ansi(output).strip().splitlines()[-5:])[:limit]
    if failure.get("problem") is None:
        return f"{failure['error']}: {failure.get('message') or ''}".strip()[:limit]
    crash = failure.get("crash")
    lines = render_failure(
        failure.get("exercise"),
        failure["problem"],
        failure.get("case"),
        failure.get("sentence"),
        crash=f"{crash['type']}: {crash.get('message') or ''}" if crash else None,
        crash_lines=[f"      {crash['line']}"] if crash and crash.get("line") else (),
    )
    return strip_ansi("\n".join(lines))[:limit]


def _score_table(record: dict) -> str:
    rows = []
    for grade_id, cell in record.get("cells", {}).items():
        result = "passed" if cell.get("passed") else "not passed"
        if cell.get("manual"):
            result = "graded by hand" + (
                f": {html.escape(cell['comment'])}" if cell.get("comment") else ""
            )
        rows.append(
            f"<tr><td>{html.escape(grade_id)}</td><td>{cell.get('score', 0):g} / "
            f"{cell.get('max_score', 0):g}</td><td>{result}</td></tr>"
        )
    if not rows:
        return ""
    return (
        "<table><tr><th>test cell</th><th>points</th><th>result</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def banner(record: dict, assignment: str) -> str:
    """The score box put on top of a graded student's page."""
    return (
        f'<div class="tl-feedback"><h2>{html.escape(assignment)}: '
        f"{record['score']:g} / {record['max_score']:g} points</h2>"
        "<p>This is your final score. Each test cell below shows what the checks found; "
        "the hidden tests that grading adds are not shown.</p>"
        f"{_score_table(record)}</div>"
    )


def record_page(student: str, assignment: str, record: dict | None, hidden: list[str]) -> str:
    """A page made from the result record alone (ungradable, or no notebook page available)."""
    e = html.escape
    title = f"{assignment}: feedback for {student}"
    if record is None:
        body = (
            f'<div class="tl-feedback"><h2>{e(title)}</h2><p>No graded submission of '
            f"{e(assignment)} is on record for you. If you submitted it, ask your instructor.</p></div>"
        )
        return _page(title, body)
    if record["status"] == "ungradable":
        body = (
            f'<div class="tl-feedback"><h2>{e(assignment)}: your submission could not be graded'
            f"</h2><p>Reason: <strong>{e(record.get('reason') or 'not recorded')}</strong></p>"
            f"<p>Score recorded: {record['score']:g} / {record['max_score']:g}. "
            "This is not a judgement of your code: the grader could not run it to the end. "
            "Check that you submitted the notebook of this assignment, unchanged in name, that "
            "it opens in Jupyter, and that it runs top to bottom (Kernel &gt; Restart &amp; Run "
            "All) in a few minutes; then ask your instructor about resubmitting.</p></div>"
        )
        return _page(title, body)
    details = []
    for grade_id, cell in record.get("cells", {}).items():
        message = (
            "" if cell.get("passed") else failure_text(cell.get("failure"), cell.get("output", ""))
        )
        if message and not leaks(f"<pre>{e(message)}</pre>", hidden):
            details.append(f"<h3>{e(grade_id)}</h3><pre>{e(message)}</pre>")
    return _page(title, banner(record, assignment) + "".join(details))


def _insert_banner(page: str, block: str) -> str:
    """Put a block of HTML (with its style) right after <body ...>."""
    match = re.search(r"<body[^>]*>", page, flags=re.I)
    if not match:
        return STYLE + block + page
    return page[: match.end()] + STYLE + block + page[match.end() :]


def _render_autograded(course: Path, notebook: Path) -> str:
    """nbconvert's HTML of an autograded notebook through the course's HideHiddenTests filter."""
    from nbconvert import HTMLExporter

    from .safe_html import EXPORTER

    spec = importlib.util.spec_from_file_location(
        "_tl_feedback_filter", Path(course) / "autograder" / "feedback_filter.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    nb = nbformat.read(notebook, as_version=4)
    nb, _ = module.HideHiddenTests().preprocess(nb, {})
    exporter = HTMLExporter(template_name="classic", **EXPORTER)  # as nbgrader_config's
    body, _ = exporter.from_notebook_node(nb)
    return body


def exchange_files(folder: Path, who: dict, record: dict | None) -> None:
    """Write what `nbgrader release_feedback` needs beside a student's pages (see module)."""
    stamp = who.get("timestamp") or who.get("submitted_at") or (record or {}).get("graded_at")
    secret_file = folder / "submission_secret.txt"
    secret = who.get("submission_secret")
    if not secret and secret_file.is_file():
        secret = secret_file.read_text(encoding="utf-8").strip()
    (folder / "timestamp.txt").write_text(stamp or now(), encoding="utf-8")
    secret_file.write_text(secret or secrets.token_hex(32), encoding="utf-8")


# ----------------------------------------------------------------------------------------------
# The command.


def _students(course: Path, assignment: str, records: dict) -> list[str]:
    autograded = {
        p.parent.name
        for p in (Path(course) / "autograder" / "work" / "autograded").glob(f"*/{assignment}")
    }
    return sorted(set(records) | autograded)


def feedback(course: Path, assignment: str, students: list[str] | None = None) -> list[Path]:
    """Write one feedback page per student; return the pages written (sorted)."""
    course = Path(course).resolve()
    require_lesson(course, assignment)
    records, problems = load_class_records(course, assignment)
    manual.overlay(course, assignment, records.values())
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    points = released_cells(course, assignment)
    for record in records.values():  # a record may leave a cell's points out: the release has them
        for grade_id, cell in record["cells"].items():
            if not cell["max_score"] and grade_id in points:
                cell["max_score"] = points[grade_id]["max_score"]
    wanted = list(dict.fromkeys(students)) if students else _students(course, assignment, records)
    bad = [s for s in wanted if not s or s.startswith(".") or re.search(r"[/\\\x00]", s)]
    if bad:
        raise SystemExit(f"not a student id: {', '.join(map(repr, bad))}")
    hidden = hidden_test_lines(course, assignment)
    default_name = f"{assignment}.html"

    def nbgrader_pages(student: str) -> list[Path]:
        return sorted(feedback_dir(course, student, assignment).glob("*.html"))

    # nbgrader's pages for graded students: old pages go first, so whatever exists after is fresh.
    graded = [
        s
        for s in wanted
        if records.get(s, {}).get("status") != "ungradable"
        and autograded_dir(course, s, assignment).is_dir()
    ]
    for student in wanted:
        for page in nbgrader_pages(student):
            page.unlink()
    if graded:
        try:
            if students is None:
                nbgrader_app.generate_feedback(course, assignment)
            else:
                raise RuntimeError("per student")
        except RuntimeError:
            for student in graded:
                try:
                    nbgrader_app.generate_feedback(course, assignment, student)
                except RuntimeError as error:
                    last = str(error).strip().splitlines()[-1:] or [""]
                    print(
                        f"warning: nbgrader feedback failed for {student}: {last[0]}",
                        file=sys.stderr,
                    )

    written = []
    register = identities.load(course, assignment)
    for student in wanted:
        record = records.get(student)
        folder = feedback_dir(course, student, assignment)
        if record is not None and record["status"] == "ungradable":
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            page = folder / default_name
            page.write_text(record_page(student, assignment, record, hidden), encoding="utf-8")
            written.append(page)
            continue
        pages = nbgrader_pages(student)
        if not pages:  # nbgrader could not: render the autograded notebook ourselves
            folder.mkdir(parents=True, exist_ok=True)
            for notebook in sorted(autograded_dir(course, student, assignment).glob("*.ipynb")):
                try:
                    text = _render_autograded(course, notebook)
                except Exception as error:  # a broken notebook: the record page instead
                    print(f"warning: cannot render {notebook}: {error}", file=sys.stderr)
                    continue
                (folder / f"{notebook.stem}.html").write_text(text, encoding="utf-8")
            pages = nbgrader_pages(student)
        if not pages:
            page = folder / default_name
            folder.mkdir(parents=True, exist_ok=True)
            page.write_text(record_page(student, assignment, record, hidden), encoding="utf-8")
            written.append(page)
            continue
        for page in pages:
            text = page.read_text(encoding="utf-8")
            found = leaks(text, hidden)
            if found:
                print(
                    f"warning: {page} showed hidden-test text ({found[0][:60]!r}); "
                    "replaced by a page made from the result record",
                    file=sys.stderr,
                )
                text = record_page(student, assignment, record, hidden)
            elif record is not None:
                text = _insert_banner(text, banner(record, assignment))
            page.chmod(0o644)  # nbgrader may leave its pages read-only
            page.write_text(text, encoding="utf-8")
            written.append(page)
    for folder in sorted({page.parent for page in written}):
        student = folder.parent.name
        exchange_files(folder, identities.of(register, student), records.get(student))
    return sorted(written)
