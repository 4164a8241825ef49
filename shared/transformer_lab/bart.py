"""Lesson 10 — BART: a denoising sequence-to-sequence model.

BART is trained as a denoising autoencoder. Corrupt a document with a noising function, feed the
corrupted text to a bidirectional encoder, and train an autoregressive decoder to write the
original back, token by token, with the usual cross-entropy loss. The encoder sees everything
(as in BERT); the decoder sees only what it has already written (as in GPT).

The noising functions, all on a 1-D tensor of token ids:

    token masking          a random token becomes [MASK]                 A B C D E -> A [M] C D E
    token deletion         a random token disappears                     A B C D E -> A C D E
    text infilling         a span of k ~ Poisson(λ) tokens becomes ONE   A B C D E -> A [M] E
                           [MASK]; k = 0 inserts a [MASK]
    sentence permutation   the sentences are shuffled                    S1 S2 S3 -> S3 S1 S2
    document rotation      the document starts at a random token         A B C D E -> D E A B C
    span corruption (T5)   spans become sentinels <X>, <Y>, ...; the     A B C D E -> A <X> D <Y>
                           target lists the spans after their sentinel   target: <X> B C <Y> E <Z>

With text infilling the model must also work out *how many* tokens are missing, since a single
[MASK] may stand for none, one or many. T5 does the mirror image: the decoder only writes the
missing spans, each after its sentinel, instead of the whole document.

The architecture is the 2017 encoder–decoder (post-norm blocks) with a few changes that matter
when loading real weights: GELU instead of ReLU, learned positions (stored with an offset of 2),
a LayerNorm right after the embeddings on both sides ("layernorm_embedding"), one token
embedding shared by encoder, decoder and the output layer, plus a bias on the final logits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import require_ndim
from .encoder_decoder import Parts
from .masking import causal_mask

# ------------------------------------------------------------------------------------------------
# Noising functions
# ------------------------------------------------------------------------------------------------


def _check_tokens(tokens: torch.Tensor) -> None:
    require_ndim("tokens", tokens, 1, "(L,)")
    if tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise TypeError(f"tokens must be integer token ids, got dtype {tokens.dtype}")


def _check_probability(name: str, p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {p}")


def _rand_device(generator: torch.Generator | None) -> torch.device:
    """Random numbers are drawn where the generator lives (CPU by default), then moved."""
    return generator.device if generator is not None else torch.device("cpu")


def token_masking(
    tokens: torch.Tensor, mask_id: int, p: float = 0.15, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Replace each token by `mask_id` independently with probability p (BERT-style).

    tokens (L,) -> (L,): the length is kept.
    """
    _check_tokens(tokens)
    _check_probability("p", p)
    chosen = torch.rand(len(tokens), generator=generator, device=_rand_device(generator)) < p
    return tokens.masked_fill(chosen.to(tokens.device), mask_id)


