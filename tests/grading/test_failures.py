"""Failures travel as data (issue 23, part 4): what the judge catches reaches the result record
as fields, never as text to parse back.

One judged run of four lesson-02 tests (the student's cells in their process, the tests in the
judge, unboxed as the reference's timing run is): a catalogued mistake, a crash in the
student's code, an untouched stub and a pass. The job's record (`job.graded_record`, then
`records.validate_record` as `grade` checks it) must carry, for each failed cell, the exercise,
the mistake's key, what differed, the case, and the crash with the student's own line. Mutants
of the judge's hand-over (the key dropped, the crash dropped, only the text kept) must fail the
same assertions.
"""

from __future__ import annotations

import time

import pytest

from transformer_lab import check
from transformer_lab_grader import failures, feedback, job, judge, judge_cells, judge_limits
from transformer_lab_grader import records as rec

SDPA = "scaled_dot_product_attention"
TEST = f"check.{SDPA}({SDPA})"
NO_SCALE = check.EXERCISES[SDPA].mistake("no-scale")
CRASHING_LINE = "return q.view(-1, 7) @ v  # my crashing line"
CELLS = [
    judge_cells.Cell(0, "import torch"),
    judge_cells.Cell(
        1,
        f"def {SDPA}(q, k, v, mask=None):\n"
        "    s = q @ k.transpose(-2, -1)\n"
        "    if mask is not None:\n"
        "        s = s.masked_fill(~mask, float('-inf'))\n"
        "    w = torch.softmax(s, -1).nan_to_num(0.0)\n"
        "    return w @ v, w",
    ),
    judge_cells.Cell(2, TEST, "mistake-test", "mistake-test"),
    judge_cells.Cell(3, f"def {SDPA}(q, k, v, mask=None):\n    {CRASHING_LINE}"),
    judge_cells.Cell(4, TEST, "crash-test", "crash-test"),
    judge_cells.Cell(
        5, f"def {SDPA}(q, k, v, mask=None):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    ),
    judge_cells.Cell(6, TEST, "untouched-test", "untouched-test"),
    judge_cells.Cell(7, "assert 1 + 1 == 2", "pass-test", "pass-test"),
]
POINTS = {"mistake-test": 2, "crash-test": 2, "untouched-test": 2, "pass-test": 1}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> dict:
    deadline = time.monotonic() + 300
    workdir = tmp_path_factory.mktemp("judged")
    return judge.Judge(workdir, deadline=deadline, limits=judge_limits.Limits()).run(CELLS).verdicts


def _record(verdicts: dict) -> dict:
    """The record the grading job hands back (nbgrader scores each failed cell 0), validated as
    `grade` validates it."""
    spec = {
        "student": "amy",
        "assignment": "02_qkv_attention",
        "cells": {gid: {"points": p} for gid, p in POINTS.items()},
    }
    scores = {gid: float(p if verdicts[gid]["passed"] else 0) for gid, p in POINTS.items()}
    raw = job.graded_record(spec, scores, {}, [], [], verdicts)
    cells = {gid: {"points": p, "exercises": [SDPA]} for gid, p in POINTS.items()}
    return rec.validate_record(raw, "amy", "02_qkv_attention", cells)


def _assert_fields(record: dict) -> None:
    cells = record["cells"]
    mistake = cells["mistake-test"]["failure"]
    assert (mistake["error"], mistake["exercise"]) == ("CheckFailed", SDPA)
    assert (mistake["mistake"], mistake["sentence"]) == (NO_SCALE.key, NO_SCALE.sentence)
    assert mistake["problem"].startswith("output differs in")
    assert mistake["case"].endswith("(float64 on cpu)") and mistake["crash"] is None
    crash = cells["crash-test"]["failure"]
    assert (crash["exercise"], crash["mistake"]) == (SDPA, None)
    assert crash["crash"] == {
        "type": "RuntimeError",
        "message": "shape '[-1, 7]' is invalid for input of size 12",
        "line": f"cell 4, line 2: {CRASHING_LINE}",
    }
    assert crash["kind"] == "CheckFailed: your code raised RuntimeError"
    untouched = cells["untouched-test"]["failure"]
    assert (untouched["error"], untouched["kind"]) == (
        "NotImplementedError",
        failures.NOT_ATTEMPTED,
    )
    assert untouched["mistake"] is None and untouched["crash"] is None
    assert cells["pass-test"]["passed"] and cells["pass-test"]["failure"] is None


@pytest.mark.slow
def test_the_record_carries_the_judges_failures_as_fields(verdicts):
    record = _record(verdicts)
    _assert_fields(record)
    # what a reader of the record (report, feedback) gets: the same fields, and the page of a
    # failed check as the notebook shows it, the student's crashing line included
    kept = rec.clean_record(record, "02_qkv_attention")["cells"]
    assert kept["crash-test"]["failure"] == record["cells"]["crash-test"]["failure"]
    page = feedback.failure_text(kept["crash-test"]["failure"])
    assert page.startswith(f"✗ {SDPA}: check failed\nYour code raised RuntimeError: shape")
    assert CRASHING_LINE in page and "Case: q (3, 4)" in page
    page = feedback.failure_text(kept["mistake-test"]["failure"])
    assert f"Likely mistake: {NO_SCALE.sentence}" in page


MUTANTS = {
    "the judge drops the mistake key": lambda f: {**f, "mistake": None},
    "the judge drops the student's crash": lambda f: {**f, "crash": None},
    "the judge hands over only the text": lambda f: failures.failure_named(
        f["error"], f["message"]
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_judge_that_loses_a_field_fails_the_check(verdicts, mutant):
    change = MUTANTS[mutant]
    lost = {
        gid: {**v, "failure": change(v["failure"]) if v["failure"] else None}
        for gid, v in verdicts.items()
    }
    with pytest.raises(AssertionError):
        _assert_fields(_record(lost))


def test_a_record_keeps_only_a_failures_known_fields_as_capped_text():
    raw = {
        "error": "CheckFailed",
        "mistake": "x" * 5000,
        "crash": {"type": "RuntimeError", "line": 3, "extra": "dropped"},
        "extra": "dropped",
    }
    clean = failures.clean_failure(raw)
    assert set(clean) == set(failures.FIELDS) | {"crash"} and "extra" not in clean["crash"]
    assert len(clean["mistake"]) == failures.TEXT and clean["crash"]["line"] == "3"
    assert clean["kind"] == "CheckFailed: your code raised RuntimeError"
    for junk in (None, "CheckFailed: text", {"error": 3}, ["error"]):
        assert failures.clean_failure(junk) is None
