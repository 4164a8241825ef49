"""Check fixes for lessons 01-06 that the fourth held-out set found (benchmarks/heldout4), each
tested with the held-out implementation that found it, and, where a case or a diagnoser was
added, with the check as it was (the new piece patched away):

- a float input changed in place (`q /= sqrt(d_k)` under torch.no_grad()) no longer escapes as
  autograd's raw RuntimeError from the reference's backward: FunctionDriver and ModuleDriver give
  the student its own copy of every tensor input, as ExactDriver does, and name a change
  ("in-place-input");
- a crash is named by the catalogued mistake that raises the very same error on the same case
  (a reshape's -1 and its spelled-out size read alike): the RNN's state sized by d_in, MHA's
  values from x and its context reshaped with L_q, the learned table's length from the batch axis;
- a module whose output does not depend on a parameter the reference's does is named (a bias
  left out by a weight used by hand, a layer a copy-paste slip never calls);
- ExactDriver runs each catalogued mistake on copies of its own, so that a mistake that changes
  its inputs in place (padding_mask's "tokens-changed") no longer spoils those after it;
- LearnedPositionalEmbedding keeps x's dtype beside a float32 table (a stated rule: "the same
  shape and dtype as x"), a new visible case;
- catalogue mistakes for the rest, by kind, and "several letters" for a one-letter question.

Each new catalogue mistake is also proven by the catalogue-wide test in
tests/checks/test_engine_and_lessons01_02.py (its mutant caught and named by the hidden check).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from transformer_lab import check
from transformer_lab.check import answer_drivers, drivers
from transformer_lab.check import lesson04 as checks04
from transformer_lab.check import lesson06 as checks06

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from heldout4 import lesson01, lesson02, lesson03, lesson04, lesson05, lesson06  # noqa: E402


def key_of(check_fn, impl, **kwargs):
    with pytest.raises(check.CheckFailed) as info:
        check_fn(impl, **kwargs)
    return info.value.mistake_key


def _wrong(module, name):
    return next(i for v in module.WRONG.values() for i in v if i.__name__ == name)


# ---------------------------------------------------------------------------------------------
# A float input changed in place: named, never autograd's raw error.


def test_sdpa_scaling_the_callers_q_in_place_is_named():
    with pytest.raises(check.CheckFailed) as info:
        check.scaled_dot_product_attention(lesson02.sdpa_inplace_scale)
    assert info.value.mistake_key == "in-place-input"
    assert info.value.problem == "your function changed its input `q` in place"


def test_sdpa_in_place_is_named_by_the_thorough_check_too():
    assert (
        key_of(check.scaled_dot_product_attention, lesson02.sdpa_inplace_scale, thorough=True)
        == "in-place-input"
    )


def test_mutant_shared_float_inputs_let_the_reference_backward_raise(monkeypatch):
    """The driver as it was: only integer and bool inputs copied, so the student's q is the
    reference's, and the reference's own backward meets the changed q."""
    monkeypatch.setattr(drivers, "_own_copy", lambda v: v if v.is_floating_point() else v.clone())
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        check.scaled_dot_product_attention(lesson02.sdpa_inplace_scale)


class _LearnedAddsInPlace(nn.Module):
    """The right sum, written into the caller's x under no_grad (so no leaf error)."""

    def __init__(self, n_positions, d_model):
        super().__init__()
        self.n_positions = n_positions
        self.embedding = nn.Embedding(n_positions, d_model)

    def forward(self, x, offset=0):
        with torch.no_grad():
            x += self.embedding(torch.arange(offset, offset + x.shape[1], device=x.device))
        return x


def test_a_module_changing_its_float_input_in_place_is_named():
    with pytest.raises(check.CheckFailed) as info:
        check.LearnedPositionalEmbedding(_LearnedAddsInPlace)
    assert info.value.mistake_key == "in-place-input"
    assert info.value.problem == "your forward changed its input `x` in place"


def test_an_input_left_alone_passes_with_nan_and_infinities():
    """A copy the student left alone keeps NaN where NaN was (NaN != NaN is no change)."""
    given = {"a": torch.tensor([float("nan"), float("-inf"), 1.0]), "n": torch.tensor([1, 2])}
    own = drivers.own_copies(given)
    assert own["a"] is not given["a"] and own["n"] is not given["n"]
    drivers.require_unchanged(check.EXERCISES["rotary_embedding"], given, own, "case")


