"""Checks for lesson 05 — Add & Norm: `LayerNorm` and `FeedForward`; `EncoderBlock`, which builds
on both, continues in `lesson05_block`."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import add_norm as _add_norm
from .drivers import CustomDriver, ModuleDriver
from .exercise import Case, CheckFailed, Exercise, Mistake, fail

__all__ = ["FeedForward", "LayerNorm"]


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


class _LayerNormEpsRootOutside(_add_norm.LayerNorm):
    """ε taken out of the root as its own root: sqrt(var) + sqrt(eps)."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.var(-1, keepdim=True, unbiased=False).sqrt()
        return self.weight * (x - mean) / (std + self.eps**0.5) + self.bias


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
        Mistake(
            "eps-root-outside",
            "the denominator is sqrt(var) + sqrt(eps): a root of a sum is not the sum of the "
            "roots, so keep ε inside the one square root, sqrt(var + eps).",
            _LayerNormEpsRootOutside,
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


class _FFNReluLast(_add_norm.FeedForward):
    """The ReLU moved after w_2: relu(w_2(w_1(x)))."""

    def forward(self, x):
        return torch.relu(self.w_2(self.w_1(x)))


class _FFNDropoutInEval(_add_norm.FeedForward):
    """F.dropout(h, 0.1) with its default training=True: it drops in eval mode too."""

    def forward(self, x):
        return self.w_2(F.dropout(torch.relu(self.w_1(x)), 0.1))


_FFN_DROPOUT = Mistake(
    "dropout",
    "FeedForward applies dropout, so in training mode (a module's default) its output is random: "
    "FFN(x) = w_2(relu(w_1(x))) has none; the encoder block's own dropout argument is where "
    "dropout goes.",
    _FFNDropout,
)


_FFN_RANDOM_IN_EVAL = Mistake(
    "dropout-in-eval-mode",
    "your module's output is random even in eval mode: F.dropout(h, p) drops whatever the "
    "module's mode, since its training argument defaults to True. FFN(x) = w_2(relu(w_1(x))) "
    "has no dropout; where a block does want one, use an nn.Dropout layer (or "
    "F.dropout(h, p, training=self.training)).",
    _FFNDropoutInEval,
)


def _same_in_eval_mode(ex: Exercise, student_cls, case: Case, mistake: Mistake) -> None:
    """Fail naming `mistake` when the module, built from `case` and put in eval mode, gives two
    different outputs for the same input (randomness the module's mode does not switch off)."""
    inputs = case.make(torch.Generator().manual_seed(2000))
    try:
        with torch.random.fork_rng(devices=[]):
            module = ex.run_student(student_cls, lambda: student_cls(**case.init)).double().eval()
            with torch.no_grad():
                first, second = (
                    ex.run_student(student_cls, lambda: module(**inputs)) for _ in "12"
                )
            same = torch.equal(first, second)
    except Exception:  # the module check has worded what went wrong already
        return
    if not same:
        fail(ex, "your module's output in eval mode differs from call to call", case.label, mistake)


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
    """Outputs and gradients (eval mode; an unnamed difference there is tested for randomness
    that eval mode does not switch off), then the same output in training mode: no dropout."""
    driver = ModuleDriver(_ffn_cases, outputs=("output",))
    unnamed = None
    try:
        n = driver.run(ex, student_cls, thorough)
    except CheckFailed as failed:
        if failed.mistake is not None:
            raise
        unnamed = failed
    if unnamed is not None:  # no mistake named: is the output random in eval mode?
        _same_in_eval_mode(ex, student_cls, _ffn_cases(False)[1], _FFN_RANDOM_IN_EVAL)
        raise unnamed
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
        Mistake(
            "relu-at-end",
            "the ReLU comes after w_2, relu(w_2(w_1(x))): nothing lies between the two layers, "
            "so they collapse into one linear map, and the output can never be negative; the "
            "ReLU goes between them, w_2(relu(w_1(x))).",
            _FFNReluLast,
        ),
        _FFN_RANDOM_IN_EVAL,
    ],
    driver=CustomDriver(_check_ffn),
    doc="a FeedForward class: FeedForward(d_model, d_ff) with w_1, w_2; forward(x)",
)
