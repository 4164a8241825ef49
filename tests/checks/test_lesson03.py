"""Lesson 03 checks: split_heads, merge_heads, MultiHeadAttention; the practice_thinking question.

Correct implementations written the way a student would pass; wrong ones beyond the catalogue
fail; forbidden built-ins and the reference itself are refused.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_lab import check, multihead
from transformer_lab.check import CheckFailed, ImplementThisYourself, lesson03_thinking


def good_split(x, n_heads):
    B, L, d_model = x.shape
    d_k = d_model // n_heads
    return x.view(B, L, n_heads, d_k).permute(0, 2, 1, 3)


def good_merge(x):
    B, h, L, d_k = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(B, L, h * d_k)


def good_sdpa(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


class GoodMHA(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, context=None, mask=None):
        if context is None:
            context = x
        q = good_split(self.w_q(x), self.n_heads)
        k = good_split(self.w_k(context), self.n_heads)
        v = good_split(self.w_v(context), self.n_heads)
        out, _ = good_sdpa(q, k, v, mask)
        return self.w_o(good_merge(out))


class LoopMHA(GoodMHA):
    """A per-head loop over slices of the projections: also correct."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q, k, v = self.w_q(x), self.w_k(context), self.w_v(context)
        d_k = q.shape[-1] // self.n_heads
        heads = []
        for i in range(self.n_heads):
            part = slice(i * d_k, (i + 1) * d_k)
            m = None if mask is None else (mask if mask.dim() < 4 else mask[:, i % mask.shape[1]])
            heads.append(good_sdpa(q[..., part], k[..., part], v[..., part], m)[0])
        return self.w_o(torch.cat(heads, dim=-1))


@pytest.mark.parametrize("thorough", [False, True])
def test_correct_implementations_pass(thorough):
    assert check.split_heads(good_split, thorough=thorough) is None
    assert check.merge_heads(good_merge, thorough=thorough) is None
    assert check.MultiHeadAttention(GoodMHA, thorough=thorough) is None


def test_per_head_loop_passes():
    assert check.MultiHeadAttention(LoopMHA, thorough=True) is None


def test_visible_check_is_fast():
    import time

    start = time.perf_counter()
    check.split_heads(good_split)
    check.merge_heads(good_merge)
    check.MultiHeadAttention(GoodMHA)
    assert time.perf_counter() - start < 3.0


# ---------------------------------------------------------------------------------------------
# Wrong implementations beyond the catalogue.


def split_by_chunk(x, n_heads):  # correct too: chunk gives contiguous feature blocks
    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)


def split_reversed_heads(x, n_heads):
    return good_split(x, n_heads).flip(1)


def split_detached(x, n_heads):
    return good_split(x, n_heads).detach()


def merge_reversed(x):
    return good_merge(x.flip(1))


def merge_swapped_last_axes(x):
    B, h, L, d_k = x.shape
    return x.transpose(2, 3).reshape(B, L, h * d_k)


class MHASharedKV(GoodMHA):
    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = good_split(self.w_q(x), self.n_heads)
        k = good_split(self.w_k(context), self.n_heads)
        out, _ = good_sdpa(q, k, k, mask)
        return self.w_o(good_merge(out))


class MHAPostScale(GoodMHA):
    """Divides the output, not the scores, by sqrt(d_k)."""

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = good_split(self.w_q(x), self.n_heads)
        k = good_split(self.w_k(context), self.n_heads)
        v = good_split(self.w_v(context), self.n_heads)
        w = torch.softmax(q @ k.transpose(-2, -1), -1)
        if mask is not None:
            w = w.masked_fill(~mask, 0.0)
        return self.w_o(good_merge(w @ v))


class MHAExtraLayer(GoodMHA):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__(d_model, n_heads, bias)
        self.norm = nn.LayerNorm(d_model)


def test_split_wrong_variants_fail():
    assert check.split_heads(split_by_chunk, thorough=True) is None
    for wrong in (split_reversed_heads, split_detached):
        with pytest.raises(CheckFailed):
            check.split_heads(wrong, thorough=True)


