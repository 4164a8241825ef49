"""Lesson 08 — GPT: a decoder-only language model, sampling, the KV cache, and fine-tuning.

GPT keeps only the decoder of the Transformer, without cross-attention: a stack of pre-norm blocks
whose self-attention is causal, so position i sees tokens 0..i and nothing after. Trained to
predict each next token, it maximises the language-modelling likelihood

    L1(U) = Σ_i log P(u_i | u_{i-k}, ..., u_{i-1})

over a corpus U (k is the context size, here `n_positions`). The forward pass, in the paper's
symbols (U the one-hot context, W_e the token embedding, W_p the position embedding):

    h_0 = U W_e + W_p
    h_l = block(h_{l-1})              for l = 1 .. n
    P(u) = softmax(h_n W_eᵀ)          the output layer reuses W_e ("tied" weights)

GPT-2 moved the LayerNorm in front of each sublayer (pre-norm) and added a final one, `ln_f`,
before the output layer; this module follows GPT-2 so that its weights load unchanged.

Generation is autoregressive: sample one token, append it, run again. Recomputing the whole
prefix each step repeats work: the keys and values of the old positions never change (the mask
stops them from seeing the new token). The KV cache keeps them, so each step only runs the new
token through the network.

Fine-tuning (GPT-1) puts a linear layer W_y on the last token's final hidden state,
P(y | x^1..x^m) = softmax(h^m W_y), and trains on L3 = L2 + λ·L1: the classification loss plus
λ times the language-modelling loss on the same text as an auxiliary objective.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import require_ndim
from .add_norm import ACTIVATIONS, FeedForward, LayerNorm
from .encoder_decoder import Parts
from .masking import causal_mask
from .multihead import KVCache, MultiHeadAttention

IGNORE_INDEX = -100  # target value that the losses skip (as in F.cross_entropy)


def _require_token_ids(name: str, idx: torch.Tensor, vocab_size: int) -> None:
    """idx must be a (B, L) integer tensor with every id in 0 .. vocab_size - 1 (the ids are
    read only when not compiling: under torch.compile only the shape and dtype are checked)."""
    require_ndim(name, idx, 2, "(B, L)")
    if idx.is_floating_point() or idx.is_complex() or idx.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids, got dtype {idx.dtype}")
    if _compiling():
        return  # reading the ids would break the compiled graph in two (and wait for a GPU)
    if idx.numel() and (idx.min() < 0 or idx.max() >= vocab_size):
        raise ValueError(
            f"{name} has token ids in [{int(idx.min())}, {int(idx.max())}] but the vocabulary "
            f"has {vocab_size} tokens (ids 0 .. {vocab_size - 1}); shape {tuple(idx.shape)}"
        )


def _compiling() -> bool:
    """Whether torch.compile is tracing this call (torch.compiler.is_compiling, from torch 2.3;
    always False before)."""
    is_compiling = getattr(torch.compiler, "is_compiling", None)
    return is_compiling is not None and is_compiling()


@dataclass
class GPTConfig:
    """The sizes and settings of a GPT. The defaults are those of a small model trained from
    scratch (nanoGPT's CPU configuration: 4 blocks of 4 heads, d_model 128, a context of 64).

        vocab_size:  number of tokens V.
        n_positions: the context size: at most this many positions (learned table W_p).
        d_model, n_heads, n_layers: width, heads per block, number of blocks.
        d_ff:        hidden size of the feed-forward network; None means 4 * d_model.
        dropout:     on the embeddings, attention weights and residual branches.
        eps:         the LayerNorm epsilon.
        activation:  the feed-forward network's nonlinearity, one of `add_norm.ACTIVATIONS`:
                     "gelu" (the default) is the exact GELU, nanoGPT's, cheaper on a CPU;
                     "gelu_tanh" is GPT-2's tanh approximation, which GPT-2's weights need
                     (`GPT.from_hf` sets it).
    """

    vocab_size: int
    n_positions: int = 64
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 4
    d_ff: int | None = None
    dropout: float = 0.0
    eps: float = 1e-5
    activation: str = "gelu"

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}"
            )
        for name in ("vocab_size", "n_positions", "n_layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @classmethod
    def from_hf(cls, hf_config) -> GPTConfig:
        """Our GPTConfig for a `transformers.GPT2Config` (GPT-2's tanh GELU: "gelu_new")."""
        activation = getattr(hf_config, "activation_function", "gelu_new")
        if activation not in _FROM_HF_ACTIVATION:
            raise ValueError(
                f"GPT loads a GELU ({', '.join(sorted(_FROM_HF_ACTIVATION))} in Hugging Face's "
                f"names); the model's activation is {activation!r}"
            )
        if not getattr(hf_config, "scale_attn_weights", True) or getattr(
            hf_config, "scale_attn_by_inverse_layer_idx", False
        ):
            raise ValueError("GPT scales attention scores by 1/sqrt(d_k) only; this config differs")
        return cls(
            vocab_size=hf_config.vocab_size,
            n_positions=hf_config.n_positions,
            d_model=hf_config.n_embd,
            n_heads=hf_config.n_head,
            n_layers=hf_config.n_layer,
            d_ff=hf_config.n_inner or 4 * hf_config.n_embd,
            dropout=hf_config.resid_pdrop,
            eps=hf_config.layer_norm_epsilon,
            activation=_FROM_HF_ACTIVATION[activation],
        )

    def to_hf(self, **overrides):
        """A `transformers.GPT2Config` with these sizes (needs `transformers`)."""
        from transformers import GPT2Config

        kwargs = dict(
            vocab_size=self.vocab_size,
            n_positions=self.n_positions,
            n_embd=self.d_model,
            n_layer=self.n_layers,
            n_head=self.n_heads,
            n_inner=self.d_ff,
            activation_function=_TO_HF_ACTIVATION[self.activation],
            resid_pdrop=self.dropout,
            embd_pdrop=self.dropout,
            attn_pdrop=self.dropout,
            layer_norm_epsilon=self.eps,
            tie_word_embeddings=True,
            bos_token_id=self.vocab_size - 1,
            eos_token_id=self.vocab_size - 1,
        )
        return GPT2Config(**kwargs | overrides)


class GPTBlock(nn.Module):
    """GPT-2's decoder-only block: causal self-attention and the FFN, each pre-norm with a residual.

        x = x + attn(norm1(x), causal mask)      (no cross-attention: there is no encoder)
        x = x + ffn(norm2(x))                    (cfg.activation: a GELU)

    Lesson 05's pre-norm block with lesson 06's causal mask, plus the KV cache for generation.
    The sublayers are built from the classes passed in (`attention`, `norm`, `ffn`).

    GPTBlock(cfg: GPTConfig, *, attention, norm, ffn)
    forward(x (B, L, d_model), mask=None, cache=None, is_causal=False) -> (B, L, d_model)
    is_causal=True says `mask` is the plain causal mask (L, L); an attention that takes the hint
    (the reference's) then lets its fused kernel mask by itself.
    """

    norm_first = True  # always pre-norm (GPT-2)

    def __init__(
        self,
        cfg: GPTConfig,
        *,
        attention: type[nn.Module] = MultiHeadAttention,
        norm: type[nn.Module] = LayerNorm,
        ffn: type[nn.Module] = FeedForward,
    ):
        super().__init__()
        d_model, d_ff = cfg.d_model, cfg.d_ff or 4 * cfg.d_model
        self.self_attn = attention(d_model, cfg.n_heads, dropout=cfg.dropout)
        self.ffn = ffn(d_model, d_ff, cfg.activation, cfg.dropout)
        self.norm1 = norm(d_model, cfg.eps)
        self.norm2 = norm(d_model, cfg.eps)
        self.dropout1 = nn.Dropout(cfg.dropout)
        self.dropout2 = nn.Dropout(cfg.dropout)
        forward = inspect.signature(self.self_attn.forward).parameters
        self.takes_is_causal = "is_causal" in forward  # a student's attention need not

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        attend = {} if cache is None else {"cache": cache}  # a part without a cache never gets one
        if is_causal and self.takes_is_causal:
            attend["is_causal"] = True
        x = x + self.dropout1(self.self_attn(self.norm1(x), mask=mask, **attend))
        return x + self.dropout2(self.ffn(self.norm2(x)))


class GPT(nn.Module):
    """A GPT-2-style decoder-only Transformer language model.

    GPT(cfg: GPTConfig, parts=None)
        cfg:   the sizes (see `GPTConfig`).
        parts: what the blocks are made of (`Parts()`, the reference, by default): each of the
            n_layers `GPTBlock`s builds its sublayers from `parts.attention`, `parts.norm` and
            `parts.ffn`, and `ln_f` is a `parts.norm`. Pass `student.parts()` for your own.

    forward(idx (B, L), cache=None) -> logits (B, L, V), where logits[:, t] scores token t + 1.
    `cache` is a list of one `KVCache` per block (see `new_cache`); with it, `idx` holds only the
    new tokens, placed after the len(cache[0]) positions already cached.
    """

    def __init__(self, cfg: GPTConfig, parts: Parts | None = None):
        super().__init__()
        parts = Parts() if parts is None else parts
        self.cfg = cfg
        self.vocab_size, self.n_positions, self.d_model = (
            cfg.vocab_size,
            cfg.n_positions,
            cfg.d_model,
        )
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)  # W_e
        self.wpe = nn.Embedding(cfg.n_positions, cfg.d_model)  # W_p
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(GPTBlock(cfg, **parts.sublayers) for _ in range(cfg.n_layers))
        self.ln_f = parts.norm(cfg.d_model, cfg.eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.reset_parameters()
        self.lm_head.weight = self.wte.weight  # tie: logits = h_n W_eᵀ
        parts.built(self)

    def reset_parameters(self) -> None:
        """GPT-2's initialisation: N(0, 0.02) weights, zero biases; the two projections that
        write into the residual stream (w_o, ffn.w_2) get std 0.02 / sqrt(2 n_layers) so the
        variance of the residual stream does not grow with depth."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        residual_std = 0.02 / math.sqrt(2 * len(self.blocks))
        for block in self.blocks:
            nn.init.normal_(block.self_attn.w_o.weight, mean=0.0, std=residual_std)
            nn.init.normal_(block.ffn.w_2.weight, mean=0.0, std=residual_std)

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Number of parameters (the tied head is counted once); optionally without wte and wpe."""
        n = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            n -= self.wte.weight.numel() + self.wpe.weight.numel()
        return n

    @property
    def supports_cache(self) -> bool:
        """Whether every block's attention takes a KV cache (a part written without one does not:
        `generate` then recomputes the prefix at each step)."""
        return all(getattr(block.self_attn, "supports_cache", False) for block in self.blocks)

    def new_cache(self) -> list[KVCache]:
        """An empty KV cache: one KVCache per block."""
        return [KVCache() for _ in self.blocks]

    # -- the forward pass -------------------------------------------------------------------

    def _position_rows(self, offset: int, L: int) -> torch.Tensor:
        """W_p's rows for L new tokens that follow `offset` cached ones: positions offset ..
        offset + L - 1, (L, d_model). A slice of the table: the same numbers as
        `wpe(torch.arange(offset, offset + L))` without building the indices each step."""
        return self.wpe.weight[offset : offset + L]

    def _attention_mask(self, L_q: int, L_k: int, device) -> torch.Tensor | None:
        """Causal mask (L_q, L_k) for the last L_q of L_k positions; True = may attend.

        The new queries are the last L_q rows of the full causal mask. A single new token may
        attend to every key, so it needs no mask.
        """
        if L_q == 1:
            return None
        return causal_mask(L_k, device=device)[-L_q:]

    def hidden_states(self, idx: torch.Tensor, cache: list[KVCache] | None = None) -> torch.Tensor:
        """h_n after the final LayerNorm: (B, L) token ids -> (B, L, d_model)."""
        _require_token_ids("idx", idx, self.vocab_size)
        offset = 0
        if cache is not None:
            if len(cache) != len(self.blocks):
                raise ValueError(
                    f"cache has {len(cache)} entries but the model has {len(self.blocks)} blocks; "
                    "make one with model.new_cache()"
                )
            offset = len(cache[0])  # positions already cached
        L = idx.shape[1]
        if offset + L > self.n_positions:
            raise ValueError(
                f"sequence of length {offset + L} ({offset} cached + {L} new, idx shape "
                f"{tuple(idx.shape)}) is longer than n_positions={self.n_positions}: crop the "
                f"input to its last {self.n_positions} tokens (generate() does this)"
            )
        W_p = self._position_rows(offset, L)
        h = self.drop(self.wte(idx) + W_p)  # h_0 = U W_e + W_p, (B, L, d_model)
        mask = self._attention_mask(L, offset + L, idx.device)
        is_causal = mask is not None and offset == 0  # the plain causal mask: no cached prefix
        for i, block in enumerate(self.blocks):
            h = block(h, mask=mask, cache=None if cache is None else cache[i], is_causal=is_causal)
        return self.ln_f(h)

    def forward(self, idx: torch.Tensor, cache: list[KVCache] | None = None) -> torch.Tensor:
        """(B, L) token ids -> (B, L, vocab_size) logits: P(u) = softmax(h_n W_eᵀ)."""
        return self.lm_head(self.hidden_states(idx, cache))

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of the next-token predictions (the negative of L1, averaged).

        targets (B, L) is aligned with idx: targets[:, t] is the token after idx[:, t] (see
        `shift_targets`); positions with target -100 are ignored.
        """
        logits = self(idx)
        return lm_loss(logits, targets)

    # -- generation ------------------------------------------------------------------------

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
        return_logits: bool = False,
        top_p: float | None = None,
    ):
        """Append `max_new_tokens` sampled tokens to idx (B, L); returns (B, L + max_new_tokens).

        Each step samples from the last position's logits with `sample_next` (temperature, top_k,
        top_p; temperature 0 or top_k=1: greedy). With use_cache, the prompt runs once to fill a KV cache and each later
        step feeds only the newest token. Once the context would pass n_positions, the model sees
        only the last n_positions tokens: their positions all shift, so the cached keys no longer
        apply and that step is recomputed from scratch, as without a cache.

        With return_logits=True also returns the logits used at each step, (B, max_new_tokens, V).
        The model is put in eval mode during generation and its mode restored afterwards.
        """
        _require_token_ids("idx", idx, self.vocab_size)
        if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        if idx.shape[1] == 0:
            raise ValueError(
                f"idx must hold at least one token per row, got shape {tuple(idx.shape)}"
            )
        if use_cache and not self.supports_cache:
            if not getattr(self, "_told_no_cache", False):
                attention = next(
                    type(b.self_attn)
                    for b in self.blocks
                    if not getattr(b.self_attn, "supports_cache", False)
                )
                print(
                    f"  generate: {attention.__module__}.{attention.__name__} has no KV cache; "
                    "recomputing"
                )
                self._told_no_cache = True
            use_cache = False
        was_training = self.training
        self.eval()
        cache: list[KVCache] | None = None
        step_logits = []
        try:
            for _ in range(max_new_tokens):
                if use_cache and cache is not None and len(cache[0]) < self.n_positions:
                    logits = self(idx[:, -1:], cache=cache)  # only the newest token
                else:
                    cache = self.new_cache() if use_cache else None
                    logits = self(idx[:, -self.n_positions :], cache=cache)  # (re)compute, cropped
                next_logits = logits[:, -1, :]  # (B, V)
                step_logits.append(next_logits)
                next_id = sample_next(next_logits, temperature, top_k, generator, top_p=top_p)
                idx = torch.cat([idx, next_id[:, None].to(idx.dtype)], dim=1)
        finally:
            self.train(was_training)
        if return_logits:
            V = self.vocab_size
            empty = torch.empty(idx.shape[0], 0, V, device=idx.device, dtype=self.wte.weight.dtype)
            return idx, torch.stack(step_logits, dim=1) if step_logits else empty
        return idx

    # -- Hugging Face interoperability --------------------------------------------------------

    @classmethod
    def from_hf(cls, hf_model, parts: Parts | None = None) -> GPT:
        """Build a GPT with every weight of a `transformers` GPT2LMHeadModel or GPT2Model.

        `parts` as in the constructor: `GPT.from_hf(hf, parts=student.parts())` loads the weights
        into your own attention and LayerNorm.

        Works the same for a random-weight model built from a GPT2Config and for a pretrained
        checkpoint (`GPT2LMHeadModel.from_pretrained("gpt2")`, when online). The result has the
        dtype and device of the Hugging Face weights and is in eval mode.

        GPT-2 stores its projections as Conv1D with weight (in, out), the transpose of
        nn.Linear's (out, in); its `c_attn` packs W^Q, W^K, W^V side by side along the output.
        """
        body = getattr(hf_model, "transformer", hf_model)  # GPT2LMHeadModel wraps a GPT2Model
        lm_head = getattr(hf_model, "lm_head", None)
        if lm_head is not None and not torch.equal(lm_head.weight, body.wte.weight):
            raise ValueError("the model's lm_head is not tied to wte; GPT ties them")
        weight = body.wte.weight
        model = cls(GPTConfig.from_hf(hf_model.config), parts=parts)
        model.to(device=weight.device, dtype=weight.dtype)
        d_model = model.d_model

        state = {"wte.weight": body.wte.weight, "wpe.weight": body.wpe.weight}
        for i, hf_block in enumerate(body.h):
            p = f"blocks.{i}."
            q, k, v = _split_c_attn(hf_block.attn.c_attn.weight, hf_block.attn.c_attn.bias, d_model)
            for name, (w, b) in zip(("w_q", "w_k", "w_v"), (q, k, v)):
                state[p + f"self_attn.{name}.weight"], state[p + f"self_attn.{name}.bias"] = w, b
            pairs = {
                "norm1": hf_block.ln_1,
                "norm2": hf_block.ln_2,
                "self_attn.w_o": hf_block.attn.c_proj,
                "ffn.w_1": hf_block.mlp.c_fc,
                "ffn.w_2": hf_block.mlp.c_proj,
            }
            for ours, theirs in pairs.items():
                is_conv1d = not ours.startswith("norm")
                w = _conv1d_to_linear(theirs.weight) if is_conv1d else theirs.weight
                state[p + ours + ".weight"], state[p + ours + ".bias"] = w, theirs.bias
        state["ln_f.weight"], state["ln_f.bias"] = body.ln_f.weight, body.ln_f.bias
        state["lm_head.weight"] = body.wte.weight  # tied
        with torch.no_grad():
            model.load_state_dict({k: t.detach() for k, t in state.items()}, strict=True)
        return model.eval()

    def to_hf_config(self, **overrides):
        """A `transformers.GPT2Config` with this model's shape (needs `transformers`)."""
        return self.cfg.to_hf(**overrides)


# Hugging Face's GPT-2 activation_function -> ours (add_norm.ACTIVATIONS): the GELUs
_FROM_HF_ACTIVATION = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}
_TO_HF_ACTIVATION = {  # ours -> Hugging Face's name for the same function
    "gelu_tanh": "gelu_new",  # GPT-2's
    "gelu": "gelu",
    "relu": "relu",
    "quick_gelu": "quick_gelu",
}


