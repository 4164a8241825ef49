"""Lesson 04 checks: sinusoidal_positional_encoding, LearnedPositionalEmbedding and rotary_embedding.

Correct implementations written the way a student would pass; wrong ones beyond the catalogue
fail; the references are refused. Also the property the lesson demonstrates: self-attention
without positions is permutation-equivariant, and RoPE makes q·k depend on the offset only.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import transformer_lab
from transformer_lab import check, positional
from transformer_lab.check import CheckFailed, ImplementThisYourself


def good_pe(n_positions, d_model):
    """Written in float32 with a loop over pairs, as a student might."""
    pe = torch.zeros(n_positions, d_model)
    t = torch.arange(n_positions, dtype=torch.float32)
    for i in range(0, d_model, 2):
        omega = 1.0 / 10000 ** (i / d_model)
        pe[:, i] = torch.sin(t * omega)
        if i + 1 < d_model:
            pe[:, i + 1] = torch.cos(t * omega)
    return pe


def good_pe_log(n_positions, d_model):
    """The exp/log form of the annotated-transformer style, computed in float64 and returned in
    the default dtype, as the text asks."""
    position = torch.arange(n_positions, dtype=torch.float64)[:, None]
    div = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float64) * -(math.log(10000.0) / d_model)
    )
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * div)
    pe[:, 1::2] = torch.cos(position * div)[:, : d_model // 2]
    return pe.to(torch.get_default_dtype())


def good_rope(x, positions=None):
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    omega = 10000.0 ** (-torch.arange(0, d, 2, device=x.device, dtype=x.dtype) / d)
    theta = positions.to(x.dtype)[:, None] * omega  # (L, d/2)
    cos, sin = torch.cos(theta), torch.sin(theta)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out


def good_rope_complex(x, positions=None):
    """The complex-number form (LLaMA style): also correct."""
    L, d = x.shape[-2], x.shape[-1]
    t = torch.arange(L, device=x.device) if positions is None else positions
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    ones = torch.ones(L, d // 2, dtype=torch.float64, device=x.device)
    rot = torch.polar(ones, t.double()[:, None] * omega)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * rot).flatten(-2).to(x.dtype)


@pytest.mark.parametrize("thorough", [False, True])
def test_correct_implementations_pass(thorough):
    assert check.sinusoidal_positional_encoding(good_pe, thorough=thorough) is None
    assert check.sinusoidal_positional_encoding(good_pe_log, thorough=thorough) is None
    assert check.rotary_embedding(good_rope, thorough=thorough) is None
    assert check.rotary_embedding(good_rope_complex, thorough=thorough) is None


def rope_arange_on_the_cpu(x, positions=None):
    """Right on the CPU; on a GPU its positions and frequencies stay on the CPU."""
    L, d = x.shape[-2], x.shape[-1]
    t = torch.arange(L) if positions is None else positions
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    theta = t.double()[:, None] * omega
    cos, sin = torch.cos(theta).to(x.dtype), torch.sin(theta).to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)


def test_rope_implementations_keep_to_the_input_device():
    """The right implementations above and every catalogued mistake make their tensors on x's
    device, so that the thorough check on a GPU passes the one and names the other as on the CPU
    (the GPU check's catalogue step). The meta device stands in for a GPU on a machine without
    one: a tensor made on the CPU cannot meet it; the mutant shows that."""
    x = torch.zeros(2, 5, 8, dtype=torch.float64, device="meta")
    positions = torch.arange(5, device="meta")
    mistakes = [m.impl for m in check.EXERCISES["rotary_embedding"].mistakes]
    for impl in [good_rope, good_rope_complex, *mistakes]:
        for where in (None, positions):
            assert impl(x, where).device == x.device, impl.__name__
    with pytest.raises(RuntimeError, match="device"):
        rope_arange_on_the_cpu(x)
    torch.testing.assert_close(
        rope_arange_on_the_cpu(torch.ones(2, 5, 8)), good_rope(torch.ones(2, 5, 8))
    )


# ---------------------------------------------------------------------------------------------
# Wrong implementations beyond the catalogue.


def pe_odd_crashes(n_positions, d_model):
    pe = torch.zeros(n_positions, d_model)
    t = torch.arange(n_positions)[:, None].float()
    omega = 10000 ** (-torch.arange(0, d_model, 2).float() / d_model)
    pe[:, 0::2] = torch.sin(t * omega)
    pe[:, 1::2] = torch.cos(t * omega)  # shape error for odd d_model
    return pe


def pe_starts_at_one(n_positions, d_model):
    return good_pe(n_positions + 1, d_model)[1:]


def pe_integer(n_positions, d_model):
    return good_pe(n_positions, d_model).round().long()


def rope_detached(x, positions=None):
    return good_rope(x.detach(), positions)


def rope_positions_from_one(x, positions=None):
    if positions is None:
        positions = torch.arange(1, x.shape[-2] + 1)
    return good_rope(x, positions)


def test_pe_wrong_variants_fail():
    with pytest.raises(CheckFailed, match="raised RuntimeError"):
        check.sinusoidal_positional_encoding(pe_odd_crashes, thorough=True)
    # "an odd d_model works too" is a stated rule, so a visible case has an odd d_model
    with pytest.raises(CheckFailed, match="raised RuntimeError") as info:
        check.sinusoidal_positional_encoding(pe_odd_crashes)
    assert "d_model=7" in info.value.case
    with pytest.raises(CheckFailed, match="differs"):
        check.sinusoidal_positional_encoding(pe_starts_at_one)
    with pytest.raises(CheckFailed, match="floating point"):
        check.sinusoidal_positional_encoding(pe_integer)


def test_rope_wrong_variants_fail():
    with pytest.raises(CheckFailed, match="gradient"):
        check.rotary_embedding(rope_detached)
    with pytest.raises(CheckFailed, match="differs"):
        check.rotary_embedding(rope_positions_from_one)


def test_catalogue_sentences_reach_the_student():
    def rotate_half(x, positions=None):
        d = x.shape[-1]
        perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
        inverse = torch.argsort(perm)
        return good_rope(x[..., inverse], positions)[..., perm]

    with pytest.raises(CheckFailed, match="rotate-half layout"):
        check.rotary_embedding(rotate_half)

    def backwards(x, positions=None):
        t = torch.arange(x.shape[-2]) if positions is None else positions
        return good_rope(x, -t)

    def swapped(n_positions, d_model):
        return good_pe(n_positions, d_model + 1)[:, 1:]  # cos first... and off by one column

    with pytest.raises(CheckFailed, match="−angle"):
        check.rotary_embedding(backwards)
    base_1000 = check.EXERCISES["sinusoidal_positional_encoding"].mistake("base-1000")
    with pytest.raises(CheckFailed, match="base is 1000"):
        check.sinusoidal_positional_encoding(lambda n, d: base_1000.impl(n, d))
    with pytest.raises(CheckFailed):
        check.sinusoidal_positional_encoding(swapped)


def test_references_are_refused():
    with pytest.raises(ImplementThisYourself):
        check.sinusoidal_positional_encoding(positional.sinusoidal_positional_encoding)
    with pytest.raises(ImplementThisYourself):
        check.sinusoidal_positional_encoding(
            lambda n_positions, d_model: positional.sinusoidal_positional_encoding(
                n_positions, d_model
            )
        )
    with pytest.raises(ImplementThisYourself):
        check.rotary_embedding(lambda x, positions=None: positional.rotary_embedding(x, positions))
    if hasattr(transformer_lab, "rotary_embedding"):
        with pytest.raises(ImplementThisYourself):
            check.rotary_embedding(
                lambda x, positions=None: transformer_lab.rotary_embedding(x, positions)
            )
    # and everything is restored afterwards
    assert positional.rotary_embedding(torch.zeros(1, 2, 4)).shape == (1, 2, 4)


# ---------------------------------------------------------------------------------------------
# The properties the notebook demonstrates.


def _self_attention(x):
    s = x @ x.transpose(-2, -1) / math.sqrt(x.shape[-1])
    return torch.softmax(s, -1) @ x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_without_positions_is_permutation_equivariant(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 8, generator=g, dtype=dtype)
    perm = torch.randperm(6, generator=g)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    assert torch.allclose(_self_attention(x[perm]), _self_attention(x)[perm], atol=tol)
    # with positions added, it is not (the mutant: positions that break the symmetry)
    pe = good_pe(6, 8).to(dtype)
    gap = (_self_attention(x[perm] + pe) - _self_attention(x + pe)[perm]).abs().max()
    assert gap > 1e-2


def test_rope_scores_depend_on_offset_only():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(16, generator=g, dtype=torch.float64)
    k = torch.randn(16, generator=g, dtype=torch.float64)

    def score(s, t, rope=good_rope):
        qs = rope(q.expand(1, 16), torch.tensor([s]))[0]
        kt = rope(k.expand(1, 16), torch.tensor([t]))[0]
        return (qs @ kt).item()

    assert score(5, 2) == pytest.approx(score(13, 10), abs=1e-10)

    per_feature = check.EXERCISES["rotary_embedding"].mistake("per-feature-frequencies")

    def broken(x, positions=None):  # per-feature frequencies: not a rotation any more
        return per_feature.impl(x, positions)

    assert abs(score(5, 2, broken) - score(13, 10, broken)) > 1e-3


# ---------------------------------------------------------------------------------------------
# Every rule the exercise text states has a visible case: a mutant that breaks only that rule
# fails the visible check (not just the hidden one).


def test_visible_cases_cover_the_stated_rules():
    odd = check.EXERCISES["sinusoidal_positional_encoding"].mistake("odd-d_model-rounded-up")
    with pytest.raises(CheckFailed) as info:
        check.sinusoidal_positional_encoding(lambda n, d: odd.impl(n, d))
    assert info.value.mistake == odd.sentence

    def rope_third_axis(x, positions=None):  # reads L from axis 1: right for (B, L, d) only
        L = x.shape[1]
        return good_rope(x, torch.arange(L) if positions is None else positions)

    with pytest.raises(CheckFailed) as info:  # x is (..., L, d): the 4-D case is visible
        check.rotary_embedding(rope_third_axis)
    assert "(2, 3, 6, 8)" in info.value.case


@pytest.mark.parametrize("key", ["sin-then-cos-halves", "positions-from-one", "sin-cos-swapped"])
def test_table_layout_mistakes_are_named_by_the_visible_check(key):
    """Students' table mistakes (sines and cosines in two halves, positions counted from 1) are
    named already by the check a student runs, not only by the hidden one."""
    mistake = check.EXERCISES["sinusoidal_positional_encoding"].mistake(key)
    with pytest.raises(CheckFailed) as info:
        check.sinusoidal_positional_encoding(mistake.impl)
    assert info.value.mistake == mistake.sentence


# ---------------------------------------------------------------------------------------------
# LearnedPositionalEmbedding


class GoodLearned(nn.Module):
    def __init__(self, n_positions, d_model):
        super().__init__()
        self.n_positions = n_positions
        self.embedding = nn.Embedding(n_positions, d_model)

    def forward(self, x, offset=0):
        L = x.shape[-2]
        if offset + L > self.n_positions:
            raise ValueError(f"position {offset + L - 1} is beyond the table")
        return x + self.embedding(torch.arange(offset, offset + L, device=x.device))


class GoodLearnedWeightIndexing(nn.Module):
    """Indexes the weight directly and checks the range with an explicit comparison."""

    def __init__(self, n_positions, d_model):
        super().__init__()
        self.n_positions = n_positions
        self.embedding = nn.Embedding(n_positions, d_model)

    def forward(self, x, offset=0):
        end = offset + x.shape[1]
        if not end <= self.n_positions:
            raise ValueError("too long for the learned table")
        return x + self.embedding.weight[offset:end].unsqueeze(0)


@pytest.mark.parametrize("thorough", [False, True])
def test_learned_correct_implementations_pass(thorough):
    assert check.LearnedPositionalEmbedding(GoodLearned, thorough=thorough) is None
    assert check.LearnedPositionalEmbedding(GoodLearnedWeightIndexing, thorough=thorough) is None


@pytest.mark.parametrize(
    "key", ["no-range-check", "clamped", "offset-ignored", "positions-from-one", "replaces-x"]
)
def test_learned_mistakes_fail_visibly_and_are_named(key):
    mistake = check.EXERCISES["LearnedPositionalEmbedding"].mistake(key)
    with pytest.raises(CheckFailed) as info:
        check.LearnedPositionalEmbedding(mistake.impl)
    assert info.value.mistake == mistake.sentence


class LearnedWrapsAround(GoodLearned):
    """Beyond the catalogue: positions past the table wrap round to its first rows."""

    def forward(self, x, offset=0):
        t = torch.arange(offset, offset + x.shape[-2], device=x.device) % self.n_positions
        return x + self.embedding(t)


class LearnedWrongName(nn.Module):
    def __init__(self, n_positions, d_model):
        super().__init__()
        self.n_positions = n_positions
        self.table = nn.Parameter(torch.randn(n_positions, d_model))

    def forward(self, x, offset=0):
        return x + self.table[offset : offset + x.shape[-2]]


class LearnedAssertion(GoodLearned):
    """Checks the range with assert: an AssertionError is not the ValueError asked for."""

    def forward(self, x, offset=0):
        assert offset + x.shape[-2] <= self.n_positions, "too long"
        return x + self.embedding(torch.arange(offset, offset + x.shape[-2], device=x.device))


class LearnedDetached(GoodLearned):
    def forward(self, x, offset=0):
        return GoodLearned.forward(self, x.detach(), offset)


class LearnedFloat64(GoodLearned):
    """Breaks only "the same dtype as x"."""

    def forward(self, x, offset=0):
        return GoodLearned.forward(self, x, offset).double()


def test_learned_wrong_variants_fail():
    with pytest.raises(CheckFailed, match="instead of raising ValueError") as info:
        check.LearnedPositionalEmbedding(LearnedWrapsAround)
    assert info.value.mistake == (
        check.EXERCISES["LearnedPositionalEmbedding"].mistake("clamped").sentence
    )
    with pytest.raises(CheckFailed, match="expected parameter names"):
        check.LearnedPositionalEmbedding(LearnedWrongName)
    with pytest.raises(CheckFailed, match="raised AssertionError"):
        check.LearnedPositionalEmbedding(LearnedAssertion)
    with pytest.raises(CheckFailed, match="gradient"):
        check.LearnedPositionalEmbedding(LearnedDetached)
    with pytest.raises(
        CheckFailed, match="dtype torch.float64 but should have dtype torch.float32"
    ):
        check.LearnedPositionalEmbedding(LearnedFloat64)


def test_learned_reference_is_refused():
    with pytest.raises(ImplementThisYourself):
        check.LearnedPositionalEmbedding(positional.LearnedPositionalEmbedding)

    class Wrapper(nn.Module):  # builds and calls the course's module inside its own
        def __init__(self, n_positions, d_model):
            super().__init__()
            self.n_positions = n_positions
            self.embedding = nn.Embedding(n_positions, d_model)

        def forward(self, x, offset=0):
            inner = positional.LearnedPositionalEmbedding(self.n_positions, x.shape[-1])
            inner.embedding = self.embedding
            return inner(x, offset)

    with pytest.raises(ImplementThisYourself):
        check.LearnedPositionalEmbedding(Wrapper)
