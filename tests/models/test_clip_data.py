"""Lesson 13's data: the digits with captions from templates, and the caption tokenizer.

Each property is checked by a small function that is also run on a plausible wrong version
(a mutant) to show that the check can fail.
"""

from __future__ import annotations

import pytest
import torch

from transformer_lab import data

TRAIN, HELD_OUT = data.CAPTION_TEMPLATES, data.HELD_OUT_CAPTION_TEMPLATES


# ----------------------------------------------------------------------------- property checks


def caption_problems(captions, labels) -> list[str]:
    """Captions that do not name their own class, or also name another one (word by word)."""
    problems = []
    for text, y in zip(captions, torch.as_tensor(labels).tolist()):
        words = set(text.split())
        names = {c for c in range(10) if {data.DIGIT_NAMES[c], str(c)} & words}
        if names != {y}:
            problems.append(f"{text!r} for label {y} names {sorted(names)}")
    return problems


def token_problems(tokens, tokenizer) -> list[str]:
    """Rows whose ids fall outside the vocabulary, lack exactly one eot, have anything but padding
    after it, or whose eot is not where argmax(-1) (CLIP's pooling rule) points."""
    problems = []
    if tokens.dtype != torch.long:
        problems.append(f"dtype {tokens.dtype}, expected torch.long")
    if int(tokens.min()) < 0 or int(tokens.max()) >= tokenizer.vocab_size:
        problems.append(f"ids in [{int(tokens.min())}, {int(tokens.max())}] outside the vocabulary")
    for i, row in enumerate(tokens):
        eot = (row == tokenizer.eot_id).nonzero().flatten().tolist()
        if len(eot) != 1:
            problems.append(f"row {i}: {len(eot)} eot tokens")
            continue
        if (row[eot[0] + 1 :] != tokenizer.pad_id).any():
            problems.append(f"row {i}: something other than padding after the eot")
        if (row[: eot[0]] == tokenizer.pad_id).any():
            problems.append(f"row {i}: padding before the eot")
        if int(row.argmax()) != eot[0]:
            problems.append(f"row {i}: argmax(-1) = {int(row.argmax())}, eot at {eot[0]}")
    return problems


def overlap(templates_a, templates_b) -> set[str]:
    """Captions (filled in for every class) that two template sets share."""
    filled = lambda ts: {p for row in data.class_prompts(ts) for p in row}
    return filled(templates_a) & filled(templates_b)


# ----------------------------------------------------------------------------- templates


def test_train_and_held_out_templates_are_disjoint_even_filled_in():
    assert len(TRAIN) >= 4 and len(HELD_OUT) >= 3
    assert set(TRAIN).isdisjoint(HELD_OUT)
    assert overlap(TRAIN, HELD_OUT) == set()
    # each template set uses both the word ("seven") and the numeral ("7")
    for templates in (TRAIN, HELD_OUT):
        assert any("{word}" in t for t in templates) and any("{digit}" in t for t in templates)


def test_mutant_overlapping_templates_are_caught():
    leaky = (*HELD_OUT, TRAIN[0])  # a training prompt among the held-out ones
    assert overlap(TRAIN, leaky) != set()
    assert len(overlap(("a {word}",), ("a {digit}", "a {word}"))) == 10
    assert overlap(("a {word}",), ("a {digit}",)) == set()  # "a seven" is not "a 7"


def test_class_prompts_one_per_class_and_template():
    prompts = data.class_prompts(HELD_OUT)
    assert len(prompts) == len(HELD_OUT) and all(len(row) == 10 for row in prompts)
    for row in prompts:
        assert caption_problems(row, range(10)) == []
        assert len(set(row)) == 10
    assert prompts[0][7] == HELD_OUT[0].format(word="seven", digit="7")


def test_digit_caption_fills_word_and_numeral():
    assert data.digit_caption(7, "a handwritten {word}") == "a handwritten seven"
    assert data.digit_caption(7, "the digit {digit}") == "the digit 7"
    assert data.digit_caption(torch.tensor(0), "{word} or {digit}") == "zero or 0"


def test_bad_labels_and_templates_are_refused_clearly():
    with pytest.raises(ValueError, match="0..9"):
        data.digit_caption(10, "the digit {digit}")
    with pytest.raises(ValueError, match="names no digit"):
        data.digit_caption(3, "a handwritten thing")
    with pytest.raises(ValueError, match="empty"):
        data.digit_captions([1, 2], templates=())


# ----------------------------------------------------------------------------- captions


def test_every_caption_names_its_own_class_and_only_that():
    x_tr, y_tr, cap_tr, x_te, y_te, cap_te = data.captioned_digits()
    assert len(cap_tr) == len(x_tr) == len(y_tr) and len(cap_te) == len(x_te) == len(y_te)
    assert caption_problems(cap_tr, y_tr) == [] and caption_problems(cap_te, y_te) == []
    assert all(isinstance(c, str) for c in cap_tr)


def test_mutant_captions_of_the_wrong_class_are_caught():
    y = torch.arange(10)
    shifted = [data.digit_caption((c + 1) % 10, "a handwritten {word}") for c in range(10)]
    assert len(caption_problems(shifted, y)) == 10
    two = [data.digit_caption(c, "{word} not {digit}") for c in range(10)]
    assert caption_problems(two, y) == []
    mixed = [f"the digit {c} or {(c + 1) % 10}" for c in range(10)]
    assert len(caption_problems(mixed, y)) == 10


