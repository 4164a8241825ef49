"""Each mistake costs its own exercise (issue 28, item 7).

Lesson 02's SelfAttention calls the student's `scaled_dot_product_attention` by its notebook
name. Graded, it runs with the course's attention in place of the student's (`Exercise.uses`,
`instructor.verify_earlier`), and its test cell says so: a student whose attention lacks √d_k
loses the attention exercise's 5 points and keeps SelfAttention's 3; the class report counts one
mistake. A mutant grader without the substitution (the student's process started without the
course's parts) counts it twice, and a student whose two parts are both wrong loses both.

The judged runs use a slim lesson 02 (its setup and graded cells, no demonstrations): about 10 s
each. The declarations are checked against the solution notebooks (what each solution cell calls).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from transformer_lab import attention, check, multihead
from transformer_lab.check import Exercise
from transformer_lab_grader import report_summary, verify_child, verify_session
from transformer_lab_grader import verify as V
from transformer_lab_grader.verify_earlier import course_parts, in_place, note, stand_in
from transformer_lab_grader.verify_guard import Guard, capture

ROOT = Path(__file__).resolve().parents[2]
L02 = "02_qkv_attention"
SLIM = ("colab-setup", "setup", "sdpa-solution", "sdpa-test", "self-attention-solution")
SLIM += ("self-attention-test",)

NOTE = note("SelfAttention", ("scaled_dot_product_attention",))


def _solution_cells() -> dict[str, str]:
    """{cell id: source} of lesson 02's solution notebook."""
    solution = nbformat.read(ROOT / "solutions" / L02 / f"{L02}.ipynb", as_version=4)
    return {c.get("id"): c.source for c in solution.cells}


def _wrong(cell_id: str, right: str, wrong: str) -> str:
    """Lesson 02's solution cell `cell_id` with one mistake made."""
    source = _solution_cells()[cell_id]
    assert source.count(right) == 1, (cell_id, right)
    return source.replace(right, wrong)


NO_SCALE = _wrong("sdpa-solution", " / math.sqrt(d_k)", "")  # the attention without √d_k
KEYS_FROM_W_Q = _wrong("self-attention-solution", "self.w_k(x)", "self.w_q(x)")


# ---------------------------------------------------------------------------------------------
# The declarations: every exercise names the earlier exercises its solution calls.


def _graded_parts(lesson_dir: Path) -> list[tuple[str, set[str]]]:
    """[(exercise, names its solution cell loads)] of one solution notebook, in order."""
    nb = nbformat.read(lesson_dir / f"{lesson_dir.name}.ipynb", as_version=4)
    parts, loads = [], set()
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code":
            continue
        if meta.get("solution"):
            tree = ast.parse(cell.source)
            loads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        elif meta.get("grade"):
            called = re.search(r"check\.(\w+)\(", cell.source).group(1)
            parts.append((called, loads))
    return parts


def test_every_exercise_declares_the_earlier_parts_its_solution_calls():
    found = {}
    for lesson_dir in sorted((ROOT / "solutions").iterdir()):
        earlier: list[str] = []
        for exercise, loads in _graded_parts(lesson_dir):
            calls = tuple(name for name in earlier if name in loads)
            if exercise in check.EXERCISES:
                assert check.EXERCISES[exercise].uses == calls, exercise
                found[exercise] = calls
            earlier.append(exercise)
    assert {name: uses for name, uses in found.items() if uses} == {
        "SelfAttention": ("scaled_dot_product_attention",),
        "MultiHeadAttention": ("split_heads", "merge_heads"),
        "EncoderBlock": ("LayerNorm", "FeedForward"),
        "sample_next": ("next_token_probs",),
        "ViTEmbedding": ("patchify",),
    }


