"""Checks for lesson 05 — Add & Norm: `LayerNorm`, `FeedForward` and `EncoderBlock`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import add_norm as _add_norm
from .drivers import CustomDriver, ModuleDriver
from .exercise import Case, Exercise, Mistake, fail

__all__ = ["EncoderBlock", "FeedForward", "LayerNorm"]


# ==============================================================================================
# Lesson 05 — LayerNorm. The mutants subclass the reference (same parameters) and compute the
# formula with one thing wrong; they never call the reference's forward (it is forbidden).


def _normalise(x, dims, unbiased=False, eps=1e-5):
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=unbiased)
    return (x - mean) / torch.sqrt(var + eps)


class _LayerNormUnbiased(_add_norm.LayerNorm):
    def forward(self, x):
        return self.weight * _normalise(x, -1, unbiased=True, eps=self.eps) + self.bias


class _LayerNormEpsOutside(_add_norm.LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.var(-1, keepdim=True, unbiased=False).sqrt()
        return self.weight * (x - mean) / (std + self.eps) + self.bias


class _LayerNormBatchAxis(_add_norm.LayerNorm):
    def forward(self, x):
        return self.weight * _normalise(x, 0, eps=self.eps) + self.bias


class _LayerNormSequenceAxis(_add_norm.LayerNorm):
    def forward(self, x):
        return self.weight * _normalise(x, -2, eps=self.eps) + self.bias


class _LayerNormNoAffine(_add_norm.LayerNorm):
    def forward(self, x):
        return _normalise(x, -1, eps=self.eps)


class _LayerNormStdForVar(_add_norm.LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.var(-1, keepdim=True, unbiased=False).sqrt()
        return self.weight * (x - mean) / torch.sqrt(std + self.eps) + self.bias


class _LayerNormNoSqrt(_add_norm.LayerNorm):
    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / (var + self.eps) + self.bias


class _LayerNormNotCentred(_add_norm.LayerNorm):
    def forward(self, x):
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * x / torch.sqrt(var + self.eps) + self.bias


class _LayerNormAffineFirst(_add_norm.LayerNorm):
    def forward(self, x):
        return _normalise(self.weight * x + self.bias, -1, eps=self.eps)


class _LayerNormShiftBeforeScale(_add_norm.LayerNorm):
    """β added to x̂ before γ multiplies: γ · (x̂ + β)."""

    def forward(self, x):
        return self.weight * (_normalise(x, -1, eps=self.eps) + self.bias)


class _LayerNormTwoAxes(_add_norm.LayerNorm):
    def forward(self, x):
        return self.weight * _normalise(x, (-2, -1), eps=self.eps) + self.bias


class _LayerNormRandomInit(_add_norm.LayerNorm):
    """γ and β drawn at random: the outputs match once the check copies weights in."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        with torch.no_grad():
            self.weight.normal_()
            self.bias.normal_()

    def forward(self, x):
        return self.weight * _normalise(x, -1, eps=self.eps) + self.bias


class _LayerNormZeroInit(_LayerNormRandomInit):
    """γ and β both initialised with zeros (β's line copied): a fresh layer outputs 0."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        with torch.no_grad():
            self.weight.zero_()
            self.bias.zero_()


class _LayerNormAnnotated(_add_norm.LayerNorm):
    """The Annotated Transformer's (x - mean) / (x.std(-1) + eps): unbiased std, ε outside."""

    def forward(self, x):
        return (
            self.weight * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + self.eps)
            + self.bias
        )


