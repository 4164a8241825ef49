"""Check fixes (heldout6, helper f6c): right answers that checks rejected for their Python type.

A count or a number computed with NumPy or torch comes back as a NumPy scalar (np.int64,
np.float64), a NumPy array or a 0-d tensor. `check.answers.plain_number` reads such a value as
the plain Python number it holds, and four checks now use it:

- practice_john: `rnn_steps` / `attention_layers` may be any whole number (np.int64, a 0-d
  integer tensor, 11.0); a bool, a fractional value (11.5) and a non-number are still rejected;
- sequential_steps: np.int64 and a 0-d integer tensor are ints (the text asks for an `int`); a
  float such as 4.0 (also np.float64 or a float tensor) is still the catalogued "float-steps";
- practice_thinking: the weights as a NumPy array of two numbers (or NumPy numbers / 0-d tensors
  in a list) are read like a tensor of two numbers; three numbers are still rejected;
- training_flops: "return 6 N D as a number": an np.int64 or a 0-d tensor is compared by value,
  and a wrong one is named by its mistake as an int would be.

The right answers that found these are heldout6's REJECTED (benchmarks/heldout6/extra_right.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer_lab import check
from transformer_lab.check import answers, lesson01

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from heldout6.extra_right import REJECTED  # noqa: E402

RIGHT_JOHN = {"answer": "B", "rnn_steps": 11, "attention_layers": 1}


def _failure(check_fn, value, **kwargs) -> check.CheckFailed:
    with pytest.raises(check.CheckFailed) as info:
        check_fn(value, **kwargs)
    return info.value


def _ids(values):
    return [getattr(v, "__name__", None) or repr(v)[:40] for v in values]


# -- the shared helper ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value,expected",
    [
        (np.int64(11), 11),
        (np.uint8(3), 3),
        (np.float64(0.5), 0.5),
        (np.float32(0.25), 0.25),
        (np.array(7), 7),
        (torch.tensor(11), 11),
        (torch.tensor(0.5, dtype=torch.float64), 0.5),
        (torch.tensor(2.0, requires_grad=True), 2.0),
    ],
)
def test_plain_number_reads_numpy_scalars_and_0d_tensors(value, expected):
    got = answers.plain_number(value)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    "value",
    [True, np.bool_(True), torch.tensor(True), "11", [1, 2], torch.tensor([11]), np.array([1, 2])],
    ids=repr,
)
def test_plain_number_leaves_everything_else_alone(value):
    assert answers.plain_number(value) is value


# -- practice_john --------------------------------------------------------------------------------


@pytest.mark.parametrize("thorough", [False, True])
@pytest.mark.parametrize("value", REJECTED["practice_john"], ids=_ids(REJECTED["practice_john"]))
def test_practice_john_counts_computed_with_numpy_or_torch_pass(value, thorough):
    assert check.practice_john(value, thorough=thorough) is None


@pytest.mark.parametrize(
    "change",
    [
        {"rnn_steps": np.int64(11)},
        {"rnn_steps": torch.tensor(11.0)},
        {"attention_layers": torch.tensor(1)},
        {"attention_layers": 1.0},
        {"rnn_steps": np.float64(11.0)},
    ],
    ids=repr,
)
def test_practice_john_other_whole_numbers_pass(change):
    assert check.practice_john(dict(RIGHT_JOHN, **change)) is None


@pytest.mark.parametrize("thorough", [False, True])
@pytest.mark.parametrize(
    "key,wrong",
    [
        ("rnn_steps", 11.5),
        ("rnn_steps", np.float64(11.5)),
        ("rnn_steps", torch.tensor(11.5)),
        ("rnn_steps", True),
        ("attention_layers", np.bool_(True)),
        ("attention_layers", torch.tensor(True)),
        ("rnn_steps", "11"),
        ("rnn_steps", torch.tensor([11])),
        ("rnn_steps", np.array([11])),
        ("rnn_steps", float("inf")),
        ("attention_layers", None),
    ],
    ids=repr,
)
def test_practice_john_still_rejects_what_is_not_a_whole_number(key, wrong, thorough):
    failure = _failure(check.practice_john, dict(RIGHT_JOHN, **{key: wrong}), thorough=thorough)
    assert f"{key} should be a whole number, got {wrong!r}" in str(failure)
    assert failure.mistake is None


@pytest.mark.parametrize(
    "change,key",
    [
        ({"rnn_steps": np.int64(12)}, "counted-both-ends"),
        ({"rnn_steps": torch.tensor(10)}, "words-between"),
        ({"rnn_steps": 16.0}, "whole-sentence"),
        ({"attention_layers": np.int64(0)}, "attention-zero-layers"),
    ],
)
def test_practice_john_a_wrong_count_in_another_type_is_named_as_an_int_is(change, key):
    failure = _failure(check.practice_john, dict(RIGHT_JOHN, **change))
    assert failure.mistake == lesson01._john_mistakes()[key].sentence


# -- sequential_steps -----------------------------------------------------------------------------


def _steps(kind, n, kernel_size=3):
    if kind == "rnn":
        return n
    if kind == "attention":
        return 1
    if kind == "conv":
        return max(1, -(-(n - 1) // (kernel_size - 1)))
    raise ValueError(f"unknown kind {kind!r}")


def sequential_steps_np_int64(kind, n, kernel_size=3):
    """Counts computed with NumPy: np.int64 (an int: operator.index accepts it)."""
    return np.int64(_steps(kind, n, kernel_size))


def sequential_steps_tensor(kind, n, kernel_size=3):
    """Counts computed with torch: a 0-d integer tensor."""
    return torch.tensor(_steps(kind, n, kernel_size))


@pytest.mark.parametrize("thorough", [False, True])
@pytest.mark.parametrize("impl", [sequential_steps_np_int64, sequential_steps_tensor])
def test_sequential_steps_numpy_and_tensor_ints_pass(impl, thorough):
    check.sequential_steps(impl, thorough=thorough)


@pytest.mark.parametrize("thorough", [False, True])
@pytest.mark.parametrize(
    "to_float,shown",
    [
        (float, "1.0"),
        (np.float64, "np.float64(1.0)"),
        (lambda v: torch.tensor(float(v)), "tensor(1.)"),
    ],
    ids=["float", "np.float64", "float tensor"],
)
def test_sequential_steps_a_float_count_is_still_named_float_steps(to_float, shown, thorough):
    def steps_float(kind, n, kernel_size=3):
        return to_float(_steps(kind, n, kernel_size))

    failure = _failure(check.sequential_steps, steps_float, thorough=thorough)
    assert failure.mistake_key == "float-steps"
    ex = check.EXERCISES["sequential_steps"]
    assert failure.mistake == ex.mistake("float-steps").sentence
    assert (
        failure.problem == f"sequential_steps('rnn', 1, kernel_size=3) returned {shown}, expected 1"
    )


def test_sequential_steps_a_wrong_numpy_count_is_named_by_its_mistake():
    def rnn_n_minus_1(kind, n, kernel_size=3):
        return np.int64(n - 1 if kind == "rnn" else _steps(kind, n, kernel_size))

    failure = _failure(check.sequential_steps, rnn_n_minus_1)
    assert failure.mistake_key == "rnn-n-minus-1"


def test_sequential_steps_a_one_element_tensor_is_still_rejected():
    failure = _failure(
        check.sequential_steps, lambda kind, n, kernel_size=3: torch.tensor([_steps(kind, n)])
    )
    assert "returned tensor([1])" in failure.problem


# -- practice_thinking ----------------------------------------------------------------------------


@pytest.mark.parametrize("thorough", [False, True])
@pytest.mark.parametrize(
    "weights",
    [
        REJECTED["practice_thinking"][0]["weights"],  # np.exp(...) / np.exp(...).sum()
        [np.float32(0.88), np.float32(0.12)],
        (np.float64(0.88), np.float64(0.12)),
        [torch.tensor(0.88), torch.tensor(0.12)],
        np.array([[0.88], [0.12]]),
    ],
    ids=["ndarray", "np.float32 list", "np.float64 tuple", "0-d tensors", "2x1 ndarray"],
)
def test_practice_thinking_numpy_weights_pass(weights, thorough):
    assert check.practice_thinking({"weights": weights, "answer": "C"}, thorough=thorough) is None


@pytest.mark.parametrize("thorough", [False, True])
def test_practice_thinking_the_rejected_answer_passes(thorough):
    (value,) = REJECTED["practice_thinking"]
    assert check.practice_thinking(value, thorough=thorough) is None


@pytest.mark.parametrize(
    "weights",
    [
        np.array([0.88, 0.12, 0.0]),
        torch.tensor([0.88, 0.12, 0.0]),
        [np.float64(0.88), np.float64(0.12), np.float64(0.0)],
        np.array(["0.88", "0.12"]),
        [np.bool_(True), np.bool_(False)],
        "0.88, 0.12",
    ],
    ids=repr,
)
def test_practice_thinking_still_rejects_what_is_not_two_numbers(weights):
    failure = _failure(check.practice_thinking, {"weights": weights, "answer": "C"})
    assert '"weights" should be two numbers' in str(failure)


def test_practice_thinking_wrong_numpy_weights_are_named():
    dots = np.array([112.0, 96.0])
    no_scale = np.exp(dots - dots.max()) / np.exp(dots - dots.max()).sum()
    failure = _failure(check.practice_thinking, {"weights": no_scale, "answer": "C"})
    assert failure.mistake_key == "no-scale"


def test_practice_thinking_one_weight_as_a_0d_tensor_is_named_first_weight_only():
    failure = _failure(check.practice_thinking, {"weights": torch.tensor(0.88), "answer": "C"})
    assert failure.mistake_key == "first-weight-only"


# -- training_flops -------------------------------------------------------------------------------


@pytest.mark.parametrize("thorough", [False, True])
@pytest.mark.parametrize("impl", REJECTED["training_flops"], ids=_ids(REJECTED["training_flops"]))
def test_training_flops_numpy_and_tensor_results_pass(impl, thorough):
    check.training_flops(impl, thorough=thorough)


def training_flops_np_forward_only(model, batch_size, block_size, n_steps):
    """2 N D, with wpe left out of N too, as an np.int64 (the forward pass only)."""
    n = np.sum([p.numel() for k, p in model.named_parameters() if not k.startswith(("wte", "wpe"))])
    return 2 * n * batch_size * block_size * n_steps


def test_training_flops_a_wrong_numpy_result_is_named_and_shown_as_a_number():
    failure = _failure(check.training_flops, training_flops_np_forward_only)
    assert failure.mistake_key == "forward-only"
    assert failure.problem.startswith("returned ") and "FLOPs, expected" in failure.problem


@pytest.mark.parametrize(
    "result,kind",
    [(True, "bool"), ("6ND", "str"), (torch.tensor([6]), "Tensor"), (np.array([6]), "ndarray")],
    ids=["bool", "str", "1-element tensor", "1-element array"],
)
def test_training_flops_still_rejects_what_is_not_a_number(result, kind):
    failure = _failure(check.training_flops, lambda model, batch_size, block_size, n_steps: result)
    assert failure.problem == f"the result should be a number (of FLOPs) but is a {kind}"
