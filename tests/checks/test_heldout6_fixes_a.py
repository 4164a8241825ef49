"""Check fixes for lessons 01 and 04-07 that the sixth held-out set found (benchmarks/heldout6),
each tested with the held-out implementation that found it, with another student's version of
the same kind, and with the check as it was (the new case, diagnoser or catalogue mistake taken
away), which let that implementation through or named nothing.

A visible pass that broke a rule the exercise text states, now failing the visible check:

- causal_mask cut from a fixed 64 × 64 table (nanoGPT's buffer): the text asks for causal_mask(n)
  for any n; the visible cases now hold n = 100 and the thorough ones n = 100 and 1100. A mask too
  small for n, the same for 2n, is named "fixed-size-table" whatever the table's size.

Caught but not named before, now named by kind:

- RNN: the state changed in place after it was appended (h.copy_), every output the final state
  ("state-aliased");
- sequential_steps: attention counted as a tree, ceil(log2 n) ("attention-log"; an unnamed
  failure whose attention count is log2 n rounded either way, for n = 10, 100, 1000, too);
- sinusoidal_positional_encoding and rotary_embedding: the exponent 2k/d computed on integers,
  every frequency 1 ("integer-exponent"); the sinusoidal table's odd d_model rounded down in the
  exponent ("odd-d_model-rounded-down", beside the rounded-up one);
- LayerNorm: sqrt(var) + sqrt(eps) ("eps-root-outside");
- FeedForward: relu(w_2(w_1(x))) ("relu-at-end"); an output random in eval mode (F.dropout with its
  default training=True), tested when the outputs differ with no mistake named
  ("dropout-in-eval-mode"); layers of the right shapes under other names (linear1 for w_1), a
  generic diagnoser of every module check ("params-renamed", check.parameters);
- EncoderBlock: pre-norm with the keys and values read from the un-normalised x
  ("pre-norm-keys-unnormed");
- alpha_22: a uniform weight over three or four keys ("uniform-three-keys", "uniform-four-keys");
- greedy_decode: the largest logit's value taken as the token ("max-values"); a sequence's being
  done read from its newest token only, so decoding resumes after a PAD ("done-from-last-token").

Each new catalogue mistake is also proven by the catalogue-wide test in
tests/checks/test_engine_and_lessons01_02.py (its mutant caught and named by the hidden check).
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_lab import check
from transformer_lab.check import answer_drivers, lesson05, lesson06, parameters
from transformer_lab.check import lesson01 as lesson01_checks

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from heldout6 import lesson01, lesson04, lesson07  # noqa: E402
from heldout6 import lesson05 as h05  # noqa: E402
from heldout6 import lesson06 as h06  # noqa: E402


@pytest.fixture(autouse=True)
def _no_saving(monkeypatch, tmp_path):
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path))


def key_of(check_fn, impl, **kwargs):
    with pytest.raises(check.CheckFailed) as info:
        check_fn(impl, **kwargs)
    return info.value.mistake_key


def _wrong(module, name):
    return next(
        i
        for v in module.WRONG.values()
        for i in (v if isinstance(v, list) else [v])
        if getattr(i, "__name__", None) == name
    )


def _without(monkeypatch, exercise: str, key: str) -> None:
    """The exercise's catalogue as it was: the new mistake taken out."""
    ex = check.EXERCISES[exercise]
    monkeypatch.setattr(ex, "mistakes", [m for m in ex.mistakes if m.key != key])


# ---------------------------------------------------------------------------------------------
# The held-out implementations, now named (visible and thorough).

HELD_OUT = [
    ("RNN", lesson01, "RNNInPlaceH0", "state-aliased"),
    ("sequential_steps", lesson01, "steps_log_attention", "attention-log"),
    ("sinusoidal_positional_encoding", lesson04, "sin_int_div_exponent", "integer-exponent"),
    (
        "sinusoidal_positional_encoding",
        lesson04,
        "sin_odd_exponent_d_minus_one",
        "odd-d_model-rounded-down",
    ),
    ("rotary_embedding", lesson04, "rope_int_div_exponent", "integer-exponent"),
    ("LayerNorm", h05, "LayerNormStdSquaredEps", "eps-root-outside"),
    ("FeedForward", h05, "FeedForwardReluLast", "relu-at-end"),
    ("EncoderBlock", h05, "EncoderBlockPreNormContextUnnormed", "pre-norm-keys-unnormed"),
    ("greedy_decode", lesson07, "greedy_decode_max_values", "max-values"),
    ("greedy_decode", lesson07, "greedy_decode_last_token_only", "done-from-last-token"),
    # named by a structural check or a generic diagnoser (tested apart below)
    ("FeedForward", h05, "FeedForwardFunctionalDropout", "dropout-in-eval-mode"),
    ("FeedForward", h05, "FeedForwardOtherNames", "params-renamed"),
    ("causal_mask", h06, "causal_mask_cached_64", "fixed-size-table"),
]
CATALOGUE_ONLY = HELD_OUT[:10]