def token_deletion(
    tokens: torch.Tensor, p: float = 0.15, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Delete each token independently with probability p.

    tokens (L,) -> (L',), L' ~ Binomial(L, 1 - p). The model must find *where* tokens are missing.
    """
    _check_tokens(tokens)
    _check_probability("p", p)
    keep = torch.rand(len(tokens), generator=generator, device=_rand_device(generator)) >= p
    return tokens[keep.to(tokens.device)]


def _random_partition(n_items: int, n_parts: int, generator: torch.Generator | None) -> list[int]:
    """Split n_items into n_parts non-empty segments at random; returns the segment lengths."""
    cuts = torch.randperm(n_items - 1, generator=generator, device=_rand_device(generator))
    cuts = (cuts[: n_parts - 1] + 1).sort().values.tolist()
    bounds = [0, *cuts, n_items]
    return [b - a for a, b in zip(bounds[:-1], bounds[1:])]


def text_infilling(
    tokens: torch.Tensor,
    mask_id: int,
    p: float = 0.3,
    lam: float = 3.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Replace random spans by a single `mask_id` each; span lengths ~ Poisson(lam).

    round(p * L) tokens are removed in total. Span lengths are drawn from Poisson(lam) until they
    cover that many tokens (the last one is cut to fit). A span of length 0 inserts a [MASK]
    without removing anything. Spans never touch: at least one kept token separates two spans,
    so every [MASK] in the output stands for exactly one span.

    tokens (L,) -> (L',) with L' = L - round(p * L) + (number of spans).
    """
    _check_tokens(tokens)
    _check_probability("p", p)
    if not lam > 0:
        raise ValueError(f"lam (the mean span length) must be > 0, got {lam}")
    n = len(tokens)
    n_masked = round(p * n)
    if n_masked == 0:
        return tokens.clone()
    device = _rand_device(generator)

    # 1. span lengths: Poisson draws until they cover n_masked tokens, the last one trimmed
    lengths: list[int] = []
    while sum(lengths) < n_masked:
        rates = torch.full((max(4, n_masked),), float(lam), dtype=torch.float64, device=device)
        for k in torch.poisson(rates, generator=generator).long().tolist():
            lengths.append(min(k, n_masked - sum(lengths)))
            if sum(lengths) == n_masked:
                break

    # 2. the n - n_masked kept tokens leave n - n_masked + 1 gaps; each span takes its own gap.
    #    If there are more spans than gaps, fold the extra spans into the others.
    n_kept = n - n_masked
    while len(lengths) > n_kept + 1:
        extra = lengths.pop()
        lengths[len(lengths) - 1] += extra
    order = torch.randperm(len(lengths), generator=generator, device=device).tolist()
    lengths = [lengths[i] for i in order]
    gaps = torch.randperm(n_kept + 1, generator=generator, device=device)[: len(lengths)]
    span_at_gap = dict(zip(gaps.sort().values.tolist(), lengths))

    # 3. walk through the input: at gap g (before the g-th kept token) emit [MASK], skip the span
    out: list[torch.Tensor] = []
    mask = tokens.new_tensor([mask_id])
    i = 0  # position in the input
    for g in range(n_kept + 1):
        if g in span_at_gap:
            out.append(mask)
            i += span_at_gap[g]
        if g < n_kept:
            out.append(tokens[i : i + 1])
            i += 1
    return torch.cat(out)


def _split_sentences(tokens: torch.Tensor, eos_id: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Sentences that end with eos_id (boundary included), and the trailing rest (maybe empty)."""
    ends = (tokens == eos_id).nonzero().flatten().tolist()
    starts = [0] + [e + 1 for e in ends[:-1]]
    sentences = [tokens[s : e + 1] for s, e in zip(starts, ends)]
    rest = tokens[(ends[-1] + 1 if ends else 0) :]
    return sentences, rest


def sentence_permutation(
    tokens: torch.Tensor, eos_id: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Shuffle the sentences of a document; a sentence ends with the boundary token `eos_id`.

    Every sentence keeps its tokens and its boundary token. Tokens after the last boundary (an
    unfinished sentence) stay at the end. tokens (L,) -> (L,).
    """
    _check_tokens(tokens)
    sentences, rest = _split_sentences(tokens, eos_id)
    order = torch.randperm(len(sentences), generator=generator, device=_rand_device(generator))
    return torch.cat([*(sentences[i] for i in order.tolist()), rest])


def document_rotation(
    tokens: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Rotate the document so that a uniformly chosen token comes first.

    tokens (L,) -> (L,): tokens[k:] followed by tokens[:k], k uniform in 0 .. L-1. The model
    must find where the document really starts.
    """
    _check_tokens(tokens)
    if len(tokens) == 0:
        return tokens.clone()
    k = int(torch.randint(len(tokens), (), generator=generator, device=_rand_device(generator)))
    return torch.cat([tokens[k:], tokens[:k]])


def span_corruption(
    tokens: torch.Tensor,
    sentinel_ids: Sequence[int] | torch.Tensor,
    noise_density: float = 0.15,
    mean_span_length: float = 3.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """T5's objective: drop random spans from the input and make them the target.

    round(noise_density * L) tokens (at least 1, at most L - 1) are noise, in
    n_spans = round(n_noise / mean_span_length) spans (at least 1). As in T5, kept pieces and
    noise spans alternate, starting with a kept piece and ending with a noise span. In `inputs`
    the i-th span is replaced by sentinel_ids[i]; `targets` is sentinel_ids[i] followed by the
    span, for every i, then one closing sentinel sentinel_ids[n_spans]:

        tokens   A B C D E F G        inputs   A <0> D E F <1>
                   ^^^       ^        targets  <0> B C <1> G <2>

    Returns (inputs (L_in,), targets (L_out,)); L_in + L_out = L + 2 * n_spans + 1.
    """
    _check_tokens(tokens)
    if not 0.0 < noise_density < 1.0:
        raise ValueError(f"noise_density must be in (0, 1), got {noise_density}")
    if mean_span_length <= 0:
        raise ValueError(f"mean_span_length must be > 0, got {mean_span_length}")
    n = len(tokens)
    if n < 2:
        raise ValueError(f"span_corruption needs at least 2 tokens, got {n}")
    sentinels = torch.as_tensor(sentinel_ids, dtype=tokens.dtype, device=tokens.device).flatten()
    if torch.isin(tokens, sentinels).any():
        raise ValueError("tokens already contain sentinel ids; the targets would be ambiguous")

    n_noise = min(max(round(noise_density * n), 1), n - 1)
    n_spans = min(max(round(n_noise / mean_span_length), 1), n_noise, n - n_noise)
    if len(sentinels) < n_spans + 1:
        raise ValueError(
            f"{n_spans} spans need {n_spans + 1} sentinel ids (one per span and a closing one), "
            f"got {len(sentinels)}"
        )
    noise_lengths = _random_partition(n_noise, n_spans, generator)
    kept_lengths = _random_partition(n - n_noise, n_spans, generator)

    inputs, targets = [], []
    i = 0
    for s, (kept, noise) in enumerate(zip(kept_lengths, noise_lengths)):
        inputs += [tokens[i : i + kept], sentinels[s : s + 1]]
        i += kept
        targets += [sentinels[s : s + 1], tokens[i : i + noise]]
        i += noise
    targets.append(sentinels[n_spans : n_spans + 1])
    return torch.cat(inputs), torch.cat(targets)


# ------------------------------------------------------------------------------------------------
# The model
# ------------------------------------------------------------------------------------------------

HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
}


def shift_tokens_right(input_ids: torch.Tensor, pad_id: int, decoder_start_id: int) -> torch.Tensor:
    """Teacher forcing input: (B, L) -> (B, L), [start, y_0, ..., y_{L-2}]; -100 becomes pad_id."""
    require_ndim("input_ids", input_ids, 2, "(B, L)")
    shifted = input_ids.new_full(input_ids.shape, decoder_start_id)
    shifted[:, 1:] = input_ids[:, :-1]
    return shifted.masked_fill(shifted == -100, pad_id)


class BartLearnedPositions(nn.Module):
    """Learned absolute positions stored with an offset: position t uses row t + 2.

    (fairseq kept two rows in front for its padding scheme; the checkpoints have them, so the
    table has max_position + 2 rows.) forward(L) -> (L, d_model).
    """

    offset = 2

    def __init__(self, max_position: int, d_model: int):
        super().__init__()
        self.max_position = max_position
        self.weight = nn.Parameter(torch.randn(max_position + self.offset, d_model) * 0.02)

    def forward(self, length: int, start: int = 0) -> torch.Tensor:
        if start + length > self.max_position:
            raise ValueError(
                f"sequence of length {start + length} exceeds max_position={self.max_position}"
            )
        positions = torch.arange(start, start + length, device=self.weight.device)
        return self.weight[positions + self.offset]


@dataclass
class BARTConfig:
    """The sizes and settings of a BART. The defaults are a small model trained from scratch
    (lesson 10); `BARTConfig.from_hf` reads a `transformers.BartConfig`.

        vocab_size:        number of tokens; the embedding E is shared by both sides and the
                           output layer.
        d_model, n_heads, d_ff: width, heads and FFN hidden size (the same on both sides).
        n_encoder_layers, n_decoder_layers: the depth of each side.
        max_position:      at most this many positions on each side (learned tables).
        dropout:           on the embeddings, attention weights and residual branches.
        eps:               the LayerNorm epsilon.
        scale_embedding:   multiply E[ids] by sqrt(d_model) (False in BART's checkpoints).
        activation:        the FFN's nonlinearity (`add_norm.ACTIVATIONS`): BART's exact GELU.
        pad_id, bos_id, eos_id, decoder_start_id: BART's special ids (<pad> 1, <s> 0, </s> 2;
                           the decoder starts from </s>).
    (The fields keep the order of BART's former positional arguments.)
    """

    vocab_size: int
    d_model: int = 64
    n_heads: int = 4
    n_encoder_layers: int = 2
    n_decoder_layers: int = 2
    d_ff: int = 256
    max_position: int = 1024
    dropout: float = 0.0
    pad_id: int = 1
    eps: float = 1e-5
    scale_embedding: bool = False
    activation: str = "gelu"
    bos_id: int = 0
    eos_id: int = 2
    decoder_start_id: int = 2

    def __post_init__(self):
        if self.activation not in HF_ACTIVATIONS.values():
            raise ValueError(
                f"activation must be one of {sorted(set(HF_ACTIVATIONS.values()))}, "
                f"got {self.activation!r}"
            )
        for name in ("pad_id", "bos_id", "eos_id", "decoder_start_id"):
            if not 0 <= getattr(self, name) < self.vocab_size:
                raise ValueError(
                    f"{name}={getattr(self, name)} is not an id of {self.vocab_size} tokens"
                )

    @classmethod
    def from_hf(cls, c) -> BARTConfig:
        """Our BARTConfig for a `transformers.BartConfig`."""
        if (
            c.encoder_attention_heads != c.decoder_attention_heads
            or c.encoder_ffn_dim != c.decoder_ffn_dim
        ):
            raise ValueError("encoder and decoder must have the same number of heads and d_ff")
        if c.activation_function not in HF_ACTIVATIONS:
            raise ValueError(f"unsupported activation_function {c.activation_function!r}")
        return cls(
            vocab_size=c.vocab_size,
            d_model=c.d_model,
            n_heads=c.encoder_attention_heads,
            n_encoder_layers=c.encoder_layers,
            n_decoder_layers=c.decoder_layers,
            d_ff=c.encoder_ffn_dim,
            max_position=c.max_position_embeddings,
            dropout=c.dropout,
            eps=1e-5,
            scale_embedding=c.scale_embedding,
            activation=HF_ACTIVATIONS[c.activation_function],
            pad_id=c.pad_token_id,
            bos_id=c.bos_token_id,
            eos_id=c.eos_token_id,
            decoder_start_id=c.decoder_start_token_id,
        )

    def to_hf(self, **overrides):
        """A `transformers.BartConfig` with these sizes (needs `transformers`)."""
        from transformers import BartConfig

        to_hf_activation = {ours: theirs for theirs, ours in reversed(HF_ACTIVATIONS.items())}
        kwargs = dict(
            vocab_size=self.vocab_size,
            d_model=self.d_model,
            encoder_attention_heads=self.n_heads,
            decoder_attention_heads=self.n_heads,
            encoder_layers=self.n_encoder_layers,
            decoder_layers=self.n_decoder_layers,
            encoder_ffn_dim=self.d_ff,
            decoder_ffn_dim=self.d_ff,
            max_position_embeddings=self.max_position,
            dropout=self.dropout,
            attention_dropout=self.dropout,
            activation_dropout=0.0,
            scale_embedding=self.scale_embedding,
            activation_function=to_hf_activation[self.activation],
            pad_token_id=self.pad_id,
            bos_token_id=self.bos_id,
            eos_token_id=self.eos_id,
            decoder_start_token_id=self.decoder_start_id,
            forced_eos_token_id=None,
        )
        return BartConfig(**kwargs | overrides)


class BART(nn.Module):
    """BART: a post-norm encoder–decoder with learned positions and a shared, tied embedding.

    forward(input_ids (B, L_s), decoder_input_ids (B, L_t), attention_mask=None,
            decoder_attention_mask=None) -> logits (B, L_t, vocab_size)

    attention_mask: (B, L_s), 1/True at real tokens; None derives it from input_ids != pad_id.
    decoder_attention_mask: optional (B, L_t), combined with the causal mask.

        x_enc = layernorm_embedding(E[src] * s + P_enc)      s = sqrt(d_model) if scale_embedding
        memory = EncoderBlock_N(... EncoderBlock_1(x_enc))   (post-norm, GELU)
        x_dec = layernorm_embedding(E[tgt] * s + P_dec)
        h = DecoderBlock_M(... (x_dec, memory))              (causal self-attn + cross-attn)
        logits = h Eᵀ + final_logits_bias                    (output layer tied to E)

    BART(cfg: BARTConfig, parts=None)
    parts: what it is built from (`Parts()`, the reference, by default): `parts.encoder_block`s
    and `parts.decoder_block`s given `parts.sublayers`, and `parts.norm` for the two
    layernorm_embedding.
    """

    def __init__(self, cfg: BARTConfig, parts: Parts | None = None):
        super().__init__()
        parts = Parts() if parts is None else parts
        self.cfg = cfg
        self.vocab_size, self.d_model = cfg.vocab_size, cfg.d_model
        self.pad_id, self.bos_id, self.eos_id = cfg.pad_id, cfg.bos_id, cfg.eos_id
        self.decoder_start_id = cfg.decoder_start_id
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else 1.0

        self.shared = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)  # E
        # BART's init_std: E is also the output layer, and N(0, 1) rows would start the logits
        # h Eᵀ at a scale of √d_model (an initial loss of ~50 instead of ln V)
        nn.init.normal_(self.shared.weight, std=0.02)
        with torch.no_grad():
            self.shared.weight[cfg.pad_id].zero_()
        self.encoder_positions = BartLearnedPositions(cfg.max_position, cfg.d_model)
        self.decoder_positions = BartLearnedPositions(cfg.max_position, cfg.d_model)
        self.encoder_layernorm_embedding = parts.norm(cfg.d_model, cfg.eps)
        self.decoder_layernorm_embedding = parts.norm(cfg.d_model, cfg.eps)
        self.dropout = nn.Dropout(cfg.dropout)
        sizes = (cfg.d_model, cfg.n_heads, cfg.d_ff)
        block = dict(
            dropout=cfg.dropout,
            norm_first=False,
            activation=cfg.activation,
            eps=cfg.eps,
            **parts.sublayers,
        )
        self.encoder = nn.ModuleList(
            parts.encoder_block(*sizes, **block) for _ in range(cfg.n_encoder_layers)
        )
        self.decoder = nn.ModuleList(
            parts.decoder_block(*sizes, **block) for _ in range(cfg.n_decoder_layers)
        )
        self.register_buffer("final_logits_bias", torch.zeros(cfg.vocab_size))
        parts.built(self)

    def to_hf_config(self, **overrides):
        """A `transformers.BartConfig` with this model's shape (needs `transformers`)."""
        return self.cfg.to_hf(**overrides)

    def _embed(self, ids: torch.Tensor, positions: BartLearnedPositions, norm: nn.Module):
        x = self.shared(ids) * self.embed_scale + positions(ids.shape[1])
        return self.dropout(norm(x))

    def _key_mask(self, mask: torch.Tensor | None, ids: torch.Tensor, name: str) -> torch.Tensor:
        """(B, L) 0/1 or bool -> bool (B, 1, 1, L), True at keys that may be attended to."""
        if mask is None:
            mask = ids != self.pad_id
        if mask.shape != ids.shape:
            raise ValueError(
                f"{name} has shape {tuple(mask.shape)} but the token ids have {tuple(ids.shape)}"
            )
        return mask.bool()[:, None, None, :]

    def encode(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """input_ids (B, L_s) -> memory (B, L_s, d_model) and its key mask (B, 1, 1, L_s)."""
        require_ndim("input_ids", input_ids, 2, "(B, L_s)")
        src_mask = self._key_mask(attention_mask, input_ids, "attention_mask")
        x = self._embed(input_ids, self.encoder_positions, self.encoder_layernorm_embedding)
        for block in self.encoder:
            x = block(x, mask=src_mask)
        return x, src_mask

    def decode_hidden(
        self,
        decoder_input_ids: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        decoder_attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """decoder_input_ids (B, L_t) -> the decoder's last hidden states (B, L_t, d_model)."""
        require_ndim("decoder_input_ids", decoder_input_ids, 2, "(B, L_t)")
        L = decoder_input_ids.shape[1]
        self_mask = causal_mask(L, device=decoder_input_ids.device)
        if decoder_attention_mask is not None:
            self_mask = self_mask & self._key_mask(
                decoder_attention_mask, decoder_input_ids, "decoder_attention_mask"
            )
        x = self._embed(decoder_input_ids, self.decoder_positions, self.decoder_layernorm_embedding)
        for block in self.decoder:
            x = block(x, memory, self_mask=self_mask, memory_mask=src_mask)
        return x

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, L, d_model) -> (B, L, vocab_size): tied to the embedding, plus final_logits_bias."""
        return F.linear(hidden, self.shared.weight) + self.final_logits_bias.to(hidden.dtype)

    def forward(
        self,
        input_ids: torch.Tensor,
        decoder_input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        memory, src_mask = self.encode(input_ids, attention_mask)
        hidden = self.decode_hidden(decoder_input_ids, memory, src_mask, decoder_attention_mask)
        return self.lm_head(hidden)

    def loss(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Denoising loss: cross-entropy of reconstructing `labels` (B, L_t) from `input_ids`.

        The decoder reads labels shifted right (teacher forcing); positions equal to -100 or
        pad_id in labels are ignored.
        """
        decoder_input_ids = shift_tokens_right(labels, self.pad_id, self.decoder_start_id)
        logits = self(input_ids, decoder_input_ids, attention_mask)
        targets = labels.masked_fill(labels == self.pad_id, -100)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        max_new_tokens: int = 20,
        decoder_start_id: int | None = None,
        eos_id: int | None = None,
    ) -> torch.Tensor:
        """Greedy decoding: (B, L_s) -> (B, 1 + n), starting with decoder_start_id.

        Each step appends the most likely next token; a sequence that has produced EOS is padded
        with pad_id; stops when all have finished or after max_new_tokens.
        """
        start = self.decoder_start_id if decoder_start_id is None else decoder_start_id
        eos = self.eos_id if eos_id is None else eos_id
        memory, src_mask = self.encode(input_ids, attention_mask)
        B = input_ids.shape[0]
        ys = torch.full((B, 1), start, dtype=torch.long, device=input_ids.device)
        done = torch.zeros(B, dtype=torch.bool, device=input_ids.device)
        for _ in range(max_new_tokens):
            logits = self.lm_head(self.decode_hidden(ys, memory, src_mask)[:, -1])
            next_token = logits.argmax(-1).masked_fill(done, self.pad_id)
            ys = torch.cat([ys, next_token[:, None]], dim=1)
            done |= next_token == eos
            if done.all():
                break
        return ys


# ------------------------------------------------------------------------------------------------
# Loading Hugging Face weights
# ------------------------------------------------------------------------------------------------


def hf_key_map(n_encoder_layers: int, n_decoder_layers: int) -> dict[str, str]:
    """Our state_dict key -> the key in transformers.BartModel's state_dict."""
    keys = {
        "shared.weight": "shared.weight",
        "encoder_positions.weight": "encoder.embed_positions.weight",
        "decoder_positions.weight": "decoder.embed_positions.weight",
    }
    for side in ("encoder", "decoder"):
        for p in ("weight", "bias"):
            keys[f"{side}_layernorm_embedding.{p}"] = f"{side}.layernorm_embedding.{p}"
    attn = {"w_q": "q_proj", "w_k": "k_proj", "w_v": "v_proj", "w_o": "out_proj"}
    for i in range(n_encoder_layers):
        ours, theirs = f"encoder.{i}", f"encoder.layers.{i}"
        sub = {
            **{f"self_attn.{a}": f"self_attn.{b}" for a, b in attn.items()},
            "ffn.w_1": "fc1",
            "ffn.w_2": "fc2",
            "norm1": "self_attn_layer_norm",
            "norm2": "final_layer_norm",
        }
        for a, b in sub.items():
            for p in ("weight", "bias"):
                keys[f"{ours}.{a}.{p}"] = f"{theirs}.{b}.{p}"
    for i in range(n_decoder_layers):
        ours, theirs = f"decoder.{i}", f"decoder.layers.{i}"
        sub = {
            **{f"self_attn.{a}": f"self_attn.{b}" for a, b in attn.items()},
            **{f"cross_attn.{a}": f"encoder_attn.{b}" for a, b in attn.items()},
            "ffn.w_1": "fc1",
            "ffn.w_2": "fc2",
            "norm1": "self_attn_layer_norm",
            "norm2": "encoder_attn_layer_norm",
            "norm3": "final_layer_norm",
        }
        for a, b in sub.items():
            for p in ("weight", "bias"):
                keys[f"{ours}.{a}.{p}"] = f"{theirs}.{b}.{p}"
    return keys


def from_hf(hf_model: nn.Module, parts: Parts | None = None) -> BART:
    """A BART with the weights of a transformers BartModel or BartForConditionalGeneration, built
    from `parts` (the reference by default; `student.parts()` for your own).

    Works offline with a model built from a config (random weights) and with real checkpoints
    (e.g. facebook/bart-base) when they are available. The result has the HF model's dtype and
    device and is in eval mode.
    """
    from transformers import BartForConditionalGeneration, BartModel

    if isinstance(hf_model, BartForConditionalGeneration):
        body, final_logits_bias = hf_model.model, hf_model.final_logits_bias
        if not torch.equal(hf_model.lm_head.weight, body.shared.weight):
            raise ValueError("lm_head is not tied to the shared embedding; BART here ties them")
    elif isinstance(hf_model, BartModel):
        body, final_logits_bias = hf_model, None
    else:
        raise TypeError(
            "from_hf expects a transformers BartModel or BartForConditionalGeneration, "
            f"got {type(hf_model).__name__}"
        )
    model = BART(BARTConfig.from_hf(hf_model.config), parts=parts)
    c = model.cfg
    theirs = body.state_dict()
    ours = model.state_dict()
    key_map = hf_key_map(c.n_encoder_layers, c.n_decoder_layers)
    unmapped = set(ours) - set(key_map) - {"final_logits_bias"}
    if unmapped:
        raise RuntimeError(f"no Hugging Face key for {sorted(unmapped)}")
    with torch.no_grad():
        for key, hf_key in key_map.items():
            if ours[key].shape != theirs[hf_key].shape:
                raise ValueError(
                    f"{key} has shape {tuple(ours[key].shape)} but {hf_key} has "
                    f"{tuple(theirs[hf_key].shape)}"
                )
            ours[key] = theirs[hf_key].detach().clone()
        if final_logits_bias is not None:
            ours["final_logits_bias"] = final_logits_bias.detach().reshape(-1).clone()
    model = model.to(device=body.shared.weight.device, dtype=body.shared.weight.dtype)
    model.load_state_dict(ours)
    return model.eval()
