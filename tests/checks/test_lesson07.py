"""Lesson 07 checks: DecoderBlock, greedy_decode, label_smoothed_loss, length_normalised_score.

Correct implementations written the way a student would pass; catalogued mistakes are named (the
generic catalogue test lives in test_check.py); further wrong variants are caught; forbidden
built-ins are refused while the student's code runs.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from transformer_lab import check
from transformer_lab.add_norm import FeedForward, LayerNorm
from transformer_lab.check import lesson07
from transformer_lab.multihead import MultiHeadAttention

# ---------------------------------------------------------------------------------------------
# Correct student implementations.


class GoodDecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, "relu", dropout)
        self.norm1, self.norm2, self.norm3 = (LayerNorm(d_model) for _ in range(3))

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, mask=self_mask)
            x = x + self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(x + self.ffn(x))


def good_greedy(model, src, bos_id, eos_id, max_len):
    """A loop over Python lists, calling the model's forward each step (no encode/decode)."""
    outputs = []
    for row in src:
        tokens = [bos_id]
        for _ in range(max_len):
            logits = model(row[None], torch.tensor([tokens], device=src.device))
            tokens.append(int(logits[0, -1].argmax()))
            if tokens[-1] == eos_id:
                break
        outputs.append(tokens)
    width = max(len(t) for t in outputs)
    padded = [t + [model.pad_id] * (width - len(t)) for t in outputs]
    return torch.tensor(padded, dtype=torch.long, device=src.device)


@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_good_decoder_block_passes(thorough, capsys):
    assert check.DecoderBlock(GoodDecoderBlock, thorough=thorough) is None
    assert "✓ DecoderBlock" in capsys.readouterr().out


@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_good_greedy_decode_passes(thorough, capsys):
    assert check.greedy_decode(good_greedy, thorough=thorough) is None
    assert "✓ greedy_decode" in capsys.readouterr().out


def test_good_implementations_are_saved(tmp_path):
    check.DecoderBlock(GoodDecoderBlock)
    check.greedy_decode(good_greedy)
    saved = (tmp_path / "pkg" / "transformer_lab_student" / "encoder_decoder.py").read_text()
    assert "class GoodDecoderBlock" in saved and "def good_greedy" in saved


# ---------------------------------------------------------------------------------------------
# The check cases exercise what the mistakes need.


def test_greedy_cases_have_sequences_that_end_early_and_late():
    """Some case must stop some (not all) sequences before max_len, else EOS bugs go unseen."""
    mixed = 0
    for spec in lesson07._greedy_grid(thorough=True):
        model = lesson07._random_model(
            spec["vocab"], spec["d_model"], spec["n_layers"], spec["norm_first"], spec["seed"]
        )
        g = torch.Generator().manual_seed(spec["seed"] + 1)
        src = torch.randint(3, spec["vocab"], (spec["B"], spec["L_s"]), generator=g)
        eos = lesson07._pick_eos(model, src, 1, spec["max_len"])
        out = lesson07._ed.greedy_decode(model, src, 1, eos, spec["max_len"])
        ended = (out == eos).any(1)
        mixed += bool(ended.any() and not ended.all())
    assert mixed >= 1


def test_greedy_check_does_not_depend_on_the_global_seed():
    torch.manual_seed(123)
    a = torch.rand(3)
    check.greedy_decode(good_greedy)
    torch.manual_seed(123)
    assert torch.equal(torch.rand(3), a)


# ---------------------------------------------------------------------------------------------
# Wrong variants beyond the catalogue.