@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
@pytest.mark.parametrize("name, module, impl, key", HELD_OUT, ids=[h[2] for h in HELD_OUT])
def test_the_held_out_implementation_is_named(name, module, impl, key, thorough):
    assert key_of(getattr(check, name), _wrong(module, impl), thorough=thorough) == key


@pytest.mark.parametrize(
    "impl, key",
    [
        ("alpha_22_uniform_three", "uniform-three-keys"),
        ("alpha_22_uniform_four", "uniform-four-keys"),
    ],
)
def test_the_held_out_alpha_22_answers_are_named(impl, key):
    answer = next(a for a in h06.WRONG_ALPHAS if a.__name__ == impl)
    assert key_of(check.alpha_22, answer) == key


@pytest.mark.parametrize(
    "name, module, impl, key", CATALOGUE_ONLY, ids=[h[2] for h in CATALOGUE_ONLY]
)
def test_mutant_catalogue_without_the_new_mistake_names_nothing(
    monkeypatch, name, module, impl, key
):
    _without(monkeypatch, name, key)
    monkeypatch.setattr(lesson01_checks, "_attention_grows_as_log", lambda *args: False)
    assert key_of(getattr(check, name), _wrong(module, impl)) is None


@pytest.mark.parametrize("value", [1 / 3, 0.25])
def test_mutant_alpha_22_without_the_uniform_answers_names_nothing(monkeypatch, value):
    kept = [(v, m) for v, m in lesson06._ALPHA_22_MISTAKES if not m.key.startswith("uniform")]
    monkeypatch.setattr(lesson06, "_ALPHA_22_MISTAKES", kept)
    assert key_of(check.alpha_22, value) is None


# ---------------------------------------------------------------------------------------------
# Another student's version of each kind.


class _RNNSliceAssign(lesson01.RNNRight):
    """The state's entries overwritten with h[:] = ..., after h was appended."""

    def forward(self, x, h0=None):
        h = torch.zeros(x.shape[0], self.d_hidden, dtype=x.dtype) if h0 is None else h0.clone()
        outputs = []
        with torch.no_grad():
            for x_t in x.unbind(1):
                h[:] = torch.tanh(self.w_xh(x_t) + self.w_hh(h))
                outputs.append(h)
        return torch.stack(outputs, dim=1), h


