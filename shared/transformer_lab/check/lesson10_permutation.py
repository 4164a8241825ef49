"""Checks for lesson 10, exercise 2 — `sentence_permutation`: the sentences (each ending with
eos_id, a lone eos_id among them too) come out whole, each once, in another order; the
unfinished last sentence stays at the end; the same seed gives the same order; every one of the
n! orders comes out, about equally often (each order within its band and, thorough, all of them
together by a chi-square test).

Lesson 10's checks span three modules, imported in course order: ``lesson10`` (text_infilling,
and the overview of how the noising functions are checked), this one and ``lesson10_rotation``;
what they share is in ``lesson10_properties``.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable

import torch

from .. import bart as _bart
from .exercise import Exercise, Mistake
from .lesson10_properties import (
    Broken,
    direct,
    gen,
    id_settings,
    reproducible,
    require_ids,
    suite_driver,
    uniform_cells,
    uniform_fit,
)

__all__ = ["sentence_permutation"]


# ==============================================================================================
# Exercise 2 — sentence_permutation(tokens, eos_id, generator=None)

EOS = 2


def _sentence_doc(seed: int, n_sentences: int, rest: int, eos_id: int = EOS) -> torch.Tensor:
    """n_sentences sentences of 1-4 distinct ids then eos_id, followed by `rest` ids (no eos)."""
    g = gen(seed)
    n_content = 4 * n_sentences + rest
    ids = [t for t in (torch.randperm(n_content + 1, generator=g) + 10).tolist() if t != eos_id]
    parts, i = [], 0
    for _ in range(n_sentences):
        length = int(torch.randint(1, 5, (), generator=g))
        parts += [*ids[i : i + length], eos_id]
        i += length
    parts += ids[i : i + rest]
    return torch.tensor(parts)


def _pieces(tokens: list[int], eos_id: int, before: bool = False) -> list[tuple[int, ...]]:
    """Sentences ending with eos_id (or, with before=True, pieces cut just before each eos_id)."""
    pieces, cur = [], []
    for t in tokens:
        if before and t == eos_id and cur:
            pieces.append(tuple(cur))
            cur = []
        cur.append(t)
        if not before and t == eos_id:
            pieces.append(tuple(cur))
            cur = []
    if cur:
        pieces.append(tuple(cur))
    return pieces


def _is_arrangement(out: list[int], pieces: list[tuple[int, ...]]) -> bool:
    """Is `out` the concatenation of `pieces` in some order (each exactly once)?"""
    left = Counter(pieces)
    i = 0
    while i < len(out):
        for piece in left:
            if left[piece] and tuple(out[i : i + len(piece)]) == piece:
                left[piece] -= 1
                i += len(piece)
                break
        else:
            return False
    return not +left


def _no_sentence_repeated(doc, out, sentences, rest, eos_id, label) -> None:
    """Broken when `out` is input sentences, one of them more often than in the input, then the
    unfinished rest: an order drawn with replacement."""
    if len(out) < len(rest) or tuple(out[len(out) - len(rest) :]) != rest:
        return
    drawn = _pieces(out[: len(out) - len(rest)], eos_id)
    have, want = Counter(drawn), Counter(sentences)
    if all(s in want for s in drawn) and any(have[s] > want[s] for s in have):
        raise Broken(
            "repeated",
            f"{label}: some sentences come out more than once (and others not at all): each of "
            f"the input's sentences comes out exactly once. Input {doc}, output {out}",
        )


def _lone_eos_kept(run: Callable) -> int:
    """Lone eos_ids among ordinary sentences, at the start and twice in a row, are sentences of
    their own and stay; `run(label, *args, **kwargs)` calls the function. The number of calls."""
    doc = torch.tensor([EOS, 11, 12, EOS, EOS, 13, EOS, 14, 15])
    label = f"sentence_permutation(tokens={doc.tolist()}, eos_id={EOS})"
    others = [s for s in _pieces(doc.tolist(), EOS)[:-1] if s != (EOS,)]
    for seed in range(3):
        out = require_ids(run(label, doc, EOS, generator=gen(seed)), doc, label)
        if len(out) < len(doc) and out[-2:] == [14, 15] and _is_arrangement(out[:-2], others):
            raise Broken(
                "lone eos",
                f"{label}: got {out}: the lone {EOS}s are missing; each is a sentence of its own "
                "(empty, with its boundary) and is kept",
            )
        _permutation_structure(doc.tolist(), out, EOS, label)
    return 3


def _permutation_structure(doc: list[int], out: list[int], eos_id: int, label: str) -> tuple:
    """The input sentences' order in `out` (as indices), or a Broken saying what is wrong."""
    sentences = _pieces(doc, eos_id)
    has_rest = bool(doc) and doc[-1] != eos_id
    rest = sentences.pop() if has_rest else ()
    if rest and len(out) == len(doc) - len(rest) and _is_arrangement(out, sentences):
        raise Broken(
            "tail dropped",
            f"{label}: the unfinished last sentence {list(rest)} (no {eos_id} at its end) is "
            f"missing: it stays at the end of the output. Input {doc}, output {out}",
        )
    _no_sentence_repeated(doc, out, sentences, rest, eos_id, label)
    if len(out) != len(doc):
        raise Broken(
            "length",
            f"{label}: the output has {len(out)} tokens, the input {len(doc)}: a permutation "
            "keeps every token",
        )
    body, tail = out[: len(out) - len(rest)], tuple(out[len(out) - len(rest) :])
    if tail == rest and _is_arrangement(body, sentences):
        order, i = [], 0
        for s in _pieces(body, eos_id):
            order.append(sentences.index(s))
            i += len(s)
        return tuple(order)
    if Counter(out) != Counter(doc):
        raise Broken(
            "multiset", f"{label}: tokens were lost, added or duplicated: input {doc}, output {out}"
        )
    if _is_arrangement(out, sentences + ([rest] if rest else [])):
        raise Broken(
            "tail",
            f"{label}: the unfinished last sentence {list(rest)} (no {eos_id} at its end) moved: "
            f"it stays at the end, only whole sentences are shuffled. Input {doc}, output {out}",
        )
    if _is_arrangement(out, _pieces(doc, eos_id, before=True)):
        raise Broken(
            "boundary",
            f"{label}: the document was cut just before each {eos_id}, so the boundary token "
            f"travels with the next sentence: a sentence ends with its {eos_id}. Input {doc}, "
            f"output {out}",
        )
    raise Broken(
        "not sentences",
        f"{label}: the output is not the input's sentences in another order (each sentence, "
        f"ending with {eos_id}, kept whole): input {doc}, output {out}",
    )


