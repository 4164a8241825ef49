"""Check bugs the second held-out set found (benchmarks/heldout2, issue 25), each fixed and kept
here with the implementation that found it:

- mean_pool rejected a right implementation that reads a float mask as (mask != 0): the check
  asked for a gradient with respect to the mask, which is data;
- kv_cache_bytes accepted a float, though the text asks for an int;
- label_smoothed_loss's visible check never used an ignore_index other than 0, so gathering at
  -100, or masking with targets > 0, passed it;
- bert_mask_tokens accepted exactly round(p · n) chosen positions (a permutation), though the
  text asks that each position be chosen independently with probability p;
- three mistakes that only the hidden check caught now fail the visible one: LayerNorm's
  E[x²] − E[x]² variance (large values in float32), text_infilling's floor(p · L), and
  learn_bpe merging with str.replace (named as such, not as "count the pairs again").
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from transformer_lab import check
from transformer_lab.check import drivers

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from heldout2 import lesson05, lesson07, lesson09, lesson10, lesson12  # noqa: E402


@pytest.fixture(autouse=True)
def _no_saving(monkeypatch, tmp_path):
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path))


def key_of(check_fn, impl):
    with pytest.raises(check.CheckFailed) as info:
        check_fn(impl)
    return info.value.mistake_key


def test_mean_pool_accepts_a_mask_compared_with_zero():
    check.mean_pool(lesson09.pool_right2)
    check.mean_pool(lesson09.pool_right2, thorough=True)


def test_mutant_driver_that_differentiates_the_mask_rejects_it(monkeypatch):
    monkeypatch.setattr(
        drivers.FunctionDriver,
        "grad_leaves",
        lambda self, inputs: drivers.compare.grad_leaves(inputs),
    )
    with pytest.raises(check.CheckFailed, match="no gradient flows back to `attention_mask`"):
        check.mean_pool(lesson09.pool_right2)


def test_kv_cache_bytes_names_a_float():
    wrong = [f for f in lesson12.WRONG["kv_cache_bytes"] if "float" in (f.__doc__ or "")]
    assert wrong, "the held-out set's float implementation"
    assert key_of(check.kv_cache_bytes, wrong[0]) == "float"


@pytest.mark.parametrize("impl", [lesson07.ls_gather_unclamped, lesson07.ls_ignore_by_zero_only])
def test_label_smoothing_visible_check_uses_other_ignore_indices(impl):
    with pytest.raises((check.CheckFailed, IndexError, RuntimeError)):
        check.label_smoothed_loss(impl)


def test_bert_mask_tokens_names_a_fixed_count():
    assert key_of(check.bert_mask_tokens, lesson09.mask_exact_count) == "fixed-count"
    check.bert_mask_tokens(lesson09.mask_right)  # independent choices still pass


def test_a_fixed_count_is_not_read_from_two_calls_alone(monkeypatch):
    # the mutant: judging from the first two calls only; a right implementation that happens to
    # land on round(p·n) twice would be rejected. The check draws two more before it says so.
    import transformer_lab.check.lesson09 as l09

    draws = []
    real = l09._fixed_count

    def spy(pairs, eligible, spec, draw, seed):
        def counting(s):
            draws.append(s)
            return draw(s)

        return real(pairs, eligible, spec, counting, seed)

    monkeypatch.setattr(l09, "_fixed_count", spy)
    with pytest.raises(check.CheckFailed):
        check.bert_mask_tokens(lesson09.mask_exact_count)
    # seed + 2 and seed + 3 on the failing case (and again for the catalogued mistake's profile)
    assert draws and all(b == a + 1 for a, b in zip(draws[::2], draws[1::2]))


@pytest.mark.parametrize(
    "name, impl",
    [
        ("LayerNorm", lesson05.LayerNormNaiveVariance),
        ("text_infilling", lesson10.infill_floor),
    ],
)
def test_hidden_only_mistakes_now_fail_the_visible_check(name, impl):
    with pytest.raises(check.CheckFailed):
        getattr(check, name)(impl)


def test_learn_bpe_names_a_merge_by_str_replace():
    assert key_of(check.learn_bpe, lesson09.bpe_learn_string_replace) == "string-replace"