class _LayerNormPrecedence(_add_norm.LayerNorm):
    """x - mean / sqrt(var + eps): the parentheses around x - mean left out."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean / torch.sqrt(var + self.eps)) + self.bias


class _LayerNormEpsFixed(_add_norm.LayerNorm):
    """The eps argument ignored: the default 1e-5 always."""

    fixed = 1e-5

    def forward(self, x):
        return self.weight * _normalise(x, -1, eps=self.fixed) + self.bias


class _LayerNormEpsSmaller(_LayerNormEpsFixed):
    """The eps argument ignored: a hard-coded 1e-6."""

    fixed = 1e-6


class _LayerNormNaiveVariance(_add_norm.LayerNorm):
    """var = E[x²] - E[x]²: it cancels in float32 when the mean is large."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = (x * x).mean(-1, keepdim=True) - mean * mean
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class _LayerNormVarianceAroundZero(_add_norm.LayerNorm):
    """Centred numerator, but the denominator's mean square is taken around 0: E[x²]."""

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        return (
            self.weight * centred / (x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt() + self.bias
        )


_ZERO_INIT = Mistake(
    "zero-init",
    "γ starts at zeros, so a fresh LayerNorm outputs 0 whatever its input: γ = "
    "torch.ones(d_model) (only β starts at zeros).",
    _LayerNormZeroInit,
)
_RANDOM_INIT = Mistake(
    "random-init",
    "γ and β start at random values: a fresh LayerNorm must be the identity normalisation, "
    "γ = torch.ones(d_model) and β = torch.zeros(d_model).",
    _LayerNormRandomInit,
)


def _check_layer_norm(ex: Exercise, student_cls, thorough: bool):
    """Outputs and gradients with the reference's weights copied in, then the stated start:
    γ all ones, β all zeros."""
    n = ModuleDriver(_layer_norm_cases, outputs=("output",)).run(ex, student_cls, thorough)
    params = dict(student_cls(6).named_parameters())
    weight, bias = params["weight"], params["bias"]
    if not (torch.all(weight == 1) and torch.all(bias == 0)):
        fail(
            ex,
            f"a fresh LayerNorm(6) starts with weight {weight.detach().flatten().tolist()[:3]}... "
            f"and bias {bias.detach().flatten().tolist()[:3]}..., expected ones and zeros",
            "LayerNorm(6), as constructed",
            _ZERO_INIT if torch.all(weight == 0) else _RANDOM_INIT,
        )
    return n + 1, "outputs and gradients on every case; γ = 1 and β = 0 at the start"


def _layer_norm_cases(thorough: bool) -> list[Case]:
    def case(shape, eps=None, scale=1.0, shift=0.0, label=""):
        def make(g):
            x = torch.randn(*shape, generator=g, dtype=torch.float64) * scale + shift
            return {"x": x}

        init = {"d_model": shape[-1]} | ({} if eps is None else {"eps": eps})
        text = f"LayerNorm({shape[-1]}" + ("" if eps is None else f", eps={eps:g}") + ")"
        return Case(f"{text} on x {tuple(shape)}" + (f", {label}" if label else ""), make, init)

    # x is (..., d_model): the visible cases include one without a sequence axis.
    cases = [
        case((2, 3, 8)),
        case((3, 4, 6), eps=0.1, scale=0.5, label="eps = 0.1"),
        case((5, 4), label="(B, d_model), no sequence axis"),
        # E[x²] − E[x]² cancels in float32 here: the variance must be taken around the mean
        case((2, 7, 32), shift=100.0, label="large values with an offset (mean 100, std 1)"),
    ]
    if thorough:
        cases += [
            case((4, 5, 16), eps=1e-3, scale=0.05, label="small inputs, eps = 1e-3"),
            case((2, 2, 3, 5), label="two leading axes"),
            case((1, 1, 4), label="one position"),
            case((3, 2, 512), label="d_model = 512"),
            case((2, 3, 1), label="d_model = 1 (every input equals its mean)"),
        ]
    return cases


LayerNorm = Exercise(
    name="LayerNorm",
    lesson="05",
    module="add_norm",
    reference=_add_norm.LayerNorm,
    forbidden=(
        "torch.nn.functional.layer_norm",
        "torch.nn.LayerNorm",
        "torch.layer_norm",
        "torch.native_layer_norm",
        "torch.nn.functional.group_norm",
        "torch.nn.GroupNorm",
        "torch.nn.functional.rms_norm",
        "transformer_lab.add_norm.LayerNorm",
        "transformer_lab.LayerNorm",
    ),
    mistakes=[
        Mistake(
            "unbiased-variance",
            "the variance is the unbiased one (divided by d_model - 1): LayerNorm uses the "
            "biased variance, x.var(-1, unbiased=False) or ((x - mean)**2).mean(-1).",
            _LayerNormUnbiased,
        ),
        Mistake(
            "eps-outside-sqrt",
            "ε is added outside the square root: divide by sqrt(var + eps), not sqrt(var) + eps.",
            _LayerNormEpsOutside,
        ),
        Mistake(
            "batch-axis",
            "the statistics are taken over the batch axis (dim=0), as BatchNorm does: "
            "LayerNorm normalises each position over its features, dim=-1.",
            _LayerNormBatchAxis,
        ),
        Mistake(
            "sequence-axis",
            "the statistics are taken over the sequence axis (dim=-2): LayerNorm normalises "
            "each position over its d_model features, dim=-1.",
            _LayerNormSequenceAxis,
        ),
        _RANDOM_INIT,
        _ZERO_INIT,
        Mistake(
            "no-affine",
            "γ and β are not applied: multiply by self.weight and add self.bias after normalising.",
            _LayerNormNoAffine,
        ),
        Mistake(
            "std-for-var",
            "the denominator uses the standard deviation where the variance belongs: "
            "sqrt(var + eps), with var = mean((x - mean)²), not sqrt(std + eps).",
            _LayerNormStdForVar,
        ),
        Mistake(
            "no-sqrt",
            "the square root is missing: divide by sqrt(var + eps), the standard deviation, "
            "not by var + eps.",
            _LayerNormNoSqrt,
        ),
        Mistake(
            "not-centred",
            "the mean is not subtracted: LayerNorm centres each row, (x − mean) / sqrt(var + "
            "eps), before γ and β (dividing x alone is what RMSNorm does, with its own "
            "denominator).",
            _LayerNormNotCentred,
        ),
        Mistake(
            "affine-first",
            "γ and β are applied before normalising, which undoes them: normalise first, then "
            "γ · x̂ + β.",
            _LayerNormAffineFirst,
        ),
        Mistake(
            "two-axes",
            "the statistics are taken over the last two axes (positions and features): "
            "LayerNorm normalises each position's d_model features on their own, over dim=-1 "
            "only.",
            _LayerNormTwoAxes,
        ),
        Mistake(
            "std-plus-eps",
            "the denominator is x.std(-1) + eps (the Annotated Transformer's form): that std is "
            "the unbiased one and ε sits outside the root; divide by sqrt(x.var(-1, "
            "unbiased=False) + eps).",
            _LayerNormAnnotated,
        ),
        Mistake(
            "precedence",
            "x - mean / sqrt(var + eps) divides only the mean (/ binds tighter than -): write "
            "(x - mean) / sqrt(var + eps).",
            _LayerNormPrecedence,
        ),
        Mistake(
            "eps-ignored",
            "the eps argument is ignored (the default 1e-5 is used whatever it is): keep "
            "self.eps = eps in __init__ and add self.eps inside the square root.",
            _LayerNormEpsFixed,
        ),
        Mistake(
            "eps-hard-coded",
            "ε is a hard-coded 1e-6, not the eps argument (default 1e-5): store self.eps = eps "
            "and use it.",
            _LayerNormEpsSmaller,
        ),
        Mistake(
            "naive-variance",
            "the variance is E[x²] - E[x]², which cancels (loses its digits) when the mean is "
            "large next to the spread: take the mean of (x - mean)², or x.var(-1, "
            "unbiased=False).",
            _LayerNormNaiveVariance,
        ),
        Mistake(
            "shift-before-scale",
            "β is added before γ multiplies, γ · (x̂ + β): scale first, then shift, γ · x̂ + β.",
            _LayerNormShiftBeforeScale,
        ),
        Mistake(
            "variance-not-centred",
            "the denominator is the root mean square of x, mean(x²), taken around 0 rather than "
            "around the mean: the variance is mean((x − mean)²), x.var(-1, unbiased=False), "
            "and the mean is subtracted inside it too.",
            _LayerNormVarianceAroundZero,
        ),
    ],
    driver=CustomDriver(_check_layer_norm),
    doc="a LayerNorm class: LayerNorm(d_model, eps=1e-5) with `weight`, `bias`; forward(x)",
)


# ==============================================================================================
# FeedForward: w_2(relu(w_1(x))).


class _FFNNoActivation(_add_norm.FeedForward):
    def forward(self, x):
        return self.w_2(self.w_1(x))


class _FFNActivationTwice(_add_norm.FeedForward):
    def forward(self, x):
        return torch.relu(self.w_2(torch.relu(self.w_1(x))))


class _FFNSwapped(_add_norm.FeedForward):
    def forward(self, x):
        return self.w_1(torch.relu(self.w_2(x)))


class _FFNGelu(_add_norm.FeedForward):
    def forward(self, x):
        return self.w_2(F.gelu(self.w_1(x)))


class _FFNReluFirst(_add_norm.FeedForward):
    """A parenthesis misplaced: the ReLU applied to the input, w_2(w_1(relu(x)))."""

    def forward(self, x):
        return self.w_2(self.w_1(torch.relu(x)))


class _FFNResidual(_add_norm.FeedForward):
    def forward(self, x):
        return x + self.w_2(torch.relu(self.w_1(x)))


class _FFNLeakyRelu(_add_norm.FeedForward):
    def forward(self, x):
        return self.w_2(F.leaky_relu(self.w_1(x)))


class _FFNTanh(_add_norm.FeedForward):
    def forward(self, x):
        return self.w_2(torch.tanh(self.w_1(x)))


class _FFNDropout(_add_norm.FeedForward):
    """A hard-coded nn.Dropout(0.1) after the ReLU (the reference applies self.dropout there)."""

    def __init__(self, d_model, d_ff):
        super().__init__(d_model, d_ff, dropout=0.1)


_FFN_DROPOUT = Mistake(
    "dropout",
    "FeedForward applies dropout, so in training mode (a module's default) its output is random: "
    "FFN(x) = w_2(relu(w_1(x))) has none; the encoder block's own dropout argument is where "
    "dropout goes.",
    _FFNDropout,
)


def _same_in_training_mode(ex: Exercise, student_cls, case: Case, mistake: Mistake) -> None:
    """Fail naming `mistake` unless the module, built from `case`, computes the same in training
    mode as in eval mode (the check compares in eval mode; the exercise states one function)."""
    inputs = case.make(torch.Generator().manual_seed(2000))
    module = ex.run_student(student_cls, lambda: student_cls(**case.init)).double()

    def outputs(training):
        module.train(training)
        with torch.no_grad():
            return ex.run_student(student_cls, lambda: module(**inputs))

    if not torch.equal(outputs(True), outputs(False)):
        fail(
            ex, "your module's output in training mode differs from eval mode", case.label, mistake
        )


def _check_ffn(ex: Exercise, student_cls, thorough: bool):
    """Outputs and gradients (eval mode), then the same output in training mode: no dropout."""
    driver = ModuleDriver(_ffn_cases, outputs=("output",))
    n = driver.run(ex, student_cls, thorough)
    _same_in_training_mode(ex, student_cls, _ffn_cases(False)[1], _FFN_DROPOUT)
    return n + 1, f"{driver.covered(thorough)}; the same output in training mode"


def _ffn_cases(thorough: bool) -> list[Case]:
    def case(shape, d_ff, label=""):
        def make(g):
            return {"x": torch.randn(*shape, generator=g, dtype=torch.float64)}

        init = {"d_model": shape[-1], "d_ff": d_ff}
        text = f"FeedForward({shape[-1]}, {d_ff}) on x {tuple(shape)}"
        return Case(text + (f", {label}" if label else ""), make, init)

    # d_ff == d_model first: there a w_1/w_2 mix-up still runs, so the check can name it.
    # x is (..., d_model): the visible cases include one without a sequence axis.
    cases = [
        case((2, 3, 8), 8),
        case((2, 5, 6), 24),
        case((5, 12), 48, "(B, d_model), no sequence axis"),
    ]
    if thorough:
        cases += [
            case((4, 6, 16), 16),
            case((1, 1, 4), 16, "one position"),
            case((3, 7, 8), 32),
            case((2, 2, 3, 5), 7, "two leading axes, odd sizes"),
        ]
    return cases


FeedForward = Exercise(
    name="FeedForward",
    lesson="05",
    module="add_norm",
    reference=_add_norm.FeedForward,
    forbidden=(
        "transformer_lab.add_norm.FeedForward",
        "transformer_lab.FeedForward",
        "torch.nn.TransformerEncoderLayer",
    ),
    mistakes=[
        Mistake(
            "relu-on-input",
            "the ReLU is applied to the input, w_2(w_1(relu(x))): it goes between the two "
            "layers, w_2(relu(w_1(x))).",
            _FFNReluFirst,
        ),
        Mistake(
            "no-activation",
            "there is no activation between w_1 and w_2, so the two layers collapse into one "
            "linear map: FFN(x) = w_2(relu(w_1(x))).",
            _FFNNoActivation,
        ),
        Mistake(
            "relu-after-w_2",
            "the ReLU is applied after w_2 as well: the FFN's output is w_2(...) itself, "
            "negative values included.",
            _FFNActivationTwice,
        ),
        Mistake(
            "w_1-w_2-swapped",
            "w_1 and w_2 are used in the wrong order: w_1 (d_model -> d_ff) comes first, "
            "w_2 (d_ff -> d_model) last.",
            _FFNSwapped,
        ),
        Mistake(
            "gelu",
            "the activation is GELU: this exercise's FeedForward uses ReLU, as the 2017 paper.",
            _FFNGelu,
        ),
        Mistake(
            "residual-inside",
            "the FFN adds its input (x + ...): the residual connection belongs to the encoder "
            "block, not to FeedForward.",
            _FFNResidual,
        ),
        Mistake(
            "leaky-relu",
            "the activation is leaky_relu: this exercise's FeedForward uses ReLU, torch.relu "
            "(negative values become 0).",
            _FFNLeakyRelu,
        ),
        Mistake(
            "tanh",
            "the activation is tanh: this exercise's FeedForward uses ReLU, torch.relu.",
            _FFNTanh,
        ),
        _FFN_DROPOUT,
    ],
    driver=CustomDriver(_check_ffn),
    doc="a FeedForward class: FeedForward(d_model, d_ff) with w_1, w_2; forward(x)",
)


# ==============================================================================================
# EncoderBlock: attention and FFN sub-layers, each with a residual connection and a LayerNorm.


class _BlockNormSwapped(_add_norm.EncoderBlock):
    """Pre-norm where post-norm is asked for, and the other way round."""

    def forward(self, x, mask=None):
        if not self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm2(x))
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(x))


