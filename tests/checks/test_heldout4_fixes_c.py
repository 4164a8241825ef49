"""Check fixes for lessons 10-13 that the fourth held-out set found (benchmarks/heldout4), each
tested with the held-out implementation that found it, and with the check as it was:

- a visible pass that broke a stated rule: sentence_permutation dropping the lone eos_ids of a
  document that also has ordinary sentences (the only lone-eos case was a document of eos_ids
  alone, which such code returns untouched); now a visible case;
- structural evidence for a kind, so that every version of it is named: an order of sentences
  drawn with replacement (a sentence comes out twice), [MASK]s side by side from two spans in one
  gap (told apart from one [MASK] per removed token by the whole output);
- crashes named by the catalogue (lesson 12): a catalogued mistake that raises the same error on
  the same case, or whose result the crashing code gives on another case (tiled_attention slicing
  a broadcast mask, repeat_kv's head index i // h_kv);
- a generic diagnoser: a right output whose gradient holds NaN (torch.where(l > 0, o / l, 0));
- new catalogue mistakes (clip_loss's a + b / 2 and sigmoid loss, zero_shot_classify's prompt
  norm axis, ViTEmbedding's √d_model and missing bias, cls_attention_map renormalised per head,
  tiled_attention's dropped last block, kv_cache_bytes in bits, repeat_kv along the wrong axis
  then reshaped, positive_random_features with x / d^(1/4)).

Each new catalogue mistake is also proven by the catalogue-wide test in
tests/checks/test_engine_and_lessons01_02.py (its mutant caught and named by the hidden check).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from transformer_lab import check
from transformer_lab.check import drivers, generic
from transformer_lab.check import lesson10 as checks10
from transformer_lab.check import lesson10_permutation as checks10p
from transformer_lab.check import lesson12 as checks12

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from heldout4 import lesson10, lesson11, lesson12, lesson13  # noqa: E402


def key_of(check_fn, impl):
    with pytest.raises(check.CheckFailed) as info:
        check_fn(impl)
    return info.value.mistake_key


HELD_OUT = [
    ("text_infilling", lesson10.infilling_gaps_with_replacement, "gaps-shared"),
    ("sentence_permutation", lesson10.permutation_drop_empty, "lone-eos-dropped"),
    ("sentence_permutation", lesson10.permutation_with_replacement, "with-replacement"),
    ("ViTEmbedding", lesson11.ViTEmbeddingScaled, "patches-scaled"),
    ("ViTEmbedding", lesson11.ViTEmbeddingNoBias, "no-bias"),
    ("cls_attention_map", lesson11.cls_map_renormalised, "renormalised-per-head"),
    ("tiled_attention", lesson12.tiled_where_division, "generic-nan-gradient"),
    ("tiled_attention", lesson12.tiled_drops_tail, "partial-block-dropped"),
    ("tiled_attention", lesson12.tiled_slices_broadcast_mask, "broadcast-mask-sliced"),
    ("kv_cache_bytes", lesson12.kv_cache_bits, "bits"),
    ("repeat_kv", lesson12.repeat_kv_wrong_divisor, "divisor-h-kv"),
    ("repeat_kv", lesson12.repeat_kv_positions, "length-axis-reshaped"),
    ("repeat_kv", lesson12.repeat_kv_last_dim, "feature-axis-reshaped"),
    ("positive_random_features", lesson12.prf_quarter_scale, "quarter-scaled"),
    ("clip_loss", lesson13.clip_loss_precedence, "one-direction-halved"),
    ("clip_loss", lesson13.clip_loss_sigmoid, "sigmoid-loss"),
    ("zero_shot_classify", lesson13.zero_shot_prompt_axis_norm, "prompt-norm-axis"),
]


@pytest.mark.parametrize("name, impl, key", HELD_OUT, ids=[i.__name__ for _, i, _ in HELD_OUT])
def test_the_held_out_mistake_is_named(name, impl, key):
    assert key_of(getattr(check, name), impl) == key


CATALOGUED = [(name, impl, key) for name, impl, key in HELD_OUT if not key.startswith("generic-")]


@pytest.mark.parametrize("name, impl, key", CATALOGUED, ids=[i.__name__ for _, i, _ in CATALOGUED])
def test_mutant_the_catalogue_without_the_new_mistake_names_nothing(monkeypatch, name, impl, key):
    """The generic diagnosers that came in the same round (a crash matched to the catalogue, an
    unused parameter: drivers.py) switched off too: they name some of these by kind."""
    ex = check.EXERCISES[name]
    monkeypatch.setattr(ex, "mistakes", [m for m in ex.mistakes if m.key != key])
    monkeypatch.setattr(drivers, "_same_crash", lambda *args: None)
    monkeypatch.setattr(drivers, "_unused_parameters", lambda *args: None)
    assert key_of(getattr(check, name), impl) is None


# ---------------------------------------------------------------------------------------------
# Lesson 10: a visible lone-eos case, and the structure that names a kind.


def test_mutant_without_the_lone_eos_case_the_visible_check_passes(monkeypatch):
    monkeypatch.setattr(checks10p, "_lone_eos_kept", lambda run: 0)
    assert check.sentence_permutation(lesson10.permutation_drop_empty) is None


def test_a_sentence_drawn_twice_is_named_in_another_version():
    def choice_order(tokens, eos_id, generator=None):  # multinomial with replacement
        sentences, rest = lesson10._sentences(tokens, eos_id)
        if not sentences:
            return tokens.clone()
        weights = torch.ones(len(sentences))
        order = torch.multinomial(weights, len(sentences), True, generator=generator).tolist()
        return torch.cat([sentences[i] for i in order] + [rest])

    assert key_of(check.sentence_permutation, choice_order) == "with-replacement"


def one_sentence_lost(tokens, eos_id, generator=None):  # wrong, but nothing is drawn twice
    sentences, rest = lesson10._sentences(tokens, eos_id)
    order = torch.randperm(len(sentences), generator=generator).tolist()
    return torch.cat([sentences[i] for i in order[1:]] + [rest]) if order[1:] else tokens.clone()


def test_a_lost_sentence_is_not_called_a_draw_with_replacement():
    assert key_of(check.sentence_permutation, one_sentence_lost) is None


def test_mutant_without_the_repeat_structure_a_lost_sentence_is_misnamed(monkeypatch):
    """Without the evidence of a sentence drawn twice, the mutant and any output of the wrong
    length break the same property first, so every such output would be named a draw with
    replacement."""
    monkeypatch.setattr(checks10p, "_no_sentence_repeated", lambda *args: None)
    assert key_of(check.sentence_permutation, one_sentence_lost) == "with-replacement"


def test_two_spans_in_one_gap_are_told_from_one_mask_per_token():
    doc = list(range(10, 18))
    # 11 12 removed behind two masks (two spans of 1 in one gap), 15 16 behind one mask
    out = [10, 3, 3, 13, 14, 3, 17]
    with pytest.raises(checks10.Broken) as info:
        checks10._spans_behind_masks(doc, out, 3, "case")
    assert info.value.key == "adjacent"
    # one mask per removed token everywhere: that mistake
    out = [10, 3, 3, 13, 14, 3, 3, 17]
    with pytest.raises(checks10.Broken) as info:
        checks10._spans_behind_masks(doc, out, 3, "case")
    assert info.value.key == "mask per token"


# ---------------------------------------------------------------------------------------------
# Lesson 12: crashes named by the catalogue, and a NaN gradient under a right output.


@pytest.mark.parametrize(
    "name, impl",
    [
        ("tiled_attention", lesson12.tiled_slices_broadcast_mask),
        ("repeat_kv", lesson12.repeat_kv_wrong_divisor),
    ],
)
def test_mutant_without_crash_matching_the_crash_is_unnamed(monkeypatch, name, impl):
    monkeypatch.setattr(checks12, "catalogued_crash", lambda *args: None)
    monkeypatch.setattr(drivers, "_same_crash", lambda *args: None)  # the drivers' own matching
    assert key_of(getattr(check, name), impl) is None


def test_a_crash_of_another_wording_is_named_by_the_case_where_it_does_not_crash():
    def divisor_stacked(x, n_rep):  # raises "... for dimension 1 ...", the mutant "dimension 0"
        h = x.shape[1]
        return torch.stack([x[:, i // h] for i in range(h * n_rep)], dim=1)

    assert key_of(check.repeat_kv, divisor_stacked) == "divisor-h-kv"


def test_a_crash_no_mistake_explains_stays_unnamed():
    def broken(x, n_rep):
        raise ZeroDivisionError("oops")

    assert key_of(check.repeat_kv, broken) is None


def test_mutant_without_the_nan_diagnoser_the_nan_gradient_is_unnamed(monkeypatch):
    monkeypatch.setattr(generic, "_nan_where_finite", lambda got, expected: False)
    assert key_of(check.tiled_attention, lesson12.tiled_where_division) is None


# ---------------------------------------------------------------------------------------------
# No right implementation is rejected.


@pytest.mark.parametrize("module", [lesson10, lesson11, lesson12, lesson13])
def test_the_right_implementations_still_pass(module):
    for table in (module.RIGHT, module.RIGHT2):
        for name, impl in table.items():
            assert getattr(check, name)(impl) is None
