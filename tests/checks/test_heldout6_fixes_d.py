"""Check fixes that the sixth held-out set found (benchmarks/heldout6) in the engine and in
lessons 02, 07 and 08, each kept with the implementation that found it and a mutant: the check as
it was, which rejected the right one or let the wrong one through.

Right implementations a check rejected (from `extra_right.REJECTED`, written from the texts alone):

- modules holding more than the text names: another name for their own submodules
  (``self.net = nn.Sequential(self.w_1, ...)``, ``nn.ModuleList([self.norm1, self.norm2])``) or a
  buffer of their own (``eps_t``, Hugging Face's ``position_ids``). The weights are still copied
  in by the reference's names; an extra *learnable* parameter is still refused (it changes the
  model);
- `next_token_probs` at T = 0 on tied maxima: the text now says which one (the first, as
  `torch.argmax` gives), and the check names the other picks (`torch.topk`'s, the last);
- `scaled_dot_product_attention` adding -inf to the scores: the text now says that the gradients
  are compared and why masked_fill, and the NaN-gradient sentence names this cause too.

Wrong implementations that passed both checks, now failing the visible one:

- `length_normalised_score` with float32 lengths (`lengths.float()`, named by the generic dtype
  sentence): the text asks for scores in log_probs' dtype, which only a low precision can show,
  so a case runs in bfloat16 (the engine's `Case.dtype`); and lengths reshaped to log_probs' shape (`view_as`), where the text
  allows lengths that only broadcast: a (3, 1) case;
- `sample_next` making its own seeded generator when none is given: with generator=None the
  draws must follow torch's global random state.

Also named: `length_normalised_score` with floor division.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_lab import check
from transformer_lab.check import drivers, lesson07_length, lesson08_sampling
from transformer_lab.check.exercise import Case

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from heldout6 import extra_right as x  # noqa: E402
from heldout6 import lesson07 as h07  # noqa: E402
from heldout6 import lesson08 as h08  # noqa: E402


@pytest.fixture(autouse=True)
def _no_saving(monkeypatch, tmp_path):
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path))


def key_of(check_fn, impl, thorough=False):
    with pytest.raises(check.CheckFailed) as info:
        check_fn(impl, thorough=thorough)
    return info.value.mistake_key


# ---------------------------------------------------------------------------------------------
# Modules with state of their own beside what the text names.

EXTRAS = [
    ("FeedForward", x.FeedForward_sequential_alias),
    ("LayerNorm", x.LayerNorm_eps_buffer),
    ("LearnedPositionalEmbedding", x.LearnedPositionalEmbedding_position_ids),
    ("MultiHeadAttention", x.MultiHeadAttention_alias_list),
    ("EncoderBlock", x.EncoderBlock_alias_norms),
]


@pytest.mark.parametrize("thorough", [False, True])
@pytest.mark.parametrize("name, impl", EXTRAS, ids=[n for n, _ in EXTRAS])
def test_aliases_and_buffers_of_their_own_pass(name, impl, thorough):
    assert getattr(check, name)(impl, thorough=thorough) is None


@pytest.mark.parametrize("name, impl", EXTRAS, ids=[n for n, _ in EXTRAS])
def test_mutant_strict_copy_rejects_them(name, impl, monkeypatch):
    monkeypatch.setattr(drivers, "_own_extra", lambda *args: False)
    with pytest.raises(check.CheckFailed, match="cannot be copied in"):
        getattr(check, name)(impl)


class FeedForwardExtraScale(nn.Module):
    """Near miss: a learnable scale the text never asks for (1 at the start, so the output is
    right, but the model has a parameter more)."""

    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return self.scale * self.w_2(torch.relu(self.w_1(x)))


def test_an_extra_learnable_parameter_is_still_refused():
    with pytest.raises(check.CheckFailed, match=r"unexpected: \['scale'\]"):
        check.FeedForward(FeedForwardExtraScale)


# ---------------------------------------------------------------------------------------------
# next_token_probs at T = 0 on tied maxima.


def _ties_at(pick):
    right = h08.RIGHT["next_token_probs"]

    def next_token_probs(logits, temperature=1.0, top_k=None, top_p=None):
        if temperature == 0:
            return F.one_hot(pick(logits), logits.shape[-1]).to(logits.dtype)
        return right(logits, temperature, top_k, top_p)

    return next_token_probs


def test_greedy_on_the_last_tied_maximum_is_named():
    assert key_of(check.next_token_probs, x.REJECTED["next_token_probs"][0]) == "greedy-tie-last"


def test_greedy_where_topk_puts_it_is_named():
    topk = _ties_at(lambda z: torch.topk(z, 1, dim=-1).indices[:, 0])
    assert key_of(check.next_token_probs, topk) in {"greedy-tie-topk", "greedy-tie-last"}


def test_greedy_on_the_first_tied_maximum_passes():
    assert check.next_token_probs(_ties_at(lambda z: z.argmax(-1)), thorough=True) is None


def test_the_text_says_which_tied_maximum():
    text = (REPO / "exercises/08_gpt/08_gpt.ipynb").read_text(encoding="utf-8")
    assert "the first of them, as `torch.argmax` gives" in text


# ---------------------------------------------------------------------------------------------
# scaled_dot_product_attention adding -inf: the NaN gradient and its cause.


def test_additive_minus_inf_gets_the_masked_fill_sentence():
    with pytest.raises(check.CheckFailed) as info:
        check.scaled_dot_product_attention(x.REJECTED["scaled_dot_product_attention"][0])
    assert info.value.mistake_key == "generic-nan-gradient"
    assert "masked_fill" in str(info.value)


def test_the_text_says_gradients_are_compared():
    text = (REPO / "exercises/02_qkv_attention/02_qkv_attention.ipynb").read_text(encoding="utf-8")
    assert "sends NaN gradients back" in text


# ---------------------------------------------------------------------------------------------
# length_normalised_score: the dtype and broadcast rules, floor division.


def _without(monkeypatch, keep):
    driver = lesson07_length.length_normalised_score.driver
    real = driver._cases
    monkeypatch.setattr(driver, "_cases", lambda thorough: [c for c in real(thorough) if keep(c)])


def test_float32_lengths_fail_the_visible_check_in_bfloat16():
    impl = h07.length_normalised_score_float32_lengths
    with pytest.raises(check.CheckFailed, match="bfloat16") as info:
        check.length_normalised_score(impl)
    assert info.value.mistake_key == "generic-float-dtype"  # a tensor of another dtype mixed in


def test_mutant_without_the_bfloat16_case_passes_float32_lengths(monkeypatch):
    _without(monkeypatch, lambda c: c.dtype is None)
    assert check.length_normalised_score(h07.length_normalised_score_float32_lengths) is None


def test_lengths_reshaped_are_named():
    impl = h07.length_normalised_score_view_as
    assert key_of(check.length_normalised_score, impl) == "lengths-reshaped"


def test_mutant_without_the_broadcast_case_passes_view_as(monkeypatch):
    _without(monkeypatch, lambda c: "broadcast" not in c.label)
    assert check.length_normalised_score(h07.length_normalised_score_view_as) is None


def test_floor_division_is_named():
    impl = h07.length_normalised_score_floor_division
    assert key_of(check.length_normalised_score, impl) == "floor-division"


def test_right_scores_computed_in_float64_pass_in_bfloat16():
    def via_float64(log_probs, lengths, alpha):
        scores = log_probs.double() / lengths.double() ** alpha
        return scores.to(log_probs.dtype)

    assert check.length_normalised_score(via_float64, thorough=True) is None


# ---------------------------------------------------------------------------------------------
# The engine: a case pinned to a dtype runs once per device, in that dtype.


def test_a_pinned_case_runs_once_per_device_in_its_dtype():
    seen = []

    def make(g):
        return {"x": torch.randn(3, generator=g, dtype=torch.float64)}

    driver = drivers.FunctionDriver(
        lambda thorough: [Case("plain", make), Case("low", make, dtype=torch.bfloat16)]
    )
    ex = check.EXERCISES["length_normalised_score"]
    driver.run_case = lambda ex, fn, case, index, setting: seen.append((case.label, setting[1]))
    n = driver.run(ex, None, thorough=False)
    assert seen == [
        ("plain", torch.float64),
        ("low", torch.bfloat16),
        ("plain", torch.float32),
    ]
    assert n == 3
    assert "bfloat16" in driver.covered(False)


# ---------------------------------------------------------------------------------------------
# sample_next without a generator.


def test_a_generator_made_inside_is_named():
    assert key_of(check.sample_next, h08.sample_next_default_seed) == "fixed-default-generator"


def test_mutant_without_the_unseeded_step_passes_it(monkeypatch):
    monkeypatch.setattr(lesson08_sampling, "_unseeded_finding", lambda *args: None)
    assert check.sample_next(h08.sample_next_default_seed) is None


@pytest.mark.parametrize("impl", x.RIGHT3["sample_next"], ids=lambda f: f.__name__)
def test_right_samplers_in_other_styles_still_pass(impl):
    assert check.sample_next(impl) is None


# ---------------------------------------------------------------------------------------------
# Lesson 10's reproducibility probe: code drawing from a source the check cannot seed.


def _unlucky_rotation():
    """A rotation that ignores `generator` (as with Python's `random`), caught in the run where
    its first two probe pairs happened to agree (a browser walk met this): the same start for the
    generators seeded 11 and 12, then starts that move on with every call."""
    calls = iter(range(10**9))

    def document_rotation(tokens, generator=None):
        seed = generator.initial_seed() if generator is not None else None
        n = max(tokens.numel(), 1)
        k = 5 % n if seed in (11, 12) else next(calls) % n
        return torch.cat([tokens[k:], tokens[:k]])

    return document_rotation


def test_a_rotation_that_ignores_the_generator_fails_even_when_two_probes_agree():
    with pytest.raises(check.CheckFailed, match="draw every random number from `generator`"):
        check.document_rotation(_unlucky_rotation())


def test_mutant_two_probe_seeds_let_it_through(monkeypatch):
    from transformer_lab.check import lesson10_properties

    monkeypatch.setattr(lesson10_properties, "REPRODUCIBLE_SEEDS", (11, 12))
    assert check.document_rotation(_unlucky_rotation()) is None
