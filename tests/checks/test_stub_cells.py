"""check/stub_cells.py: a notebook cell other than a check's that reaches an untouched stub shows
one line in IPython (issue 29's walk: exercise 02's demo cells showed 24-line tracebacks)."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest
from IPython.core.interactiveshell import InteractiveShell

from transformer_lab.check import feedback, stub_cells

STUB = """
import torch
from torch import nn

class SelfAttention(nn.Module):
    def forward(self, x):
        # YOUR CODE HERE
        raise NotImplementedError()
"""


@pytest.fixture
def shell():
    shell = InteractiveShell.instance()
    shell.run_cell("from transformer_lab import check")
    stub_cells.install(shell)  # done by that import when it is the kernel's first (not here)
    shell.run_cell(STUB)
    yield shell
    InteractiveShell.clear_instance()


def _run(shell, code: str, store_history: bool = False):
    out = io.StringIO()
    with redirect_stdout(out):
        result = shell.run_cell(code, store_history=store_history)
    return result, feedback.strip_ansi(out.getvalue()).strip()


def test_a_demo_cell_reaching_a_stub_shows_one_line_and_fails(shell):
    result, text = _run(shell, "out = SelfAttention()(torch.ones(2))  # a demo cell")
    assert type(result.error_in_exec) is NotImplementedError and not result.success
    assert text == (
        "✗ `SelfAttention.forward` is not written yet: fill in its cell (this cell uses it)."
    )


def test_an_untouched_answer_cell_shows_one_line_and_fails(shell):
    """A practice question's released cell: the answer's name set to ..., then nbgrader's stub."""
    code = "practice = ...\n# YOUR CODE HERE\nraise NotImplementedError()"
    result, text = _run(shell, code)
    assert type(result.error_in_exec) is NotImplementedError and not result.success
    assert " ".join(text.split()) == "✗ " + stub_cells.CELL_NOT_WRITTEN  # one message, wrapped
    assert shell.user_ns["practice"] is ...  # so the check cell after it says "not written yet"


def test_other_not_implemented_errors_keep_their_traceback(shell):
    _, text = _run(shell, "raise NotImplementedError('mine, with a reason')")
    assert "Traceback" in text and "mine, with a reason" in text
    _, text = _run(shell, "def f():\n    raise NotImplementedError()\nf() if False else 1/0")
    assert "ZeroDivisionError" in text and "Traceback" in text


def test_mutant_without_the_handler_shows_the_traceback(shell):
    shell.set_custom_exc((), None)  # what a cell showed before stub_cells
    _, text = _run(shell, "out = SelfAttention()(torch.ones(2))")
    assert "Traceback" in text and len(text.splitlines()) > 5


def test_install_leaves_another_handler_alone(shell):
    def other(shell, etype, value, tb, tb_offset=None):
        return ["other"]

    shell.set_custom_exc((ValueError,), other)
    stub_cells.install(shell)
    assert shell.custom_exceptions == (ValueError,)


def test_a_check_reaching_a_stub_keeps_its_own_line(shell):
    shell.run_cell(
        "def online_softmax(scores, block_size):\n    # YOUR CODE HERE\n"
        "    raise NotImplementedError()"
    )
    result, text = _run(shell, "check.online_softmax(online_softmax)")
    assert isinstance(result.error_in_exec, NotImplementedError)
    assert text == "✗ `online_softmax` is not written yet: fill in the cell above."


def test_a_name_that_a_failed_cell_never_set_is_named_in_one_line(shell):
    """Exercise 09's walk: a demo cell sets `merges` by calling an untouched stub, so the next
    cell's NameError points at the wrong cell; it says which cell to fix instead."""
    shell.run_cell("merges = SelfAttention()(torch.ones(2))  # stops", store_history=True)
    result, text = _run(shell, "ranks = dict(enumerate(merges))", store_history=True)
    assert type(result.error_in_exec) is NameError and not result.success  # still fails
    assert " ".join(text.split()) == "✗ " + stub_cells.failed_before_line("merges")


def test_a_name_no_cell_sets_keeps_its_traceback(shell):
    shell.run_cell("def helper():\n    merged = 1\n    return merged", store_history=True)
    for typo in ("mergse", "merged"):  # never set; set only inside a function
        _, text = _run(shell, f"print({typo})", store_history=True)
        assert "Traceback" in text and f"name '{typo}' is not defined" in text
    shell.run_cell("total = 0", store_history=True)  # a global, then a local of the same name
    _, text = _run(shell, "def add():\n    total += 1\nadd()", store_history=True)
    assert "Traceback" in text and "UnboundLocalError" in text


def test_mutant_handling_only_not_implemented_shows_the_name_error_traceback(shell):
    shell.set_custom_exc((NotImplementedError,), stub_cells.show_stub)  # as before
    shell.run_cell("merges = SelfAttention()(torch.ones(2))", store_history=True)
    _, text = _run(shell, "print(merges)", store_history=True)
    assert "Traceback" in text and len(text.splitlines()) > 3
