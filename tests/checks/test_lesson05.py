"""Lesson 05 checks: LayerNorm, FeedForward and EncoderBlock.

Correct implementations written the way a student would pass (visible and thorough); wrong ones
beyond the catalogue (which tests/checks/test_engine_and_lessons01_02.py covers) are rejected; forbidden built-ins used
inside the student's code are refused with ImplementThisYourself.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer_lab
from transformer_lab import MultiHeadAttention, check
from transformer_lab.check import lesson05, lesson05_block

# ---------------------------------------------------------------------------------------------
# Correct student implementations.


class GoodLayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return self.weight * (x - mu) / torch.sqrt(var + self.eps) + self.bias


class RsqrtLayerNorm(nn.Module):
    """Same maths with var_mean and rsqrt."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class GoodFeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(F.relu(self.w_1(x)))


class GoodEncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = GoodFeedForward(d_model, d_ff)
        self.norm1 = GoodLayerNorm(d_model)
        self.norm2 = GoodLayerNorm(d_model)

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm2(x))
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(x))


class BlockFromReferenceParts(nn.Module):
    """The contract allows the reference sub-blocks from transformer_lab."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = transformer_lab.MultiHeadAttention(d_model, n_heads)
        self.ffn = transformer_lab.FeedForward(d_model, d_ff)
        self.norm1 = transformer_lab.LayerNorm(d_model)
        self.norm2 = transformer_lab.LayerNorm(d_model)

    def forward(self, x, mask=None):
        sublayers = [
            (self.norm1, lambda h: self.self_attn(h, mask=mask)),
            (self.norm2, self.ffn),
        ]
        for norm, f in sublayers:
            x = x + f(norm(x)) if self.norm_first else norm(x + f(x))
        return x


GOOD = [
    ("LayerNorm", GoodLayerNorm),
    ("LayerNorm", RsqrtLayerNorm),
    ("FeedForward", GoodFeedForward),
    ("EncoderBlock", GoodEncoderBlock),
    ("EncoderBlock", BlockFromReferenceParts),
]


@pytest.mark.parametrize("name,impl", GOOD, ids=[c.__name__ for _, c in GOOD])
@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_correct_implementations_pass(name, impl, thorough, capsys):
    assert getattr(check, name)(impl, thorough=thorough) is None
    assert f"✓ {name}" in capsys.readouterr().out


def test_passing_block_is_saved_with_its_parts(tmp_path):
    check.LayerNorm(GoodLayerNorm)
    check.EncoderBlock(GoodEncoderBlock)
    saved = (tmp_path / "pkg" / "transformer_lab_student" / "add_norm.py").read_text()
    assert "class GoodLayerNorm" in saved and "class GoodEncoderBlock" in saved


# ---------------------------------------------------------------------------------------------
# Wrong implementations beyond the catalogue.


class LayerNormOneMinusMeanSquare(GoodLayerNorm):
    """var = E[x²] - E[x]²: right in exact arithmetic, cancels catastrophically in float32."""

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = (x * x).mean(-1, keepdim=True) - mu * mu
        return self.weight * (x - mu) / torch.sqrt(var + self.eps) + self.bias


class LayerNormFixedEps(GoodLayerNorm):
    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return self.weight * (x - mu) / torch.sqrt(var + 1e-5) + self.bias


class LayerNormDetachedStats(GoodLayerNorm):
    def forward(self, x):
        mu = x.mean(-1, keepdim=True).detach()
        var = ((x - mu) ** 2).mean(-1, keepdim=True).detach()
        return self.weight * (x - mu) / torch.sqrt(var + self.eps) + self.bias


class LayerNormNamedGammaBeta(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return self.gamma * (x - mu) / torch.sqrt(var + self.eps) + self.beta


class FeedForwardNoBias(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff, bias=False)
        self.w_2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.w_2(F.relu(self.w_1(x)))


class FeedForwardLeaky(GoodFeedForward):
    def forward(self, x):
        return self.w_2(F.leaky_relu(self.w_1(x), 0.1))


class BlockDoubleResidual(GoodEncoderBlock):
    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + x + self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm2(x))
        return super().forward(x, mask)


class BlockNormAfterBoth(GoodEncoderBlock):
    """Pre-norm with an extra final norm on the output (GPT-2 has it once per model, not block)."""

    def forward(self, x, mask=None):
        out = super().forward(x, mask)
        return self.norm2(out) if self.norm_first else out


class BlockCausalAlways(GoodEncoderBlock):
    """Replaces whatever mask it is given by a causal one."""

    def forward(self, x, mask=None):
        if mask is not None:
            mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).tril()
        return super().forward(x, mask)


WRONG = [
    ("LayerNorm", LayerNormOneMinusMeanSquare, "differs"),
    ("LayerNorm", LayerNormFixedEps, "eps = 0.1"),
    ("LayerNorm", LayerNormDetachedStats, "gradient with respect to `x`"),
    ("LayerNorm", LayerNormNamedGammaBeta, "missing: ['bias', 'weight']"),
    ("FeedForward", FeedForwardNoBias, "missing: ['w_1.bias', 'w_2.bias']"),
    ("FeedForward", FeedForwardLeaky, "differs"),
    ("EncoderBlock", BlockDoubleResidual, "norm_first=True"),
    ("EncoderBlock", BlockNormAfterBoth, "norm_first=True"),
    ("EncoderBlock", BlockCausalAlways, "padding mask"),
]


@pytest.mark.parametrize("name,impl,message", WRONG, ids=[c.__name__ for _, c, _ in WRONG])
def test_wrong_implementations_are_caught(name, impl, message):
    with pytest.raises(check.CheckFailed) as info:
        getattr(check, name)(impl, thorough=True)
    assert message in str(info.value)


def test_large_values_case_catches_float32_cancellation():
    # E[x²] - E[x]² passes in float64 but the offset case breaks it in float32; the case is
    # visible (stop 35): the hidden check failed it, so the student must see it first.
    for thorough in (False, True):
        with pytest.raises(
            check.CheckFailed, match=r"large values with an offset \(mean 100, std 1\) \(float32"
        ):
            check.LayerNorm(LayerNormOneMinusMeanSquare, thorough=thorough)


# ---------------------------------------------------------------------------------------------
# Mutants of the check itself.


def test_mutant_cases_without_padding_miss_a_hard_coded_causal_mask(monkeypatch):
    original = lesson05_block._block_cases

    def causal_only(thorough):
        return [c for c in original(thorough) if "padding" not in c.label]

    monkeypatch.setattr(lesson05_block, "_block_cases", causal_only)
    assert check.EncoderBlock(BlockCausalAlways, thorough=True) is None


@pytest.mark.parametrize("key", ["norms-swapped", "ffn-reads-block-input"])
def test_block_wiring_mistakes_are_named_by_the_visible_check(key):
    """norm1 and norm2 swapped (the check gives the two norms different weights, so the swap
    changes the output), or the FFN fed the block's input: named by the check a student runs."""
    mistake = check.EXERCISES["EncoderBlock"].mistake(key)
    with pytest.raises(check.CheckFailed) as info:
        check.EncoderBlock(mistake.impl)
    assert info.value.mistake == mistake.sentence


