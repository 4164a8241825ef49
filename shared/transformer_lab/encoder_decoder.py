"""Lesson 07 — cross-attention and the encoder–decoder Transformer.

The decoder block has three sublayers: masked self-attention over the target so far,
cross-attention (queries from the decoder, keys and values from the encoder's output, the
"memory"), and the FFN — each with a residual connection and a LayerNorm.

Training uses teacher forcing: the decoder reads the true target shifted right and predicts
every next token in parallel under a causal mask. At inference it must read its own outputs, one
token at a time: greedy decoding keeps the best token, beam search the best few prefixes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from ._validate import require_ndim
from .add_norm import EncoderBlock, FeedForward, LayerNorm
from .masking import causal_mask, padding_mask
from .multihead import MultiHeadAttention
from .positional import SinusoidalPositionalEncoding


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention over `memory`, FFN; each with Add & Norm.

    forward(x (B, L_t, d), memory (B, L_s, d), self_mask=None, memory_mask=None) -> (B, L_t, d)

    As in EncoderBlock, the sublayers are built from the classes passed in (`attention`, `norm`,
    `ffn`; the reference ones by default).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        eps: float = 1e-5,
        *,
        attention: type[nn.Module] = MultiHeadAttention,
        norm: type[nn.Module] = LayerNorm,
        ffn: type[nn.Module] = FeedForward,
    ):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = attention(d_model, n_heads, dropout=dropout)
        self.cross_attn = attention(d_model, n_heads, dropout=dropout)
        self.ffn = ffn(d_model, d_ff, activation, dropout)
        self.norm1 = norm(d_model, eps)
        self.norm2 = norm(d_model, eps)
        self.norm3 = norm(d_model, eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        self_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if self.norm_first:
            x = x + self.dropout1(self.self_attn(self.norm1(x), mask=self_mask))
            x = x + self.dropout2(self.cross_attn(self.norm2(x), context=memory, mask=memory_mask))
            x = x + self.dropout3(self.ffn(self.norm3(x)))
        else:
            x = self.norm1(x + self.dropout1(self.self_attn(x, mask=self_mask)))
            x = self.norm2(x + self.dropout2(self.cross_attn(x, context=memory, mask=memory_mask)))
            x = self.norm3(x + self.dropout3(self.ffn(x)))
        return x


@dataclass(frozen=True)
class Parts:
    """The building blocks a model is made of, passed in (as the Annotated Transformer's
    `make_model` takes them). Every model takes `parts=`; `Parts()` are the reference classes.

        attention      MultiHeadAttention (lesson 03)  attention(d_model, n_heads, dropout=p)
        norm           LayerNorm (lesson 05)           norm(d_model, eps)
        ffn            FeedForward (lesson 05)         ffn(d_model, d_ff, activation, dropout)
        encoder_block  EncoderBlock (lesson 05)        encoder_block(d_model, n_heads, d_ff,
                       dropout, norm_first, activation, eps, attention=, norm=, ffn=)
        decoder_block  DecoderBlock (lesson 07)        the same arguments as encoder_block

    Each field is a class, or any callable that takes those arguments and returns an nn.Module.
    `student.parts()` gives the student's passing classes (the reference for the rest).
    `report`, when set, is called with every model built from these parts (`built`): that is
    how `student.parts()` says which of a model's parts are the student's.
    """

    attention: Callable[..., nn.Module] = MultiHeadAttention
    norm: Callable[..., nn.Module] = LayerNorm
    ffn: Callable[..., nn.Module] = FeedForward
    encoder_block: Callable[..., nn.Module] = EncoderBlock
    decoder_block: Callable[..., nn.Module] = DecoderBlock
    report: Callable[[nn.Module], None] | None = field(default=None, compare=False, repr=False)

    @property
    def sublayers(self) -> dict[str, Callable[..., nn.Module]]:
        """The keyword arguments a block takes its sublayers from: attention, norm, ffn."""
        return {"attention": self.attention, "norm": self.norm, "ffn": self.ffn}

    def built(self, model: nn.Module) -> None:
        """Every model calls this at the end of its constructor (runs `report`, if any)."""
        if self.report is not None:
            self.report(model)


@dataclass
class TransformerConfig:
    """The sizes and settings of the encoder–decoder Transformer (a small one trained from scratch
    on lesson 07's toy translation tasks by default).

        src_vocab, tgt_vocab: the two vocabularies (they may be the same size).
        d_model, n_heads, n_layers, d_ff: width, heads, blocks on each side, FFN hidden size.
        dropout:    on the embeddings and the sublayers (the paper's P_drop = 0.1).
        max_len:    rows of the sinusoidal position table.
        pad_id:     the padding id: no query attends to it.
        norm_first: pre-norm blocks (and a final LayerNorm on each side) instead of the paper's
                    post-norm.
    """

    src_vocab: int
    tgt_vocab: int
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 512
    dropout: float = 0.1
    max_len: int = 512
    pad_id: int = 0
    norm_first: bool = False

    def __post_init__(self):
        for name in ("src_vocab", "tgt_vocab", "max_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


class Transformer(nn.Module):
    """The encoder–decoder of Vaswani et al. (2017) for token sequences.

    Transformer(cfg: TransformerConfig, parts=None)
    forward(src (B, L_s), tgt_in (B, L_t)) -> logits (B, L_t, tgt_vocab), where tgt_in is the
    target shifted right (starting with BOS) — teacher forcing.

    parts: the blocks and sublayers it is built from (`Parts()`, the reference, by default):
    `parts.encoder_block` and `parts.decoder_block`, each given `parts.sublayers`, and
    `parts.norm` for the final LayerNorms of a pre-norm stack.
    """

    def __init__(self, cfg: TransformerConfig, parts: Parts | None = None):
        super().__init__()
        parts = Parts() if parts is None else parts
        self.cfg = cfg
        self.d_model, self.pad_id = cfg.d_model, cfg.pad_id
        self.src_embed = nn.Embedding(cfg.src_vocab, cfg.d_model)
        self.tgt_embed = nn.Embedding(cfg.tgt_vocab, cfg.d_model)
        self.pos = SinusoidalPositionalEncoding(cfg.d_model, cfg.max_len)
        self.embed_dropout = nn.Dropout(cfg.dropout)
        sizes = (cfg.d_model, cfg.n_heads, cfg.d_ff)
        block = dict(dropout=cfg.dropout, norm_first=cfg.norm_first, **parts.sublayers)
        self.encoder = nn.ModuleList(
            parts.encoder_block(*sizes, **block) for _ in range(cfg.n_layers)
        )
        self.decoder = nn.ModuleList(
            parts.decoder_block(*sizes, **block) for _ in range(cfg.n_layers)
        )
        # pre-norm stacks end with a LayerNorm; post-norm blocks already end normalised
        self.encoder_norm = parts.norm(cfg.d_model, 1e-5) if cfg.norm_first else nn.Identity()
        self.decoder_norm = parts.norm(cfg.d_model, 1e-5) if cfg.norm_first else nn.Identity()
        self.generator = nn.Linear(cfg.d_model, cfg.tgt_vocab)
        parts.built(self)

    def _embed(self, embedding: nn.Embedding, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed_dropout(self.pos(embedding(tokens) * math.sqrt(self.d_model)))

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src (B, L_s) -> memory (B, L_s, d_model) and its padding mask (B, 1, 1, L_s)."""
        require_ndim("src", src, 2, "(B, L_s)")
        src_mask = padding_mask(src, self.pad_id)
        x = self._embed(self.src_embed, src)
        for block in self.encoder:
            x = block(x, mask=src_mask)
        return self.encoder_norm(x), src_mask

    def decode(
        self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor
    ) -> torch.Tensor:
        """tgt_in (B, L_t) -> logits (B, L_t, tgt_vocab), attending causally and to `memory`."""
        require_ndim("tgt_in", tgt_in, 2, "(B, L_t)")
        L = tgt_in.shape[1]
        self_mask = causal_mask(L, device=tgt_in.device) & padding_mask(tgt_in, self.pad_id)
        x = self._embed(self.tgt_embed, tgt_in)
        for block in self.decoder:
            x = block(x, memory, self_mask=self_mask, memory_mask=src_mask)
        return self.generator(self.decoder_norm(x))

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask)

    def cross_attention_weights(
        self, src: torch.Tensor, tgt_in: torch.Tensor
    ) -> list[torch.Tensor]:
        """The (B, h, L_t, L_s) cross-attention weights of every decoder layer (for plots)."""
        for block in self.decoder:
            block.cross_attn.explicit = True
        try:
            self.forward(src, tgt_in)
            return [block.cross_attn.last_weights for block in self.decoder]
        finally:
            for block in self.decoder:
                block.cross_attn.explicit = False


@torch.no_grad()
def greedy_decode(
    model: Transformer, src: torch.Tensor, bos_id: int, eos_id: int, max_len: int
) -> torch.Tensor:
    """Feed the model its own best token until EOS or max_len new tokens.

    Returns (B, 1 + n) tokens starting with BOS; after a sequence's EOS it is padded with pad_id.
    """
    memory, src_mask = model.encode(src)
    B = src.shape[0]
    ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        next_token = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        next_token = torch.where(done, torch.full_like(next_token, model.pad_id), next_token)
        ys = torch.cat([ys, next_token[:, None]], dim=1)
        done |= next_token == eos_id
        if done.all():
            break
    return ys


def length_normalised_score(
    log_probs: torch.Tensor, lengths: torch.Tensor, alpha: float
) -> torch.Tensor:
    """Beam search's length normalisation: log p(Y | x) / |Y|^alpha, elementwise.

    log_probs (...) are total log-probabilities of finished hypotheses, lengths (...) (integer or
    float, broadcastable to log_probs) their numbers of generated tokens, EOS included (>= 1).
    alpha >= 0: 0 leaves the totals as they are (which favours short outputs), 1 gives the mean
    log-probability per token. Returns the scores in log_probs' dtype. GNMT (Wu et al. 2016)
    divides by ((5 + |Y|) / 6)^alpha instead, a softer form of the same idea.
    """
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    if (lengths < 1).any():
        raise ValueError(f"every length must be at least 1 (EOS counts), got {lengths.min()}")
    return log_probs / lengths.to(log_probs.dtype) ** alpha


@torch.no_grad()
def beam_search(
    model: Transformer,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    max_len: int,
    beam_size: int = 4,
    length_penalty: float = 0.0,
    normalise: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, float]:
    """Beam search for one source sequence src (1, L_s) or (L_s,).

    Keeps the `beam_size` best prefixes by total log-probability. A prefix that emits EOS is
    finished; after `max_len` new tokens the unfinished ones are finished too. The winner maximises
    `normalise(score, len, length_penalty)`, len the number of generated tokens (EOS included);
    by default `length_normalised_score`, score / len^length_penalty (lesson 07's exercise 4 writes
    it; pass the student's version as `normalise`).
    Returns (tokens (1 + n,) starting with BOS, score).
    """
    if src.dim() == 1:
        src = src[None]
    if src.shape[0] != 1:
        raise ValueError(f"beam_search decodes one sequence at a time, got batch {src.shape[0]}")
    if length_penalty < 0:
        raise ValueError(f"length_penalty must be >= 0, got {length_penalty}")
    normalise = normalise or length_normalised_score
    memory, src_mask = model.encode(src)
    beams = [(torch.tensor([bos_id], device=src.device), 0.0)]
    finished: list[tuple[torch.Tensor, float]] = []

    for _ in range(max_len):
        ys = torch.stack([t for t, _ in beams])
        n = ys.shape[0]
        log_probs = model.decode(ys, memory.expand(n, -1, -1), src_mask.expand(n, -1, -1, -1))[
            :, -1
        ]
        log_probs = log_probs.log_softmax(-1).double()
        scores = torch.tensor([s for _, s in beams], dtype=torch.float64, device=src.device)
        total = (scores[:, None] + log_probs).flatten()  # (n * V,)
        top = total.topk(min(beam_size, total.numel()))
        V = log_probs.shape[-1]
        beams = []
        for score, idx in zip(top.values.tolist(), top.indices.tolist()):
            prefix, token = ys[idx // V], idx % V
            candidate = (torch.cat([prefix, prefix.new_tensor([token])]), score)
            (finished if token == eos_id else beams).append(candidate)
        if not beams:
            break
    finished.extend(beams)
    scores = torch.tensor([score for _, score in finished], dtype=torch.float64)
    lengths = torch.tensor([len(tokens) - 1 for tokens, _ in finished])
    best = finished[int(normalise(scores, lengths, length_penalty).argmax())]  # the first on a tie
    return best[0], best[1]