@pytest.mark.parametrize(
    ("uses", "error"),
    [
        (("no_such_exercise",), "not an exercise declared before it"),
        (("RNN",), "of lesson 01; only an earlier exercise of the same notebook"),
        ("scaled_dot_product_attention", "uses is a tuple of exercise names"),
    ],
)
def test_a_wrong_declaration_is_a_clear_error(uses, error):
    before = dict(check.EXERCISES)
    with pytest.raises((ValueError, TypeError), match=re.escape(error)):
        Exercise("Scratch", "02", "attention", attention.SelfAttention, uses=uses)
    assert dict(check.EXERCISES) == before


# ---------------------------------------------------------------------------------------------
# The student's process: the course's parts rebound, put back, and let through by the guard.


def test_the_notebook_names_are_rebound_for_the_call_and_put_back():
    mine = object()
    ns = {"scaled_dot_product_attention": mine}
    parts = course_parts(check.EXERCISES)["MultiHeadAttention"]
    with in_place(ns, parts):
        assert ns["split_heads"] is parts["split_heads"]
        assert ns["scaled_dot_product_attention"] is mine
    assert ns == {"scaled_dot_product_attention": mine}  # split_heads was not there: removed


def test_the_stand_ins_compute_what_the_reference_computes():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 4, generator=g) for _ in range(3))
    sdpa = stand_in(attention.scaled_dot_product_attention)
    for got, want in zip(sdpa(q, k, v), attention.scaled_dot_product_attention(q, k, v)):
        torch.testing.assert_close(got, want)
    mha = stand_in(multihead.MultiHeadAttention)(8, 2)
    assert isinstance(mha, multihead.MultiHeadAttention)
    reference = multihead.MultiHeadAttention(8, 2)
    reference.load_state_dict(mha.state_dict())
    x = torch.randn(2, 3, 8, generator=g)
    torch.testing.assert_close(mha(x), reference(x))


STUDENT_CELL = """
def forward_of_mine(q, k, v):
    return scaled_dot_product_attention(q, k, v)

def build_mine():
    return MultiHeadAttention(8, 2)
"""


@pytest.mark.parametrize("course", [True, False], ids=["stand-ins", "mutant-raw-references"])
def test_the_guard_lets_the_course_parts_through(course):
    """SelfAttention forbids the course's attention and MultiHeadAttention for the student's own
    use: called from the student's code (compiled as a notebook cell) under SelfAttention's guard,
    the stand-ins pass; the raw references (a mutant `course_parts`) are refused."""
    ns = {}
    exec(compile(STUDENT_CELL, "<cell 5>", "exec"), ns)  # noqa: S102
    refs = {
        "scaled_dot_product_attention": attention.scaled_dot_product_attention,
        "MultiHeadAttention": multihead.MultiHeadAttention,
    }
    parts = {n: stand_in(r) for n, r in refs.items()} if course else refs
    q = torch.randn(1, 2, 4)
    guard = Guard(capture(check), check.forbid, "SelfAttention")
    profile = sys.getprofile()
    try:
        with in_place(ns, parts), guard:
            ns["forward_of_mine"](q, q, q)
            ns["build_mine"]()
    finally:
        sys.setprofile(profile)
    if course:
        assert guard.refused == []
    else:
        assert guard.refused == [
            "called forbidden transformer_lab.attention.scaled_dot_product_attention",
            "called forbidden transformer_lab.multihead.MultiHeadAttention",
        ]


# ---------------------------------------------------------------------------------------------
# Judged: lesson 02, the attention wrong.


def _submission(tmp_path: Path, answers: dict[str, str]) -> Path:
    """The released lesson 02, slim, the solutions in, `answers` replacing some by grade id."""
    nb = nbformat.read(ROOT / "exercises" / L02 / f"{L02}.ipynb", as_version=4)
    sources = _solution_cells()
    nb.cells = [c for c in nb.cells if c.get("id") in SLIM]
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = answers.get(cell.id, sources[cell.id])
    path = tmp_path / "submitted" / f"{L02}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    return path