class _BlockPostNormOnly(_add_norm.EncoderBlock):
    def forward(self, x, mask=None):
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(x))


class _BlockNoFFNResidual(_add_norm.EncoderBlock):
    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            return self.ffn(self.norm2(x))
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(self.ffn(x))


class _BlockNormedResidual(_add_norm.EncoderBlock):
    """norm(x) + sublayer(...): the residual path carries the normalised input."""

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = h + self.self_attn(h, mask=mask)
            h = self.norm2(x)
            return h + self.ffn(h)
        x = self.norm1(x) + self.self_attn(x, mask=mask)
        return self.norm2(x) + self.ffn(x)


class _BlockIgnoresMask(_add_norm.EncoderBlock):
    def forward(self, x, mask=None):
        return super().forward(x, mask=None)


class _BlockSharedNorm(_add_norm.EncoderBlock):
    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm1(x))
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm1(x + self.ffn(x))


class _BlockNormsSwapped(_add_norm.EncoderBlock):
    """norm2 on the attention sub-layer, norm1 on the feed-forward one."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm2(x), mask=mask)
            return x + self.ffn(self.norm1(x))
        x = self.norm2(x + self.self_attn(x, mask=mask))
        return self.norm1(x + self.ffn(x))


class _BlockFFNReadsInput(_add_norm.EncoderBlock):
    """The FFN sub-layer reads the block's input x instead of the attention sub-layer's output."""

    def forward(self, x, mask=None):
        if self.norm_first:
            h = x + self.self_attn(self.norm1(x), mask=mask)
            return h + self.ffn(self.norm2(x))
        h = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(h + self.ffn(x))


class _BlockFFNResidualFromInput(_add_norm.EncoderBlock):
    """The FFN sub-layer reads the attention's result, but its residual adds the block's input."""

    def forward(self, x, mask=None):
        if self.norm_first:
            h = x + self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm2(h))
        h = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(h))


class _BlockResidualAfterNorm(_add_norm.EncoderBlock):
    """Post-norm written as norm(sublayer(x)) + x: the residual is added after the norm."""

    def forward(self, x, mask=None):
        if self.norm_first:
            return super().forward(x, mask=mask)
        x = x + self.norm1(self.self_attn(x, mask=mask))
        return x + self.norm2(self.ffn(x))


class _BlockFinalNorm(_add_norm.EncoderBlock):
    """Pre-norm with norm2 applied once more to the block's output."""

    def forward(self, x, mask=None):
        out = super().forward(x, mask=mask)
        return self.norm2(out) if self.norm_first else out


