"""Models take their building blocks as `parts=` and have one fast/explicit switch.

- `Parts()` is the reference; every model (GPT, Transformer, BERT, BART, ViT) builds its blocks
  from the parts passed in, so a deliberately wrong part changes the output (while the reference
  parts reproduce Hugging Face, see test_gpt / test_bert / test_bart / test_vit).
- MultiHeadAttention and LayerNorm share one switch, `explicit`, default False (fused kernels);
  `set_explicit(model)` turns on the written-out formulas, which give the same numbers.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer_lab.multihead as multihead_mod
from transformer_lab import (
    BART,
    BERT,
    GPT,
    BARTConfig,
    BERTConfig,
    GPTConfig,
    Parts,
    Transformer,
    TransformerConfig,
    ViT,
    ViTConfig,
    set_explicit,
)
from transformer_lab.add_norm import EncoderBlock, FeedForward, LayerNorm
from transformer_lab.encoder_decoder import DecoderBlock
from transformer_lab.gpt import GPTBlock
from transformer_lab.multihead import MultiHeadAttention


class WrongNorm(LayerNorm):
    """LayerNorm with the unbiased variance: a plausible mistake, same parameters."""

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class NoScaleAttention(MultiHeadAttention):
    """Attention without the 1/sqrt(d_k) scale (a plausible mistake), same parameters."""

    def forward(self, x, context=None, mask=None, need_weights=False, cache=None):
        return super().forward(x * self.d_k**0.5, context, mask, need_weights, cache)


class LinearFeedForward(FeedForward):
    """Forgets the activation between the two layers."""

    def forward(self, x):
        return self.w_2(self.w_1(x))


def _randomise(model: nn.Module) -> nn.Module:
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = 0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype)
            p.copy_(1 + noise if p.dim() == 1 and name.endswith("weight") else noise)
    return model.eval()


def _gpt(parts=None):
    return GPT(
        GPTConfig(vocab_size=23, n_positions=12, d_model=16, n_heads=4, n_layers=2), parts=parts
    )


def _transformer(parts=None, norm_first=False):
    return Transformer(TransformerConfig(11, 13, d_model=16, n_heads=4, n_layers=2, d_ff=32, dropout=0.0, norm_first=norm_first), parts=parts)  # fmt: skip


def _bert(parts=None):
    return BERT(
        BERTConfig(30, d_model=16, n_heads=4, n_layers=2, d_ff=32, max_position=16), parts=parts
    )


def _bart(parts=None):
    return BART(BARTConfig(30, 16, 4, 1, 1, 32, max_position=16), parts=parts)


def _vit(parts=None):
    return ViT(ViTConfig(8, 4, 3, 5, d_model=16, n_heads=4, n_layers=2, d_ff=32), parts=parts)


def _inputs(name):
    g = torch.Generator().manual_seed(1)
    if name == "gpt":
        return (torch.randint(0, 23, (2, 9), generator=g),)
    if name in ("transformer",):
        return torch.randint(1, 11, (2, 7), generator=g), torch.randint(1, 13, (2, 5), generator=g)
    if name == "bert":
        return (torch.randint(1, 30, (2, 9), generator=g),)
    if name == "bart":
        return torch.randint(3, 30, (2, 9), generator=g), torch.randint(3, 30, (2, 6), generator=g)
    return (torch.randn(2, 3, 8, 8, generator=g),)


MODELS = {
    "gpt": _gpt,
    "transformer": _transformer,
    "pre-norm transformer": functools.partial(_transformer, norm_first=True),
    "bert": _bert,
    "bart": _bart,
    "vit": _vit,
}


def _run(name, parts=None, reference=None):
    torch.manual_seed(0)
    model = MODELS[name](parts)
    if reference is not None:
        model.load_state_dict(reference.state_dict())
    else:
        _randomise(model)
    with torch.no_grad():
        return model, model(*_inputs(name.replace("pre-norm ", "")))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_default_parts_are_the_reference(name):
    model, out = _run(name)
    _, again = _run(name, Parts(), model)
    assert torch.equal(out, again)
    kinds = {type(m) for m in model.modules()}
    assert MultiHeadAttention in kinds and LayerNorm in kinds and FeedForward in kinds


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize(
    "part, wrong",
    [("norm", WrongNorm), ("attention", NoScaleAttention), ("ffn", LinearFeedForward)],
    ids=["norm", "attention", "ffn"],
)
def test_a_wrong_part_passed_in_changes_the_output(name, part, wrong):
    """The parts passed in are really used: with one deliberately wrong part (same parameters,
    the reference's weights) the output changes, and every instance of that kind is the wrong one."""
    reference, expected = _run(name)
    model, out = _run(name, Parts(**{part: wrong}), reference)
    assert not torch.allclose(out, expected, atol=1e-4)
    base = {"norm": LayerNorm, "attention": MultiHeadAttention, "ffn": FeedForward}[part]
    assert all(type(m) is wrong for m in model.modules() if isinstance(m, base))


class MarkedEncoderBlock(EncoderBlock):
    pass


class MarkedDecoderBlock(DecoderBlock):
    pass


@pytest.mark.parametrize("name", ["transformer", "bert", "bart", "vit"])
def test_the_blocks_passed_in_are_the_models_blocks(name):
    parts = Parts(encoder_block=MarkedEncoderBlock, decoder_block=MarkedDecoderBlock)
    reference, expected = _run(name)
    model, out = _run(name, parts, reference)
    torch.testing.assert_close(out, expected, atol=0, rtol=0)  # same computation
    blocks = {type(m) for m in model.modules() if isinstance(m, (EncoderBlock, DecoderBlock))}
    assert EncoderBlock not in blocks and DecoderBlock not in blocks
    assert MarkedEncoderBlock in blocks


def test_gpt_is_made_of_gpt_blocks_with_the_parts_passed_in():
    model = _gpt(Parts(norm=WrongNorm))
    assert all(type(b) is GPTBlock for b in model.blocks)
    assert type(model.ln_f) is WrongNorm and type(model.blocks[1].norm2) is WrongNorm
    # the same state_dict keys as before the rename (and as from_hf writes)
    assert {
        "blocks.0.self_attn.w_q.weight",
        "blocks.1.norm2.bias",
        "blocks.0.ffn.w_2.weight",
    } <= set(model.state_dict())


def test_report_is_called_with_every_model_built():
    seen = []
    parts = Parts(report=seen.append)
    for build in MODELS.values():
        build(parts)
    assert [type(m).__name__ for m in seen] == [
        "GPT", "Transformer", "Transformer", "BERT", "BART", "ViT"
    ]  # fmt: skip
    assert parts == Parts()  # the report does not make the parts different


# ---------------------------------------------------------------------------------------------
# One fast/explicit switch


def test_one_switch_with_one_default():
    assert MultiHeadAttention.explicit is False and LayerNorm.explicit is False
    model = set_explicit(_gpt())
    switched = [m for m in model.modules() if isinstance(m, (MultiHeadAttention, LayerNorm))]
    assert len(switched) == 2 * 3 + 1 and all(m.explicit for m in switched)
    assert not set_explicit(model, False).ln_f.explicit


@pytest.mark.parametrize("name", sorted(MODELS))
def test_fast_and_explicit_paths_give_the_same_model(name):
    torch.manual_seed(0)
    model = _randomise(MODELS[name]().double())
    x = [t.double() if t.is_floating_point() else t for t in _inputs(name.replace("pre-norm ", ""))]
    with torch.no_grad():
        fast = model(*x)
        explicit = set_explicit(model)(*x)
    torch.testing.assert_close(fast, explicit, atol=1e-12, rtol=1e-12)


def test_the_switch_routes_both_parts(monkeypatch):
    """Mutant kernels: a wrong fused LayerNorm or fused attention changes the fast path only."""
    torch.manual_seed(0)
    model = _randomise(_gpt())
    idx = _inputs("gpt")[0]
    with torch.no_grad():
        fast = model(idx)
        monkeypatch.setattr(F, "layer_norm", lambda x, *a, **k: x)
        assert not torch.allclose(model(idx), fast, atol=1e-3)
        monkeypatch.undo()
        monkeypatch.setattr(multihead_mod, "fused_attention", lambda q, k, v, *a, **kw: v)
        assert not torch.allclose(model(idx), fast, atol=1e-3)
        set_explicit(model)  # the written-out paths use neither kernel
        torch.testing.assert_close(model(idx), fast, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("parts, matches", [(Parts(), True), (Parts(norm=WrongNorm), False)])
def test_hugging_face_parity_holds_for_the_reference_parts_only(parts, matches):
    """`from_hf(..., parts=)` loads the weights into the parts passed in: the reference parts
    reproduce GPT-2's logits, a wrong LayerNorm (the mutant) does not."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=40, n_positions=16, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    hf = _randomise(transformers.GPT2LMHeadModel(config))
    ours = GPT.from_hf(hf, parts=parts)
    assert type(ours.ln_f) is parts.norm
    idx = torch.randint(0, 40, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        close = torch.allclose(ours(idx), hf(idx).logits, atol=1e-5, rtol=1e-5)
    assert close is matches
