"""What a student meets in JupyterLab (issue 29): short, true messages.

- A refusal ("implement this yourself") never suggests an operation the exercise forbids.

Each assertion is a function, and each has a mutant (the old behaviour, or a plausible wrong
implementation) that must fail it.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from transformer_lab import check

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