def _permutation_suite(fn: Callable, thorough: bool, call: Callable = direct) -> int:
    def run(label: str, *args, **kwargs):
        return call(lambda: fn(*args, **kwargs), label)

    n_calls = 0
    cases = [(4, 0, EOS), (3, 2, EOS), (1, 0, EOS), (0, 5, EOS), (5, 1, EOS)]
    if thorough:
        cases += [(0, 0, EOS), (6, 3, 17), (2, 0, 0), (8, 1, EOS)]
    n_seeds = 8 if thorough else 3
    for device, dtype in id_settings(thorough):
        for n_sent, rest, eos_id in cases:
            for seed in range(n_seeds):
                doc = _sentence_doc(200 + seed, n_sent, rest, eos_id).to(device=device, dtype=dtype)
                label = f"sentence_permutation(tokens={doc.tolist()}, eos_id={eos_id})"
                out = run(label, doc, eos_id, generator=gen(seed))
                out_list = require_ids(out, doc, label)
                _permutation_structure(doc.tolist(), out_list, eos_id, label)
                n_calls += 1
    n_calls += _lone_eos_kept(run)  # visible too
    # a document of boundary tokens only (visible too): every sentence is a lone eos_id
    doc = torch.tensor([EOS, EOS, EOS])
    label = f"sentence_permutation(tokens={doc.tolist()}, eos_id={EOS})"
    out = require_ids(run(label, doc, EOS, generator=gen(0)), doc, label)
    if out != doc.tolist():
        raise Broken(
            "lone eos" if len(out) < len(doc) else "length",
            f"{label}: got {out}, expected {doc.tolist()}: a lone {EOS} is a sentence of its "
            "own (empty, with its boundary) and is kept",
        )
    doc = _sentence_doc(5, 5, 2)
    label = f"sentence_permutation(tokens={doc.tolist()}, eos_id={EOS})"
    n_calls += reproducible(call, label, lambda g: fn(doc, EOS, generator=g))
    require_ids(run(label + " with generator=None", doc, EOS), doc, label)
    # statistics: every order of n sentences equally likely. Each order's count within its band
    # (an order that never or too rarely comes out); thorough, for 4 sentences, also all 24
    # counts together (chi-square): the biased swap-with-any-j shuffle gives those orders
    # probabilities 8/256 to 15/256, and over 6000 draws its statistic is about 200 against a
    # threshold of 76.9 (it passes with probability about 1e-8; tests/checks/test_lesson10.py).
    stats = [(3, 0, 300, False)] if not thorough else [(3, 1, 600, False), (4, 0, 6000, True)]
    for n_sent, rest, n_draws, fit in stats:
        doc = _sentence_doc(77 + n_sent, n_sent, rest)
        label = f"sentence_permutation(tokens={doc.tolist()}, eos_id={EOS})"
        counts: Counter = Counter()
        for s in range(n_draws):
            out = run(label, doc, EOS, generator=gen(50_000 + s))
            counts[
                _permutation_structure(doc.tolist(), require_ids(out, doc, label), EOS, label)
            ] += 1
            n_calls += 1
        orders = list(itertools.permutations(range(n_sent)))
        if fit and all(counts[order] for order in orders):  # (a missing order: named below)
            uniform_fit(counts, orders, n_draws, "sentence order", label, key="uniform")
        uniform_cells(
            counts,
            orders,
            n_draws,
            "sentence order",
            label,
            zero_key=lambda cell: "unreachable",
            key="uniform",
        )
    return n_calls


