"""Checks for lesson 02 — QKV attention: `scaled_dot_product_attention` and `SelfAttention`."""

from __future__ import annotations

import math

import torch

from .. import attention as _attention
from .compare import compare_tensor, same_within_tolerance
from .drivers import CustomDriver, FunctionDriver, ModuleDriver, init_parameters
from .exercise import Case, Exercise, Mistake, fail
from .forbid import ImplementThisYourself

__all__ = ["SelfAttention", "scaled_dot_product_attention"]

# ==============================================================================================
# Lesson 02 — QKV attention


def _scores(q, k):
    return q @ k.transpose(-2, -1)


def _sdpa_plain(q, k, v, mask=None):
    """A private copy of the right answer for the mutants (the reference itself is forbidden)."""
    s = _scores(q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, -1).nan_to_num(0.0)
    return w @ v, w


def _sdpa_no_scale(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, -1).nan_to_num(0.0)
    return w @ v, w


def _sdpa_scale_d_k(q, k, v, mask=None):
    s = _scores(q, k) / q.shape[-1]
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, -1).nan_to_num(0.0)
    return w @ v, w


def _sdpa_scale_sqrt_d_v(q, k, v, mask=None):
    s = _scores(q, k) / math.sqrt(v.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, -1).nan_to_num(0.0)
    return w @ v, w


def _sdpa_query_axis(q, k, v, mask=None):
    s = _scores(q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, -2).nan_to_num(0.0)
    return w @ v, w


