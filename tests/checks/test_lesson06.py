"""Lesson 06 checks: causal_mask, padding_mask and the practice answer alpha_22.

Correct implementations written the way a student would pass; wrong ones beyond the catalogue
(which tests/checks/test_engine_and_lessons01_02.py covers) are rejected; forbidden helpers are refused.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

import transformer_lab
from transformer_lab import check
from transformer_lab.check import lesson06

# ---------------------------------------------------------------------------------------------
# Correct student implementations.


def causal_by_arange(n):
    i = torch.arange(n)
    return i[None, :] <= i[:, None]


def causal_by_tril(n):
    return torch.tril(torch.ones(n, n)).bool()


def padding_by_unsqueeze(tokens, pad_id):
    return tokens.ne(pad_id).unsqueeze(1).unsqueeze(2)


def padding_by_view(tokens, pad_id):
    B, L = tokens.shape
    return (tokens != pad_id).view(B, 1, 1, L)


GOOD = [
    ("causal_mask", causal_by_arange),
    ("causal_mask", causal_by_tril),
    ("padding_mask", padding_by_unsqueeze),
    ("padding_mask", padding_by_view),
]


@pytest.mark.parametrize("name,impl", GOOD, ids=[f.__name__ for _, f in GOOD])
@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_correct_implementations_pass(name, impl, thorough, capsys):
    assert getattr(check, name)(impl, thorough=thorough) is None
    assert f"✓ {name}" in capsys.readouterr().out


def test_passing_mask_is_saved_into_the_students_package(tmp_path):
    check.causal_mask(causal_by_arange)
    saved = (tmp_path / "pkg" / "transformer_lab_student" / "masking.py").read_text()
    assert "def causal_by_arange" in saved and "causal_mask = causal_by_arange" in saved


# ---------------------------------------------------------------------------------------------
# Wrong implementations beyond the catalogue.


def causal_batched(n):
    return torch.ones(1, n, n, dtype=torch.bool).tril()


def causal_strict_arange(n):
    i = torch.arange(n)
    return i[None, :] < i[:, None]


def causal_off_by_one(n):
    return torch.ones(n, n, dtype=torch.bool).tril(1)


def causal_fixed_size(n):
    return torch.ones(4, 4, dtype=torch.bool).tril()


def padding_full_square(tokens, pad_id):
    keep = tokens != pad_id
    return (keep[:, :, None] & keep[:, None, :])[:, None]  # (B, 1, L, L): also hides pad queries


def padding_wrong_batch(tokens, pad_id):
    return (tokens[:1] != pad_id)[:, None, None, :].expand(tokens.shape[0], 1, 1, -1)


def padding_float(tokens, pad_id):
    return (tokens != pad_id).float()[:, None, None, :]


WRONG = [
    ("causal_mask", causal_batched, "shape (1, 2, 2) but should have shape (2, 2)"),
    ("causal_mask", causal_strict_arange, "Likely mistake: the diagonal is excluded"),
    ("causal_mask", causal_off_by_one, "differs at index"),
    ("causal_mask", causal_fixed_size, "has shape (4, 4)"),
    ("padding_mask", padding_full_square, "should have shape"),
    ("padding_mask", padding_wrong_batch, "differs at index"),
    ("padding_mask", padding_float, "should have dtype torch.bool"),
]


@pytest.mark.parametrize("name,impl,message", WRONG, ids=[f.__name__ for _, f, _ in WRONG])
def test_wrong_implementations_are_caught(name, impl, message):
    with pytest.raises(check.CheckFailed, match=re.escape(message)):
        getattr(check, name)(impl, thorough=True)


def test_a_crash_is_reported_with_the_case():
    def crashes(tokens, pad_id):
        return tokens.view(-1, 1, 1, 5) != pad_id  # only works for L = 5

    with pytest.raises(
        check.CheckFailed, match=r"padding_mask\(tokens \(3, 4\), pad_id=1\).* raised RuntimeError"
    ):
        check.padding_mask(crashes)


def test_pad_id_other_than_zero_is_in_the_visible_check():
    mistake = check.EXERCISES["padding_mask"].mistake("pad_id-zero")
    with pytest.raises(check.CheckFailed, match="Likely mistake: pad_id is hard-coded"):
        check.padding_mask(mistake.impl)


@pytest.mark.parametrize("key", ["flat-shape", "three-axes", "query-axis"])
def test_mask_shape_mistakes_are_named_by_the_visible_check(key):
    """(B, L), (B, 1, L) and (B, 1, L, 1) instead of (B, 1, 1, L): each named where a student
    first sees it."""
    mistake = check.EXERCISES["padding_mask"].mistake(key)
    with pytest.raises(check.CheckFailed) as info:
        check.padding_mask(mistake.impl)
    assert info.value.mistake == mistake.sentence


def test_every_padding_case_has_padding_and_a_real_token():
    for seed, (B, L, pad_id) in enumerate([(2, 5, 0), (3, 4, 1), (4, 7, 2)]):
        tokens = lesson06._token_batch(seed, B, L, pad_id)
        assert (tokens == pad_id).any() and (tokens[:, 0] != pad_id).all()


# ---------------------------------------------------------------------------------------------
# Mutants of the check itself: dropping the dtype comparison would let a float mask through.


def test_mutant_check_without_dtype_comparison_accepts_a_float_mask(monkeypatch):
    float_mask = check.EXERCISES["causal_mask"].mistake("float-mask")
    with pytest.raises(check.CheckFailed):
        check.causal_mask(float_mask.impl, thorough=True)

    def identical_values_only(a, b):
        return (
            isinstance(a, torch.Tensor) and a.shape == b.shape and torch.equal(a.float(), b.float())
        )

    monkeypatch.setattr(check.EXERCISES["causal_mask"].driver, "equal", identical_values_only)
    assert check.causal_mask(float_mask.impl, thorough=True) is None


def mask_as_numpy(n):
    return torch.ones(n, n, dtype=torch.bool).tril().numpy()


def test_a_numpy_mask_is_told_to_be_a_tensor(monkeypatch):
    with pytest.raises(check.CheckFailed, match="should be a bool tensor but is a ndarray"):
        check.causal_mask(mask_as_numpy)
    # the mutant: a comparison with plain == compares the catalogue's tensors with the array entry
    # by entry while naming the mistake, and the check crashes instead
    naive = lambda got, expected: bool(got == expected)
    monkeypatch.setattr(check.EXERCISES["causal_mask"].driver, "equal", naive)
    with pytest.raises(RuntimeError, match="ambiguous"):
        check.causal_mask(mask_as_numpy)


def test_length_one_comes_last_so_the_inverted_mask_is_named():
    strict = check.EXERCISES["causal_mask"].mistake("diagonal-excluded")
    inverted = check.EXERCISES["causal_mask"].mistake("mask-inverted")
    # at n = 1 the strict triangle and the inverted mask agree: the name comes from a larger n
    assert torch.equal(strict.impl(1), inverted.impl(1))
    with pytest.raises(check.CheckFailed, match="Likely mistake: the mask is inverted"):
        check.causal_mask(inverted.impl)


# ---------------------------------------------------------------------------------------------
# Forbidden helpers.


def test_the_reference_is_refused():
    with pytest.raises(check.ImplementThisYourself):
        check.causal_mask(transformer_lab.causal_mask)
    with pytest.raises(check.ImplementThisYourself):
        check.padding_mask(transformer_lab.masking.padding_mask)


def test_calling_the_reference_inside_is_refused():
    def wraps_reference(n):
        return transformer_lab.causal_mask(n)

    def wraps_masking_module(tokens, pad_id):
        return transformer_lab.masking.padding_mask(tokens, pad_id)

    with pytest.raises(check.ImplementThisYourself, match="causal_mask"):
        check.causal_mask(wraps_reference)
    with pytest.raises(check.ImplementThisYourself, match="padding_mask"):
        check.padding_mask(wraps_masking_module)
    assert transformer_lab.causal_mask(2).dtype == torch.bool  # restored afterwards


def test_pytorch_square_subsequent_mask_is_refused():
    def via_pytorch(n):
        return torch.nn.Transformer.generate_square_subsequent_mask(n) == 0

    with pytest.raises(check.ImplementThisYourself, match="generate_square_subsequent_mask"):
        check.causal_mask(via_pytorch)


# ---------------------------------------------------------------------------------------------
# The practice question.


@pytest.mark.parametrize("answer", [0.5, 0.5001, 1 / 2, torch.tensor(0.5)])
def test_alpha_22_right_answers_pass(answer):
    assert check.alpha_22(answer) is None
    assert check.alpha_22(answer, thorough=True) is None


@pytest.mark.parametrize(
    "answer,sentence",
    [
        (0.0, "the causal mask keeps the diagonal"),
        (math.e / (2 * math.e + math.exp(-1) + 1), "weight without the mask"),
        (1.0, "shares the weight"),
        (math.e / (2 * math.e + 2), "set to 0, not to -inf"),  # from the unseen held-out set
        (math.e / (1 + 2 * math.e), "counting from 0"),
        (math.e / (math.e + math.exp(-1) + 1), "the mask is transposed"),
    ],
)
def test_alpha_22_wrong_options_are_explained(answer, sentence):
    with pytest.raises(check.CheckFailed, match=f"Likely mistake: .*{sentence}"):
        check.alpha_22(answer)


def test_alpha_22_other_wrong_answers():
    unexplained = 0.3  # no slip gives it: said wrong, and nothing named
    with pytest.raises(check.CheckFailed, match="counting from 1") as info:
        check.alpha_22(unexplained)
    assert "Likely mistake" not in str(info.value)
    with pytest.raises(check.NotWrittenYet, match="`alpha_22` is not written yet"):
        check.alpha_22(...)  # the released answer: one line, like an untouched stub
    with pytest.raises(check.CheckFailed, match="replace the None"):
        check.alpha_22(None)
    with pytest.raises(check.CheckFailed, match="should be a number"):
        check.alpha_22("one half")


def test_alpha_22_expected_value_follows_the_causal_softmax():
    assert lesson06._alpha_22_expected() == pytest.approx(0.5, abs=1e-12)
