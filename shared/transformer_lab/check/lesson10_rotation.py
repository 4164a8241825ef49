"""Checks for lesson 10, exercise 3 — `document_rotation`: the output is a rotation
tokens[k:] + tokens[:k] of the input; the same seed gives the same k; every start k in 0 .. L-1
comes out, about equally often.

Lesson 10's checks span three modules, imported in course order: ``lesson10`` (text_infilling,
and the overview of how the noising functions are checked), ``lesson10_permutation`` and this one;
what they share is in ``lesson10_properties``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch

from .. import bart as _bart
from .exercise import Exercise, Mistake
from .lesson10_properties import (
    Broken,
    direct,
    distinct_doc,
    gen,
    id_settings,
    reproducible,
    require_ids,
    suite_driver,
    uniform_cells,
)

__all__ = ["document_rotation"]


# ==============================================================================================
# Exercise 3 — document_rotation(tokens, generator=None)


def _rotation_offset(doc: list[int], out: list[int], label: str) -> int:
    """k such that out == doc[k:] + doc[:k] (doc has distinct ids), or a Broken."""
    if len(out) != len(doc):
        raise Broken(
            "length",
            f"{label}: the output has {len(out)} tokens, the input {len(doc)}: a rotation keeps "
            f"every token (input {doc}, output {out})",
        )
    if not doc:
        return 0
    k = doc.index(out[0]) if out[0] in doc else -1
    if k < 0 or out != doc[k:] + doc[:k]:
        raise Broken(
            "not rotation",
            f"{label}: the output is not a rotation tokens[k:] + tokens[:k] of the input: input "
            f"{doc}, output {out}",
        )
    return k


def _unchanged_input(doc: torch.Tensor, before: torch.Tensor, label: str) -> None:
    """The caller's tokens are left as they were: the rotation is a new tensor."""
    if not torch.equal(doc, before):
        raise Broken(
            "in-place",
            f"{label}: your function changed its input `tokens` in place (it holds "
            f"{doc.tolist()} after the call): return a new tensor and leave the caller's alone",
        )


def _rotation_suite(fn: Callable, thorough: bool, call: Callable = direct) -> int:
    def run(label: str, *args, **kwargs):
        return call(lambda: fn(*args, **kwargs), label)

    n_calls = 0
    lengths = [5, 8, 1, 2, 0] + ([3, 17, 64] if thorough else [])  # 0: an empty document
    n_seeds = 8 if thorough else 3
    for device, dtype in id_settings(thorough):
        for L in lengths:
            for seed in range(n_seeds):
                doc = distinct_doc(300 + seed, L).to(device=device, dtype=dtype)
                label = f"document_rotation(tokens={doc.tolist()})"
                before = doc.clone()
                out = run(label, doc, generator=gen(seed))
                _unchanged_input(doc, before, label)
                _rotation_offset(doc.tolist(), require_ids(out, doc, label), label)
                n_calls += 1
    doc = distinct_doc(9, 12)
    label = f"document_rotation(tokens={doc.tolist()})"
    n_calls += reproducible(call, label, lambda g: fn(doc, generator=g))
    outs = {tuple(run(label, doc, generator=gen(s)).tolist()) for s in range(20)}
    n_calls += 20
    if outs == {tuple(doc.tolist())}:  # 20 seeds, 12 starts: all k = 0 with chance 12^-20
        raise Broken(
            "unchanged",
            f"{label}: 20 different seeds all gave the document back unchanged: the rotation is "
            "tokens[k:] followed by tokens[:k] (tokens[:k] then tokens[k:] is the input again)",
        )
    if len(outs) == 1:  # 20 seeds, 12 starts: all equal with chance 12^-19
        raise Broken(
            "constant",
            f"{label}: 20 different seeds all gave the same result {list(outs.pop())}: the start "
            "must be drawn at random, k uniform in 0 .. L-1",
        )
    # generator=None draws from torch's global generator, whose state moves on: not every call
    # the same rotation (10 calls all alike: chance 12^-9 for a correct implementation)
    nones = {
        tuple(require_ids(run(label + " with generator=None", doc), doc, label)) for _ in range(10)
    }
    if len(nones) == 1:
        raise Broken(
            "constant without generator",
            f"{label} with generator=None: 10 calls all gave the same result {list(nones.pop())}: "
            "without a generator, draw k from torch's global generator (torch.randint(L, (), "
            "generator=None)), not from a new torch.Generator(), whose seed is always the same",
        )
    # k from 0..L (a common slip) makes k = 0 twice as likely: at L = 4 and 1600 draws it comes
    # out ~640 times, 7 of its standard deviations above the band (tests/checks/test_lesson10.py)
    stats = [(4, 1600)] if not thorough else [(4, 1600), (7, 1750)]
    for L, n_draws in stats:
        doc = distinct_doc(40 + L, L)
        label = f"document_rotation(tokens={doc.tolist()})"
        counts: Counter = Counter()
        for s in range(n_draws):
            out = run(label, doc, generator=gen(60_000 + s))
            counts[_rotation_offset(doc.tolist(), require_ids(out, doc, label), label)] += 1
            n_calls += 1
        uniform_cells(
            counts,
            list(range(L)),
            n_draws,
            "start k =",
            label,
            zero_key=lambda k, L=L, counts=counts: (
                "start 0"
                if k == 0
                else "last start"  # the only one missing: randint's high end read as inclusive
                if k == L - 1 and all(counts[c] for c in range(L - 1))
                else "unreachable"
            ),
            key=lambda lo, hi, counts=counts: "uniform" if counts[0] > hi else "uneven",
        )
    return n_calls


