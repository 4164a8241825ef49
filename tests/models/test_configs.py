"""The config dataclasses: every model family is built as Model(cfg, parts=...), its from_hf and
to_hf_config go through the config, bad sizes are refused when the config is made, and the
defaults are those of a model trained from scratch (the exact GELU for GPT)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from transformer_lab import (
    BART,
    BERT,
    GPT,
    BARTConfig,
    BERTConfig,
    GPTConfig,
    Transformer,
    TransformerConfig,
    ViT,
    ViTConfig,
)
from transformer_lab import bart as bart_module
from transformer_lab import bert as bert_module

transformers = pytest.importorskip("transformers")

SMALL = {  # a small config of each family, away from the defaults where it matters
    GPT: GPTConfig(30, n_positions=16, d_model=24, n_heads=2, n_layers=3, d_ff=40, eps=1e-4),
    BERT: BERTConfig(30, d_model=24, n_heads=2, n_layers=3, d_ff=40, max_position=20, pad_id=3),
    BART: BARTConfig(
        30,
        d_model=24,
        n_heads=2,
        n_encoder_layers=1,
        n_decoder_layers=3,
        d_ff=40,
        max_position=20,
        scale_embedding=True,
    ),  # fmt: skip
    ViT: ViTConfig(
        image_size=12,
        patch_size=4,
        n_channels=3,
        n_classes=5,
        d_model=24,
        n_heads=2,
        n_layers=3,
        d_ff=40,
    ),  # fmt: skip
}


def test_each_model_is_built_from_its_config_and_keeps_it():
    for model_class, cfg in SMALL.items():
        model = model_class(cfg)
        assert model.cfg is cfg
    model = Transformer(TransformerConfig(11, 13, n_layers=3, norm_first=True))
    assert len(model.encoder) == len(model.decoder) == 3
    assert model.generator.out_features == 13


def test_sizes_reach_the_modules():
    gpt = GPT(SMALL[GPT])
    assert len(gpt.blocks) == 3 and gpt.blocks[0].ffn.w_1.out_features == 40
    assert gpt.wpe.num_embeddings == 16 and gpt.ln_f.eps == 1e-4
    bert = BERT(SMALL[BERT])
    assert bert.embeddings.word_embeddings.padding_idx == 3
    assert bert.embeddings.position_embeddings.num_embeddings == 20
    bart = BART(SMALL[BART])
    assert (len(bart.encoder), len(bart.decoder)) == (1, 3)
    assert bart.embed_scale == pytest.approx(24**0.5)
    vit = ViT(SMALL[ViT])
    assert vit.n_patches == 9 and vit.head.out_features == 5 and vit.patch_embed.in_features == 48


def test_gpt_defaults_are_a_model_trained_from_scratch():
    cfg = GPTConfig(65)
    assert cfg.activation == "gelu"  # nanoGPT's exact GELU: cheaper on a CPU than GPT-2's tanh
    assert (cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.n_positions) == (4, 4, 128, 64)
    assert GPT(cfg).blocks[0].ffn.w_1.out_features == 4 * 128  # d_ff None: 4 * d_model


@pytest.mark.parametrize("model_class", [GPT, BERT, BART, ViT])
def test_to_hf_config_and_back_gives_the_same_config(model_class):
    cfg = SMALL[model_class]
    hf_config = model_class(cfg).to_hf_config()
    back = type(cfg).from_hf(hf_config, **({"n_classes": 5} if model_class is ViT else {}))
    assert back == cfg


def test_from_hf_goes_through_the_config():
    """A Hugging Face model built from our to_hf_config loads into a model with our config."""
    hf = {
        GPT: transformers.GPT2LMHeadModel,
        BERT: transformers.BertModel,
        BART: transformers.BartForConditionalGeneration,
        ViT: transformers.ViTForImageClassification,
    }
    load = {
        GPT: GPT.from_hf,
        BERT: bert_module.from_hf,
        BART: bart_module.from_hf,
        ViT: ViT.from_hf,
    }
    for model_class, cfg in SMALL.items():
        ours = model_class(cfg)
        theirs = hf[model_class](ours.to_hf_config(attn_implementation="eager"))
        loaded = load[model_class](theirs)
        assert loaded.cfg == cfg, model_class.__name__


def test_gpt_from_hf_sets_gpt2s_tanh_gelu():
    hf = transformers.GPT2LMHeadModel(
        GPTConfig(30, 16, 24, 2, 1).to_hf(activation_function="gelu_new")
    )
    assert GPT.from_hf(hf).cfg.activation == "gelu_tanh"
    assert GPTConfig.from_hf(transformers.GPT2Config()).activation == "gelu_tanh"  # GPT-2's own


def test_mutant_to_hf_that_drops_a_size_is_caught(monkeypatch):
    """The round trip compares every field: a to_hf that forgets one (here d_ff) fails it."""
    original = GPTConfig.to_hf

    def forgets_d_ff(self, **overrides):
        return original(dataclasses.replace(self, d_ff=None), **overrides)

    monkeypatch.setattr(GPTConfig, "to_hf", forgets_d_ff)
    with pytest.raises(AssertionError):
        test_to_hf_config_and_back_gives_the_same_config(GPT)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: GPTConfig(0), "vocab_size must be >= 1"),
        (lambda: GPTConfig(10, n_positions=0), "n_positions must be >= 1"),
        (lambda: GPTConfig(10, n_layers=0), "n_layers must be >= 1"),
        (lambda: GPTConfig(10, activation="swish"), "activation must be one of"),
        (lambda: BERTConfig(10, pad_id=10), "pad_id=10 is not an id of 10 tokens"),
        (lambda: BERTConfig(10, max_position=0), "max_position must be >= 1"),
        (lambda: BARTConfig(10, eos_id=12), "eos_id=12 is not an id of 10 tokens"),
        (lambda: BARTConfig(10, activation="swish"), "activation must be one of"),
        (lambda: ViTConfig(image_size=10, patch_size=4), "must be divisible by patch_size=4"),
        (lambda: TransformerConfig(0, 5), "src_vocab must be >= 1"),
        (lambda: TransformerConfig(5, 5, max_len=0), "max_len must be >= 1"),
    ],
)
def test_bad_sizes_are_refused_with_a_clear_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_the_config_is_the_only_argument_besides_parts():
    """The long argument lists are gone: sizes go in the config, not next to it."""
    with pytest.raises(TypeError):
        GPT(65, 64, 128, 4, 4)  # the former positional form
    with pytest.raises(TypeError):
        BERT(BERTConfig(30), d_model=16)
    model = ViT(ViTConfig(), parts=None)
    assert isinstance(model(torch.zeros(2, 1, 8, 8)), torch.Tensor)