class _BlockAttentionResidualShadowed(_add_norm.EncoderBlock):
    """Post-norm with x overwritten by the attention output a: norm1(a + a)."""

    def forward(self, x, mask=None):
        if self.norm_first:
            return super().forward(x, mask=mask)
        a = self.self_attn(x, mask=mask)
        x = self.norm1(a + a)
        return self.norm2(x + self.ffn(x))


class _BlockNoAttentionResidual(_add_norm.EncoderBlock):
    """No residual around the attention sub-layer."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm2(x))
        x = self.norm1(self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(x))


class _BlockPreNormFFNPostNorm(_add_norm.EncoderBlock):
    """norm_first=True: pre-norm around the attention, post-norm around the FFN."""

    def forward(self, x, mask=None):
        if not self.norm_first:
            return super().forward(x, mask=mask)
        x = x + self.self_attn(self.norm1(x), mask=mask)
        return self.norm2(x + self.ffn(x))


class _BlockTorchLayerNorm(_add_norm.EncoderBlock):
    """norm1 and norm2 built as torch's nn.LayerNorm instead of the student's own LayerNorm."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first, norm=nn.LayerNorm)


_TORCH_LAYER_NORM = Mistake(
    "torch-layer-norm",
    "norm1 and norm2 are torch's nn.LayerNorm: build them from your own LayerNorm class of "
    "exercise 1, LayerNorm(d_model), as the exercise asks.",
    _BlockTorchLayerNorm,
)