class NoFfnResidualDecoder(GoodDecoderBlock):
    """Forgets the FFN's residual."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            return super().forward(x, memory, self_mask, memory_mask)
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(x + self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(self.ffn(x))


class CrossBeforeSelfDecoder(GoodDecoderBlock):
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        x = self.norm1(x + self.cross_attn(x, context=memory, mask=memory_mask))
        x = self.norm2(x + self.self_attn(x, mask=self_mask))
        return self.norm3(x + self.ffn(x))


class WrongNormOrderDecoder(GoodDecoderBlock):
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        self.norm1, self.norm3 = self.norm3, self.norm1
        try:
            return super().forward(x, memory, self_mask, memory_mask)
        finally:
            self.norm1, self.norm3 = self.norm3, self.norm1


class RenamedDecoder(GoodDecoderBlock):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.cross = self.cross_attn
        del self.cross_attn

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        raise AssertionError("never reached: the weights cannot be copied in")


@pytest.mark.parametrize(
    "wrong",
    [NoFfnResidualDecoder, CrossBeforeSelfDecoder, WrongNormOrderDecoder],
    ids=lambda c: c.__name__,
)
def test_other_wrong_decoder_blocks_are_caught(wrong):
    with pytest.raises(check.CheckFailed):
        check.DecoderBlock(wrong, thorough=True)


def test_wrong_submodule_names_are_reported():
    with pytest.raises(check.CheckFailed, match="cross_attn.w_q.weight"):
        check.DecoderBlock(RenamedDecoder)


def _greedy_sampling(model, src, bos_id, eos_id, max_len):
    g = torch.Generator().manual_seed(0)
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_len):
        probs = model.decode(ys, memory, src_mask)[:, -1].softmax(-1)
        nxt = torch.multinomial(probs, 1, generator=g)[:, 0].masked_fill(done, model.pad_id)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


def _greedy_without_bos_in_output(model, src, bos_id, eos_id, max_len):
    return lesson07._greedy_pad_not_stop.__wrapped__(model, src, bos_id, eos_id, max_len)[:, 1:]


def _greedy_float_tokens(model, src, bos_id, eos_id, max_len):
    return good_greedy(model, src, bos_id, eos_id, max_len).float()


def _greedy_one_step_short(model, src, bos_id, eos_id, max_len):
    return good_greedy(model, src, bos_id, eos_id, max_len - 1)


@pytest.mark.parametrize(
    "wrong,message",
    [
        (_greedy_sampling, "differs at position|shape"),
        (_greedy_without_bos_in_output, "shape"),
        (_greedy_float_tokens, "dtype"),
        (_greedy_one_step_short, "shape|differs"),
    ],
    ids=["sampling", "drops-bos", "float-tokens", "one-step-short"],
)
def test_other_wrong_greedy_decoders_are_caught(wrong, message):
    with pytest.raises(check.CheckFailed, match=message):
        check.greedy_decode(wrong, thorough=True)


# ---------------------------------------------------------------------------------------------
# Forbidden built-ins.


def test_decoder_block_may_not_wrap_the_reference():
    from transformer_lab.encoder_decoder import DecoderBlock as Reference

    class Wrapper(nn.Module):
        def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
            super().__init__()
            self.inner = Reference(d_model, n_heads, d_ff, dropout, norm_first)

        def forward(self, x, memory, self_mask=None, memory_mask=None):
            return self.inner(x, memory, self_mask, memory_mask)

    with pytest.raises(check.ImplementThisYourself):
        check.DecoderBlock(Wrapper)


def test_decoder_block_may_not_use_torch_decoder_layer():
    class TorchLayer(nn.Module):
        def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
            super().__init__()
            self.layer = nn.TransformerDecoderLayer(d_model, n_heads, d_ff, dropout)

        def forward(self, x, memory, self_mask=None, memory_mask=None):
            return self.layer(x, memory)

    with pytest.raises(check.ImplementThisYourself):
        check.DecoderBlock(TorchLayer)


def test_greedy_decode_may_not_call_the_reference():
    import transformer_lab
    from transformer_lab import seq2seq

    def via_reference(model, src, bos_id, eos_id, max_len):
        return transformer_lab.encoder_decoder.greedy_decode(model, src, bos_id, eos_id, max_len)

    def via_translate(model, src, bos_id, eos_id, max_len):
        return seq2seq.translate(model, None, [])

    for cheat in (via_reference, via_translate):
        with pytest.raises(check.ImplementThisYourself):
            check.greedy_decode(cheat)


def test_passing_the_reference_itself_is_refused():
    from transformer_lab.encoder_decoder import DecoderBlock, greedy_decode

    with pytest.raises(check.ImplementThisYourself):
        check.greedy_decode(greedy_decode)
    with pytest.raises(check.ImplementThisYourself):
        check.DecoderBlock(DecoderBlock)


def test_decoder_block_may_use_the_reference_attention_and_ffn(capsys):
    """The contract lets the student build on MultiHeadAttention, FeedForward and LayerNorm."""
    assert check.DecoderBlock(GoodDecoderBlock) is None
    assert "forbidden" not in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# Exercise 3: label_smoothed_loss.


def good_smoothing_explicit(logits, targets, eps=0.1, ignore_index=0):
    """Builds the target distribution q and takes its cross-entropy with log_softmax."""
    V = logits.shape[-1]
    keep = targets != ignore_index
    onehot = torch.nn.functional.one_hot(torch.where(keep, targets, 0), V).to(logits.dtype)
    q = (1 - eps) * onehot + eps / V
    per_position = -(q * torch.log_softmax(logits, dim=-1)).sum(-1)
    return (per_position * keep).sum() / keep.sum()


def good_smoothing_nll(logits, targets, eps=0.1, ignore_index=0):
    """(1 - eps) · F.nll_loss + eps · the mean over classes, flattened first."""
    log_p = logits.reshape(-1, logits.shape[-1]).log_softmax(-1)
    flat = targets.reshape(-1)
    keep = flat != ignore_index
    nll = torch.nn.functional.nll_loss(log_p, flat, ignore_index=ignore_index)
    return (1 - eps) * nll + eps * (-log_p.mean(-1)[keep]).mean()


@pytest.mark.parametrize("good", [good_smoothing_explicit, good_smoothing_nll])
@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_good_label_smoothed_loss_passes(good, thorough, capsys):
    assert check.label_smoothed_loss(good, thorough=thorough) is None
    assert "✓ label_smoothed_loss" in capsys.readouterr().out


def test_good_label_smoothed_loss_is_saved(tmp_path):
    check.label_smoothed_loss(good_smoothing_explicit)
    saved = (tmp_path / "pkg" / "transformer_lab_student" / "seq2seq.py").read_text()
    assert "def good_smoothing_explicit" in saved


SMOOTHING_KEYS = [m.key for m in check.EXERCISES["label_smoothed_loss"].mistakes]


@pytest.mark.parametrize("key", SMOOTHING_KEYS)
def test_every_smoothing_mistake_is_named_by_the_visible_check(key):
    mistake = check.EXERCISES["label_smoothed_loss"].mistake(key)
    with pytest.raises(check.CheckFailed) as info:
        check.label_smoothed_loss(mistake.impl)
    assert info.value.mistake == mistake.sentence


def _smoothing_with_probabilities(logits, targets, eps=0.1, ignore_index=0):
    """-sum q·p: the probabilities where their logs belong."""
    V = logits.shape[-1]
    keep = targets != ignore_index
    onehot = torch.nn.functional.one_hot(torch.where(keep, targets, 0), V).to(logits.dtype)
    q = (1 - eps) * onehot + eps / V
    return (-(q * logits.softmax(-1)).sum(-1) * keep).sum() / keep.sum()


def _smoothing_mean_of_row_means(logits, targets, eps=0.1, ignore_index=0):
    """The mean over sequences of each sequence's mean: rows with more padding weigh more."""
    if logits.dim() == 2:
        return good_smoothing_explicit(logits, targets, eps, ignore_index)
    rows = [
        good_smoothing_explicit(lg, t, eps, ignore_index)
        for lg, t in zip(logits, targets)
        if (t != ignore_index).any()
    ]
    return torch.stack(rows).mean()


