"""Check fixes for lessons 08-12 that the fifth held-out set found (benchmarks/heldout5), each kept
here with the held-out implementation that found it and, where a case or a structural check was
added, a mutant: the check as it was, which let that implementation through or named nothing.

A visible pass that broke a rule the exercise text states, now failing the visible check:

- learn_bpe breaking ties by the joined string a + b instead of the tuple (a, b) (the text: "ties
  go to the smallest pair in Python's order (compare the tuples ...)"): a visible corpus,
  {"az": 1, "abc": 1}, whose second merge is a tie of ('a', 'z') and ('ab', 'c') (the smaller
  tuple, though 'abc' < 'az'), named "tie-joined-string".

A structural check: document_rotation writing the rotation back into the caller's tensor
(tokens[:] = ...) was caught only as "start k = 1 never came out" (the suite reuses its
document); the suite now checks that the input is left as it was, named "in-place".

Judged right, left passing: bpe_encode with one pass over the merges in rank order (as in the
fourth set: on ranks that learning produces it gives the reference's pieces).

Caught but not named before, now named by kind with catalogue mistakes: KVCache joined and
counted along the heads axis; BERT masking's 80/10/10 thresholds scaled by p, the choice inverted
(rand > p), int64 labels; bpe_encode merging an unranked pair (ranks.get(pair, 0)); mean_pool
normalising the tokens and not the mean; patchify splitting each axis as (p, H/p); ViTEmbedding
giving [CLS] the last position row, and adding cls_token to every patch with an extra row;
cls_attention_map averaged over every query; kv_cache_bytes with a factor 3; positive random
features subtracting |ω|²/2 instead of |x|²/2.

practice_transformers reads its letter with the course's one parser, ``answers.letters``:
"C and D" / "A or B" are named "several-letters" there too (its joining words are not letters).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from transformer_lab import check
from transformer_lab.check import lesson09_bpe, lesson10_rotation

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from heldout5 import lesson08 as h08  # noqa: E402
from heldout5 import lesson09 as h09  # noqa: E402
from heldout5 import lesson10 as h10  # noqa: E402
from heldout5 import lesson11 as h11  # noqa: E402
from heldout5 import lesson12 as h12  # noqa: E402


@pytest.fixture(autouse=True)
def _no_saving(monkeypatch, tmp_path):
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path))


def key_of(check_fn, impl, thorough=False):
    with pytest.raises(check.CheckFailed) as info:
        check_fn(impl, thorough=thorough)
    return info.value.mistake_key


# ---------------------------------------------------------------------------------------------
# learn_bpe: ties by the joined string, a visible case.


def test_learn_bpe_string_tiebreak_now_fails_visibly_and_is_named():
    assert key_of(check.learn_bpe, h09.learn_bpe_string_tiebreak) == "tie-joined-string"


def test_mutant_learn_bpe_without_the_tie_case_passes_string_tiebreak(monkeypatch):
    real = lesson09_bpe._learn_cases
    monkeypatch.setattr(
        lesson09_bpe.learn_bpe.driver,
        "_cases",
        lambda thorough: [c for c in real(thorough) if c.args[0] != {"az": 1, "abc": 1}],
    )
    assert check.learn_bpe(h09.learn_bpe_string_tiebreak) is None


def test_the_tie_case_tells_the_tuple_from_the_joined_string():
    assert lesson09_bpe._learn({"az": 1, "abc": 1}, 2) == [("a", "b"), ("a", "z")]
    assert lesson09_bpe._learn_tie_joined({"az": 1, "abc": 1}, 2) == [("a", "b"), ("ab", "c")]


# ---------------------------------------------------------------------------------------------
# document_rotation: the input changed in place, a structural check.


def test_rotation_in_place_is_named():
    assert key_of(check.document_rotation, h10.rotation_inplace) == "in-place"


def test_rotation_in_place_other_forms_are_named_too():
    def copy_back(tokens, generator=None):
        k = int(torch.randint(max(len(tokens), 1), (), generator=generator))
        tokens.copy_(torch.roll(tokens, -k))
        return tokens.clone()

    assert key_of(check.document_rotation, copy_back) == "in-place"


def test_mutant_rotation_suite_without_the_input_check_names_nothing(monkeypatch):
    ex = check.EXERCISES["document_rotation"]
    monkeypatch.setattr(lesson10_rotation, "_unchanged_input", lambda *args: None)
    monkeypatch.setattr(ex, "mistakes", [m for m in ex.mistakes if m.key != "in-place"])
    assert key_of(check.document_rotation, h10.rotation_inplace) is None


# ---------------------------------------------------------------------------------------------
# Catalogue mistakes, by kind.


@pytest.mark.parametrize(
    "name, impl, key",
    [
        ("KVCache", h08.KVCacheHeadAxis, "heads-axis"),
        ("bert_mask_tokens", h09.bert_mask_tokens_p_on_mask, "split-scaled-by-p"),
        ("bert_mask_tokens", h09.bert_mask_tokens_chosen_inverted, "choice-inverted"),
        ("bert_mask_tokens", h09.bert_mask_tokens_labels_int64, "int64-labels"),
        ("bpe_encode", h09.bpe_encode_default_zero, "unranked-merged"),
        ("mean_pool", h09.mean_pool_tokens_normalised, "tokens-not-mean"),
        ("patchify", h11.patchify_split_order, "split-inverted"),
        ("ViTEmbedding", h11.EmbeddingPositionsOffByOne, "cls-last-position"),
        ("ViTEmbedding", h11.EmbeddingClsAdded, "cls-added-to-patches"),
        ("cls_attention_map", h11.cls_map_query_mean, "all-queries-mean"),
        ("kv_cache_bytes", h12.kv_qkv, "factor-3"),
        ("positive_random_features", h12.prf_omega_norm, "omega-norm"),
    ],
)
def test_caught_but_unnamed_are_now_named(name, impl, key):
    assert key_of(getattr(check, name), impl) == key


def test_unranked_merged_names_other_defaults_too():
    def default_minus_one(word, ranks):
        symbols = list(word)
        while len(symbols) > 1:
            pairs = list(zip(symbols, symbols[1:]))
            if all(p not in ranks for p in pairs):
                break
            best = min(pairs, key=lambda p: ranks.get(p, -1))
            symbols = lesson09_bpe._merge(symbols, best)
        return symbols

    assert key_of(check.bpe_encode, default_minus_one) == "unranked-merged"


# ---------------------------------------------------------------------------------------------
# practice_transformers: the shared letter parser.


@pytest.mark.parametrize("answer", ["C and D", "C, D", "CD", "c or d", "(C) (D)", "A and B"])
def test_practice_transformers_several_letters_are_named(answer):
    assert key_of(check.practice_transformers, answer) == "several-letters"


@pytest.mark.parametrize("answer", ["C", "c", " C ", "(C)", "(c)"])
def test_practice_transformers_one_letter_in_any_form_passes(answer):
    assert check.practice_transformers(answer) is None


def test_practice_transformers_other_forms_say_what_to_write():
    with pytest.raises(check.CheckFailed, match="made of the letters A, B, C, D"):
        check.practice_transformers("E")
    with pytest.raises(check.CheckFailed, match="a letter in quotes"):
        check.practice_transformers(3)


def test_and_or_are_not_letters_for_a_many_letter_question_either():
    from transformer_lab.check.answers import letters

    assert letters("q", "A and C", "ABCDE", many=True) == "AC"
    assert letters("q", "(b)", "ABCD") == "B"


# ---------------------------------------------------------------------------------------------
# The right implementations still pass.


@pytest.mark.parametrize(
    "name",
    [
        "KVCache",
        "bert_mask_tokens",
        "learn_bpe",
        "bpe_encode",
        "mean_pool",
        "document_rotation",
        "patchify",
        "ViTEmbedding",
        "cls_attention_map",
        "kv_cache_bytes",
        "positive_random_features",
    ],
)
def test_heldout5_right_implementations_still_pass(name):
    for module in (h08, h09, h10, h11, h12):
        for table in (module.RIGHT, module.RIGHT2):
            if name in table:
                assert getattr(check, name)(table[name]) is None
