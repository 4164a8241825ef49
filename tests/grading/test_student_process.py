"""The student's process starts warm (`verify_child.warm_torch`): what torch imports lazily on a
check's first gradient (sympy, through torch.fx) is imported before the student's first line, so
that no guarded request pays for an import under the guard's call monitor, which made it about
three times dearer (1.4 CPU s a notebook of lesson 05, benchmarks/history/journal.md §38).

The probe is a student's cell that asks for a gradient with `grad_outputs` (what
`check.compare.backward` asks of the student's process) and writes down how many modules it
imported. The mutant is the student's process with the warm-up switched off.
"""

from __future__ import annotations

import json
import time

import pytest

from transformer_lab_grader import verify_session

PROBE = """
import json, sys
import torch
before = set(sys.modules)
x = torch.randn(3, requires_grad=True)
torch.autograd.grad(x * 3, x, torch.randn(3))
open("probe.json", "w").write(json.dumps(len(set(sys.modules) - before)))
"""


def _imported_by_the_first_gradient(tmp_path) -> int:
    session = verify_session.Session(
        [[0, PROBE, 60.0, 60.0]], tmp_path, time.monotonic() + 300, memory=None
    )
    try:
        assert not session.dead, session.dead
        assert session.cell_errors == {}, session.cell_errors
    finally:
        session.close()
    return json.loads((tmp_path / "probe.json").read_text())


def test_the_students_process_has_imported_what_a_gradient_needs(tmp_path):
    assert _imported_by_the_first_gradient(tmp_path) == 0


def test_a_students_process_without_the_warm_up_imports_under_the_guard(tmp_path, monkeypatch):
    mutant = verify_session.CHILD_MAIN.replace(
        "from transformer_lab_grader.verify_child import child_main; ",
        "from transformer_lab_grader import verify_child; "
        "verify_child.warm_torch = lambda torch: None; "
        "from transformer_lab_grader.verify_child import child_main; ",
    )
    assert mutant != verify_session.CHILD_MAIN
    monkeypatch.setattr(verify_session, "CHILD_MAIN", mutant)
    imported = _imported_by_the_first_gradient(tmp_path)
    if imported == 0:
        pytest.skip("this torch imports nothing on a first gradient: nothing to warm")
    assert imported > 0


class _BrokenTorch:
    """A torch whose gradients fail: the warm-up is only a saving and must not stop grading."""

    @staticmethod
    def ones(*shape, requires_grad=False):
        raise RuntimeError("no autograd in this build")


def test_a_warm_up_that_fails_loses_nothing():
    from transformer_lab_grader import verify_child

    verify_child.warm_torch(_BrokenTorch)  # no exception: the process goes on to the cells


def test_the_broken_torch_does_fail_an_unguarded_warm_up():
    with pytest.raises(RuntimeError, match="no autograd"):
        x = _BrokenTorch.ones(2, requires_grad=True)  # what warm_torch runs, unguarded
        del x
