"""Checks for lesson 12, exercise 3 — `kv_cache_bytes`: the KV cache's size from a model's shape.

An exact count, compared with the reference (`scaling.kv_cache_bytes`) on published shapes: GPT-3
175B at a batch of 32 (288 GiB, which is 309 GB: less than its 350 GB of float16 weights) and at
37 sequences (where the cache passes the weights), Llama-2-70B with grouped-query attention, and a
multi-query model. A failure gives both numbers in bytes, GB and GiB, so that a unit slip shows.
"""

from __future__ import annotations

import numbers

from .. import scaling as _scaling
from .answer_drivers import Call, ExactDriver
from .exercise import Exercise, Mistake

__all__ = ["kv_cache_bytes"]

# ==============================================================================================
# Mutants: the formula with one slip each (no call to the reference: it is switched off).


def _cache_bug(bug: str):
    """The catalogued kv_cache_bytes mistake `bug`, with the exercise's signature."""

    def impl(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None):
        kv = n_heads if n_kv_heads is None or bug == "query-heads" else n_kv_heads
        per_head = n_heads * d_head if bug == "d-model-per-head" else d_head
        size = (
            {"no-factor-2": 1, "factor-3": 3}.get(bug, 2)
            * (1 if bug == "no-layers" else n_layers)
            * kv
            * per_head
            * (1 if bug == "no-batch" else batch)
            * (length - 1 if bug == "length-minus-one" else length)
            * dtype_bytes
        )
        if bug == "gib":
            return size / 2**30
        if bug == "gb":
            return size / 1e9
        if bug == "float":
            return float(size)
        if bug == "bits":
            return size * 8
        return size

    impl.__name__ = impl.__qualname__ = f"kv_cache_bytes_{bug.replace('-', '_')}"
    return impl


# ==============================================================================================
# Cases: published shapes (layers, heads, d_head), float16 unless said.

_GPT3 = (96, 96, 128)  # GPT-3 175B (Brown et al., 2020, table 2.1), context 2048
_LLAMA2_70B = (80, 64, 128)  # 8 K/V heads (grouped-query), context 4096


def _cases(thorough: bool) -> list[Call]:
    def call(shape, batch, length, dtype_bytes, label, n_kv_heads=None):
        kwargs = {} if n_kv_heads is None else {"n_kv_heads": n_kv_heads}
        args = (*shape, batch, length, dtype_bytes)
        written = ", ".join([*map(str, args), *(f"{k}={v}" for k, v in kwargs.items())])
        return Call(args, kwargs, f"kv_cache_bytes({written}): {label}")

    cases = [
        call(_GPT3, 32, 2048, 2, "GPT-3 175B, a batch of 32 sequences of 2048 tokens, float16"),
        call(_GPT3, 37, 2048, 2, "GPT-3 175B, 37 sequences: the cache passes 350 GB of weights"),
        call(_LLAMA2_70B, 1, 4096, 2, "Llama-2-70B, grouped-query: 8 K/V heads", n_kv_heads=8),
        call((6, 8, 32), 3, 100, 4, "a small model, multi-query (1 K/V head), float32", 1),
    ]
    if thorough:
        cases += [
            call((12, 12, 64), 1, 1024, 2, "GPT-2 small, one sequence"),
            call(_GPT3, 1, 1, 2, "GPT-3 175B, one token"),
            call(_LLAMA2_70B, 4, 4096, 1, "Llama-2-70B, int8 cache", n_kv_heads=8),
            call((3, 4, 8), 5, 7, 8, "float64, n_kv_heads = n_heads given", n_kv_heads=4),
            call((2, 6, 16), 2, 9, 2, "6 query heads in 3 groups", n_kv_heads=2),
            call((4, 4, 8), 0, 10, 2, "an empty batch"),
        ]
    return cases


def _same_number(a, b) -> bool:
    """Equal and of the same type: the text asks for an int, so 2.0 * ... (a float) is not
    the answer even where its value is (any integer type is an int here, a bool is not)."""
    whole = [isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in (a, b)]
    return (all(whole) or type(a) is type(b)) and a == b


def _in_units(value: int | float) -> str:
    return f"{value / 1e9:,.2f} GB = {value / 2**30:,.2f} GiB"


def _describe(expected, got) -> str:
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        shown = repr(got)
    else:
        shown = f"{got:,} ({_in_units(got)}, if that is bytes)"
    return f"your function returned {shown}, expected {expected:,} bytes ({_in_units(expected)})"


kv_cache_bytes = Exercise(
    name="kv_cache_bytes",
    lesson="12",
    module="scaling",
    reference=_scaling.kv_cache_bytes,
    forbidden=("transformer_lab.scaling.kv_cache_bytes", "transformer_lab.kv_cache_bytes"),
    mistakes=[
        Mistake(
            "no-factor-2",
            "the factor 2 is missing: the cache holds a key and a value vector per token, "
            "layer and K/V head.",
            _cache_bug("no-factor-2"),
        ),
        Mistake(
            "query-heads",
            "the query heads are counted, not the K/V heads: with grouped-query attention only "
            "n_kv_heads heads are cached (n_heads when n_kv_heads is None).",
            _cache_bug("query-heads"),
        ),
        Mistake(
            "no-layers",
            "the layers are missing: every layer keeps its own keys and values.",
            _cache_bug("no-layers"),
        ),
        Mistake(
            "no-batch",
            "the batch is missing: every sequence of the batch keeps its own keys and values.",
            _cache_bug("no-batch"),
        ),
        Mistake(
            "d-model-per-head",
            "each K/V head is counted with d_model = n_heads · d_head numbers per token: a head "
            "holds d_head of them.",
            _cache_bug("d-model-per-head"),
        ),
        Mistake(
            "gib",
            "the result is in GiB (bytes / 2**30): return bytes, and convert only when you print.",
            _cache_bug("gib"),
        ),
        Mistake(
            "gb",
            "the result is in GB (bytes / 10**9): return bytes, and convert only when you print.",
            _cache_bug("gb"),
        ),
        Mistake(
            "float",
            "the number of bytes is right but a float (a 2.0, a /, or float(...) on the way): "
            "return an int, computed with integers only.",
            _cache_bug("float"),
        ),
        Mistake(
            "bits",
            "the result is in bits (× 8): dtype_bytes already counts bytes per number, so "
            "return bytes, with no factor 8.",
            _cache_bug("bits"),
        ),
        Mistake(
            "factor-3",
            "the factor is 3, as if the queries were cached too: only the keys and values are "
            "kept (a new token's query is used once, at its own step), so the factor is 2.",
            _cache_bug("factor-3"),
        ),
        Mistake(
            "length-minus-one",
            "one token too few is cached (length - 1, as if the newest token had no key and "
            "value yet): every one of the length tokens keeps its key and value.",
            _cache_bug("length-minus-one"),
        ),
    ],
    driver=ExactDriver(
        _cases,
        covered="GPT-3, Llama-2-70B and multi-query shapes",
        equal=_same_number,
        describe=_describe,
    ),
    doc="kv_cache_bytes(n_layers, n_heads, d_head, batch, length, dtype_bytes, n_kv_heads=None) "
    "-> bytes of the KV cache",
)