def _smoothing_detached(logits, targets, eps=0.1, ignore_index=0):
    loss = good_smoothing_explicit(logits, targets, eps, ignore_index)
    return torch.tensor(loss.item(), dtype=logits.dtype, device=logits.device)


def _smoothing_fixed_eps(logits, targets, eps=0.1, ignore_index=0):
    """Ignores the eps argument (always the paper's 0.1)."""
    return good_smoothing_explicit(logits, targets, 0.1, ignore_index)


@pytest.mark.parametrize(
    "wrong,message",
    [
        (_smoothing_with_probabilities, "loss differs"),
        (_smoothing_mean_of_row_means, "loss differs"),
        (_smoothing_detached, "no gradient"),
        (_smoothing_fixed_eps, "loss differs"),
    ],
    ids=["probabilities", "mean-of-row-means", "detached", "fixed-eps"],
)
def test_other_wrong_label_smoothed_losses_are_caught(wrong, message):
    with pytest.raises(check.CheckFailed, match=message):
        check.label_smoothed_loss(wrong, thorough=True)


def test_label_smoothed_loss_may_not_call_cross_entropy_or_the_reference():
    from transformer_lab import seq2seq

    def via_pytorch(logits, targets, eps=0.1, ignore_index=0):
        return torch.nn.functional.cross_entropy(
            logits.flatten(0, -2), targets.flatten(), ignore_index=ignore_index, label_smoothing=eps
        )

    def via_module(logits, targets, eps=0.1, ignore_index=0):
        loss = nn.CrossEntropyLoss(ignore_index=ignore_index, label_smoothing=eps)
        return loss(logits.flatten(0, -2), targets.flatten())

    for cheat in (via_pytorch, via_module, seq2seq.label_smoothed_loss):
        with pytest.raises(check.ImplementThisYourself):
            check.label_smoothed_loss(cheat)


