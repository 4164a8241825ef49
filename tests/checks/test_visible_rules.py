"""Issue 25: no wrong implementation passes a visible check while breaking a rule its exercise
text states, and the mistakes the texts invite are named by the visible check (not only by the
hidden one). Each mutant below broke a stated rule and passed the visible check before."""

from __future__ import annotations

import pytest

from transformer_lab import check

STATED_RULES = [
    ("padding_mask", "zero-is-padding-too"),  # only pad_id is padding, a real token 0 is not
    ("sample_next", "squeeze-all"),  # shape (B,), a batch of one included
    ("bert_mask_tokens", "randint-high"),  # random ids uniform on [0, vocab_size)
    ("wordpiece_tokenize", "limit-inclusive"),  # [UNK] only for words LONGER than the limit
    ("sentence_permutation", "fixed-dtype"),  # the input's dtype
    ("online_softmax", "zero-start"),  # equals torch.softmax, very negative rows included
    ("tiled_attention", "query-tiles"),  # loops over blocks of keys
    ("clip_loss", "scale-clamped"),  # logits = exp(logit_scale) · cosine similarities
]

INVITED = [
    ("scaled_dot_product_attention", "finite-fill"),
    ("rotary_embedding", "positions-from-one"),
    ("rotary_embedding", "cos-sin-swapped"),
    ("rotary_embedding", "overwritten-in-place"),
    ("LayerNorm", "not-centred"),
    ("LayerNorm", "affine-first"),
    ("LayerNorm", "two-axes"),
    ("EncoderBlock", "residual-after-norm"),
    ("EncoderBlock", "pre-norm-final-norm"),
    ("DecoderBlock", "cross-first"),
    ("DecoderBlock", "memory-normed"),
    ("DecoderBlock", "masks-swapped"),
    ("DecoderBlock", "cross-reads-block-input"),
    ("lm_loss", "divided-by-batch"),
    ("lm_loss", "ignored-as-token-zero"),
    ("lm_loss", "log-softmax-positions"),
]


@pytest.mark.parametrize("name,key", STATED_RULES + INVITED)
def test_visible_check_names_it(name, key):
    mistake = check.EXERCISES[name].mistake(key)
    with pytest.raises(check.CheckFailed) as info:
        getattr(check, name)(mistake.impl)
    assert info.value.mistake_key == key, str(info.value)