def _steps_bit_length(kind, n, kernel_size=3):
    """Attention as a tournament of pairs: (n - 1).bit_length() rounds."""
    if kind not in ("rnn", "conv", "attention"):
        raise ValueError(kind)
    if kind == "attention":
        return max(1, (n - 1).bit_length())
    return n if kind == "rnn" else max(1, -(-(n - 1) // (kernel_size - 1)))


def _pe_floor_exponent(n_positions, d_model):
    """k from an integer arange, 2 * k // d_model: the exponent floors to 0."""
    k = torch.arange((d_model + 1) // 2)
    omega = 1.0 / 10000.0 ** (2 * k // d_model)
    angles = torch.arange(n_positions)[:, None] * omega
    pe = torch.zeros(n_positions, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)[:, : d_model // 2]
    return pe


def _pe_even_part(n_positions, d_model):
    """The exponent over d_model // 2 * 2, the even part of d_model."""
    d = d_model // 2 * 2
    omega = torch.exp(-torch.arange(0, d_model, 2, dtype=torch.float64) * math.log(10000.0) / d)
    angles = torch.arange(n_positions, dtype=torch.float64)[:, None] * omega
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)[:, : d_model // 2]
    return pe.float()


def _rope_floor_exponent(x, positions=None):
    L, d = x.shape[-2], x.shape[-1]
    t = torch.arange(L) if positions is None else positions
    theta = t[:, None].to(x.dtype) / 10000.0 ** (torch.arange(d // 2) * 2 // d).to(x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    cos, sin = theta.cos(), theta.sin()
    out = torch.empty_like(x)
    out[..., 0::2] = x_even * cos - x_odd * sin
    out[..., 1::2] = x_even * sin + x_odd * cos
    return out


class _LayerNormMathSqrtEps(h05.LayerNormRight):
    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        std = centred.pow(2).mean(-1, keepdim=True).sqrt()
        return self.weight * centred / (std + math.sqrt(self.eps)) + self.bias


class _FFNReluOutside(h05.FeedForwardRight):
    def forward(self, x):
        return F.relu(self.w_2(self.w_1(x)))


class _FFNDropoutP(h05.FeedForwardRight):
    """F.dropout(h, p=0.2) in the forward: training defaults to True."""

    def forward(self, x):
        return self.w_2(F.dropout(F.relu(self.w_1(x)), p=0.2))


class _FFNSequential(nn.Module):
    """The layers in an nn.Sequential: net.0 and net.2 where w_1 and w_2 belong."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))

    def forward(self, x):
        return self.net(x)


class _BlockKeysFromInput(h05.EncoderBlockRight):
    def forward(self, x, mask=None):
        if not self.norm_first:
            return super().forward(x, mask=mask)
        h = self.norm1(x)
        x = x + self.self_attn(h, context=x, mask=mask)
        return x + self.ffn(self.norm2(x))


_TABLE_1024 = torch.ones(1024, 1024, dtype=torch.bool).tril()


def _causal_from_1024(n):
    """A registered-buffer style table of 1024: passes the visible sizes, not the thorough 1100."""
    return _TABLE_1024[:n, :n].clone()


@torch.no_grad()
def _greedy_torch_max(model, src, bos_id, eos_id, max_len):
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)
    finished = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_len):
        best, _ = torch.max(model.decode(ys, memory, src_mask)[:, -1], dim=-1)
        nxt = best.long().masked_fill(finished, model.pad_id)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        finished |= nxt == eos_id
        if finished.all():
            break
    return ys


@torch.no_grad()
def _greedy_eq_last(model, src, bos_id, eos_id, max_len):
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(ys[:, -1].eq(eos_id), model.pad_id, nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        if ys.eq(eos_id).any(dim=1).all():
            break
    return ys


OTHER_VERSIONS = [
    ("RNN", _RNNSliceAssign, {}, "state-aliased"),
    ("sequential_steps", _steps_bit_length, {}, "attention-log"),
    ("sinusoidal_positional_encoding", _pe_floor_exponent, {}, "integer-exponent"),
    ("sinusoidal_positional_encoding", _pe_even_part, {}, "odd-d_model-rounded-down"),
    ("rotary_embedding", _rope_floor_exponent, {}, "integer-exponent"),
    ("LayerNorm", _LayerNormMathSqrtEps, {}, "eps-root-outside"),
    ("FeedForward", _FFNReluOutside, {}, "relu-at-end"),
    ("FeedForward", _FFNDropoutP, {}, "dropout-in-eval-mode"),
    ("FeedForward", _FFNSequential, {}, "params-renamed"),
    ("EncoderBlock", _BlockKeysFromInput, {}, "pre-norm-keys-unnormed"),
    ("causal_mask", _causal_from_1024, {"thorough": True}, "fixed-size-table"),
    ("greedy_decode", _greedy_torch_max, {}, "max-values"),
    ("greedy_decode", _greedy_eq_last, {}, "done-from-last-token"),
]


@pytest.mark.parametrize(
    "name, impl, kwargs, key", OTHER_VERSIONS, ids=[o[1].__name__ for o in OTHER_VERSIONS]
)
def test_another_version_of_the_kind_is_named(name, impl, kwargs, key):
    assert key_of(getattr(check, name), impl, **kwargs) == key


def _steps_floor_log(kind, n, kernel_size=3):
    """Attention as int(math.log2(n)): 3 for n = 10, not the catalogue mutant's 4."""
    if kind == "attention":
        return max(1, int(math.log2(n)))
    return _steps_bit_length(kind, n, kernel_size)


def test_a_floored_log_is_named_as_the_tree_too():
    assert key_of(check.sequential_steps, _steps_floor_log) == "attention-log"


def test_mutant_without_the_log_test_names_a_floored_log_nothing(monkeypatch):
    monkeypatch.setattr(lesson01_checks, "_attention_grows_as_log", lambda *args: False)
    assert key_of(check.sequential_steps, _steps_floor_log) is None


@pytest.mark.parametrize("value", [Fraction(1, 4), 0.3333])
def test_other_uniform_answers_are_named(value):
    assert key_of(check.alpha_22, value).startswith("uniform-")


# ---------------------------------------------------------------------------------------------
# causal_mask: a size past 64 (visible) and past 1024 (thorough); a fixed table named by kind.


def _old_causal_cases(thorough):
    sizes = [3, 5, 1] if not thorough else [2, 3, 4, 5, 7, 8, 16, 31, 64, 0, 1]
    return [answer_drivers.Call((), {"n": n}, label=f"causal_mask({n})") for n in sizes]


@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_mutant_causal_mask_check_without_the_long_sizes_passes_a_64_table(monkeypatch, thorough):
    monkeypatch.setattr(check.EXERCISES["causal_mask"].driver, "_cases", _old_causal_cases)
    assert check.causal_mask(_wrong(h06, "causal_mask_cached_64"), thorough=thorough) is None


def test_a_1024_table_passes_the_visible_check_and_fails_the_thorough_one():
    assert check.causal_mask(_causal_from_1024) is None
    assert key_of(check.causal_mask, _causal_from_1024, thorough=True) == "fixed-size-table"


def test_mutant_without_the_fixed_table_diagnoser_names_only_the_catalogued_size(monkeypatch):
    monkeypatch.setattr(lesson06, "_same_size_past", lambda *args: None)
    assert key_of(check.causal_mask, _causal_from_1024, thorough=True) is None
    # the 64 table is the catalogue's own mutant, named without the diagnoser
    assert key_of(check.causal_mask, _wrong(h06, "causal_mask_cached_64")) == "fixed-size-table"


def test_a_mask_one_short_is_not_a_fixed_table():
    def one_short(n):
        return (
            torch.ones(n - 1, n - 1, dtype=torch.bool).tril() if n > 1 else torch.ones(1, 1).bool()
        )

    assert key_of(check.causal_mask, one_short) != "fixed-size-table"


# ---------------------------------------------------------------------------------------------
# FeedForward: randomness in eval mode, tested once the outputs differ unnamed.


def test_mutant_ffn_without_the_eval_mode_test_names_nothing(monkeypatch):
    monkeypatch.setattr(lesson05, "_same_in_eval_mode", lambda *args: None)
    assert key_of(check.FeedForward, _wrong(h05, "FeedForwardFunctionalDropout")) is None


def test_eval_mode_test_keeps_the_global_random_state():
    ex = check.EXERCISES["FeedForward"]
    case, mistake = lesson05._ffn_cases(False)[1], ex.mistake("dropout-in-eval-mode")
    torch.manual_seed(0)
    state = torch.get_rng_state()
    with pytest.raises(check.CheckFailed):
        lesson05._same_in_eval_mode(ex, _FFNDropoutP, case, mistake)
    assert torch.equal(torch.get_rng_state(), state)


def test_an_unnamed_deterministic_ffn_is_not_called_random():
    class Doubled(h05.FeedForwardRight):
        def forward(self, x):
            return 2 * self.w_2(torch.relu(self.w_1(x))) + 0.5

    assert key_of(check.FeedForward, Doubled) != "dropout-in-eval-mode"


# ---------------------------------------------------------------------------------------------
# Renamed layers: a generic diagnoser of every module check.


def test_mutant_without_the_renamed_layers_diagnoser_names_nothing(monkeypatch):
    monkeypatch.setattr(parameters, "_renamed_layers", lambda *args: None)
    assert key_of(check.FeedForward, _wrong(h05, "FeedForwardOtherNames")) is None


def test_renamed_layers_are_named_in_another_exercise():
    class RNNOtherNames(nn.Module):
        def __init__(self, d_in, d_hidden):
            super().__init__()
            self.d_hidden = d_hidden
            self.input_layer = nn.Linear(d_in, d_hidden)
            self.hidden_layer = nn.Linear(d_hidden, d_hidden)

        def forward(self, x, h0=None):
            h = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0
            outs = []
            for t in range(x.shape[1]):
                h = torch.tanh(self.input_layer(x[:, t]) + self.hidden_layer(h))
                outs.append(h)
            return torch.stack(outs, 1), h

    with pytest.raises(check.CheckFailed) as info:
        check.RNN(RNNOtherNames)
    assert info.value.mistake_key == "params-renamed"
    assert "`input_layer` where `w_xh` belongs" in info.value.mistake


def test_renamed_layers_need_the_same_shapes_and_parts():
    reference = nn.ModuleDict({"w_1": nn.Linear(4, 8), "w_2": nn.Linear(8, 4)})
    same = nn.ModuleDict({"a": nn.Linear(4, 8), "b": nn.Linear(8, 4)})
    other_shape = nn.ModuleDict({"a": nn.Linear(4, 6), "b": nn.Linear(6, 4)})
    no_bias = nn.ModuleDict({"a": nn.Linear(4, 8, bias=False), "b": nn.Linear(8, 4)})

    def named(student):
        theirs, mine = set(reference.state_dict()), set(student.state_dict())
        return parameters.name_parameters(
            student, sorted(theirs - mine), sorted(mine - theirs), reference
        )

    assert named(same)[0] == "params-renamed"
    assert named(other_shape) is None
    assert named(no_bias) is None
    # without the reference (the old call), nothing is named
    assert parameters.name_parameters(same, ["w_1.weight"], ["a.weight"]) is None