def test_merge_wrong_variants_fail():
    with pytest.raises(CheckFailed, match="differs"):
        check.merge_heads(merge_reversed, thorough=True)
    with pytest.raises(CheckFailed):
        check.merge_heads(merge_swapped_last_axes, thorough=True)


@pytest.mark.parametrize("wrong", [MHASharedKV, MHAPostScale])
def test_mha_wrong_variants_fail(wrong):
    with pytest.raises(CheckFailed):
        check.MultiHeadAttention(wrong, thorough=True)


def test_mha_parameter_names_must_match():
    with pytest.raises(CheckFailed, match="unexpected"):
        check.MultiHeadAttention(MHAExtraLayer)


def test_catalogue_names_the_mistake():
    with pytest.raises(CheckFailed, match="transpose") as info:
        check.split_heads(lambda x, n_heads: x.reshape(x.shape[0], n_heads, x.shape[1], -1))
    assert info.value.mistake == check.EXERCISES["split_heads"].mistake("no-transpose").sentence
    with pytest.raises(CheckFailed, match="W\\^O") as info:

        class NoWo(GoodMHA):
            def forward(self, x, context=None, mask=None):
                q = good_split(self.w_q(x), self.n_heads)
                k = good_split(self.w_k(x), self.n_heads)
                v = good_split(self.w_v(x), self.n_heads)
                return good_merge(good_sdpa(q, k, v, mask)[0])

        check.MultiHeadAttention(NoWo)
    assert info.value.mistake == check.EXERCISES["MultiHeadAttention"].mistake("no-w_o").sentence


# ---------------------------------------------------------------------------------------------
# Forbidden built-ins and references.


def test_reference_split_is_refused():
    with pytest.raises(ImplementThisYourself):
        check.split_heads(multihead.split_heads)
    with pytest.raises(ImplementThisYourself):
        check.split_heads(lambda x, n_heads: multihead.split_heads(x, n_heads))
    with pytest.raises(ImplementThisYourself):
        check.merge_heads(lambda x: multihead.merge_heads(x))


class MHATorchSDPA(GoodMHA):
    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        q = good_split(self.w_q(x), self.n_heads)
        k = good_split(self.w_k(context), self.n_heads)
        v = good_split(self.w_v(context), self.n_heads)
        return self.w_o(good_merge(F.scaled_dot_product_attention(q, k, v, attn_mask=mask)))


