"""The generic diagnosers (check/generic.py): each names the mistake it is made for, and none names
a right result, a result wrong in another way, or evidence it cannot read (no false names)."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_lab import check
from transformer_lab.check import compare, generic
from transformer_lab.check.answer_drivers import exactly_equal

CPU = torch.device("cpu")


def close(a, b):
    return compare.same_within_tolerance(a, b, torch.float64, CPU)


def named(got, expected, same=close, sizes=()):
    found = generic.name(got, expected, same, sizes)
    return found[0] if found else None


@pytest.fixture
def x():
    return torch.randn(2, 3, 4, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


# ----------------------------------------------------------------------------------------------
# Each diagnoser: a mutant it names.


def test_python_number(x):
    loss = x.sum()
    assert named(loss.item(), loss) == "generic-python-number"


@pytest.mark.parametrize(
    "got_dtype, expected_dtype, key",
    [
        (torch.float64, torch.float32, "generic-float-dtype"),
        (torch.float32, torch.float64, "generic-float-dtype"),
        (torch.int64, torch.bool, "generic-mask-as-numbers"),
        (torch.float32, torch.int64, "generic-ids-as-floats"),
        (torch.int64, torch.float32, "generic-floats-as-integers"),
        (torch.int32, torch.int64, "generic-integer-dtype"),
    ],
)
def test_dtype_habits(got_dtype, expected_dtype, key):
    e = torch.ones(3, 3, dtype=expected_dtype)
    assert named(e.to(got_dtype), e, exactly_equal) == key


def test_size_one_axes(x):
    e = x[:, :1, 0, :]  # (2, 1, 8)
    assert named(e[:, None], e) == "generic-size-one-axis"  # one too many
    assert named(e[:, 0], e) == "generic-size-one-axis"  # one missing
    mask = torch.rand(2, 5) < 0.5
    sentence = generic.name(mask[:, :, None, None], mask[:, None, None, :], exactly_equal)[1]
    assert "wrong places" in sentence and "(2, 5, 1, 1)" in sentence


def test_permuted_axes(x):
    assert named(x.transpose(1, 2), x) == "generic-permuted-axes"
    square = x[:, :, :3, :3]
    sentence = generic.name(square.transpose(-2, -1), square, close)[1]
    assert "axes 2 and 3 swapped" in sentence


def test_one_slice_more_or_less(x):
    e = x[0]  # (3, 4, 8)
    assert named(e[:, 1:], e) == "generic-missing-slice"  # the first position left out
    assert "last entry along axis 2" in generic.name(e[..., :-1], e, close)[1]
    assert named(torch.cat([e, e[:, :1]], 1), e) == "generic-extra-slice"
    assert named(e[:, 1:] + 1, e) is None  # one slice short, and wrong besides


def test_expanded_size_one_axis():
    mask = torch.rand(2, 1, 1, 5, generator=torch.Generator().manual_seed(0)) < 0.5
    assert named(mask.expand(2, 1, 5, 5), mask, exactly_equal) == "generic-expanded"
    other = mask.expand(2, 1, 5, 5).clone()
    other[0, 0, 1] = ~other[0, 0, 1]  # one query's row differs: not a repeat
    assert named(other, mask, exactly_equal) is None


def test_vector_factors(x):
    counts = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)[:, None]
    e = x[0, :, 0]  # (3, 8): three pooled vectors
    assert named(e * counts / counts.sum(), e) == "generic-vector-factors"  # a batch-wide count
    zeroed = e * torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)[:, None]
    assert named(zeroed, e) is None  # a vector dropped is not a wrong amount


def test_nan_rows(x):
    w = torch.softmax(x, -1)
    got = w.clone()
    got[0, 1] = float("nan")  # whole rows (last axis) NaN
    assert named(got, w) == "generic-nan-rows"


@pytest.mark.parametrize(
    "factor, text",
    [(1 / math.sqrt(8), "1/√8"), (math.sqrt(8), "√8"), (-1.0, "−1 (the sign flipped)"), (2.0, "2")],
)
def test_constant_factor_named(x, factor, text):
    sentence = generic.name(x * factor, x, close, sizes=(2, 3, 8))[1]
    assert f"times {text} everywhere" in sentence


def test_constant_factor_unnamed_value_is_given(x):
    sentence = generic.name(x * 1.37, x, close, sizes=(8,))[1]
    assert "times 1.37 everywhere" in sentence


def test_reordered_slices(x):
    h = x[0, 0]  # (4, 8): four rows of eight features
    reversed_rows = generic.name(h.flip(0), h, close)[1]
    assert "reverse order along axis 0" in reversed_rows
    halves = torch.cat([h[:, 0::2], h[:, 1::2]], -1)  # RoPE written as halves
    assert "should be interleaved" in generic.name(halves, h, close)[1]
    heads = torch.cat([h[:, 6:], h[:, 4:6], h[:, 2:4], h[:, :2]], -1)  # 4 heads of 2, reversed
    assert "4 blocks of 2 in reverse order" in generic.name(heads, h, close)[1]
    two_heads = torch.cat([h[:, 4:], h[:, :4]], -1)
    assert "2 blocks of 4 in reverse order" in generic.name(two_heads, h, close)[1]
    assert "rolled by 1" in generic.name(h.roll(1, 0), h, close)[1]


def test_shift_by_one():
    table = torch.arange(1, 7, dtype=torch.float64)[:, None] * torch.linspace(0.1, 1, 4)
    from_one = torch.arange(2, 8, dtype=torch.float64)[:, None] * torch.linspace(0.1, 1, 4)
    sentence = generic.name(from_one, table, close)[1]
    assert "off-by-one" in sentence and "along axis 0" in sentence
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    strict = torch.ones(4, 4, dtype=torch.bool).tril(-1)
    strict[0, 0] = True  # the held-out "excludes the diagonal, patches row 0"
    assert named(strict, causal, exactly_equal) == "generic-shifted"


def test_normalised_over_the_wrong_axis(x):
    s = x[0, 0]
    assert named(torch.softmax(s, 0), torch.softmax(s, -1)) == "generic-normalised-axis"
    unit = torch.nn.functional.normalize
    assert named(unit(s, dim=0), unit(s, dim=-1)) == "generic-normalised-axis"


def test_gradient_cut_off():
    g = torch.ones(3)
    assert generic.name_gradient(g, None, "x", True)[0] == "generic-no-gradient"
    assert generic.name_gradient(g, torch.zeros(3), "x", True) is None  # a clamp's edge too
    assert generic.name_gradient(g, g * 2, "x", True)[0] == "generic-partly-detached"
    assert generic.name_gradient(g, g * (1 + 1e-7), "x", True) is None  # rounding (float32 sums)
    nan = torch.tensor([1.0, float("nan"), 1.0])
    # a torch.where's NaN, not a cut
    assert generic.name_gradient(g, nan, "x", True)[0] == "generic-nan-gradient"
    assert generic.name_gradient(g, nan, "x", False) is None  # the output wrong: it may be that


# ----------------------------------------------------------------------------------------------
# No false names: a right result, another kind of wrong, and evidence that cannot be read.


def test_nothing_named_for_unrelated_wrong_results(x):
    other = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert named(other, x) is None
    assert named(x + 0.1, x) is None  # an offset is no factor, order or axis
    assert named(torch.tanh(x), x) is None
    assert named(torch.zeros_like(x), x) is None  # all zeros: no factor is named
    assert named(x[:, :, :2], x) is None  # another shape, not a reshape of the right values
    assert named("raised", "ValueError", str.__eq__) is None  # not tensors


def test_nothing_named_when_only_some_entries_are_nan(x):
    w = torch.softmax(x, -1)
    got = w.clone()
    got[0, 0, 0, 0] = float("nan")
    assert named(got, w) is None


def test_scalars_need_a_named_factor():
    loss = torch.tensor(2.5, dtype=torch.float64)
    assert named(loss * 1.37, loss) is None  # two numbers are always some multiple
    assert named(loss * 2, loss) == "generic-constant-factor"


def test_repeated_slices_give_no_order():
    e = torch.tensor([[1.0, 2.0], [1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    assert named(e[[1, 0, 2]], e) is None  # equal to e itself: nothing wrong
    got = e[[2, 0, 1]]  # rows 0 and 1 repeat: which went where cannot be read
    assert named(got, e) in (None, "generic-shifted")


def test_a_later_wrong_output_is_diagnosed(x):
    w = torch.softmax(x, -1)
    assert named((x, w.transpose(1, 2)), (x, w)) == "generic-permuted-axes"
    assert generic.name_gradient(torch.zeros(3), None, "x", True) is None  # none expected


def test_a_catalogued_mistake_still_wins():
    mistake = check.EXERCISES["split_heads"].mistakes[0]
    with pytest.raises(check.CheckFailed) as info:
        check.split_heads(mistake.impl)
    assert info.value.mistake_key == mistake.key


# ----------------------------------------------------------------------------------------------
# Through a real check: held-out-style mutants with no catalogue entry get a generic name.


def test_merge_heads_concatenated_in_reverse_is_named():
    def merge_reversed(x):
        return torch.cat(list(reversed(x.unbind(1))), dim=-1)

    with pytest.raises(check.CheckFailed) as info:
        check.merge_heads(merge_reversed)
    assert info.value.mistake_key == "generic-reordered"
    assert "in reverse order" in info.value.mistake


def test_detached_intermediate_is_named_by_its_gradient():
    def detached_weights(q, k, v, mask=None):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        w = torch.softmax(s, -1).nan_to_num(0.0)
        return w.detach() @ v, w

    with pytest.raises(check.CheckFailed) as info:
        check.scaled_dot_product_attention(detached_weights)
    assert info.value.mistake_key == "generic-partly-detached"