# ---------------------------------------------------------------------------------------------
# A crash named by the catalogued mistake that raises the same error.


@pytest.mark.parametrize(
    "name, impl, key",
    [
        ("RNN", lesson01.RNNZerosSizedByInput, "state-sized-d_in"),
        ("MultiHeadAttention", lesson03.MHAContextOnlyForKeys, "values-from-x"),
        ("MultiHeadAttention", lesson03.MHAQueryLengthForKeys, "context-split-with-L_q"),
        ("LearnedPositionalEmbedding", lesson04.LPEBatchAxisPositions, "batch-axis-length"),
    ],
)
def test_a_crash_is_named_by_the_mistake_that_raises_the_same(name, impl, key):
    assert key_of(getattr(check, name), impl) == key


@pytest.mark.parametrize(
    "name, impl",
    [
        ("RNN", lesson01.RNNZerosSizedByInput),
        ("MultiHeadAttention", lesson03.MHAContextOnlyForKeys),
        ("LearnedPositionalEmbedding", lesson04.LPEBatchAxisPositions),
    ],
)
def test_mutant_without_crash_matching_leaves_the_crash_unnamed(monkeypatch, name, impl):
    monkeypatch.setattr(drivers, "_same_crash", lambda *args: None)
    assert key_of(getattr(check, name), impl) is None


def test_mutant_exact_messages_only_miss_a_reshape_spelled_with_minus_one(monkeypatch):
    monkeypatch.setattr(drivers, "_same_message", str.__eq__)
    assert key_of(check.MultiHeadAttention, lesson03.MHAQueryLengthForKeys) is None


def test_reshape_messages_differ_on_a_real_size():
    same = drivers._same_message
    a = "shape '[2, 3, 2, -1]' is invalid for input of size 80"
    assert same(a, "shape '[2, 3, 2, 4]' is invalid for input of size 80")
    assert not same(a, "shape '[2, 5, 2, 4]' is invalid for input of size 80")
    assert not same(a, "shape '[2, 3, 2, 4]' is invalid for input of size 96")


# ---------------------------------------------------------------------------------------------
# A parameter the reference's output depends on and the student's does not.


@pytest.mark.parametrize(
    "name, impl, key, names",
    [
        ("RNN", lesson01.RNNNoBiases, "bias-unused", ("`w_xh`", "`w_hh`")),
        ("SelfAttention", lesson02.SelfAttentionQueryFromKeyLayer, "parameter-unused", ("`w_q`",)),
        ("MultiHeadAttention", lesson03.MHAValueThroughKey, "parameter-unused", ("`w_v`",)),
    ],
)
def test_an_unused_parameter_is_named(name, impl, key, names):
    with pytest.raises(check.CheckFailed) as info:
        getattr(check, name)(impl)
    assert info.value.mistake_key == key
    assert all(n in info.value.mistake for n in names)


@pytest.mark.parametrize(
    "name, impl",
    [
        ("RNN", lesson01.RNNNoBiases),
        ("SelfAttention", lesson02.SelfAttentionQueryFromKeyLayer),
        ("MultiHeadAttention", lesson03.MHAValueThroughKey),
    ],
)
def test_mutant_without_the_unused_parameter_diagnoser_names_nothing(monkeypatch, name, impl):
    monkeypatch.setattr(drivers, "_unused_parameters", lambda *args: None)
    assert key_of(getattr(check, name), impl) is None


def test_an_output_cut_off_from_the_graph_names_no_parameter():
    """Nothing reaches a detached output: that says nothing about one parameter."""

    class Detached(nn.Module):
        def __init__(self, d_in, d_hidden):
            super().__init__()
            self.d_hidden = d_hidden
            self.w_xh = nn.Linear(d_in, d_hidden)
            self.w_hh = nn.Linear(d_hidden, d_hidden)

        def forward(self, x, h0=None):
            out = torch.zeros(x.shape[0], x.shape[1], self.d_hidden, dtype=x.dtype)
            return out, out[:, -1]

    with pytest.raises(check.CheckFailed) as info:
        check.RNN(Detached)
    assert info.value.mistake_key not in ("bias-unused", "parameter-unused")