def _check_block(ex: Exercise, student_cls, thorough: bool):
    """Outputs and gradients, then the parts the text names: norm1 and norm2 are not torch's."""
    driver = ModuleDriver(_block_cases, outputs=("output",))
    n = driver.run(ex, student_cls, thorough)
    case = _block_cases(False)[0]
    block = ex.run_student(student_cls, lambda: student_cls(**case.init))
    torch_norms = [
        k for k in ("norm1", "norm2") if isinstance(getattr(block, k, None), nn.LayerNorm)
    ]
    if torch_norms:
        fail(
            ex,
            f"{' and '.join(torch_norms)} {'is' if len(torch_norms) == 1 else 'are'} "
            "torch.nn.LayerNorm, not your LayerNorm",
            case.label,
            _TORCH_LAYER_NORM,
        )
    return n + 1, f"{driver.covered(thorough)}; norm1 and norm2 are your LayerNorm"


def _block_cases(thorough: bool) -> list[Case]:
    def case(B, L, d_model, n_heads, d_ff, norm_first, mask=None):
        def make(g):
            inputs = {"x": torch.randn(B, L, d_model, generator=g, dtype=torch.float64)}
            if mask == "causal":
                inputs["mask"] = torch.ones(L, L, dtype=torch.bool).tril()
            elif mask == "padding":
                keep = torch.ones(B, L, dtype=torch.bool)
                keep[0, L // 2 + 1 :] = False  # the first sequence is padded
                inputs["mask"] = keep[:, None, None, :]
            return inputs

        init = {"d_model": d_model, "n_heads": n_heads, "d_ff": d_ff, "norm_first": norm_first}
        label = (
            f"EncoderBlock({d_model}, {n_heads}, {d_ff}, norm_first={norm_first}) "
            f"on x {(B, L, d_model)}" + (f", {mask} mask" if mask else "")
        )
        return Case(label, make, init)

    cases = [case(2, 5, 8, 2, 16, False, "causal"), case(2, 5, 8, 2, 16, True, "causal")]
    if thorough:
        cases += [
            case(3, 6, 16, 4, 32, False),
            case(3, 6, 16, 4, 32, True),
            case(2, 7, 12, 3, 20, False, "padding"),
            case(2, 7, 12, 3, 20, True, "padding"),
            case(1, 1, 8, 2, 8, False),
            case(1, 1, 8, 2, 8, True),
            case(4, 3, 6, 1, 10, True, "causal"),
        ]
    return cases


EncoderBlock = Exercise(
    name="EncoderBlock",
    lesson="05",
    module="add_norm",
    reference=_add_norm.EncoderBlock,
    forbidden=(
        "transformer_lab.add_norm.EncoderBlock",
        "transformer_lab.EncoderBlock",
        "torch.nn.TransformerEncoderLayer",
        "torch.nn.TransformerEncoder",
        "torch._transformer_encoder_layer_fwd",
    ),
    mistakes=[
        # norm_first ignored first: on a pre-norm case it equals the swapped mutant.
        Mistake(
            "norm_first-ignored",
            "norm_first is ignored: with norm_first=True each sub-layer sees norm(x) and the "
            "residual adds the sub-layer's output to the un-normalised x.",
            _BlockPostNormOnly,
        ),
        Mistake(
            "pre-post-swapped",
            "pre-norm and post-norm are swapped: norm_first=False (post-norm) is "
            "x = norm(x + sublayer(x)); norm_first=True (pre-norm) is x = x + sublayer(norm(x)).",
            _BlockNormSwapped,
        ),
        Mistake(
            "no-ffn-residual",
            "the residual connection around the FFN is missing: add the FFN's input back, "
            "x + ffn(...).",
            _BlockNoFFNResidual,
        ),
        Mistake(
            "normed-residual",
            "the residual adds norm(x) instead of x: the skip path must carry x itself "
            "(post-norm: norm(x + sublayer(x)); pre-norm: x + sublayer(norm(x))).",
            _BlockNormedResidual,
        ),
        Mistake(
            "mask-ignored",
            "the mask is ignored: pass it on to the attention, self.self_attn(..., mask=mask).",
            _BlockIgnoresMask,
        ),
        Mistake(
            "shared-norm",
            "norm1 is used for both sub-layers: the FFN's sub-layer has its own norm2.",
            _BlockSharedNorm,
        ),
        Mistake(
            "norms-swapped",
            "norm1 and norm2 are swapped: norm1 belongs to the attention sub-layer and norm2 to "
            "the feed-forward one (their weights differ once trained or loaded).",
            _BlockNormsSwapped,
        ),
        Mistake(
            "ffn-reads-block-input",
            "the feed-forward sub-layer reads the block's input x: it must read the attention "
            "sub-layer's result, so the two sub-layers run one after the other.",
            _BlockFFNReadsInput,
        ),
        Mistake(
            "residual-after-norm",
            "post-norm adds the residual after the norm, x + norm(sublayer(x)): the norm comes "
            "last, around the sum, x = norm(x + sublayer(x)).",
            _BlockResidualAfterNorm,
        ),
        Mistake(
            "pre-norm-final-norm",
            "the pre-norm block normalises its output once more: pre-norm ends with the "
            "residual sum x + ffn(norm2(x)); the one final norm belongs to the whole stack.",
            _BlockFinalNorm,
        ),
        Mistake(
            "attention-residual-shadowed",
            "x is overwritten by the attention's output, so post-norm adds it to itself, "
            "norm1(a + a): keep the block's input, x = norm1(x + self_attn(x)).",
            _BlockAttentionResidualShadowed,
        ),
        Mistake(
            "no-attention-residual",
            "the residual connection around the attention is missing: add the sub-layer's "
            "input back, x + self_attn(...).",
            _BlockNoAttentionResidual,
        ),
        Mistake(
            "pre-norm-ffn-post-norm",
            "with norm_first=True the FFN sub-layer is post-norm, norm2(x + ffn(x)): in "
            "pre-norm both sub-layers are x + sublayer(norm(x)), so x + ffn(norm2(x)).",
            _BlockPreNormFFNPostNorm,
        ),
        _TORCH_LAYER_NORM,
        Mistake(
            "ffn-residual-from-input",
            "the FFN's residual adds the block's input x, so the attention sub-layer's result "
            "is dropped from the skip path: each sub-layer adds its own input, the attention's "
            "result h, norm2(h + ffn(h)) (pre-norm: h + ffn(norm2(h))).",
            _BlockFFNResidualFromInput,
        ),
    ],
    driver=CustomDriver(_check_block),
    doc="EncoderBlock(d_model, n_heads, d_ff, dropout=0.0, norm_first=False); forward(x, mask)",
    uses=("LayerNorm", "FeedForward"),
)