def _perm_tokens(tokens, eos_id, generator=None):
    return tokens[torch.randperm(len(tokens), generator=generator).to(tokens.device)]


def _perm_tail_too(tokens, eos_id, generator=None):
    pieces = [tokens.new_tensor(p) for p in _pieces(tokens.tolist(), eos_id)]
    order = torch.randperm(len(pieces), generator=generator).tolist()
    return torch.cat([pieces[i] for i in order]) if pieces else tokens.clone()


def _perm_cut_before(tokens, eos_id, generator=None):
    pieces = [tokens.new_tensor(p) for p in _pieces(tokens.tolist(), eos_id, before=True)]
    order = torch.randperm(len(pieces), generator=generator).tolist()
    return torch.cat([pieces[i] for i in order]) if pieces else tokens.clone()


def _perm_drops_tail(tokens, eos_id, generator=None):
    """Shuffles the finished sentences and forgets the unfinished tail."""
    sentences = _pieces(tokens.tolist(), eos_id)
    if tokens.numel() and tokens[-1] != eos_id:
        sentences.pop()
    order = torch.randperm(len(sentences), generator=generator).tolist()
    return tokens.new_tensor([t for i in order for t in sentences[i]])


def _perm_lone_eos_dropped(tokens, eos_id, generator=None):
    """Drops the empty sentences (a lone eos_id vanishes) before shuffling."""
    sentences = [s for s in _pieces(tokens.tolist(), eos_id) if s != (eos_id,)]
    rest = sentences.pop() if tokens.numel() and tokens[-1] != eos_id else ()
    order = torch.randperm(len(sentences), generator=generator).tolist()
    return tokens.new_tensor([t for i in order for t in sentences[i]] + list(rest))


def _perm_sattolo(tokens, eos_id, generator=None):
    """Sattolo's off-by-one Fisher-Yates (j < i): only cyclic orders, never the original."""
    sentences = _pieces(tokens.tolist(), eos_id)
    rest = sentences.pop() if tokens.numel() and tokens[-1] != eos_id else ()
    for i in range(len(sentences) - 1, 0, -1):
        j = int(torch.randint(i, (), generator=generator))
        sentences[i], sentences[j] = sentences[j], sentences[i]
    return tokens.new_tensor([t for s in [*sentences, rest] for t in s])


