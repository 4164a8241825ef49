"""Check fixes for lessons 07-09 that the fourth held-out set found (benchmarks/heldout4), each
kept here with the held-out implementation that found it and, where a case, a trace step or a
diagnoser was added, a mutant: the check as it was, which let that implementation through or
named it wrongly.

Visible passes that broke a rule the exercise text states, now failing the visible check:

- greedy_decode stopping only when every sequence emits EOS in the same step (its tokens are the
  right ones unless the sequences end at different steps before max_len, which no visible case
  had): a case where they do, named "never-stops-early" (on every input where it differs from the
  reference it is exactly the loop that never stops early);
- bpe_encode merging a pair's occurrences from the right (no visible word had a repeated symbol):
  words of one repeated symbol, named "from-right".

Judged right, left passing: bpe_encode merging only the first occurrence of the lowest-rank pair
per round, and one pass over the merges in rank order. On any rank table that learning can
produce (the text builds ranks from learn_bpe's merges) both give the reference's pieces: a merge
never creates a pair of lower rank nor a new occurrence of its own pair.

Caught but not named before, now named by kind: catalogue mistakes (label smoothing with eps fixed,
PAD taken as id 0, targets > ignore_index, the uniform part over everything, log_softmax on axis 1;
the alpha-th root of |Y|; greedy decoding fed the newest token only; lm_loss summing the clamped
-100 positions; T = 0 read as falsy; the temperature applied twice; KVCache's len before the
first append, a cache keeping the newest chunk only, a store shared by every instance (a new
trace step: a second cache must start empty); two letters for a one-letter practice answer;
BERT masking's random ids from 1, too few random tokens, labels 0, int64 inputs, a fixed [MASK]
id (a wrong form now matches a mistake of the same form); WordPiece's literal '[UNK]' and a cut
from the right; BPE learning from the right, stopping at count one, with '</w>'; encoding with
joined-string keys) and three crash diagnosers in ``check.crashes`` (is_causal=True without the
mask it describes, float token ids, gather along an axis the indices do not count).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from transformer_lab import check
from transformer_lab.check import crashes, lesson07, lesson08_kvcache, lesson09, lesson09_bpe

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from heldout4 import lesson07 as h07  # noqa: E402
from heldout4 import lesson08 as h08  # noqa: E402
from heldout4 import lesson09 as h09  # noqa: E402


@pytest.fixture(autouse=True)
def _no_saving(monkeypatch, tmp_path):
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path))


def key_of(check_fn, impl, thorough=False):
    with pytest.raises(check.CheckFailed) as info:
        check_fn(impl, thorough=thorough)
    return info.value.mistake_key


@pytest.mark.parametrize(
    "name, impl, key",
    [
        ("greedy_decode", h07.greedy_decode_stop_same_step, "never-stops-early"),
        ("bpe_encode", h09.bpe_encode_right_to_left, "from-right"),
    ],
)
def test_visible_passes_now_fail_visibly_and_are_named(name, impl, key):
    assert key_of(getattr(check, name), impl) == key


def test_mutant_greedy_without_the_all_end_case_passes_stop_same_step(monkeypatch):
    real = lesson07._greedy_grid
    monkeypatch.setattr(
        lesson07.greedy_decode.driver,
        "_cases",
        lambda thorough: [s for s in real(thorough) if "eos" not in s],
    )
    assert check.greedy_decode(h07.greedy_decode_stop_same_step) is None


def test_mutant_bpe_encode_without_repeated_symbols_passes_right_to_left(monkeypatch):
    real = lesson09_bpe._encode_cases
    monkeypatch.setattr(
        lesson09_bpe.bpe_encode.driver,
        "_cases",
        lambda thorough: [c for c in real(thorough) if c.args[1] is not lesson09_bpe._REPEAT_RANKS],
    )
    assert check.bpe_encode(h09.bpe_encode_right_to_left) is None


@pytest.mark.parametrize(
    "impl", [h09.bpe_encode_first_occurrence, h09.bpe_encode_one_pass], ids=lambda f: f.__name__
)
def test_bpe_encode_variants_equal_on_learned_ranks_are_left_passing(impl):
    from transformer_lab import bert

    for seed in range(10):
        corpus = lesson09_bpe._random_corpus(seed)
        ranks = bert.merge_ranks(lesson09_bpe._learn(corpus, 40))
        for word in [*corpus, "aaaa", "abab"]:
            assert impl(word, ranks) == bert.bpe_encode(word, ranks)
    assert check.bpe_encode(impl) is None


@pytest.mark.parametrize(
    "name, impl, key",
    [
        ("DecoderBlock", h07.DecoderBlockIsCausal, "crash-is-causal"),
        ("greedy_decode", h07.greedy_decode_last_token_only, "last-token-only"),
        ("greedy_decode", h07.greedy_decode_float_start, "crash-float-token-ids"),
        ("label_smoothed_loss", h07.label_smoothed_loss_fixed_eps, "eps-fixed"),
        ("label_smoothed_loss", h07.label_smoothed_loss_pad_zero, "pad-id-zero"),
        ("label_smoothed_loss", h07.label_smoothed_loss_positive_targets, "above-ignore-index"),
        ("label_smoothed_loss", h07.label_smoothed_loss_global_uniform, "uniform-over-everything"),
        ("label_smoothed_loss", h07.label_smoothed_loss_dim1, "softmax-axis-1"),
        ("length_normalised_score", h07.length_normalised_score_root, "root"),
        ("lm_loss", h08.lm_loss_gather_dim1, "crash-gather-axis"),
        ("lm_loss", h08.lm_loss_clamped_not_masked, "ignored-summed"),
        ("next_token_probs", h08.next_token_probs_falsy_temperature, "falsy-temperature"),
        ("sample_next", h08.sample_next_double_temperature, "temperature-twice"),
        ("KVCache", h08.KVCacheSharedClassLists, "shared-state"),
        ("KVCache", h08.KVCacheLenWhenEmpty, "len-when-empty"),
        ("KVCache", h08.KVCacheKeepsLastChunk, "keeps-last-chunk"),
        ("bert_mask_tokens", h09.bert_mask_tokens_random_skips_pad, "random-from-one"),
        ("bert_mask_tokens", h09.bert_mask_tokens_tenth_of_rest, "random-of-rest"),
        ("bert_mask_tokens", h09.bert_mask_tokens_labels_zero, "labels-zero"),
        ("bert_mask_tokens", h09.bert_mask_tokens_int64_random, "int64-inputs"),
        ("bert_mask_tokens", h09.bert_mask_tokens_bert_mask_id, "fixed-mask-id"),
        ("wordpiece_tokenize", h09.wordpiece_tokenize_literal_unk, "literal-unk"),
        ("wordpiece_tokenize", h09.wordpiece_tokenize_from_right, "from-right"),
        ("learn_bpe", h09.learn_bpe_stop_at_one, "stop-at-one"),
        ("learn_bpe", h09.learn_bpe_right_to_left, "from-right"),
        ("learn_bpe", h09.learn_bpe_end_of_word, "end-of-word"),
        ("bpe_encode", h09.bpe_encode_string_keys, "joined-keys"),
    ],
)
def test_caught_but_unnamed_are_now_named(name, impl, key):
    assert key_of(getattr(check, name), impl) == key


def test_several_letters_for_the_practice_question_are_named():
    for answer in ("C, D", "CD", "C and D"):
        assert key_of(check.practice_transformers, answer) == "several-letters"
    assert check.practice_transformers("C") is None
    assert key_of(check.practice_transformers, "E") is None


@pytest.mark.parametrize(
    "pattern, name, impl",
    [
        ("_IS_CAUSAL", "DecoderBlock", h07.DecoderBlockIsCausal),
        ("_FLOAT_IDS", "greedy_decode", h07.greedy_decode_float_start),
        ("_GATHER_DIM", "lm_loss", h08.lm_loss_gather_dim1),
    ],
)
def test_mutant_crashes_without_the_new_diagnoser_are_unnamed(monkeypatch, pattern, name, impl):
    import re

    monkeypatch.setattr(crashes, pattern, re.compile(r"(?!x)x"))
    assert key_of(getattr(check, name), impl) is None


def test_gather_diagnoser_needs_the_failing_axis_on_the_students_line():
    def other_line(logits, targets):
        return logits.log_softmax(-1).gather(-1, targets.clamp(min=0)[..., None] + 50).mean()

    assert key_of(check.lm_loss, other_line) is None


def test_mutant_kv_trace_without_a_second_cache_lets_shared_state_crash_unnamed(monkeypatch):
    real = lesson08_kvcache._kv_trace

    def no_second_cache(cls, chunks, call):
        trace = real(cls, chunks, call)
        return trace[:-2] if trace and trace[-1][0] == "fresh-len" else trace

    monkeypatch.setattr(lesson08_kvcache, "_kv_trace", no_second_cache)
    monkeypatch.setattr(lesson08_kvcache, "_new_cache_not_empty", lambda evidence: False)
    h08.KVCacheSharedClassLists.keys.clear()
    h08.KVCacheSharedClassLists.values.clear()
    assert key_of(check.KVCache, h08.KVCacheSharedClassLists) is None


def test_shared_state_is_named_whatever_ran_before():
    """Class-level lists keep what an earlier check stored: the first len is then not 0, which
    names the same mistake (the thorough run after the visible one)."""
    assert key_of(check.KVCache, h08.KVCacheSharedClassLists) == "shared-state"
    assert key_of(check.KVCache, h08.KVCacheSharedClassLists, thorough=True) == "shared-state"


def test_mutant_profiles_with_a_wrong_form_never_agree_leave_int64_unnamed(monkeypatch):
    real = lesson09.profiles_agree

    def old(a, b):
        return False if a["form"] or b["form"] else real(a, b)

    monkeypatch.setattr(lesson09.bert_mask_tokens.driver, "matches", old)
    assert key_of(check.bert_mask_tokens, h09.bert_mask_tokens_int64_random) is None


@pytest.mark.parametrize(
    "name",
    [
        "DecoderBlock",
        "greedy_decode",
        "label_smoothed_loss",
        "length_normalised_score",
        "lm_loss",
        "next_token_probs",
        "sample_next",
        "KVCache",
        "bert_mask_tokens",
        "wordpiece_tokenize",
        "learn_bpe",
        "bpe_encode",
    ],
)
def test_heldout4_right_implementations_still_pass(name):
    for module in (h07, h08, h09):
        for table in (module.RIGHT, module.RIGHT2):
            if name in table:
                assert getattr(check, name)(table[name]) is None