# ---------------------------------------------------------------------------------------------
# ExactDriver: each mistake on copies of its own.


def test_padding_mask_greater_than_pad_is_named():
    assert key_of(check.padding_mask, lesson06.padding_mask_greater) == "above-pad"


def test_mutant_mistakes_sharing_the_inputs_spoil_those_after_an_in_place_one(monkeypatch):
    """The driver as it was: every mistake ran on the case's own tokens, so "tokens-changed"
    (before "above-pad") left them 0/1 for the rest."""
    monkeypatch.setattr(drivers, "own_copies", lambda inputs: dict(inputs))
    monkeypatch.setattr(drivers, "require_unchanged", lambda *args: None)
    old = answer_drivers.ExactDriver(
        checks06._padding_cases, equal=checks06._identical, describe=checks06._describe
    )
    with pytest.raises(check.CheckFailed) as info:
        old.run(check.EXERCISES["padding_mask"], lesson06.padding_mask_greater, False)
    assert info.value.mistake_key != "above-pad"


# ---------------------------------------------------------------------------------------------
# LearnedPositionalEmbedding keeps x's dtype (a stated rule, a new visible case).


def test_learned_table_dtype_is_named():
    assert key_of(check.LearnedPositionalEmbedding, lesson04.LPETableDtype) == "table-dtype"


def test_mutant_without_the_dtype_case_passes_the_table_dtype(monkeypatch):
    monkeypatch.setattr(checks04, "_check_learned_dtype", lambda ex, student_cls: 0)
    assert check.LearnedPositionalEmbedding(lesson04.LPETableDtype) is None


def test_learned_rows_cast_to_x_dtype_pass():
    class RowsToX(nn.Module):
        def __init__(self, n_positions, d_model):
            super().__init__()
            self.n_positions = n_positions
            self.embedding = nn.Embedding(n_positions, d_model)

        def forward(self, x, offset=0):
            L = x.shape[1]
            if offset + L > self.n_positions:
                raise ValueError(f"position {offset + L - 1} is beyond the table")
            rows = self.embedding(torch.arange(offset, offset + L, device=x.device))
            return x + rows.to(x.dtype)

    assert check.LearnedPositionalEmbedding(RowsToX) is None
    assert check.LearnedPositionalEmbedding(RowsToX, thorough=True) is None


# ---------------------------------------------------------------------------------------------
# Catalogue mistakes, by kind.


@pytest.mark.parametrize(
    "name, impl, key",
    [
        ("RNN", lesson01.RNNUntransposedHidden, "w_hh-untransposed"),
        ("RNN", lesson01.RNNReversedTime, "reversed-loop"),
        ("sequential_steps", lesson01.steps_kernel_ignored, "kernel-size-ignored"),
        ("practice_john", _wrong(lesson01, "john_commas_split"), "commas-as-tokens"),
        ("practice_lstm", _wrong(lesson01, "lstm_two_letters"), "several-letters"),
        ("scaled_dot_product_attention", lesson02.sdpa_additive_bool, "bool-mask-added"),
        ("scaled_dot_product_attention", lesson02.sdpa_scale_after_softmax, "scale-after-softmax"),
        ("MultiHeadAttention", lesson03.MHAInterleavedHeads, "interleaved-heads"),
        ("sinusoidal_positional_encoding", lesson04.pe_log10, "log10"),
        (
            "sinusoidal_positional_encoding",
            lesson04.pe_normalised_positions,
            "normalised-positions",
        ),
        ("rotary_embedding", lesson04.rope_sign_typo, "second-row-sign-slip"),
        ("LayerNorm", lesson05.LayerNormBiasBeforeScale, "shift-before-scale"),
    ],
)
def test_the_mistake_is_named(name, impl, key):
    assert key_of(getattr(check, name), impl) == key


def test_other_students_scale_after_softmax_is_named_too():
    def scaled_late(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0) * (1 / math.sqrt(k.shape[-1]))
        return weights @ v, weights

    assert key_of(check.scaled_dot_product_attention, scaled_late) == "scale-after-softmax"
