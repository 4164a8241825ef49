"""Check fixes for lessons 08, 09 and 12 that the sixth held-out set found (benchmarks/heldout6),
each kept here with the held-out implementation that found it and, where a case, a rule or a
diagnoser was added, a mutant: the check as it was, which let that implementation through or named
nothing.

Visible passes that broke a rule, now failing the visible check:

- KVCache starting from torch.empty(0) (float32): half and bfloat16 keys came back float32. A
  half-precision case (float16 and bfloat16 chunks, once per device) checks that the cache hands
  back the dtype it was given, named "float32-start" for any start that promotes to float32.
- bert_mask_tokens drawing its random tokens from [len(special_ids), vocab_size) (the text: "a
  random id drawn uniformly from [0, vocab_size)"): a second visible range case, with special ids,
  finds the specials never drawn, named "random-not-special".

Judged right, left passing: bpe_encode replaying every merge once in rank order, and merging only
the first occurrence of the best pair per round: on every table learn_bpe can produce they give
the reference's pieces (checked on 43,000 words of random corpora over 2 to 4 letters; a smaller
sweep is a test here).

Caught but not named before, now named by kind: shift_targets masking only the first padding
target of a row; lm_loss's floor division (a generic diagnoser, "generic-floored": the right result
rounded down, for any exercise); KVCache values holding keys, whichever part (the matcher now
names "values-from-keys" wherever the wrong values are the keys of their positions); an optional
None made into a tensor (a crash diagnoser, "crash-none-as-tensor"); BERT labels inverted;
wordpiece never trying the whole rest of the word; learn_bpe one merge short; bpe_encode going on
after no pair has a rank; mean_pool's ~ on an integer mask; kv_cache_bytes with length - 1 tokens;
positive random features with x @ omega (not omega.T) and with 1/√m inside the exponential.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

from transformer_lab import bert, check
from transformer_lab.check import crashes, generic, lesson08_kvcache, lesson09

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from heldout6 import lesson08 as h08  # noqa: E402
from heldout6 import lesson09 as h09  # noqa: E402
from heldout6 import lesson12 as h12  # noqa: E402


@pytest.fixture(autouse=True)
def _no_saving(monkeypatch, tmp_path):
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path))


def key_of(check_fn, impl, thorough=False):
    with pytest.raises(check.CheckFailed) as info:
        check_fn(impl, thorough=thorough)
    return info.value.mistake_key


# ---------------------------------------------------------------------------------------------
# KVCache: half precision, a new case.


def test_kv_float32_start_now_fails_visibly_and_is_named():
    assert key_of(check.KVCache, h08.KVCacheEmptyFloat32) == "float32-start"


def test_kv_other_float32_starts_are_named_too():
    class FromTensorList(h08.KVCacheRight):
        def __init__(self):
            self.k, self.v = torch.tensor([]), torch.tensor([])

        def __len__(self):
            return 0 if self.k.numel() == 0 else self.k.shape[-2]

        def append(self, k, v):
            self.k, self.v = torch.cat((self.k, k), -2), torch.cat((self.v, v), -2)
            return self.k, self.v

    assert key_of(check.KVCache, FromTensorList) == "float32-start"


def test_mutant_kv_cases_without_half_precision_pass_float32_start(monkeypatch):
    real = lesson08_kvcache._kv_cases
    monkeypatch.setattr(
        lesson08_kvcache.KVCache.driver,
        "_cases",
        lambda thorough: [c for c in real(thorough) if c[1] != lesson08_kvcache._HALF_CASE],
    )
    assert check.KVCache(h08.KVCacheEmptyFloat32) is None


def test_kv_values_from_old_keys_is_named_by_kind():
    assert key_of(check.KVCache, h08.KVCacheValuesFromKeys) == "values-from-keys"


def test_mutant_kv_matcher_without_the_kind_rule_names_nothing(monkeypatch):
    monkeypatch.setattr(lesson08_kvcache, "_values_hold_keys", lambda evidence: False)
    assert key_of(check.KVCache, h08.KVCacheValuesFromKeys) is None


# ---------------------------------------------------------------------------------------------
# bert_mask_tokens: the random tokens include the special ids, a new visible case.


def test_bert_random_not_special_now_fails_visibly_and_is_named():
    assert key_of(check.bert_mask_tokens, h09.bert_mask_tokens_random_not_special) == (
        "random-not-special"
    )


def test_mutant_bert_without_the_special_range_case_passes_it(monkeypatch):
    monkeypatch.setattr(
        lesson09, "_RANGE_MASK_SPECS", [s for s in lesson09._RANGE_MASK_SPECS if not s["specials"]]
    )
    assert check.bert_mask_tokens(h09.bert_mask_tokens_random_not_special) is None


def test_bert_none_specials_crash_is_named_and_other_none_forms_too():
    assert key_of(check.bert_mask_tokens, h09.bert_mask_tokens_none_specials) == (
        "crash-none-as-tensor"
    )

    def isin_none(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
        given = None if special_ids is None else torch.tensor(special_ids, device=tokens.device)
        torch.isin(tokens, given)
        return h09.bert_mask_tokens_right(tokens, mask_id, vocab_size, p, generator, special_ids)

    assert key_of(check.bert_mask_tokens, isin_none) == "crash-none-as-tensor"


def test_mutant_crashes_without_the_none_tensor_rule_name_nothing(monkeypatch):
    monkeypatch.setattr(crashes, "_NONE_TENSOR", crashes.re.compile(r"(?!)"))
    assert key_of(check.bert_mask_tokens, h09.bert_mask_tokens_none_specials) is None


# ---------------------------------------------------------------------------------------------
# lm_loss: floor division, a generic diagnoser.


def test_lm_loss_floor_division_is_named_generically():
    assert key_of(check.lm_loss, h08.lm_loss_floor_div) == "generic-floored"

    def floored(logits, targets):
        return torch.floor(h08.lm_loss_right(logits, targets))

    assert key_of(check.lm_loss, floored) == "generic-floored"


def test_mutant_generic_without_floor_names_nothing(monkeypatch):
    monkeypatch.setattr(generic, "_floored", lambda g, e, same: None)
    assert key_of(check.lm_loss, h08.lm_loss_floor_div) is None


def test_floor_diagnoser_leaves_whole_numbers_alone():
    e = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    assert generic._floored(e - 1, e, lambda a, b: torch.equal(a, b)) is None


# ---------------------------------------------------------------------------------------------
# Catalogue mistakes, by kind.


@pytest.mark.parametrize(
    "name, impl, key",
    [
        ("shift_targets", h08.shift_targets_pad_before_only, "first-pad-only"),
        ("bert_mask_tokens", h09.bert_mask_tokens_labels_unchosen, "labels-inverted"),
        ("wordpiece_tokenize", h09.wordpiece_tokenize_end_off_by_one, "rest-never-tried"),
        ("learn_bpe", h09.learn_bpe_one_short, "one-short"),
        ("bpe_encode", h09.bpe_encode_no_rank_stop, "no-stop"),
        ("mean_pool", h09.mean_pool_bitwise_not, "bitwise-not-mask"),
        ("kv_cache_bytes", h12.kv_cache_bytes_past_only, "length-minus-one"),
        ("positive_random_features", h12.prf_untransposed, "omega-untransposed"),
        ("positive_random_features", h12.prf_scale_in_exp, "scale-inside"),
    ],
)
@pytest.mark.parametrize("thorough", [False, True])
def test_caught_but_unnamed_are_now_named(name, impl, key, thorough):
    assert key_of(getattr(check, name), impl, thorough) == key


# ---------------------------------------------------------------------------------------------
# Judged right: bpe_encode replaying the merges, or merging the first occurrence per round.


@pytest.mark.parametrize("impl", [h09.bpe_encode_replay, h09.bpe_encode_first_occurrence])
def test_bpe_encode_variants_judged_right_pass(impl):
    assert check.bpe_encode(impl) is None
    assert check.bpe_encode(impl, thorough=True) is None


def test_bpe_encode_variants_equal_the_reference_on_learned_tables():
    rng = random.Random(6)
    for trial in range(150):
        alphabet = "abcd"[: 2 + trial % 3]
        corpus = {
            "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))): rng.randint(1, 5)
            for _ in range(rng.randint(1, 8))
        }
        ranks = bert.merge_ranks(bert.learn_bpe(corpus, rng.randint(1, 25)))
        words = [*corpus, *("".join(rng.choice(alphabet) for _ in range(9)) for _ in range(5))]
        for word in words:
            expected = bert.bpe_encode(word, ranks)
            assert h09.bpe_encode_replay(word, ranks) == expected
            assert h09.bpe_encode_first_occurrence(word, ranks) == expected


# ---------------------------------------------------------------------------------------------
# The right implementations still pass.


@pytest.mark.parametrize("module", [h08, h09, h12], ids=["08", "09", "12"])
def test_heldout6_right_implementations_still_pass(module):
    for table in (module.RIGHT, module.RIGHT2):
        for name, impl in table.items():
            assert getattr(check, name)(impl) is None, name