def _perm_with_replacement(tokens, eos_id, generator=None):
    """The order drawn as n independent indices (torch.randint): sentences repeat or vanish."""
    sentences = _pieces(tokens.tolist(), eos_id)
    rest = sentences.pop() if tokens.numel() and tokens[-1] != eos_id else ()
    order = torch.randint(len(sentences), (len(sentences),), generator=generator).tolist()
    return tokens.new_tensor([t for i in order for t in sentences[i]] + list(rest))


def _perm_global_rng(tokens, eos_id, generator=None):
    sentences = _pieces(tokens.tolist(), eos_id)
    rest = sentences.pop() if tokens.numel() and tokens[-1] != eos_id else ()
    order = torch.randperm(len(sentences)).tolist()  # the generator is ignored
    return tokens.new_tensor([t for i in order for t in sentences[i]] + list(rest))


def _perm_fixed_dtype(tokens, eos_id, generator=None):
    """Rebuilds the result with torch.tensor(list): int64 whatever the input's dtype."""
    sentences = _pieces(tokens.tolist(), eos_id)
    rest = sentences.pop() if tokens.numel() and tokens[-1] != eos_id else ()
    order = torch.randperm(len(sentences), generator=generator).tolist()
    ids = [t for i in order for t in sentences[i]] + list(rest)
    return torch.tensor(ids, dtype=torch.long, device=tokens.device)


sentence_permutation = Exercise(
    name="sentence_permutation",
    lesson="10",
    module="bart",
    reference=_bart.sentence_permutation,
    forbidden=(
        "transformer_lab.bart.sentence_permutation",
        "transformer_lab.sentence_permutation",
        "transformer_lab.bart._split_sentences",
    ),
    mistakes=[
        Mistake(
            "tokens-shuffled",
            "the tokens were shuffled, not the sentences: split the document into sentences "
            "(each ending with eos_id) and shuffle those, keeping each sentence whole.",
            _perm_tokens,
        ),
        Mistake(
            "tail-shuffled",
            "the unfinished last sentence (the tokens after the last eos_id) was shuffled in "
            "with the others: it has no boundary, so it stays at the end.",
            _perm_tail_too,
        ),
        Mistake(
            "cut-before-eos",
            "the document was cut before each eos_id, so a boundary token travels with the "
            "next sentence: cut just after each eos_id (a sentence ends with its boundary).",
            _perm_cut_before,
        ),
        Mistake(
            "tail-dropped",
            "the unfinished last sentence (the tokens after the last eos_id) was dropped: it is "
            "kept, unshuffled, at the end.",
            _perm_drops_tail,
        ),
        Mistake(
            "lone-eos-dropped",
            "a lone eos_id (an empty sentence) was dropped: it is a sentence of its own, kept "
            "and shuffled like the others, so the output has the input's length.",
            _perm_lone_eos_dropped,
        ),
        Mistake(
            "cyclic-orders",
            "some orders never come out (e.g. a Fisher-Yates shuffle with j < i only gives "
            "cyclic orders and never the original): every one of the n! orders must be "
            "equally likely; torch.randperm(n, generator=generator) gives that.",
            _perm_sattolo,
        ),
        Mistake(
            "with-replacement",
            "the order was drawn with replacement (n draws of torch.randint), so some sentences "
            "come out twice and others not at all: draw a permutation, "
            "torch.randperm(n_sentences, generator=generator), each sentence exactly once.",
            _perm_with_replacement,
        ),
        Mistake(
            "global-rng",
            "the random numbers do not come from the `generator` argument: pass "
            "generator=generator to torch.randperm so a seed reproduces the shuffle.",
            _perm_global_rng,
        ),
        Mistake(
            "fixed-dtype",
            "the result is rebuilt with a fixed dtype (torch.tensor(list) gives int64): keep the "
            "input's dtype, tokens.new_tensor(list) or torch.cat of slices of tokens.",
            _perm_fixed_dtype,
        ),
    ],
    driver=suite_driver(
        _permutation_suite, "structure, reproducibility and the distribution of orders"
    ),
    doc="sentence_permutation(tokens, eos_id, generator=None) -> (L,)",
)