def test_mutant_cases_with_only_post_norm_miss_the_norm_first_mistakes(monkeypatch):
    original = lesson05_block._block_cases

    def post_norm_only(thorough):
        return [c for c in original(thorough) if not c.init["norm_first"]]

    monkeypatch.setattr(lesson05_block, "_block_cases", post_norm_only)
    ignored = check.EXERCISES["EncoderBlock"].mistake("norm_first-ignored")
    assert check.EncoderBlock(ignored.impl, thorough=True) is None


def test_mutant_ffn_cases_without_square_case_cannot_name_the_swap(monkeypatch):
    """Without the square case the swap only crashes; a crash is named by the mistake that raises
    the same error (drivers._same_crash), so that matching is switched off here too: the square
    case alone names the swap by its output."""
    from transformer_lab.check import drivers

    original = lesson05._ffn_cases
    swapped = check.EXERCISES["FeedForward"].mistake("w_1-w_2-swapped")

    def rectangular_only(thorough):
        return [c for c in original(thorough) if c.init["d_model"] != c.init["d_ff"]]

    monkeypatch.setattr(lesson05, "_ffn_cases", rectangular_only)
    monkeypatch.setattr(drivers, "_same_crash", lambda *args: None)
    with pytest.raises(check.CheckFailed) as info:
        check.FeedForward(swapped.impl, thorough=True)
    assert "Likely mistake" not in str(info.value) and "raised RuntimeError" in str(info.value)


