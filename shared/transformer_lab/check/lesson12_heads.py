"""Checks for lesson 12, exercise 4 — `repeat_kv`: grouped-query attention's head mapping.

(B, h_kv, L, d) -> (B, h_kv · n_rep, L, d), output head i = input head i // n_rep (interleaved, as
Hugging Face Llama's `repeat_kv`). Compared with the reference (outputs and the gradients that
flow back into the shared heads, float64 and float32, every device when thorough); the K/V head
count, the length and d differ in every case, so that a repeat along the wrong axis shows.
"""

from __future__ import annotations

import torch

from .. import scaling as _scaling
from .drivers import CustomDriver, FunctionDriver
from .exercise import Case, Exercise, Mistake
from .lesson12 import run_naming_crashes

__all__ = ["repeat_kv"]

# ==============================================================================================
# Mutants


def _tiled(x, n_rep):
    return x.repeat(1, n_rep, 1, 1)  # head i reads K/V head i mod h_kv


def _along(dim: int, name: str):
    def impl(x, n_rep):
        return torch.repeat_interleave(x, n_rep, dim=dim)

    impl.__name__ = impl.__qualname__ = name
    return impl


def _along_reshaped(dim: int, name: str):
    """Repeated along `dim`, then reshaped to (B, h_kv · n_rep, L, d): the shape looks right."""

    def impl(x, n_rep):
        B, h, L, d = x.shape
        return torch.repeat_interleave(x, n_rep, dim=dim).reshape(B, h * n_rep, L, d)

    impl.__name__ = impl.__qualname__ = name
    return impl


def _divisor_h_kv(x, n_rep):
    """Query head i reads K/V head i // h_kv (the number of K/V heads) instead of i // n_rep."""
    h = x.shape[1]
    return x[:, torch.arange(h * n_rep, device=x.device) // h]


# ==============================================================================================
# Cases


def _cases(thorough: bool) -> list[Case]:
    def case(shape, n_rep, label=""):
        def make(g):
            return {"x": torch.randn(*shape, generator=g, dtype=torch.float64), "n_rep": n_rep}

        text = f"x {tuple(shape)}, n_rep={n_rep}"
        return Case(text + (f", {label}" if label else ""), make)

    cases = [
        case((2, 2, 5, 3), 3, "2 K/V heads for 6 query heads"),
        case((1, 3, 4, 6), 2, "3 K/V heads for 6 query heads"),
    ]
    if thorough:
        cases += [
            case((2, 4, 3, 5), 1, "n_rep = 1: multi-head attention, nothing repeated"),
            case((3, 1, 6, 4), 8, "one K/V head: multi-query attention"),
            case((1, 8, 7, 2), 4, "8 K/V heads for 32 query heads (as Llama-2-70B's 8 for 64)"),
            case((2, 5, 1, 3), 2, "one position (a decoding step)"),
        ]
    return cases


def _check(ex, student, thorough):
    driver = FunctionDriver(_cases)
    return run_naming_crashes(ex, driver, _cases, student, thorough), driver.covered(thorough)


repeat_kv = Exercise(
    name="repeat_kv",
    lesson="12",
    module="scaling",
    reference=_scaling.repeat_kv,
    forbidden=("transformer_lab.scaling.repeat_kv", "transformer_lab.repeat_kv"),
    mistakes=[
        Mistake(
            "tiled",
            "the heads are tiled (x.repeat): query head i reads K/V head i mod h_kv. Grouped-query "
            "attention gives each K/V head n_rep neighbouring query heads, i // n_rep: "
            "repeat_interleave along dim 1, or x[:, :, None].expand(...) then reshape.",
            _tiled,
        ),
        Mistake(
            "length-axis",
            "the positions are repeated (dim 2), not the heads: repeat along dim 1, the K/V heads.",
            _along(2, "repeat_kv_length_axis"),
        ),
        Mistake(
            "batch-axis",
            "the batch is repeated (dim 0), not the heads: repeat along dim 1, the K/V heads.",
            _along(0, "repeat_kv_batch_axis"),
        ),
        Mistake(
            "feature-axis",
            "each head's vectors are stretched (the last dim), not the heads repeated: repeat "
            "along dim 1, the K/V heads.",
            _along(-1, "repeat_kv_feature_axis"),
        ),
        Mistake(
            "length-axis-reshaped",
            "the positions are repeated (dim 2) and the result reshaped to (B, h_kv · n_rep, L, "
            "d): the shape is right but each output head holds pieces of several positions; "
            "repeat along dim 1, the K/V heads.",
            _along_reshaped(2, "repeat_kv_length_axis_reshaped"),
        ),
        Mistake(
            "feature-axis-reshaped",
            "each head's vectors are stretched (the last dim) and the result reshaped to (B, "
            "h_kv · n_rep, L, d): the shape is right but the heads are cut from stretched "
            "vectors; repeat along dim 1, the K/V heads.",
            _along_reshaped(-1, "repeat_kv_feature_axis_reshaped"),
        ),
        Mistake(
            "divisor-h-kv",
            "query head i reads K/V head i // h_kv: divide by n_rep, the number of query heads "
            "that share a K/V head (i // h_kv runs past the last K/V head when n_rep > h_kv).",
            _divisor_h_kv,
        ),
    ],
    driver=CustomDriver(_check),
    doc="repeat_kv(x, n_rep) -> (B, h_kv · n_rep, L, d), output head i = input head i // n_rep",
)