# ---------------------------------------------------------------------------------------------
# Exercise 4: length_normalised_score.


def good_length_score(log_probs, lengths, alpha):
    return log_probs / lengths.to(log_probs.dtype) ** alpha


def good_length_score_via_log(log_probs, lengths, alpha):
    """exp(-alpha log |Y|) as a factor: the same number, written another way."""
    return log_probs * torch.exp(-alpha * torch.log(lengths.to(log_probs.dtype)))


@pytest.mark.parametrize("good", [good_length_score, good_length_score_via_log])
@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_good_length_normalised_score_passes(good, thorough, capsys):
    assert check.length_normalised_score(good, thorough=thorough) is None
    assert "✓ length_normalised_score" in capsys.readouterr().out


LENGTH_KEYS = [m.key for m in check.EXERCISES["length_normalised_score"].mistakes]


@pytest.mark.parametrize("key", LENGTH_KEYS)
def test_every_length_mistake_is_named_by_the_visible_check(key):
    mistake = check.EXERCISES["length_normalised_score"].mistake(key)
    with pytest.raises(check.CheckFailed) as info:
        check.length_normalised_score(mistake.impl)
    assert info.value.mistake == mistake.sentence


def _length_detached(log_probs, lengths, alpha):
    return good_length_score(log_probs, lengths, alpha).detach()


def _length_fixed_alpha(log_probs, lengths, alpha):
    """Ignores the alpha argument (always the Transformer paper's 0.6)."""
    return good_length_score(log_probs, lengths, 0.6)


def _length_float32(log_probs, lengths, alpha):
    """The result in float32 whatever log_probs' dtype."""
    return good_length_score(log_probs.float(), lengths, alpha)


@pytest.mark.parametrize(
    "wrong,message",
    [
        (_length_detached, "gradient"),
        (_length_fixed_alpha, "scores differs"),
        (_length_float32, "dtype"),
    ],
    ids=["detached", "fixed-alpha", "float32"],
)
def test_other_wrong_length_scores_are_caught(wrong, message):
    with pytest.raises(check.CheckFailed, match=message):
        check.length_normalised_score(wrong, thorough=True)


def test_length_normalised_score_may_not_call_the_reference():
    from transformer_lab import encoder_decoder

    def wraps_it(log_probs, lengths, alpha):
        return encoder_decoder.length_normalised_score(log_probs, lengths, alpha)

    for cheat in (encoder_decoder.length_normalised_score, wraps_it):
        with pytest.raises(check.ImplementThisYourself):
            check.length_normalised_score(cheat)