# ---------------------------------------------------------------------------------------------
# Forbidden built-ins.


class LayerNormViaF(GoodLayerNorm):
    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


class LayerNormViaTorch(GoodLayerNorm):
    def forward(self, x):
        return torch.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


class LayerNormWrapsModule(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.inner = nn.LayerNorm(d_model, eps)

    def forward(self, x):
        return self.inner(x)


class LayerNormSubclassesReference(transformer_lab.LayerNorm):
    def forward(self, x):
        return super().forward(x)


class FeedForwardWrapsReference(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.inner = transformer_lab.add_norm.FeedForward(d_model, d_ff)

    def forward(self, x):
        return self.inner(x)


class BlockWrapsTorch(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model, n_heads, d_ff, 0.0, batch_first=True)

    def forward(self, x, mask=None):
        return self.layer(x)


class BlockWrapsReference(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.inner = transformer_lab.EncoderBlock(d_model, n_heads, d_ff, norm_first=norm_first)

    def forward(self, x, mask=None):
        return self.inner(x, mask)


FORBIDDEN = [
    ("LayerNorm", LayerNormViaF, "F.layer_norm"),
    ("LayerNorm", LayerNormViaTorch, "torch.layer_norm"),
    ("LayerNorm", LayerNormWrapsModule, "nn.LayerNorm"),
    ("FeedForward", FeedForwardWrapsReference, "FeedForward"),
    ("EncoderBlock", BlockWrapsTorch, "nn.TransformerEncoderLayer"),
    ("EncoderBlock", BlockWrapsReference, "EncoderBlock"),
]


@pytest.mark.parametrize("name,impl,what", FORBIDDEN, ids=[c.__name__ for _, c, _ in FORBIDDEN])
def test_forbidden_built_ins_are_refused(name, impl, what):
    with pytest.raises(check.ImplementThisYourself, match=what):
        getattr(check, name)(impl)


def test_reference_classes_are_refused_and_restored():
    for name in ("LayerNorm", "FeedForward", "EncoderBlock"):
        with pytest.raises(check.ImplementThisYourself):
            getattr(check, name)(getattr(transformer_lab, name))
    assert F.layer_norm.__name__ == "layer_norm"
    assert nn.LayerNorm(4)(torch.ones(2, 4)).abs().sum() == 0  # restored after the checks


def test_subclass_of_the_reference_is_refused():
    with pytest.raises(check.ImplementThisYourself, match="subclasses the reference"):
        check.LayerNorm(LayerNormSubclassesReference)


# ---------------------------------------------------------------------------------------------
# Dtypes and (where present) CUDA: the visible check runs float64 and float32.


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_student_block_runs_on_each_device_and_dtype(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    for dtype in (torch.float64, torch.float32):
        block = GoodEncoderBlock(8, 2, 16, norm_first=True).to(device=device, dtype=dtype)
        x = torch.randn(2, 5, 8, device=device, dtype=dtype)
        out = block(x, mask=torch.ones(5, 5, dtype=torch.bool, device=device).tril())
        assert out.shape == x.shape and out.dtype == dtype and out.device.type == device


# ---------------------------------------------------------------------------------------------
# Every rule the exercise text states has a visible case: x is (..., d_model), so an
# implementation that only works on (B, L, d_model) fails the visible check already.


class _LayerNormThreeAxesOnly(GoodLayerNorm):
    def forward(self, x):
        mu = x.mean(2, keepdim=True)  # axis 2 is the last one only for (B, L, d_model)
        var = ((x - mu) ** 2).mean(2, keepdim=True)
        return self.weight * (x - mu) / torch.sqrt(var + self.eps) + self.bias


class _FeedForwardThreeAxesOnly(GoodFeedForward):
    def forward(self, x):
        B, L, d = x.shape  # only (B, L, d_model)
        return super().forward(x.reshape(B * L, d)).reshape(B, L, -1)


def test_visible_checks_include_an_input_without_a_sequence_axis():
    assert check.LayerNorm(GoodLayerNorm) is None
    assert check.FeedForward(GoodFeedForward) is None
    with pytest.raises(check.CheckFailed, match=r"\(B, d_model\), no sequence axis"):
        check.LayerNorm(_LayerNormThreeAxesOnly)
    with pytest.raises(check.CheckFailed, match=r"\(B, d_model\), no sequence axis"):
        check.FeedForward(_FeedForwardThreeAxesOnly)