def _judged(tmp_path: Path, answers: dict[str, str]) -> dict:
    return V.verify(L02, _submission(tmp_path, answers), tmp_path / "work", course=ROOT)


def _score(result: dict) -> float:
    """The points of the passed test cells (the released notebook's: sdpa 5, SelfAttention 3)."""
    points = report_summary.released_cells(ROOT, L02)
    return sum(points[gid]["max_score"] for gid, c in result["cells"].items() if c["passed"])


def _mistakes(result: dict) -> list[tuple[str, str]]:
    """The class report's named mistakes for a class of this one student."""
    catalogue = report_summary.mistake_catalogue()
    cells = report_summary.released_cells(ROOT, L02, catalogue)
    record = {
        "status": "graded",
        "cells": {
            gid: {
                "passed": c["passed"],
                "output": c["message"],
                "failure": c.get("failure"),
                "exercises": [],
            }
            for gid, c in result["cells"].items()
        },
    }
    named, unnamed = report_summary.count_mistakes({"student": record}, cells, catalogue, [])
    assert not unnamed
    return sorted(named)


def _mutant_child(monkeypatch) -> None:
    """The grader without the substitution: its student's process has no course parts."""
    mutant = verify_session.CHILD_MAIN.replace(
        "from transformer_lab_grader.verify_child import child_main; ",
        "from transformer_lab_grader import verify_child; "
        "verify_child.course_parts = lambda exercises: {}; "
        "from transformer_lab_grader.verify_child import child_main; ",
    )
    assert mutant != verify_session.CHILD_MAIN
    assert hasattr(verify_child, "course_parts")
    monkeypatch.setattr(verify_session, "CHILD_MAIN", mutant)


NO_SCALE_SENTENCE = check.scaled_dot_product_attention.mistake("no-scale").sentence


@pytest.mark.slow
def test_wrong_attention_costs_only_the_attention_exercise(tmp_path):
    result = _judged(tmp_path, {"sdpa-solution": NO_SCALE})
    assert {gid: c["passed"] for gid, c in result["cells"].items()} == {
        "sdpa-test": False,
        "self-attention-test": True,
    }
    assert _score(result) == 3.0
    assert _mistakes(result) == [("scaled_dot_product_attention", NO_SCALE_SENTENCE)]
    # the test cell's output (what the feedback page shows) says whose attention it ran on
    message = result["cells"]["self-attention-test"]["message"]
    assert message.startswith(NOTE + "\n✓ SelfAttention: all 5 visible checks passed")
    assert message.count(NOTE) == 1
    assert "in place of yours" not in result["cells"]["sdpa-test"]["message"]
    assert result["flags"] == []


@pytest.mark.slow
def test_mutant_grader_without_the_substitution_counts_the_mistake_twice(tmp_path, monkeypatch):
    _mutant_child(monkeypatch)
    result = _judged(tmp_path, {"sdpa-solution": NO_SCALE})
    assert {gid: c["passed"] for gid, c in result["cells"].items()} == {
        "sdpa-test": False,
        "self-attention-test": False,
    }
    assert _score(result) == 0.0
    assert _mistakes(result) == [
        ("SelfAttention", check.SelfAttention.mistake("no-scale").sentence),
        ("scaled_dot_product_attention", NO_SCALE_SENTENCE),
    ]


@pytest.mark.slow
def test_both_parts_wrong_lose_both(tmp_path):
    result = _judged(
        tmp_path, {"sdpa-solution": NO_SCALE, "self-attention-solution": KEYS_FROM_W_Q}
    )
    assert {gid: c["passed"] for gid, c in result["cells"].items()} == {
        "sdpa-test": False,
        "self-attention-test": False,
    }
    assert _score(result) == 0.0
    assert _mistakes(result) == [  # its own mistake, not the attention's
        ("SelfAttention", check.SelfAttention.mistake("keys-from-w_q").sentence),
        ("scaled_dot_product_attention", NO_SCALE_SENTENCE),
    ]