def _sdpa_mask_after_softmax(q, k, v, mask=None):
    w = torch.softmax(_scores(q, k) / math.sqrt(q.shape[-1]), -1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v, w


def _sdpa_mask_inverted(q, k, v, mask=None):
    s = _scores(q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(mask, float("-inf"))
    w = torch.softmax(s, -1).nan_to_num(0.0)
    return w @ v, w


def _sdpa_mask_inverted_nan(q, k, v, mask=None):
    """True read as "blocked", and no guard: a row whose keys are all allowed becomes all -inf."""
    s = _scores(q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(mask, float("-inf"))
    w = torch.softmax(s, -1)
    return w @ v, w


def _sdpa_mask_zero(q, k, v, mask=None):
    s = _scores(q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, 0.0)
    w = torch.softmax(s, -1)
    return w @ v, w


def _sdpa_naive_exp(q, k, v, mask=None):
    s = _scores(q, k) / math.sqrt(q.shape[-1])
    e = torch.exp(s)
    if mask is not None:
        e = e.masked_fill(~mask, 0.0)
    w = (e / e.sum(-1, keepdim=True)).nan_to_num(0.0)
    return w @ v, w


def _sdpa_nan_rows(q, k, v, mask=None):
    s = _scores(q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, -1)
    return w @ v, w


def _sdpa_finite_fill(q, k, v, mask=None):
    """Masked scores filled with -1e9: a fully masked row becomes uniform, not zero."""
    s = _scores(q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    w = torch.softmax(s, -1)
    return w @ v, w


def _sdpa_scores_as_weights(q, k, v, mask=None):
    """The right output, but the (masked) scores before the softmax returned as the weights."""
    s = _scores(q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0) @ v, s


def _sdpa_mask_added(q, k, v, mask=None):
    """The bool mask added to the scores as 0/1 (an additive mask's habit), so nothing is masked."""
    s = _scores(q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s + mask.to(s.dtype)
    w = torch.softmax(s, -1).nan_to_num(0.0)
    return w @ v, w


def _sdpa_scale_after_softmax(q, k, v, mask=None):
    """The softmax of the unscaled scores, its weights divided by √d_k afterwards."""
    w, d_k = _sdpa_no_scale(q, k, v, mask)[1], q.shape[-1]
    return w @ v / math.sqrt(d_k), w / math.sqrt(d_k)


def _sdpa_cases(thorough: bool) -> list[Case]:
    def case(batch, Lq, Lk, d_k, d_v, mask=None, scale=1.0, label=""):
        def make(g):
            q = torch.randn(*batch, Lq, d_k, generator=g, dtype=torch.float64) * scale
            k = torch.randn(*batch, Lk, d_k, generator=g, dtype=torch.float64) * scale
            v = torch.randn(*batch, Lk, d_v, generator=g, dtype=torch.float64)
            inputs = {"q": q, "k": k, "v": v}
            if mask is not None:
                inputs["mask"] = mask(g)
            return inputs

        text = f"q {(*batch, Lq, d_k)}, k {(*batch, Lk, d_k)}, v {(*batch, Lk, d_v)}"
        return Case(text + (f", {label}" if label else ""), make)

    def random_mask(shape, p=0.7, full_row=False):
        def make(g):
            m = torch.rand(shape, generator=g) < p
            m[..., 0] = True  # every query may attend to at least one key
            if full_row:
                m[..., 0, :] = False  # ... except the first query of each matrix
            return m

        return make

    def causal(L):
        return lambda g: torch.ones(L, L, dtype=torch.bool).tril()

    cases = [
        case((), 3, 5, 4, 6),
        case((2,), 4, 4, 8, 8, mask=causal(4), label="causal mask (4, 4)"),
        case((2, 2), 3, 5, 16, 4, mask=random_mask((2, 2, 3, 5)), label="mask (2, 2, 3, 5)"),
        # the stated rules, visible too: a fully masked row gives zero weights; no overflow
        case(
            (2,),
            4,
            5,
            8,
            8,
            mask=random_mask((2, 4, 5), full_row=True),
            label="a query with every key masked",
        ),
        case((2,), 6, 6, 64, 16, scale=12.0, label="large logits (q, k scaled by 12)"),
    ]
    if thorough:
        cases += [
            case((1,), 1, 1, 4, 4, label="length-1 sequences"),
            case((3,), 1, 7, 8, 5, label="one query"),
            case((2, 4), 6, 6, 32, 32),
            case((2, 3), 5, 7, 1, 3, label="d_k = 1"),
            case(
                (2, 2),
                5,
                5,
                8,
                8,
                mask=random_mask((2, 1, 5, 5)),
                label="mask (2, 1, 5, 5) broadcast over heads",
            ),
            case(
                (2, 3),
                4,
                6,
                8,
                2,
                mask=random_mask((4, 6), p=0.4),
                label="mask (4, 6) broadcast over batch",
            ),
            case(
                (2, 3, 2), 3, 4, 4, 4, mask=random_mask((1, 1, 1, 3, 4)), label="three batch dims"
            ),
        ]
    return cases


scaled_dot_product_attention = Exercise(
    name="scaled_dot_product_attention",
    lesson="02",
    module="attention",
    reference=_attention.scaled_dot_product_attention,
    forbidden=(
        "torch.nn.functional.scaled_dot_product_attention",
        "torch._C._nn.scaled_dot_product_attention",
        "torch.nn.functional.multi_head_attention_forward",
        "torch.nn.MultiheadAttention",
        "transformer_lab.attention.scaled_dot_product_attention",
        "transformer_lab.attention.fused_attention",
        "transformer_lab.scaled_dot_product_attention",
    ),
    mistakes=[
        Mistake("no-scale", "your scores are not divided by √d_k.", _sdpa_no_scale),
        Mistake("scale-by-d_k", "your scores are divided by d_k instead of √d_k.", _sdpa_scale_d_k),
        Mistake(
            "scale-by-sqrt-d_v",
            "your scores are divided by √d_v, the width of the values: the scale is √d_k, the "
            "width of the queries and keys (q.shape[-1]).",
            _sdpa_scale_sqrt_d_v,
        ),
        Mistake(
            "softmax-query-axis",
            "softmax runs over the query axis (dim=-2); it must run over the keys (dim=-1).",
            _sdpa_query_axis,
        ),
        Mistake(
            "mask-after-softmax",
            "the mask is applied after softmax: fill the masked scores with -inf before the "
            "softmax so each row still sums to 1.",
            _sdpa_mask_after_softmax,
        ),
        Mistake(
            "mask-inverted",
            "the mask is inverted: True means 'may attend', so fill where the mask is False (~mask).",
            _sdpa_mask_inverted,
        ),
        Mistake(
            "mask-inverted-nan",
            "the mask is read as True = 'blocked', so a query whose keys are all allowed has every "
            "score at -inf and gets NaN: True means 'may attend', so fill where the mask is False "
            "(scores.masked_fill(~mask, float('-inf'))).",
            _sdpa_mask_inverted_nan,
        ),
        Mistake(
            "mask-zero",
            "masked scores are set to 0 instead of -inf, so masked keys still get weight.",
            _sdpa_mask_zero,
        ),
        Mistake(
            "naive-exp",
            "exp(scores) / sum(exp(scores)) overflows for large scores: subtract each row's maximum "
            "first, or use torch.softmax.",
            _sdpa_naive_exp,
        ),
        Mistake(
            "nan-rows",
            "a query whose keys are all masked gets NaN weights; the contract asks for zeros "
            "there (e.g. weights.nan_to_num(0.0)).",
            _sdpa_nan_rows,
        ),
        Mistake(
            "finite-fill",
            "masked scores are filled with a large finite number (e.g. -1e9), so a query whose "
            "keys are all masked gets uniform weights instead of zeros: fill with "
            "float('-inf') and give such rows zero weights (nan_to_num(0.0)).",
            _sdpa_finite_fill,
        ),
        Mistake(
            "scores-as-weights",
            "the weights returned are the scores before the softmax: return softmax(scores), "
            "whose rows sum to 1 (the same weights that multiply v).",
            _sdpa_scores_as_weights,
        ),
        Mistake(
            "bool-mask-added",
            "the bool mask is added to the scores (as 0 and 1), which masks nothing: a bool "
            "mask says where a query may attend, so fill the other scores with -inf, "
            "scores.masked_fill(~mask, float('-inf')).",
            _sdpa_mask_added,
        ),
        Mistake(
            "scale-after-softmax",
            "the weights are divided by √d_k after the softmax, so their rows no longer sum to "
            "1: divide the scores, softmax(q kᵀ / √d_k).",
            _sdpa_scale_after_softmax,
        ),
    ],
    driver=FunctionDriver(_sdpa_cases, outputs=("output", "weights")),
    doc="scaled_dot_product_attention(q, k, v, mask=None) -> (output, weights)",
)


class _SelfAttentionValuesAreX(_attention.SelfAttention):
    def forward(self, x, mask=None):
        v = x if self.d_v == x.shape[-1] else self.w_v(x)
        out, self.last_weights = _sdpa_plain(self.w_q(x), self.w_k(x), v, mask)
        return out


class _SelfAttentionKeysFromWq(_attention.SelfAttention):
    def forward(self, x, mask=None):
        out, self.last_weights = _sdpa_plain(self.w_q(x), self.w_q(x), self.w_v(x), mask)
        return out


class _SelfAttentionSwapped(_attention.SelfAttention):
    def forward(self, x, mask=None):
        out, self.last_weights = _sdpa_plain(self.w_k(x), self.w_q(x), self.w_v(x), mask)
        return out


class _SelfAttentionUntransposed(_attention.SelfAttention):
    def forward(self, x, mask=None):
        q = x @ self.w_q.weight
        k = x @ self.w_k.weight
        v = x @ self.w_v.weight
        out, self.last_weights = _sdpa_plain(q, k, v, mask)
        return out


class _SelfAttentionIgnoresMask(_attention.SelfAttention):
    def forward(self, x, mask=None):
        out, self.last_weights = _sdpa_plain(self.w_q(x), self.w_k(x), self.w_v(x), None)
        return out


class _SelfAttentionUnscaled(_attention.SelfAttention):
    def forward(self, x, mask=None):
        out, self.last_weights = _sdpa_no_scale(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        return out


class _SelfAttentionScaleDModel(_attention.SelfAttention):
    """The scores divided by √d_model, the input's width, instead of √d_k."""

    def forward(self, x, mask=None):
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        s = _scores(q, k) / math.sqrt(x.shape[-1])
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        self.last_weights = torch.softmax(s, -1).nan_to_num(0.0)
        return self.last_weights @ v


class _SelfAttentionScaledTwice(_attention.SelfAttention):
    """q divided by √d_k before the attention function, which divides again."""

    def forward(self, x, mask=None):
        q = self.w_q(x)
        out, self.last_weights = _sdpa_plain(
            q / math.sqrt(q.shape[-1]), self.w_k(x), self.w_v(x), mask
        )
        return out


class _SelfAttentionValuesFromWk(_attention.SelfAttention):
    def forward(self, x, mask=None):
        k = self.w_k(x)
        v = k if self.d_k == self.d_v else self.w_v(x)
        out, self.last_weights = _sdpa_plain(self.w_q(x), k, v, mask)
        return out


# The stated rule "keep the weights in self.last_weights": outputs right, last_weights wrong.


class _SelfAttentionNoLastWeights(_attention.SelfAttention):
    def forward(self, x, mask=None):
        out, _ = _sdpa_plain(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        return out


class _SelfAttentionStaleLastWeights(_attention.SelfAttention):
    def forward(self, x, mask=None):
        out, weights = _sdpa_plain(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        if self.last_weights is None:  # kept once, never replaced
            self.last_weights = weights
        return out


class _SelfAttentionOutputAsWeights(_attention.SelfAttention):
    def forward(self, x, mask=None):
        out, _ = _sdpa_plain(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        self.last_weights = out
        return out


class _SelfAttentionFirstSequenceWeights(_attention.SelfAttention):
    def forward(self, x, mask=None):
        out, weights = _sdpa_plain(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        self.last_weights = weights[0]  # only the first sequence's (L, L), "for the plot"
        return out


class _SelfAttentionScoresAsWeights(_attention.SelfAttention):
    def forward(self, x, mask=None):
        q, k = self.w_q(x), self.w_k(x)
        out, _ = _sdpa_plain(q, k, self.w_v(x), mask)
        self.last_weights = _scores(q, k) / math.sqrt(q.shape[-1])  # before the softmax
        return out


def _self_attention_cases(thorough: bool) -> list[Case]:
    def case(B, L, d_model, d_k=None, d_v=None, mask=False):
        def make(g):
            inputs = {"x": torch.randn(B, L, d_model, generator=g, dtype=torch.float64)}
            if mask:
                inputs["mask"] = torch.ones(L, L, dtype=torch.bool).tril()
            return inputs

        init = {"d_model": d_model, "d_k": d_k, "d_v": d_v}
        label = f"SelfAttention({d_model}, d_k={d_k}, d_v={d_v}) on x {(B, L, d_model)}"
        return Case(label + (", causal mask" if mask else ""), make, init)

    cases = [case(2, 5, 8), case(2, 4, 6, d_k=4, d_v=5, mask=True)]
    if thorough:
        cases += [
            case(1, 1, 4),
            case(3, 7, 16, d_k=8, d_v=8),
            case(2, 6, 8, mask=True),
            case(4, 3, 5, d_k=2, d_v=3),
        ]
    return cases


# The last_weights case: two calls of different shapes, then `last_weights` must hold the softmax
# weights of the second one, (B, L, L), equal to the reference's.

_LAST_WEIGHTS_INIT = {"d_model": 6, "d_k": 4, "d_v": 5}
_LAST_WEIGHTS_CASE = (
    "last_weights after two calls: SelfAttention(6, d_k=4, d_v=5) on x (2, 5, 6) with a causal "
    "mask, then on x (3, 4, 6) (float64 on cpu)"
)
_MISSING = object()


def _last_weights_calls() -> list[dict]:
    g = torch.Generator().manual_seed(2100)
    first = torch.randn(2, 5, 6, generator=g, dtype=torch.float64)
    second = torch.randn(3, 4, 6, generator=g, dtype=torch.float64)
    return [{"x": first, "mask": torch.ones(5, 5, dtype=torch.bool).tril()}, {"x": second}]


def _kept_after(layer, calls: list[dict]) -> list:
    """What `layer.last_weights` holds after each call (detached copies)."""
    kept = []
    with torch.no_grad():
        for inputs in calls:
            layer(**inputs)
            weights = getattr(layer, "last_weights", _MISSING)
            kept.append(weights.detach().clone() if isinstance(weights, torch.Tensor) else weights)
    return kept


def _last_weights_finding(kept, first, last) -> tuple[str, str] | None:
    """(tag, problem) when `kept` (last_weights after the second call) is wrong, else None."""
    cpu, f64 = torch.device("cpu"), torch.float64
    expected = f"the (B, L, L) = {tuple(last.shape)} attention weights of that call"
    if kept is _MISSING:
        return "missing", (
            f"your module has no attribute `last_weights` after a call; keep {expected} in "
            "self.last_weights"
        )
    if kept is None:
        return "missing", f"`last_weights` is still None after two calls; it should hold {expected}"
    if isinstance(kept, torch.Tensor) and same_within_tolerance(kept, first, f64, cpu):
        return "stale", (
            f"`last_weights` still holds the weights of the first call, {tuple(first.shape)}, "
            f"after the second; it should hold {expected}"
        )
    problem = compare_tensor(last, kept, "`last_weights` (the weights of the last call)", f64, cpu)
    if problem is None:
        return None
    if isinstance(kept, torch.Tensor) and tuple(kept.shape) == tuple(last.shape):
        sums = kept.double().sum(-1)
        problem += (
            f"; its rows sum to {sums.min().item():.4g} .. {sums.max().item():.4g}, the "
            "softmax weights' rows to 1"
        )
        return "values", problem
    return "shape", problem


def _check_last_weights(ex: Exercise, student_cls, thorough: bool) -> int:
    """One case, visible too: `last_weights` after two calls of different shapes."""
    calls = _last_weights_calls()
    with torch.random.fork_rng(devices=[]):
        reference = ex.reference(**_LAST_WEIGHTS_INIT)
    init_parameters(reference, seed=3100)
    reference.double().eval()
    first, last = _kept_after(reference, calls)

    def kept_by(impl):
        with torch.random.fork_rng(devices=[]):
            layer = impl(**_LAST_WEIGHTS_INIT)
        layer.load_state_dict(reference.state_dict(), strict=False)  # extras of their own kept
        return _kept_after(layer.double().eval(), calls)[-1]

    try:
        kept = ex.run_student(student_cls, lambda: kept_by(student_cls))
    except (ImplementThisYourself, NotImplementedError):
        raise
    except Exception as err:
        fail(ex, f"your module raised {type(err).__name__}: {err}", _LAST_WEIGHTS_CASE, cause=err)
    finding = _last_weights_finding(kept, first, last)
    if finding is None:
        return 1

    def evidence(weights):
        found = _last_weights_finding(weights, first, last)
        tensor = weights if isinstance(weights, torch.Tensor) else None
        return (found[0] if found else "right", tensor)

    def same(a, b):  # the same finding, and the same tensor (if any)
        if a[0] != b[0] or (a[1] is None) != (b[1] is None):
            return False
        return a[1] is None or same_within_tolerance(a[1], b[1], torch.float64, torch.device("cpu"))

    mistake = ex.diagnose(
        lambda impl: evidence(kept_by(impl)), evidence(kept), ("right", last), same
    )
    fail(ex, finding[1], _LAST_WEIGHTS_CASE, mistake)


def _check_self_attention(ex: Exercise, student_cls, thorough: bool):
    """The reference comparison (weights copied in), then what `last_weights` holds."""
    driver = ModuleDriver(_self_attention_cases, outputs=("output",))
    n = driver.run(ex, student_cls, thorough) + _check_last_weights(ex, student_cls, thorough)
    return n, driver.covered(thorough) + "; last_weights of the last call"


SelfAttention = Exercise(
    name="SelfAttention",
    lesson="02",
    module="attention",
    reference=_attention.SelfAttention,
    forbidden=(
        "torch.nn.functional.scaled_dot_product_attention",
        "torch._C._nn.scaled_dot_product_attention",
        "torch.nn.functional.multi_head_attention_forward",
        "torch.nn.MultiheadAttention",
        "transformer_lab.attention.scaled_dot_product_attention",
        "transformer_lab.attention.fused_attention",
        "transformer_lab.attention.SelfAttention",
        "transformer_lab.scaled_dot_product_attention",
        "transformer_lab.SelfAttention",
        "transformer_lab.multihead.MultiHeadAttention",
    ),
    mistakes=[
        Mistake(
            "values-are-x",
            "the values are the raw inputs x: compute V = X W^V with self.w_v.",
            _SelfAttentionValuesAreX,
        ),
        Mistake(
            "keys-from-w_q",
            "the keys are computed with w_q: K = X W^K uses self.w_k.",
            _SelfAttentionKeysFromWq,
        ),
        Mistake(
            "q-k-swapped",
            "queries and keys are swapped: the scores are Q Kᵀ, one row per query.",
            _SelfAttentionSwapped,
        ),
        Mistake(
            "untransposed-weights",
            "the projections use W instead of Wᵀ: nn.Linear computes x Wᵀ; call self.w_q(x) "
            "rather than x @ self.w_q.weight.",
            _SelfAttentionUntransposed,
        ),
        Mistake(
            "mask-ignored",
            "the mask argument is ignored: pass it on to the attention function.",
            _SelfAttentionIgnoresMask,
        ),
        Mistake(
            "no-scale",
            "the scores inside your layer are not divided by √d_k.",
            _SelfAttentionUnscaled,
        ),
        Mistake(
            "scale-by-d_model",
            "the scores are divided by √d_model, the width of x: the scale is √d_k, the width "
            "of the queries and keys (q.shape[-1]).",
            _SelfAttentionScaleDModel,
        ),
        Mistake(
            "scaled-twice",
            "the scores are divided by √d_k twice: scaled_dot_product_attention divides by √d_k "
            "itself, so pass it the unscaled projections.",
            _SelfAttentionScaledTwice,
        ),
        Mistake(
            "values-from-w_k",
            "the values are computed with w_k: V = X W^V uses self.w_v.",
            _SelfAttentionValuesFromWk,
        ),
        Mistake(
            "no-last-weights",
            "self.last_weights is never set: keep the weights that scaled_dot_product_attention "
            "returns (out, self.last_weights = ...).",
            _SelfAttentionNoLastWeights,
        ),
        Mistake(
            "stale-last-weights",
            "self.last_weights keeps the weights of an earlier call: assign it on every call, so "
            "it always holds the weights of the last one.",
            _SelfAttentionStaleLastWeights,
        ),
        Mistake(
            "output-as-last-weights",
            "self.last_weights holds the layer's output: keep the second value "
            "scaled_dot_product_attention returns, the (B, L, L) weights.",
            _SelfAttentionOutputAsWeights,
        ),
        Mistake(
            "first-sequence-weights",
            "self.last_weights keeps only the first sequence's (L, L) weights: keep the whole "
            "batch's, (B, L, L) (index [0] when you plot, not when you store).",
            _SelfAttentionFirstSequenceWeights,
        ),
        Mistake(
            "scores-as-last-weights",
            "self.last_weights holds the scores Q Kᵀ/√d_k before the softmax: keep the weights, "
            "whose rows sum to 1.",
            _SelfAttentionScoresAsWeights,
        ),
    ],
    driver=CustomDriver(_check_self_attention),
    doc="a SelfAttention class: SelfAttention(d_model, d_k=None, d_v=None), forward(x, mask=None)",
    uses=("scaled_dot_product_attention",),
)