class MHAWrapsReference(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.inner = multihead.MultiHeadAttention(d_model, n_heads, bias)

    def forward(self, x, context=None, mask=None):
        return self.inner(x, context, mask)


class MHAWrapsTorch(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.inner = nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True)

    def forward(self, x, context=None, mask=None):
        context = x if context is None else context
        return self.inner(x, context, context)[0]


@pytest.mark.parametrize("forbidden", [MHATorchSDPA, MHAWrapsReference, MHAWrapsTorch])
def test_forbidden_mha_is_refused(forbidden):
    with pytest.raises(ImplementThisYourself):
        check.MultiHeadAttention(forbidden)


def test_reference_attention_function_is_allowed():
    """The notebook's MultiHeadAttention may build on lesson 02's (reference) attention."""
    from transformer_lab.attention import scaled_dot_product_attention

    class OnReference(GoodMHA):
        def forward(self, x, context=None, mask=None):
            context = x if context is None else context
            q = good_split(self.w_q(x), self.n_heads)
            k = good_split(self.w_k(context), self.n_heads)
            v = good_split(self.w_v(context), self.n_heads)
            return self.w_o(good_merge(scaled_dot_product_attention(q, k, v, mask)[0]))

    assert check.MultiHeadAttention(OnReference, thorough=True) is None
    assert torch.nn.functional.scaled_dot_product_attention is F.scaled_dot_product_attention


def test_visible_check_applies_a_mask():
    """The task states that a causal or padding mask applies to every head: visible too."""
    ignored = check.EXERCISES["MultiHeadAttention"].mistake("mask-ignored")
    with pytest.raises(check.CheckFailed) as info:
        check.MultiHeadAttention(ignored.impl)
    assert info.value.mistake == ignored.sentence
    assert "causal mask" in info.value.case


# ---------------------------------------------------------------------------------------------
# Practice: the Thinking Machines weights (check/lesson03_thinking.py).

RIGHT_THINKING = {"weights": (0.88, 0.12), "answer": "C"}


def _thinking_failure(value) -> CheckFailed:
    with pytest.raises(CheckFailed) as info:
        check.practice_thinking(value)
    return info.value


def test_the_thinking_weights_are_lecture_02s():
    """softmax(112 / 8, 96 / 8), as lecture 02 computes it; they round to the deck's (C)."""
    right = lesson03_thinking.thinking_weights()
    assert right == pytest.approx(torch.softmax(torch.tensor([14.0, 12.0]), 0).tolist(), abs=1e-6)
    assert [round(w, 2) for w in right] == list(lesson03_thinking.OPTIONS["C"])


@pytest.mark.parametrize(
    "weights",
    [(0.88, 0.12), [0.881, 0.119], torch.softmax(torch.tensor([14.0, 12.0]), 0)],
    ids=["rounded", "list", "tensor"],
)
def test_right_thinking_answers_pass(weights, capsys):
    for thorough in (False, True):
        assert check.practice_thinking({"weights": weights, "answer": "(c)"}, thorough) is None
    assert "✓ practice_thinking" in capsys.readouterr().out


def test_whole_numbers_are_weights_too():
    failure = _thinking_failure({"weights": (1, 0), "answer": "C"})
    assert failure.mistake == lesson03_thinking._weight_mistakes()["no-scale"].sentence


THINKING_SLIPS = ["no-scale", "scaled-by-d_k", "no-softmax", "swapped", "uniform"]


@pytest.mark.parametrize("key", THINKING_SLIPS)
def test_each_wrong_pair_of_weights_is_named(key):
    """Each slip's weights, computed and rounded to two decimals as a student writes them."""
    weights = [round(w, 2) for w in lesson03_thinking.thinking_weights(how=key)]
    failure = _thinking_failure({"weights": weights, "answer": "C"})
    assert failure.mistake == lesson03_thinking._weight_mistakes()[key].sentence


def test_the_right_weights_in_another_form_are_named():
    right = lesson03_thinking.thinking_weights()
    percent = _thinking_failure({"weights": [round(100 * w) for w in right], "answer": "C"})
    assert percent.mistake_key == "percent"
    rounded = _thinking_failure({"weights": [round(w, 1) for w in right], "answer": "C"})
    assert rounded.mistake_key == "rounded"
    # near the right ones but not a rounding of them: not named "rounded" (the mutant would)
    near = _thinking_failure({"weights": [right[0] - 0.03, right[1] + 0.03], "answer": "C"})
    assert near.mistake_key != "rounded"


@pytest.mark.parametrize("letter", ["A", "B", "D"])
def test_each_wrong_letter_is_named_when_the_weights_are_right(letter):
    failure = _thinking_failure(dict(RIGHT_THINKING, answer=letter))
    assert failure.mistake == lesson03_thinking._letter_mistakes()[letter].sentence


def test_the_letter_alone_does_not_pass():
    """A check that read only the letter (the weakened check) would pass these."""
    for weights in [(0.86, 0.14), (0.5, 0.5), (0.12, 0.88)]:
        assert (
            "not the attention weights"
            in _thinking_failure({"weights": weights, "answer": "C"}).problem
        )
    assert _thinking_failure({"weights": (0.7, 0.3), "answer": "C"}).mistake is None


@pytest.mark.parametrize(
    "value,message",
    [
        ("C", "a dict"),
        ({"answer": "C"}, "a dict"),
        ({"weights": 0.88, "answer": "C"}, "two numbers"),
        ({"weights": (0.88, 0.12, 0.0), "answer": "C"}, "two numbers"),
        ({"weights": (True, False), "answer": "C"}, "two numbers"),
        ({"weights": (0.88, 0.12), "answer": "CD"}, "exactly one"),
    ],
)
def test_bad_forms_of_the_thinking_answer_say_what_to_write(value, message):
    assert message in str(_thinking_failure(value))


def test_the_thinking_answer_is_not_written_yet_in_one_line():
    with pytest.raises(check.NotWrittenYet, match="is not written yet"):
        check.practice_thinking(...)
