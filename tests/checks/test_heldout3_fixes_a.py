"""Check fixes for lessons 01-07 that the third held-out set found (benchmarks/heldout3, issue 25),
each tested with the held-out implementation that found it, and with the check as it was where
that let the implementation through:

- visible passes that break a rule the exercise text states now fail the visible check, named:
  FeedForward with a hard-coded dropout (the text states FFN(x) = w_2(relu(w_1(x))), and the
  block's dropout argument is the only dropout), EncoderBlock built with nn.LayerNorm (the text
  asks for your LayerNorm), a DecoderBlock that builds its own causal mask (self_mask may hold
  the target's padding) and greedy decoding without the source mask (padded sources);
- misleading sentences: padding_mask that rewrites its tokens in place, LayerNorm with γ = 0,
  causal_mask with tril(diagonal=1), SelfAttention with pre-scaled queries;
- the generic diagnosers added for crashes and parameter shapes, on the held-out crash that
  found each.

Each new catalogue mistake is also proven by the catalogue-wide test in
tests/checks/test_engine_and_lessons01_02.py (its mutant caught and named by the hidden check).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from transformer_lab import check
from transformer_lab.check import answer_drivers, drivers
from transformer_lab.check import lesson05 as checks05
from transformer_lab.check import lesson05_block as checks05_block
from transformer_lab.check import lesson06 as checks06
from transformer_lab.check import lesson07 as checks07
from transformer_lab.check.devices import devices

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from heldout import lesson05 as first05  # noqa: E402
from heldout2 import lesson07 as second07  # noqa: E402
from heldout3 import lesson02, lesson03, lesson04, lesson05, lesson06, lesson07  # noqa: E402


def key_of(check_fn, impl):
    with pytest.raises(check.CheckFailed) as info:
        check_fn(impl)
    return info.value.mistake_key


# ---------------------------------------------------------------------------------------------
# Visible passes that broke a stated rule; the mutant is the check as it was.


def test_feed_forward_with_dropout_is_named():
    assert key_of(check.FeedForward, lesson05.FeedForwardDropout) == "dropout"


def test_mutant_eval_mode_comparison_alone_lets_dropout_through():
    old = drivers.ModuleDriver(checks05._ffn_cases)
    assert old.run(check.EXERCISES["FeedForward"], lesson05.FeedForwardDropout, False) > 0


def test_encoder_block_with_torch_layer_norm_is_named():
    assert key_of(check.EncoderBlock, lesson05.BlockTorchLayerNorm) == "torch-layer-norm"


def test_mutant_outputs_alone_let_torch_layer_norm_through():
    old = drivers.ModuleDriver(checks05_block._block_cases)
    assert old.run(check.EXERCISES["EncoderBlock"], lesson05.BlockTorchLayerNorm, False) > 0


def test_decoder_block_with_its_own_causal_mask_is_named():
    assert key_of(check.DecoderBlock, lesson07.DecoderOwnCausal) == "own-causal-mask"


def test_mutant_causal_only_self_masks_let_an_own_causal_mask_through():
    old = drivers.ModuleDriver(lambda thorough: checks07._decoder_cases(False)[:2])
    assert old.run(check.EXERCISES["DecoderBlock"], lesson07.DecoderOwnCausal, False) > 0


def test_greedy_decode_without_source_mask_is_named():
    assert key_of(check.greedy_decode, lesson07.greedy_no_src_mask) == "no-src-mask"


def test_mutant_unpadded_sources_let_a_missing_source_mask_through():
    old = answer_drivers.TrialDriver(
        lambda thorough: checks07._greedy_grid(False)[:2],
        checks07._greedy_trial,
        matches=checks07._equal,
        settings=devices,
    )
    assert old.run(check.EXERCISES["greedy_decode"], lesson07.greedy_no_src_mask, False) > 0


# ---------------------------------------------------------------------------------------------
# Misleading sentences.


def test_padding_mask_in_place_is_named_as_such():
    assert key_of(check.padding_mask, lesson06.padding_in_place) == "tokens-changed"


def test_mutant_exact_comparison_alone_calls_it_an_inverted_mask(monkeypatch):
    """The driver as it was: the student given the caller's tokens, no in-place check."""
    monkeypatch.setattr(drivers, "own_copies", lambda inputs: inputs)
    monkeypatch.setattr(drivers, "require_unchanged", lambda *args, **kwargs: None)
    old = answer_drivers.ExactDriver(
        checks06._padding_cases, equal=checks06._identical, describe=checks06._describe
    )
    with pytest.raises(check.CheckFailed) as info:
        old.run(check.EXERCISES["padding_mask"], lesson06.padding_in_place, False)
    assert info.value.mistake_key == "mask-inverted"


@pytest.mark.parametrize(
    "name, impl, key",
    [
        ("LayerNorm", lesson05.LayerNormZeroGamma, "zero-init"),
        ("causal_mask", lesson06.causal_one_future, "next-key-too"),
        ("SelfAttention", lesson02.SelfAttentionScalesQueriesToo, "scaled-twice"),
    ],
)
def test_the_specific_mistake_is_named(name, impl, key):
    assert key_of(getattr(check, name), impl) == key


@pytest.mark.parametrize(
    "impl, key",
    [
        (lesson07.ls_clamped_before_keep, "clamped-targets"),
        (lesson07.ls_eps_over_v_minus_1_no_true, "true-class-without-share"),
        (lesson07.ls_mean_over_batch_then_positions, "mean-per-sequence"),
        (lesson07.ls_uniform_over_kept_logits_only, "pad-class-left-out"),
        (lesson07.ls_eps_times_mean_of_probs, "log-of-mean-probability"),
        (second07.ls_ignore_by_zero_only, "hard-coded-pad"),
        (second07.ls_smoothing_on_probs, "smoothed-prediction"),
    ],
)
def test_label_smoothing_mistakes_are_named(impl, key):
    assert key_of(check.label_smoothed_loss, impl) == key


# ---------------------------------------------------------------------------------------------
# Generic diagnosers (crashes, parameter shapes), on the held-out implementation that found each.


@pytest.mark.parametrize(
    "name, impl, key",
    [
        ("MultiHeadAttention", lesson03.MHAContextOr, "crash-tensor-or"),
        ("MultiHeadAttention", lesson03.MHAUnsqueezesMask, "crash-mask-head-axis"),
        ("scaled_dot_product_attention", lesson02.sdpa_boolean_index, "crash-bool-index-shape"),
        ("EncoderBlock", lesson05.BlockMaskPositional, "crash-mask-as-context"),
        ("sinusoidal_positional_encoding", lesson04.pe_odd_crash, "crash-odd-columns"),
        ("LearnedPositionalEmbedding", lesson04.LearnedRejectsExactFit, "crash-bound-inclusive"),
        ("FeedForward", first05.FFNSharedDff, "params-hard-coded-width"),
    ],
)
def test_generic_diagnosers_name_the_held_out_crash(name, impl, key):
    assert key_of(getattr(check, name), impl) == key


@pytest.mark.parametrize("module", [first05, lesson05])
def test_the_right_implementations_still_pass(module):
    # the training-mode and nn.LayerNorm checks, and the in-place one, reject no right answer
    check.FeedForward(module.RIGHT["FeedForward"])
    check.EncoderBlock(module.RIGHT["EncoderBlock"])
    check.padding_mask(lesson06.RIGHT["padding_mask"])
    check.LearnedPositionalEmbedding(lesson04.RIGHT["LearnedPositionalEmbedding"])
