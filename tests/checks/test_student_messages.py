"""What a student meets in JupyterLab (issue 29): short, true messages.

- A refusal ("implement this yourself") never suggests an operation the exercise forbids.
- A scalar that differs reads "got 0.5, expected 0.25", without an index or a count.
- Message lines are wrapped at spaces (JupyterLab breaks long lines mid-word), never inside a
  word or a `code` span.

Each assertion is a function, and each has a mutant (the old behaviour, or a plausible wrong
implementation) that must fail it.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from transformer_lab import check
from transformer_lab.check import feedback
from transformer_lab.check.engine import CheckFailed, compare_tensor

forbid = importlib.import_module("transformer_lab.check.forbid")  # check.forbid is the function


@pytest.fixture(autouse=True)
def _grading(monkeypatch):
    monkeypatch.setenv("TRANSFORMER_LAB_GRADING", "1")  # nothing is saved


def _cell(source: str, tmp_path: Path, namespace: dict | None = None) -> dict:
    """Run `source` as a notebook cell would (its own file, outside the course), in `namespace`."""
    path = tmp_path / f"cell{len(list(tmp_path.iterdir()))}.py"
    path.write_text(source)
    if namespace is None:
        namespace = {"torch": torch, "nn": nn}
    namespace.setdefault("__name__", "__main__")  # what a notebook's classes have as __module__
    exec(compile(source, str(path), "exec"), namespace)  # noqa: S102 - test code
    return namespace


def _raised(call) -> BaseException:
    with pytest.raises(BaseException) as info:
        call()
    return info.value


# ----------------------------------------------------------------------------------------------
# A refusal never suggests what the exercise forbids.


def _suggested(message: str) -> list[str]:
    match = re.search(r"basic tensor operations(?: \(([^()]*)\))?\.", message)
    assert match, message
    return [op for op in (match.group(1) or "").split(", ") if op and op != "..."]


def assert_suggests_nothing_forbidden(message: str, forbidden) -> None:
    banned = {dotted.rsplit(".", 1)[-1] for dotted in forbidden}
    aliases = {"@": {"matmul", "__matmul__", "mm", "bmm"}}
    for op in _suggested(message):
        assert banned.isdisjoint(aliases.get(op, {op})), (op, message)


def _refusal(tmp_path, source: str, name: str) -> str:
    ns = _cell(source, tmp_path)
    err = _raised(lambda: getattr(check, name)(ns[name]))
    assert isinstance(err, check.ImplementThisYourself), repr(err)
    return str(err)


SOFTMAX_USER = "def online_softmax(scores, block_size):\n    return torch.softmax(scores, -1)\n"
FUSED_USER = (
    "def scaled_dot_product_attention(q, k, v, mask=None):\n"
    "    return torch.nn.functional.scaled_dot_product_attention(q, k, v), None\n"
)


def test_online_softmax_refusal_does_not_suggest_softmax(tmp_path):
    message = _refusal(tmp_path, SOFTMAX_USER, "online_softmax")
    assert_suggests_nothing_forbidden(message, check.online_softmax.forbidden)
    assert "softmax" not in _suggested(message) and "exp" in _suggested(message)
    # where softmax is allowed, it is suggested: the list is derived, not emptied
    message = _refusal(tmp_path, FUSED_USER, "scaled_dot_product_attention")
    assert "softmax" in _suggested(message)


@pytest.mark.parametrize("name", list(check.EXERCISES))
def test_no_exercise_suggests_what_it_forbids(name):
    forbidden = tuple(check.EXERCISES[name].forbidden)
    allowed = forbid.allowed_operations(forbidden)
    assert allowed  # something is always left to suggest
    message = f"Write it with basic tensor operations ({', '.join(allowed)}, ...)."
    assert_suggests_nothing_forbidden(message, forbidden)


def test_mutant_with_the_old_fixed_list_fails(monkeypatch, tmp_path):
    monkeypatch.setattr(forbid, "allowed_operations", lambda forbidden: ["@", "softmax", "tanh"])
    message = _refusal(tmp_path, SOFTMAX_USER, "online_softmax")
    with pytest.raises(AssertionError):
        assert_suggests_nothing_forbidden(message, check.online_softmax.forbidden)


# ----------------------------------------------------------------------------------------------
# A scalar reads naturally.

F64, CPU = torch.float64, torch.device("cpu")


def assert_natural_scalar(problem: str) -> None:
    """One value against one value: no index, no count of entries."""
    assert re.search(r"got \S+, expected \S+|where the reference gives \S+", problem), problem
    assert "index" not in problem and "entries" not in problem, problem


def test_a_scalar_that_differs_reads_got_and_expected():
    problem = compare_tensor(
        torch.tensor(0.25, dtype=F64), torch.tensor(0.5, dtype=F64), "loss", F64, CPU
    )
    assert problem.startswith("loss differs: got 0.5, expected 0.25 (tolerance atol=")
    assert_natural_scalar(problem)


@pytest.mark.parametrize(
    "got, expected, text",
    [
        (torch.tensor(3), torch.tensor(2), "count differs: got 3, expected 2"),
        (
            torch.tensor(float("nan"), dtype=F64),
            torch.tensor(0.25, dtype=F64),
            "count contains NaN where the reference gives 0.25",
        ),
        (
            torch.tensor(float("inf"), dtype=F64),
            torch.tensor(0.25, dtype=F64),
            "count contains inf where the reference gives 0.25",
        ),
        (
            torch.tensor([0.5], dtype=F64),
            torch.tensor([0.25], dtype=F64),
            "count differs: got 0.5, expected 0.25",
        ),
    ],
    ids=["integer", "nan", "inf", "one-entry"],
)
def test_every_kind_of_scalar_reads_naturally(got, expected, text):
    problem = compare_tensor(expected, got, "count", F64, CPU)
    assert problem.startswith(text), problem
    assert_natural_scalar(problem)


def test_a_tensor_still_says_where_it_differs():
    expected = torch.zeros(2, 3, dtype=F64)
    got = expected.clone()
    got[1, 2] = 1.0
    problem = compare_tensor(expected, got, "output", F64, CPU)
    assert "differs in 1 of 6 entries" in problem and "at index (1, 2)" in problem


def test_the_scalar_checks_say_it_too():
    err = _raised(lambda: check.lm_loss(lambda logits, targets: -(logits.log_softmax(-1).mean())))
    assert isinstance(err, CheckFailed)
    assert_natural_scalar(err.problem)
    assert re.match(r"loss differs: got -?[\d.]+, expected [\d.]+ \(tolerance", err.problem)


def test_mutant_with_the_old_scalar_wording_fails():
    old = (
        "loss differs in 1 of 1 entries; the largest difference is 0.25 at index () (got 0.5, "
        "expected 0.25; tolerance atol=1e-09, rtol=1e-07 for float64)"
    )
    with pytest.raises(AssertionError):
        assert_natural_scalar(old)


# ----------------------------------------------------------------------------------------------
# Lines are wrapped at spaces, never inside a word or a `code` span.

FIXTURE = Path(__file__).parent / "fixtures" / "check_messages.json"
MESSAGES = sorted(
    {
        m
        for per in json.loads(FIXTURE.read_text()).values()
        for v in per.values()
        for m in v.values()
    }
)


# What may not be broken: a `code` span, a short parenthesised group such as a shape.
UNBREAKABLE = re.compile(r"`[^`\n]+`|\([^()\n]{1,24}\)")


def assert_wrapped(text: str, lines: list[str], width: int = feedback.WIDTH) -> None:
    """Every line fits (or is one piece that cannot be broken), the words are the same words in
    the same order (none cut in two), and every `code` span sits on one line."""
    for line in lines:
        whole = UNBREAKABLE.sub(lambda m: m.group(0).replace(" ", "_"), line.strip())
        assert len(line) <= width or " " not in whole, line
    assert " ".join(lines).split() == text.split()
    for span in re.findall(r"`[^`\n]+`", text):
        assert any(span in line for line in lines), span


LONG = (
    "the positions to skip are those whose target is -100 (IGNORE_INDEX), not token 0: call "
    "`torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())` yourself, "
    "or mask with `targets != -100` before the mean, which counts only the positions that count."
)


@pytest.mark.parametrize("text", [LONG, *MESSAGES[:: max(1, len(MESSAGES) // 60)]])
def test_long_lines_wrap_at_spaces(text):
    assert_wrapped(text, feedback.wrap(text))


def test_a_rendered_failure_is_wrapped():
    err = CheckFailed(exercise="lm_loss", problem="loss differs", case="x (2, 3)", mistake=LONG)
    lines = feedback.render_text(err).splitlines()
    assert lines[0] == "✗ lm_loss: check failed" and lines[1].startswith("Likely mistake: ")
    assert all(len(line) <= feedback.WIDTH for line in lines), lines
    mistake = [line for line in lines[1:] if not line.startswith(("What differs", "Case"))]
    assert_wrapped("Likely mistake: " + LONG, mistake)


def test_the_passing_line_is_wrapped(tmp_path, capsys):
    ns = _cell(
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    w = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5)\n"
        "    if mask is not None:\n"
        "        w = w.masked_fill(~mask, float('-inf'))\n"
        "    w = w.softmax(-1).nan_to_num(0.0)\n"
        "    return w @ v, w\n",
        tmp_path,
    )
    assert check.scaled_dot_product_attention(ns["scaled_dot_product_attention"]) is None
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("✓ scaled_dot_product_attention: all ")
    assert all(len(line) <= feedback.WIDTH for line in lines), lines


@pytest.mark.parametrize(
    "mutant",
    [
        lambda text: [text],  # not wrapped
        lambda text: [text[i : i + feedback.WIDTH] for i in range(0, len(text), feedback.WIDTH)],
        lambda text: __import__("textwrap").wrap(text, 40),  # breaks code spans
    ],
    ids=["unwrapped", "mid-word", "inside-code"],
)
def test_mutant_wrappers_fail(mutant):
    with pytest.raises(AssertionError):
        assert_wrapped(LONG, mutant(LONG))
