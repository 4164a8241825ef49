"""Checks for lesson 03 — multi-head attention: `split_heads`, `merge_heads`, `MultiHeadAttention`."""

from __future__ import annotations

import math

import torch

from .. import multihead as _multihead
from .drivers import FunctionDriver, ModuleDriver
from .exercise import Case, Exercise, Mistake

__all__ = ["MultiHeadAttention", "merge_heads", "split_heads"]

# ==============================================================================================
# Private copies of the right answers (the references are forbidden while a mutant runs).


def _split(x, n_heads):
    B, L, d_model = x.shape
    return x.reshape(B, L, n_heads, d_model // n_heads).transpose(1, 2)


def _merge(x):
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, h * d_k)


def _sdpa(q, k, v, mask=None, scale=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(scale or q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0) @ v


# ----------------------------------------------------------------------------------------------
# split_heads


def _split_no_transpose(x, n_heads):
    B, L, d_model = x.shape
    return x.reshape(B, n_heads, L, d_model // n_heads)


def _split_interleaved(x, n_heads):
    B, L, d_model = x.shape
    return x.reshape(B, L, d_model // n_heads, n_heads).permute(0, 3, 1, 2)


def _split_transpose_first(x, n_heads):
    B, L, d_model = x.shape
    return x.transpose(1, 2).reshape(B, n_heads, L, d_model // n_heads)


def _split_no_swap(x, n_heads):
    B, L, d_model = x.shape
    return x.reshape(B, L, n_heads, d_model // n_heads)


def _split_batch_length_swapped(x, n_heads):
    """The view's leading sizes in the wrong order, (L, B, ...): x.shape unpacked as L, B, d."""
    return x.reshape(x.shape[1], x.shape[0], n_heads, -1).transpose(1, 2)


_FORBIDDEN_SPLIT = (
    "transformer_lab.multihead.split_heads",
    "transformer_lab.multihead.merge_heads",
    "transformer_lab.split_heads",
    "transformer_lab.merge_heads",
)


def _split_cases(thorough: bool) -> list[Case]:
    def case(B, L, d_model, n_heads):
        def make(g):
            return {
                "x": torch.randn(B, L, d_model, generator=g, dtype=torch.float64),
                "n_heads": n_heads,
            }

        return Case(f"x {(B, L, d_model)}, n_heads={n_heads}", make)

    cases = [case(2, 3, 8, 2), case(1, 4, 6, 3)]
    if thorough:
        cases += [
            case(1, 1, 4, 1),
            case(2, 5, 5, 5),
            case(3, 4, 12, 4),
            case(2, 7, 10, 2),
            case(2, 1, 16, 4),
        ]
    return cases


split_heads = Exercise(
    name="split_heads",
    lesson="03",
    module="multihead",
    reference=_multihead.split_heads,
    forbidden=_FORBIDDEN_SPLIT,
    mistakes=[
        Mistake(
            "no-transpose",
            "you reshaped (B, L, d_model) straight to (B, h, L, d_k), which mixes positions "
            "and features: view as (B, L, h, d_k) first, then transpose(1, 2).",
            _split_no_transpose,
        ),
        Mistake(
            "interleaved",
            "head i must own the contiguous features [i·d_k, (i+1)·d_k), but yours takes "
            "every h-th feature: view as (B, L, h, d_k), not (B, L, d_k, h).",
            _split_interleaved,
        ),
        Mistake(
            "transpose-first",
            "you transposed (L, d_model) before splitting the features, which mixes positions "
            "into the heads: split the last axis into (h, d_k) first, then swap L and h.",
            _split_transpose_first,
        ),
        Mistake(
            "no-swap",
            "the head axis must come before the positions: after the view to (B, L, h, d_k), "
            "call transpose(1, 2) to get (B, h, L, d_k).",
            _split_no_swap,
        ),
        Mistake(
            "batch-length-swapped",
            "the view's leading sizes are (L, B) where x is (B, L, d_model): x.shape was "
            "unpacked in the wrong order; B, L, d_model = x.shape, then view as (B, L, h, d_k).",
            _split_batch_length_swapped,
        ),
    ],
    driver=FunctionDriver(_split_cases, outputs=("output",)),
    doc="split_heads(x, n_heads): (B, L, d_model) -> (B, h, L, d_model / h)",
)


# ----------------------------------------------------------------------------------------------
# merge_heads


def _merge_no_transpose(x):
    B, h, L, d_k = x.shape
    return x.reshape(B, L, h * d_k)


def _merge_interleaved(x):
    B, h, L, d_k = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, L, h * d_k)


def _merge_no_reshape(x):
    return x.transpose(1, 2)


def _merge_mean(x):
    return x.mean(1)


def _merge_cat_positions(x):
    """The heads concatenated along the positions: (B, h·L, d_k)."""
    return torch.cat(x.unbind(1), dim=1)


def _merge_flatten_from_1(x):
    """flatten(1) after the transpose: positions and features flattened together, (B, L·h·d_k)."""
    return x.transpose(1, 2).flatten(1)


def _merge_last_two_transposed(x):
    """transpose(2, 3), the last two axes, where the head and position axes belong."""
    B, h, L, d_k = x.shape
    return x.transpose(2, 3).reshape(B, L, h * d_k)


def _merge_sum(x):
    return x.sum(1)


def _merge_length_from_dim1(x):
    """L read as x.shape[1], which is h: reshape(B, h, -1)."""
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)


def _merge_cases(thorough: bool) -> list[Case]:
    def case(B, h, L, d_k):
        def make(g):
            return {"x": torch.randn(B, h, L, d_k, generator=g, dtype=torch.float64)}

        return Case(f"x {(B, h, L, d_k)}", make)

    cases = [case(2, 2, 3, 4), case(1, 3, 4, 2)]
    if thorough:
        cases += [
            case(1, 1, 1, 4),
            case(2, 4, 4, 4),
            case(3, 5, 2, 1),
            case(2, 2, 7, 8),
            case(2, 4, 1, 3),
        ]
    return cases


merge_heads = Exercise(
    name="merge_heads",
    lesson="03",
    module="multihead",
    reference=_multihead.merge_heads,
    forbidden=_FORBIDDEN_SPLIT,
    mistakes=[
        Mistake(
            "no-transpose",
            "you reshaped (B, h, L, d_k) straight to (B, L, h·d_k), which mixes heads and "
            "positions: transpose(1, 2) back to (B, L, h, d_k) before the reshape.",
            _merge_no_transpose,
        ),
        Mistake(
            "interleaved",
            "the heads must be concatenated (feature i·d_k + j comes from head i), but yours "
            "interleaves them: bring the axes to (B, L, h, d_k), not (B, L, d_k, h).",
            _merge_interleaved,
        ),
        Mistake(
            "no-reshape",
            "after transpose(1, 2) the result is still 4-D: reshape it to (B, L, h·d_k).",
            _merge_no_reshape,
        ),
        Mistake(
            "mean",
            "the heads are averaged; concatenate them instead (the output has h·d_k features).",
            _merge_mean,
        ),
        Mistake(
            "cat-positions",
            "the heads are concatenated along the positions (dim 1 after unbind), giving "
            "(B, h·L, d_k): concatenate along the features, torch.cat(x.unbind(1), dim=-1).",
            _merge_cat_positions,
        ),
        Mistake(
            "flatten-from-1",
            "flatten(1) flattens the positions and the features together: flatten(2) (or "
            "reshape(B, L, h·d_k)) keeps the positions.",
            _merge_flatten_from_1,
        ),
        Mistake(
            "last-two-transposed",
            "the last two axes (positions and features) are transposed: swap the head and "
            "position axes, transpose(1, 2), then reshape to (B, L, h·d_k).",
            _merge_last_two_transposed,
        ),
        Mistake(
            "sum",
            "the heads are summed; concatenate them instead (the output has h·d_k features).",
            _merge_sum,
        ),
        Mistake(
            "length-from-dim1",
            "L is read as x.shape[1], which is h in (B, h, L, d_k): take B, h, L, d_k = x.shape "
            "and reshape to (B, L, h * d_k).",
            _merge_length_from_dim1,
        ),
    ],
    driver=FunctionDriver(_merge_cases, outputs=("output",)),
    doc="merge_heads(x): (B, h, L, d_k) -> (B, L, h * d_k), the inverse of split_heads",
)


# ----------------------------------------------------------------------------------------------
# MultiHeadAttention


class _MHANoWo(_multihead.MultiHeadAttention):
    def forward(self, x, context=None, mask=None):
        c = x if context is None else context
        h = self.n_heads
        q, k, v = _split(self.w_q(x), h), _split(self.w_k(c), h), _split(self.w_v(c), h)
        return _merge(_sdpa(q, k, v, mask))


class _MHAContextIgnored(_multihead.MultiHeadAttention):
    def forward(self, x, context=None, mask=None):
        h = self.n_heads
        q, k, v = _split(self.w_q(x), h), _split(self.w_k(x), h), _split(self.w_v(x), h)
        return self.w_o(_merge(_sdpa(q, k, v, mask)))


class _MHAScaleDModel(_multihead.MultiHeadAttention):
    def forward(self, x, context=None, mask=None):
        c = x if context is None else context
        h = self.n_heads
        q, k, v = _split(self.w_q(x), h), _split(self.w_k(c), h), _split(self.w_v(c), h)
        return self.w_o(_merge(_sdpa(q, k, v, mask, scale=self.d_model)))


class _MHAMergeNoTranspose(_multihead.MultiHeadAttention):
    def forward(self, x, context=None, mask=None):
        c = x if context is None else context
        h = self.n_heads
        q, k, v = _split(self.w_q(x), h), _split(self.w_k(c), h), _split(self.w_v(c), h)
        return self.w_o(_merge_no_transpose(_sdpa(q, k, v, mask)))


class _MHAMaskIgnored(_multihead.MultiHeadAttention):
    def forward(self, x, context=None, mask=None):
        c = x if context is None else context
        h = self.n_heads
        q, k, v = _split(self.w_q(x), h), _split(self.w_k(c), h), _split(self.w_v(c), h)
        return self.w_o(_merge(_sdpa(q, k, v, None)))


class _MHASingleHead(_multihead.MultiHeadAttention):
    def forward(self, x, context=None, mask=None):
        c = x if context is None else context
        q, k, v = self.w_q(x), self.w_k(c), self.w_v(c)
        if mask is not None and mask.dim() == 4:
            mask = mask[:, 0]
        return self.w_o(_sdpa(q, k, v, mask))


class _MHAScaledTwice(_multihead.MultiHeadAttention):
    """q divided by √d_k before the attention, which divides again."""

    def forward(self, x, context=None, mask=None):
        c = x if context is None else context
        h = self.n_heads
        q, k, v = _split(self.w_q(x), h), _split(self.w_k(c), h), _split(self.w_v(c), h)
        q = q / math.sqrt(q.shape[-1])
        return self.w_o(_merge(_sdpa(q, k, v, mask)))


class _MHAKeysFromWq(_multihead.MultiHeadAttention):
    """The keys projected with w_q (a copy-paste slip)."""

    def forward(self, x, context=None, mask=None):
        c = x if context is None else context
        h = self.n_heads
        q, k, v = _split(self.w_q(x), h), _split(self.w_q(c), h), _split(self.w_v(c), h)
        return self.w_o(_merge(_sdpa(q, k, v, mask)))


class _MHASplitByDk(_multihead.MultiHeadAttention):
    """split_heads given d_k where n_heads belongs: d_k heads of size h."""

    def forward(self, x, context=None, mask=None):
        c = x if context is None else context
        n = self.d_model // self.n_heads
        q, k, v = _split(self.w_q(x), n), _split(self.w_k(c), n), _split(self.w_v(c), n)
        return self.w_o(_merge(_sdpa(q, k, v, mask)))


class _MHAWiring(_multihead.MultiHeadAttention):
    """The layer with one projection wired wrongly (a switch of a subclass below)."""

    queries_from_context = roles_swapped = shared_projection = residual_inside = False

    def forward(self, x, context=None, mask=None):
        c = x if context is None else context
        h = self.n_heads
        w_k, w_v = (self.w_q, self.w_q) if self.shared_projection else (self.w_k, self.w_v)
        if self.roles_swapped:
            x, c = c, x
        q = _split(self.w_q(c if self.queries_from_context else x), h)
        merged = _merge(_sdpa(q, _split(w_k(c), h), _split(w_v(c), h), mask))
        return self.w_o(merged) + merged if self.residual_inside else self.w_o(merged)


class _MHAQueriesFromContext(_MHAWiring):
    queries_from_context = True


class _MHARolesSwapped(_MHAWiring):
    roles_swapped = True


class _MHASharedProjection(_MHAWiring):
    shared_projection = True


class _MHAResidualInside(_MHAWiring):
    residual_inside = True


class _MHAValuesFromX(_multihead.MultiHeadAttention):
    """The keys from context, the values from x: cross-attention cannot weigh L_q values by
    L_k weights."""

    def forward(self, x, context=None, mask=None):
        c = x if context is None else context
        h = self.n_heads
        q, k, v = _split(self.w_q(x), h), _split(self.w_k(c), h), _split(self.w_v(x), h)
        return self.w_o(_merge(_sdpa(q, k, v, mask)))


class _MHAContextSplitWithLq(_multihead.MultiHeadAttention):
    """The context's projections reshaped with x's length: a context of another length breaks."""

    def forward(self, x, context=None, mask=None):
        c = x if context is None else context
        B, L, d = x.shape
        h = self.n_heads

        def split(t):
            return t.reshape(B, L, h, d // h).transpose(1, 2)

        q, k, v = split(self.w_q(x)), split(self.w_k(c)), split(self.w_v(c))
        return self.w_o(_merge(_sdpa(q, k, v, mask)))


class _MHAInterleavedHeads(_multihead.MultiHeadAttention):
    """Every projection split as (B, L, d_k, h), head i taking every h-th feature, and merged
    back the same way."""

    def forward(self, x, context=None, mask=None):
        c = x if context is None else context
        h = self.n_heads
        q, k, v = (_split_interleaved(t, h) for t in (self.w_q(x), self.w_k(c), self.w_v(c)))
        return self.w_o(_merge_interleaved(_sdpa(q, k, v, mask)))


def _mha_cases(thorough: bool) -> list[Case]:
    def case(B, L_q, d_model, n_heads, L_k=None, mask=None, bias=True, label=""):
        def make(g):
            inputs = {"x": torch.randn(B, L_q, d_model, generator=g, dtype=torch.float64)}
            if L_k is not None:
                inputs["context"] = torch.randn(B, L_k, d_model, generator=g, dtype=torch.float64)
            if mask is not None:
                inputs["mask"] = mask(g)
            return inputs

        init = {"d_model": d_model, "n_heads": n_heads, "bias": bias}
        text = f"MultiHeadAttention({d_model}, {n_heads}, bias={bias}) on x {(B, L_q, d_model)}"
        if L_k is not None:
            text += f", context {(B, L_k, d_model)}"
        return Case(text + (f", {label}" if label else ""), make, init)

    def causal(L):
        return lambda g: torch.ones(L, L, dtype=torch.bool).tril()

    def padding(B, L_k):
        def make(g):
            m = torch.rand(B, 1, 1, L_k, generator=g) < 0.6
            m[..., 0] = True
            return m

        return make

    def random(shape):
        def make(g):
            m = torch.rand(shape, generator=g) < 0.6
            m[..., 0] = True
            return m

        return make

    cases = [
        case(2, 4, 8, 2),
        case(2, 3, 8, 2, L_k=5, label="cross-attention"),
        case(2, 5, 8, 2, mask=causal(5), label="causal mask (5, 5)"),  # the mask rule, visible
    ]
    if thorough:
        cases += [
            case(2, 3, 12, 3, L_k=6, mask=padding(2, 6), label="padding mask (2, 1, 1, 6)"),
            case(1, 1, 4, 1, label="one head, length 1"),
            case(3, 5, 12, 4, bias=False),
            case(2, 6, 16, 8, mask=random((2, 1, 6, 6)), label="mask (2, 1, 6, 6)"),
            case(2, 4, 6, 6, L_k=3, label="d_k = 1"),
            case(2, 4, 8, 4, mask=random((2, 4, 4, 4)), label="a different mask per head"),
        ]
    return cases


MultiHeadAttention = Exercise(
    name="MultiHeadAttention",
    lesson="03",
    module="multihead",
    reference=_multihead.MultiHeadAttention,
    forbidden=(
        "torch.nn.functional.scaled_dot_product_attention",
        "torch._C._nn.scaled_dot_product_attention",
        "torch.nn.functional.multi_head_attention_forward",
        "torch.nn.MultiheadAttention",
        "transformer_lab.attention.fused_attention",
        "transformer_lab.multihead.MultiHeadAttention",
        "transformer_lab.MultiHeadAttention",
    ),
    mistakes=[
        Mistake(
            "no-w_o",
            "the output projection W^O is missing: return self.w_o(merge_heads(...)).",
            _MHANoWo,
        ),
        Mistake(
            "kv-from-x",
            "the keys and values must come from `context` when it is given (cross-attention); "
            "yours are computed from x.",
            _MHAContextIgnored,
        ),
        Mistake(
            "scale-by-d_model",
            "each head's scores must be divided by √d_k with d_k = d_model / h, not by √d_model.",
            _MHAScaleDModel,
        ),
        Mistake(
            "scaled-twice",
            "the scores are divided by √d_k twice: scaled_dot_product_attention divides by √d_k "
            "itself, so pass it the unscaled projections.",
            _MHAScaledTwice,
        ),
        Mistake(
            "keys-from-w_q",
            "the keys are projected with w_q: K = w_k(context), Q = w_q(x).",
            _MHAKeysFromWq,
        ),
        Mistake(
            "split-by-d_k",
            "split_heads is given d_k where it takes the number of heads: "
            "split_heads(q, self.n_heads) makes n_heads heads of size d_k.",
            _MHASplitByDk,
        ),
        Mistake(
            "merge-no-transpose",
            "the heads are merged without transposing (B, h, L, d_k) back to (B, L, h, d_k) "
            "first, so positions and heads get mixed.",
            _MHAMergeNoTranspose,
        ),
        Mistake(
            "mask-ignored",
            "the mask argument is ignored: pass it on to the attention, where it broadcasts "
            "over the head axis.",
            _MHAMaskIgnored,
        ),
        Mistake(
            "one-head",
            "the projections are never split into heads: one big head of size d_model is not "
            "h heads of size d_k (use split_heads on Q, K and V).",
            _MHASingleHead,
        ),
        Mistake(
            "queries-from-context",
            "the queries are projected from context: they come from x, self.w_q(x); only the "
            "keys and values come from context.",
            _MHAQueriesFromContext,
        ),
        Mistake(
            "roles-swapped",
            "the roles are swapped: the queries come from x, self.w_q(x), and the keys and "
            "values from context, self.w_k(context) and self.w_v(context).",
            _MHARolesSwapped,
        ),
        Mistake(
            "one-projection",
            "w_q projects the queries, the keys and the values: the keys use self.w_k and the "
            "values self.w_v.",
            _MHASharedProjection,
        ),
        Mistake(
            "residual-inside",
            "the merged heads are added to W^O's output (a residual inside the layer): return "
            "self.w_o(merged) alone; the residual belongs to the block.",
            _MHAResidualInside,
        ),
        Mistake(
            "values-from-x",
            "the values are projected from x: the keys and the values both come from context, "
            "self.w_k(context) and self.w_v(context), so that the L_k weights of each query "
            "weigh L_k values.",
            _MHAValuesFromX,
        ),
        Mistake(
            "context-split-with-L_q",
            "the keys and values are reshaped with x's length L_q: they come from context, "
            "whose length L_k may differ; split them with their own length (split_heads, or "
            "reshape(B, -1, h, d_k)).",
            _MHAContextSplitWithLq,
        ),
        Mistake(
            "interleaved-heads",
            "the heads are split as (B, L, d_k, h), so head i takes every h-th feature: head i "
            "is the block of features i·d_k … (i+1)·d_k − 1, reshape(B, L, h, d_k) then "
            "transpose(1, 2) (split_heads), and merge_heads undoes exactly that.",
            _MHAInterleavedHeads,
        ),
    ],
    driver=ModuleDriver(_mha_cases, outputs=("output",)),
    doc="MultiHeadAttention(d_model, n_heads, bias=True), forward(x, context=None, mask=None)",
    uses=("split_heads", "merge_heads"),
)