def _conv1d_to_linear(weight: torch.Tensor) -> torch.Tensor:
    """GPT-2's Conv1D weight (in, out) -> nn.Linear's weight (out, in)."""
    return weight.t()


def _split_c_attn(
    weight: torch.Tensor, bias: torch.Tensor, d_model: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Unpack GPT-2's c_attn (weight (d, 3d), bias (3d,)) into [(W, b) for Q, K, V] as nn.Linear."""
    if weight.shape != (d_model, 3 * d_model):
        raise ValueError(
            f"c_attn weight must be (d, 3d) = ({d_model}, {3 * d_model}), got {tuple(weight.shape)}"
        )
    ws = weight.split(d_model, dim=1)  # q | k | v along the output features
    bs = bias.split(d_model, dim=0)
    return [(_conv1d_to_linear(w), b) for w, b in zip(ws, bs)]


# -- losses and sampling ----------------------------------------------------------------------


def shift_targets(idx: torch.Tensor, pad_id: int | None = None) -> torch.Tensor:
    """Next-token targets aligned with idx (B, L): targets[:, t] = idx[:, t + 1].

    The last position has no next token, and with pad_id, padding is not a target: both -100.
    """
    require_ndim("idx", idx, 2, "(B, L)")
    targets = torch.full_like(idx, IGNORE_INDEX)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[targets == pad_id] = IGNORE_INDEX
    return targets


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy: logits (B, L, V), targets (B, L) with -100 = ignore."""
    require_ndim("logits", logits, 3, "(B, L, V)")
    if targets.shape != logits.shape[:2]:
        raise ValueError(
            f"targets must have shape (B, L) = {tuple(logits.shape[:2])} to match logits "
            f"{tuple(logits.shape)}, got {tuple(targets.shape)}"
        )
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX
    )


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    *,
    top_p: float | None = None,
) -> torch.Tensor:
    """Draw one token per row from logits (B, V); returns (B,) ids.

    temperature T divides the logits: T < 1 sharpens the distribution, T > 1 flattens it, and
    T = 0 (like top_k=1) means greedy decoding: the argmax. top_k keeps only the k largest
    logits (ties with the k-th are kept) and renormalises; k above V keeps everything. top_p
    keeps the nucleus: the fewest most likely tokens that hold at least p of the probability
    (see `next_token_probs`).
    `generator` (a torch.Generator) makes the draw reproducible. The draw happens where the
    generator lives: a CPU generator (``torch.Generator()``, what a notebook usually makes) with
    logits on a GPU draws on the CPU and returns the ids on the logits' device, so one seed gives
    the same tokens on every device.
    """
    probs = next_token_probs(logits, temperature, top_k, top_p)  # checks the arguments
    if temperature == 0 or top_k == 1:
        return probs.argmax(dim=-1)  # greedy: nothing to draw
    probs = probs.to(torch.promote_types(probs.dtype, torch.float32))
    if generator is not None and generator.device.type != probs.device.type:
        draw = torch.multinomial(probs.to(generator.device), num_samples=1, generator=generator)
        return draw.squeeze(-1).to(logits.device)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)


# -- the compute of a training run -----------------------------------------------------------


def training_flops(model: GPT, batch_size: int, block_size: int, n_steps: int) -> int:
    """Training FLOPs ≈ 6·N·D (Kaplan et al. 2020): N parameters, D tokens trained on.

    N counts the parameters outside the embeddings (Kaplan et al.'s convention): every parameter
    of `model` except the token table W_e (`wte`, which is also the tied output layer) and the
    position table W_p (`wpe`), each counted once. D = batch_size · block_size · n_steps, every
    token of every window of every step. Per token, each parameter costs one multiply-add (2
    FLOPs) in the forward pass and two in the backward pass (the gradient of the activations and
    of the weight): 6 FLOPs. The count leaves out the attention scores (2·n_layers·L·d per token
    forward) and the output layer's product with W_e (2·d·V), both small for short contexts and
    wide models.
    """
    for name, value in (
        ("batch_size", batch_size),
        ("block_size", block_size),
        ("n_steps", n_steps),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if block_size > model.n_positions:
        raise ValueError(
            f"block_size {block_size} is longer than the model's n_positions={model.n_positions}"
        )
    n_params = model.num_parameters(exclude_embeddings=True)  # N
    n_tokens = batch_size * block_size * n_steps  # D
    return 6 * n_params * n_tokens


# -- fine-tuning (GPT-1) ------------------------------------------------------------------------


class GPTClassifier(nn.Module):
    """A pretrained GPT plus a linear layer W_y on the last token: P(y|x) = softmax(h^m W_y).

    forward(idx (B, L), return_lm_logits=False) -> class logits (B, n_classes), and with
    return_lm_logits also the LM logits (B, L, V) of the same pass (for the auxiliary L1 term).
    With pad_id, sequences may be right-padded: each row is read at its last non-pad token.
    Because attention is causal, padding after that token cannot change its hidden state.
    """

    def __init__(self, gpt: GPT, n_classes: int, pad_id: int | None = None):
        super().__init__()
        if n_classes < 1:
            raise ValueError(f"n_classes must be >= 1, got {n_classes}")
        self.gpt, self.n_classes, self.pad_id = gpt, n_classes, pad_id
        self.w_y = nn.Linear(gpt.d_model, n_classes, bias=False)  # W_y
        nn.init.normal_(self.w_y.weight, mean=0.0, std=0.02)

    def last_token_index(self, idx: torch.Tensor) -> torch.Tensor:
        """(B,) index of each row's last non-pad token (L - 1 when there is no pad_id)."""
        B, L = idx.shape
        if self.pad_id is None:
            return torch.full((B,), L - 1, dtype=torch.long, device=idx.device)
        positions = torch.arange(L, device=idx.device).expand(B, L)
        last = torch.where(idx != self.pad_id, positions, -1).max(dim=-1).values
        if (last < 0).any():
            rows = torch.nonzero(last < 0).flatten().tolist()
            raise ValueError(f"rows {rows} of idx {tuple(idx.shape)} contain only padding")
        return last

    def forward(self, idx: torch.Tensor, return_lm_logits: bool = False):
        h = self.gpt.hidden_states(idx)  # (B, L, d_model)
        last = self.last_token_index(idx)  # (B,)
        h_m = h[torch.arange(idx.shape[0], device=idx.device), last]  # (B, d_model)
        cls_logits = self.w_y(h_m)  # (B, n_classes)
        if return_lm_logits:
            return cls_logits, self.gpt.lm_head(h)
        return cls_logits


def finetune_loss(
    cls_logits: torch.Tensor,
    labels: torch.Tensor,
    lm_logits: torch.Tensor,
    lm_targets: torch.Tensor,
    lam: float,
) -> torch.Tensor:
    """GPT-1's fine-tuning objective L3 = L2 + λ·L1, written as losses to minimise.

    L2: cross-entropy of cls_logits (B, n_classes) against labels (B,);
    L1: next-token cross-entropy of lm_logits (B, L, V) against lm_targets (B, L) (-100 ignored),
    the language-modelling loss kept as an auxiliary objective (the paper uses λ = 0.5).
    """
    require_ndim("cls_logits", cls_logits, 2, "(B, n_classes)")
    require_ndim("labels", labels, 1, "(B,)")
    if labels.shape[0] != cls_logits.shape[0]:
        raise ValueError(
            f"labels has {labels.shape[0]} rows but cls_logits {tuple(cls_logits.shape)} has "
            f"{cls_logits.shape[0]}"
        )
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not lam >= 0:
        raise ValueError(f"lam (λ) must be a number >= 0, got {lam!r}")
    L2 = F.cross_entropy(cls_logits, labels)
    L1 = lm_loss(lm_logits, lm_targets)
    return L2 + lam * L1


# -- the sampling distribution (lesson 08's exercise) -------------------------------------------


def next_token_probs(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """The distribution `sample_next` draws from: logits (B, V) -> probabilities (B, V).

    In this order (Hugging Face's): divide by the temperature T, keep the top_k largest logits,
    keep the top_p nucleus of what is left, softmax. Removed logits are set to -inf, so they get
    probability exactly 0 and the kept ones are renormalised.

    top_k keeps every logit >= the k-th largest (ties with it are kept); k of V or more keeps
    everything. top_p (0 < p <= 1; nucleus sampling, Holtzman et al. 2020) keeps the smallest set
    of most likely tokens whose probability (after temperature and top-k) sums to at least p: a
    token is kept when the tokens more likely than it hold less than p, so the token whose
    probability crosses p is kept, and tokens tied with the last one kept are kept too. p = 1
    keeps everything. T = 0 or top_k = 1 is greedy decoding: a one-hot row at the argmax. The
    result has the logits' dtype.
    """
    require_ndim("logits", logits, 2, "(B, V)")
    if not logits.is_floating_point():
        raise TypeError(f"logits must be floating point, got dtype {logits.dtype}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a number, got {type(temperature).__name__}")
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be None or an int >= 1, got {top_k!r}")
    if top_p is not None and (
        isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1
    ):
        raise ValueError(f"top_p must be None or a number with 0 < top_p <= 1, got {top_p!r}")
    if temperature == 0 or top_k == 1:
        greedy = F.one_hot(logits.argmax(dim=-1), logits.shape[-1])
        return greedy.to(logits.dtype)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth_largest = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth_largest, float("-inf"))
    work = torch.promote_types(logits.dtype, torch.float32)  # half logits: softmax in float32
    if top_p is not None and top_p < 1:
        logits = logits.masked_fill(logits < _nucleus_threshold(logits.to(work), top_p), -math.inf)
    return torch.softmax(logits.to(work), dim=-1).to(logits.dtype)


def _nucleus_threshold(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """(B, 1): the smallest logit of each row's top-p nucleus; the logits >= it are kept.

    Sorted from the most likely down, a token belongs to the nucleus when the tokens before it
    hold less than top_p of the probability (the first token always does).
    """
    sorted_logits = logits.sort(dim=-1, descending=True).values  # (B, V)
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # the probability of the tokens more likely
    n_kept = (mass_before < top_p).sum(dim=-1, keepdim=True).clamp(min=1)  # (B, 1)
    return sorted_logits.gather(-1, n_kept - 1)