def test_every_class_and_every_train_template_is_covered():
    x_tr, y_tr, cap_tr, x_te, y_te, _ = data.captioned_digits()
    assert set(y_tr.tolist()) == set(range(10)) == set(y_te.tolist())
    assert (torch.bincount(y_te, minlength=10) >= 30).all()  # stratified: about 36 each
    used = {
        t for t in TRAIN for c, y in zip(cap_tr, y_tr.tolist()) if c == data.digit_caption(y, t)
    }
    assert used == set(TRAIN)
    # training captions come from the train templates only, never from the held-out ones
    held = {p for row in data.class_prompts(HELD_OUT) for p in row}
    assert held.isdisjoint(cap_tr)
    # the image split is lesson 11's: same images, same labels
    d_tr, dy_tr, d_te, dy_te = data.digits()
    assert torch.equal(d_tr, x_tr) and torch.equal(dy_te, y_te)
    assert x_tr.shape[1:] == (1, 8, 8) and len(x_tr) + len(x_te) == 1797


def test_captions_are_deterministic_and_leave_the_global_rng_alone():
    torch.manual_seed(0)
    before = torch.rand(1)
    torch.manual_seed(0)
    a = data.captioned_digits(seed=0)
    assert torch.equal(torch.rand(1), before)
    b = data.captioned_digits(seed=0)
    assert a[2] == b[2] and a[5] == b[5]
    assert all(torch.equal(u, v) for u, v in zip(a[:2] + a[3:5], b[:2] + b[3:5]))
    assert data.captioned_digits(seed=1)[2] != a[2]
    y = torch.arange(10).repeat(20)
    assert data.digit_captions(y, seed=3) == data.digit_captions(y, seed=3)
    assert data.digit_captions(y, seed=3) != data.digit_captions(y, seed=4)
    # a generator advances: fresh captions per call (augmentation), reproducible from its seed
    g = torch.Generator().manual_seed(5)
    first, second = data.digit_captions(y, generator=g), data.digit_captions(y, generator=g)
    assert first != second
    g.manual_seed(5)
    assert data.digit_captions(y, generator=g) == first


# ----------------------------------------------------------------------------- tokenizer


def test_tokens_in_range_with_one_eot_where_argmax_finds_it():
    tok = data.CaptionTokenizer()
    assert tok.eot_id == tok.vocab_size - 1 == len(tok) - 1 and tok.pad_id == 0
    captions = [p for ts in (TRAIN, HELD_OUT) for row in data.class_prompts(ts) for p in row]
    tokens = tok.encode_batch(captions)
    assert tokens.shape == (len(captions), max(len(c) for c in captions) + 1)
    assert token_problems(tokens, tok) == []
    assert [tok.decode(row) for row in tokens] == captions
    assert tok.encode_batch(captions[:3], context_length=48).shape == (3, 48)


def test_one_caption_encodes_character_by_character():
    tok = data.CaptionTokenizer()
    ids = tok.encode("A 7")
    assert ids.tolist() == [tok.stoi["a"], tok.stoi[" "], tok.stoi["7"], tok.eot_id]
    assert tok.decode(ids) == "a 7"
    assert len(set(tok.itos)) == tok.vocab_size  # no id shared by two symbols


class _EotFirst(data.CaptionTokenizer):
    """Mutant: end-of-text right after padding (id 1), so argmax no longer finds it."""

    def __init__(self):
        self.itos = ["<pad>", "<eot>", *self.alphabet]
        self.stoi = {c: i for i, c in enumerate(self.itos) if len(c) == 1}
        self.eot_id = 1


class _NoEot(data.CaptionTokenizer):
    """Mutant: forgets to append the end-of-text token."""

    def encode(self, text):
        return super().encode(text)[:-1]


def test_mutant_tokenizers_are_caught():
    captions = data.class_prompts(TRAIN)[0]
    for bad in (_EotFirst(), _NoEot()):
        assert token_problems(bad.encode_batch(captions), bad) != [], type(bad).__name__
    tok = data.CaptionTokenizer()
    good = tok.encode_batch(captions)
    assert token_problems(good, tok) == []
    out_of_range = good.clone()
    out_of_range[0, 0] = tok.vocab_size
    assert any("outside" in p for p in token_problems(out_of_range, tok))
    junk_after_eot = good.clone()
    junk_after_eot[0, -1] = tok.stoi["a"]  # the first prompt is not the longest: pads at the end
    assert token_problems(junk_after_eot, tok) != []


def test_tokenizer_refuses_bad_input_clearly():
    tok = data.CaptionTokenizer()
    with pytest.raises(ValueError, match="not in the caption alphabet"):
        tok.encode("a seven!")
    with pytest.raises(ValueError, match="context_length=5"):
        tok.encode_batch(["a handwritten seven"], context_length=5)
    with pytest.raises(TypeError, match="list of captions"):
        tok.encode_batch("a seven")
    with pytest.raises(ValueError, match="no captions"):
        tok.encode_batch([])
    with pytest.raises(ValueError, match="outside"):
        tok.decode([tok.vocab_size + 3])