def _rot_never_zero(tokens, generator=None):
    if len(tokens) < 2:
        return tokens.clone()
    k = int(torch.randint(1, len(tokens), (), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def _rot_fixed(tokens, generator=None):
    k = len(tokens) // 2
    return torch.cat([tokens[k:], tokens[:k]])


def _rot_k_up_to_L(tokens, generator=None):
    k = int(torch.randint(len(tokens) + 1, (), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def _rot_drops_a_token(tokens, generator=None):
    if len(tokens) == 0:
        return tokens.clone()
    k = int(torch.randint(len(tokens), (), generator=generator))
    return torch.cat([tokens[k + 1 :], tokens[:k]]) if k + 1 < len(tokens) else tokens[:k].clone()


def _rot_fixed_dtype(tokens, generator=None):
    """Rotates a Python list and converts back with torch.tensor: int64 always."""
    k = int(torch.randint(max(len(tokens), 1), (), generator=generator))
    ids = tokens.tolist()
    return torch.tensor(ids[k:] + ids[:k], dtype=torch.long, device=tokens.device)


def _rot_high_inclusive(tokens, generator=None):
    """torch.randint(0, L - 1), its high end read as inclusive: k = L - 1 never comes out."""
    k = int(torch.randint(max(len(tokens) - 1, 1), (), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def _rot_cat_order(tokens, generator=None):
    """Joins tokens[:k] then tokens[k:]: the document unchanged, whatever k."""
    k = int(torch.randint(max(len(tokens), 1), (), generator=generator))
    return torch.cat([tokens[:k], tokens[k:]])


def _rot_rounded(tokens, generator=None):
    """k = round(u * (L - 1)): the first and last starts come out half as often as the others."""
    if len(tokens) == 0:
        return tokens.clone()
    k = round(torch.rand((), generator=generator).item() * (len(tokens) - 1))
    return torch.cat([tokens[k:], tokens[:k]])


def _rot_fresh_generator(tokens, generator=None):
    """generator=None replaced by torch.Generator(): its fixed default seed repeats every call."""
    generator = torch.Generator() if generator is None else generator
    k = int(torch.randint(max(len(tokens), 1), (), generator=generator))
    return torch.cat([tokens[k:], tokens[:k]])


def _rot_global_rng(tokens, generator=None):
    k = int(torch.randint(max(len(tokens), 1), ()))  # the generator is ignored
    return torch.cat([tokens[k:], tokens[:k]])


def _rot_in_place(tokens, generator=None):
    """Writes the rotation back into the caller's tensor (tokens[:] = ...) and returns it."""
    k = int(torch.randint(max(len(tokens), 1), (), generator=generator))
    tokens[:] = torch.cat([tokens[k:], tokens[:k]])
    return tokens


document_rotation = Exercise(
    name="document_rotation",
    lesson="10",
    module="bart",
    reference=_bart.document_rotation,
    forbidden=("transformer_lab.bart.document_rotation", "transformer_lab.document_rotation"),
    mistakes=[
        Mistake(
            "never-zero",
            "the document never keeps its own start (k = 0 never comes out): draw k uniformly "
            "from 0 .. L-1, torch.randint(L, ...), so the original order is one of the L "
            "rotations.",
            _rot_never_zero,
        ),
        Mistake(
            "fixed",
            "every call gives the same rotation: the start k must be drawn at random from "
            "`generator`, a new k for each document.",
            _rot_fixed,
        ),
        Mistake(
            "k-up-to-L",
            "k is drawn from 0 .. L (L + 1 values), and k = L gives the same rotation as "
            "k = 0, which then comes out twice as often: draw k from 0 .. L-1.",
            _rot_k_up_to_L,
        ),
        Mistake(
            "drops-token",
            "a token is lost at the seam: the rotation is tokens[k:] followed by tokens[:k], "
            "every token exactly once.",
            _rot_drops_a_token,
        ),
        Mistake(
            "global-rng",
            "the random numbers do not come from the `generator` argument: pass "
            "generator=generator to torch.randint so a seed reproduces the rotation.",
            _rot_global_rng,
        ),
        Mistake(
            "fixed-dtype",
            "the result is rebuilt with a fixed dtype (torch.tensor(list) gives int64): keep the "
            "input's dtype, torch.cat of slices of tokens (or torch.roll).",
            _rot_fixed_dtype,
        ),
        Mistake(
            "high-inclusive",
            "the last start k = L - 1 never comes out: draw k with torch.randint(0, L, ...), whose "
            "high end is exclusive, not torch.randint(0, L - 1, ...) or int(u * (L - 1)).",
            _rot_high_inclusive,
        ),
        Mistake(
            "cat-order",
            "the two pieces are joined in the wrong order: tokens[:k] followed by tokens[k:] is "
            "the document unchanged; return torch.cat([tokens[k:], tokens[:k]]).",
            _rot_cat_order,
        ),
        Mistake(
            "rounded",
            "k = round(u * (L - 1)) gives the first and the last start half the chance of the "
            "others: draw k uniformly from 0 .. L-1 with torch.randint(L, (), generator=...).",
            _rot_rounded,
        ),
        Mistake(
            "fresh-generator",
            "with generator=None you made a new torch.Generator(), whose seed is always the "
            "same, so every call rotates alike: pass generator=None on to torch.randint, which "
            "then draws from torch's global generator.",
            _rot_fresh_generator,
        ),
        Mistake(
            "in-place",
            "the rotation was written back into `tokens` (tokens[:] = ...), which rewrites the "
            "caller's tensor: return a new tensor, torch.cat([tokens[k:], tokens[:k]]), and "
            "leave tokens as it was.",
            _rot_in_place,
        ),
    ],
    driver=suite_driver(
        _rotation_suite, "structure, reproducibility and the distribution of starts"
    ),
    doc="document_rotation(tokens, generator=None) -> (L,)",
)
