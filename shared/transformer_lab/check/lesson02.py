"""Checks for lesson 02 — QKV attention: `scaled_dot_product_attention` and `SelfAttention`."""

from __future__ import annotations

import math

import torch

from .. import attention as _attention
from .drivers import FunctionDriver, ModuleDriver
from .engine import Case, Exercise, Mistake

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
    ],
    driver=FunctionDriver(_sdpa_cases, outputs=("output", "weights")),
    doc="scaled_dot_product_attention(q, k, v, mask=None) -> (output, weights)",
)


class _SelfAttentionValuesAreX(_attention.SelfAttention):
    def forward(self, x, mask=None):
        v = x if self.d_v == x.shape[-1] else self.w_v(x)
        out, _ = _sdpa_plain(self.w_q(x), self.w_k(x), v, mask)
        return out


class _SelfAttentionKeysFromWq(_attention.SelfAttention):
    def forward(self, x, mask=None):
        out, _ = _sdpa_plain(self.w_q(x), self.w_q(x), self.w_v(x), mask)
        return out


class _SelfAttentionSwapped(_attention.SelfAttention):
    def forward(self, x, mask=None):
        out, _ = _sdpa_plain(self.w_k(x), self.w_q(x), self.w_v(x), mask)
        return out


class _SelfAttentionUntransposed(_attention.SelfAttention):
    def forward(self, x, mask=None):
        q = x @ self.w_q.weight
        k = x @ self.w_k.weight
        v = x @ self.w_v.weight
        out, _ = _sdpa_plain(q, k, v, mask)
        return out


class _SelfAttentionIgnoresMask(_attention.SelfAttention):
    def forward(self, x, mask=None):
        out, _ = _sdpa_plain(self.w_q(x), self.w_k(x), self.w_v(x), None)
        return out


class _SelfAttentionUnscaled(_attention.SelfAttention):
    def forward(self, x, mask=None):
        out, _ = _sdpa_no_scale(self.w_q(x), self.w_k(x), self.w_v(x), mask)
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
    ],
    driver=ModuleDriver(_self_attention_cases, outputs=("output",)),
    doc="a SelfAttention class: SelfAttention(d_model, d_k=None, d_v=None), forward(x, mask=None)",
)
