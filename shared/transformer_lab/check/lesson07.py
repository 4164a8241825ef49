"""Checks for lesson 07 — cross-attention: `DecoderBlock` and `greedy_decode`."""

from __future__ import annotations

import functools
import math

import torch

from .. import encoder_decoder as _ed
from ..masking import causal_mask
from .answer_drivers import Finding, TrialDriver
from .devices import devices
from .drivers import ModuleDriver
from .exercise import Case, Exercise, Mistake

__all__ = ["DecoderBlock", "greedy_decode"]

# ==============================================================================================
# Exercise 1 — DecoderBlock: masked self-attention, cross-attention, FFN, each with Add & Norm.


class _DecoderKVFromDecoder(_ed.DecoderBlock):
    """Cross-attention reads keys and values from the decoder itself: the memory is ignored."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = x + self.cross_attn(self.norm2(x))
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(x + self.cross_attn(x))
        return self.norm3(x + self.ffn(x))


class _DecoderRolesSwapped(_ed.DecoderBlock):
    """Queries from the memory, keys and values from the decoder."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = x + self.cross_attn(memory, context=self.norm2(x), mask=memory_mask)
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(x + self.cross_attn(memory, context=x, mask=memory_mask))
        return self.norm3(x + self.ffn(x))


class _DecoderRolesSwappedUnmasked(_ed.DecoderBlock):
    """Queries from the memory, keys and values from the decoder, and memory_mask left out (it
    masks the memory's keys, which are no longer keys); L_t rows kept for the residual."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        L_t = x.shape[1]
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = x + self.cross_attn(memory, context=self.norm2(x))[:, :L_t]
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(x + self.cross_attn(memory, context=x)[:, :L_t])
        return self.norm3(x + self.ffn(x))


class _DecoderNoSelfMask(_ed.DecoderBlock):
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        return super().forward(x, memory, self_mask=None, memory_mask=memory_mask)


class _DecoderNoMemoryMask(_ed.DecoderBlock):
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        return super().forward(x, memory, self_mask=self_mask, memory_mask=None)


class _DecoderNormSwapped(_ed.DecoderBlock):
    def forward(self, x, memory, self_mask=None, memory_mask=None):
        self.norm_first = not self.norm_first
        try:
            return super().forward(x, memory, self_mask=self_mask, memory_mask=memory_mask)
        finally:
            self.norm_first = not self.norm_first


class _DecoderNoResidual(_ed.DecoderBlock):
    """Post-norm without the residual around cross-attention."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=self_mask)
            x = self.cross_attn(self.norm2(x), context=memory, mask=memory_mask)
            return x + self.ffn(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, mask=self_mask))
        x = self.norm2(self.cross_attn(x, context=memory, mask=memory_mask))
        return self.norm3(x + self.ffn(x))


class _DecoderResidualFromNormed(_ed.DecoderBlock):
    """Pre-norm with the residual added to the normalised x: x = norm(x); x = x + f(x)."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if not self.norm_first:
            return super().forward(x, memory, self_mask=self_mask, memory_mask=memory_mask)
        x = self.norm1(x)
        x = x + self.self_attn(x, mask=self_mask)
        x = self.norm2(x)
        x = x + self.cross_attn(x, context=memory, mask=memory_mask)
        x = self.norm3(x)
        return x + self.ffn(x)


class _DecoderNormsReversed(_ed.DecoderBlock):
    """norm3 before self-attention and norm1 before the FFN."""

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        self.norm1, self.norm3 = self.norm3, self.norm1
        try:
            return super().forward(x, memory, self_mask=self_mask, memory_mask=memory_mask)
        finally:
            self.norm1, self.norm3 = self.norm3, self.norm1


class _DecoderWiring(_ed.DecoderBlock):
    """The block with one sub-layer wired wrongly (a switch of a subclass below)."""

    cross_first = memory_normed = masks_swapped = cross_reads_input = False
    residual_from_input = no_ffn_residual = norms_2_3_swapped = own_causal = False
    norms_by_position = ffn_post_norm = False

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        if self.masks_swapped:
            self_mask, memory_mask = memory_mask, self_mask
        if self.own_causal:
            self_mask = causal_mask(x.shape[1], device=x.device)
        pre, x0 = self.norm_first, x
        norm_self, norm_cross, norm_ffn = self.norm1, self.norm2, self.norm3
        if self.norms_2_3_swapped:
            norm_cross, norm_ffn = norm_ffn, norm_cross
        if self.norms_by_position:  # norm1 on whichever sub-layer runs first
            norm_self, norm_cross = norm_cross, norm_self
        mem = norm_cross(memory) if self.memory_normed and pre else memory

        def add(h, out):  # the residual sum (onto the block's input x when so wired)
            return (x0 if self.residual_from_input else h) + out

        def self_layer(h):
            return (
                add(h, self.self_attn(norm_self(h), mask=self_mask))
                if pre
                else norm_self(add(h, self.self_attn(h, mask=self_mask)))
            )

        def cross_layer(h, queries):
            if pre:
                return add(h, self.cross_attn(norm_cross(queries), context=mem, mask=memory_mask))
            return norm_cross(add(h, self.cross_attn(queries, context=mem, mask=memory_mask)))

        if self.cross_first:
            x = self_layer(cross_layer(x, x))
        else:
            h = self_layer(x)
            x = cross_layer(h, x if self.cross_reads_input else h)
        if self.ffn_post_norm:
            return norm_ffn(add(x, self.ffn(x)))
        if self.no_ffn_residual:
            return self.ffn(norm_ffn(x)) if pre else norm_ffn(self.ffn(x))
        return add(x, self.ffn(norm_ffn(x))) if pre else norm_ffn(add(x, self.ffn(x)))


class _DecoderCrossFirst(_DecoderWiring):
    cross_first = True


class _DecoderMemoryNormed(_DecoderWiring):
    memory_normed = True


class _DecoderMasksSwapped(_DecoderWiring):
    masks_swapped = True


class _DecoderCrossReadsInput(_DecoderWiring):
    cross_reads_input = True


class _DecoderResidualFromInput(_DecoderWiring):
    residual_from_input = True


class _DecoderNoFFNResidual(_DecoderWiring):
    no_ffn_residual = True


class _DecoderNorms23Swapped(_DecoderWiring):
    norms_2_3_swapped = True


class _DecoderOwnCausal(_DecoderWiring):
    own_causal = True


class _DecoderCrossFirstNormsByPosition(_DecoderWiring):
    cross_first = norms_by_position = True


class _DecoderFFNPostNorm(_DecoderWiring):
    ffn_post_norm = True


def _decoder_cases(thorough: bool) -> list[Case]:
    def case(
        B, L_t, L_s, d_model, n_heads, d_ff, norm_first=False, causal=True, pad=True, tgt_pad=0
    ):
        def make(g):
            inputs = {
                "x": torch.randn(B, L_t, d_model, generator=g, dtype=torch.float64),
                "memory": torch.randn(B, L_s, d_model, generator=g, dtype=torch.float64),
            }
            if causal:
                inputs["self_mask"] = causal_mask(L_t)
            if tgt_pad:  # the target padding too, as Transformer.decode builds it
                keep = torch.ones(B, L_t, dtype=torch.bool)
                keep[0, L_t - tgt_pad :] = False
                inputs["self_mask"] = causal_mask(L_t) & keep[:, None, None, :]
            if pad:
                # each source keeps its first position; later ones are padding at random
                keep = torch.rand(B, L_s, generator=g) < 0.6
                keep[:, 0] = True
                inputs["memory_mask"] = keep[:, None, None, :]
            return inputs

        init = {"d_model": d_model, "n_heads": n_heads, "d_ff": d_ff, "norm_first": norm_first}
        label = (
            f"DecoderBlock({d_model}, {n_heads}, {d_ff}, norm_first={norm_first}) on "
            f"x {(B, L_t, d_model)}, memory {(B, L_s, d_model)}"
            + (", causal self_mask" if causal and not tgt_pad else "")
            + (f", causal & target padding self_mask {(B, 1, L_t, L_t)}" if tgt_pad else "")
            + (f", memory_mask {(B, 1, 1, L_s)}" if pad else "")
        )
        return Case(label, make, init)

    # The first case has L_t == L_s so that swapped roles still run (and can be named).
    # The third has a self_mask that is more than causal: the first target ends in padding.
    cases = [
        case(2, 5, 5, 8, 2, 16),
        case(2, 4, 6, 8, 2, 16, norm_first=True),
        case(2, 5, 5, 8, 2, 16, norm_first=True, tgt_pad=2),
    ]
    if thorough:
        cases += [
            case(1, 1, 1, 4, 1, 8),
            case(3, 6, 3, 12, 3, 24),
            case(2, 3, 7, 16, 4, 32, norm_first=True),
            case(2, 4, 4, 8, 2, 8, causal=False, pad=False),
            case(1, 7, 2, 6, 2, 5, norm_first=True),
        ]
    return cases


DecoderBlock = Exercise(
    name="DecoderBlock",
    lesson="07",
    module="encoder_decoder",
    reference=_ed.DecoderBlock,
    forbidden=(
        "transformer_lab.encoder_decoder.DecoderBlock",
        "transformer_lab.DecoderBlock",
        "transformer_lab.encoder_decoder.Transformer",
        "transformer_lab.Transformer",
        "torch.nn.TransformerDecoderLayer",
        "torch.nn.TransformerDecoder",
        "torch.nn.Transformer",
    ),
    mistakes=[
        Mistake(
            "kv-from-x",
            "cross-attention ignores the memory: its keys and values must come from the "
            "encoder (self.cross_attn(x, context=memory, ...)).",
            _DecoderKVFromDecoder,
        ),
        Mistake(
            "roles-swapped",
            "the roles in cross-attention are swapped: the queries come from the decoder (x), "
            "the keys and values from the memory.",
            _DecoderRolesSwapped,
        ),
        Mistake(
            "no-self-mask",
            "the causal mask is not applied: pass self_mask to the self-attention sublayer.",
            _DecoderNoSelfMask,
        ),
        Mistake(
            "no-memory-mask",
            "the memory mask is ignored: pass memory_mask to the cross-attention sublayer so "
            "padded source positions get no weight.",
            _DecoderNoMemoryMask,
        ),
        Mistake(
            "norm-swapped",
            "pre-norm and post-norm are swapped: norm_first=True normalises each sublayer's "
            "input (x + f(norm(x))); norm_first=False normalises after the sum (norm(x + f(x))).",
            _DecoderNormSwapped,
        ),
        Mistake(
            "residual-from-normed",
            "pre-norm adds the sub-layer to the normalised x (x = norm(x); x = x + f(x)): the "
            "residual carries x itself, x = x + f(norm(x)), so the normalised copy is only the "
            "sub-layer's input.",
            _DecoderResidualFromNormed,
        ),
        Mistake(
            "norms-reversed",
            "the norms are used in the wrong order: norm1 goes with self-attention, norm2 with "
            "cross-attention and norm3 with the feed-forward layer.",
            _DecoderNormsReversed,
        ),
        Mistake(
            "no-cross-residual",
            "the residual connection around cross-attention is missing: add its output to x.",
            _DecoderNoResidual,
        ),
        Mistake(
            "cross-first",
            "cross-attention runs before the masked self-attention: the decoder first attends "
            "to its own prefix (self-attention), then to the encoder's memory, then the FFN.",
            _DecoderCrossFirst,
        ),
        Mistake(
            "memory-normed",
            "the memory goes through norm2 too: in a pre-norm block only the decoder's queries "
            "are normalised, cross_attn(norm2(x), context=memory) (the encoder normalised its "
            "output already).",
            _DecoderMemoryNormed,
        ),
        Mistake(
            "masks-swapped",
            "the two masks are swapped: self_mask (causal) goes to the self-attention, "
            "memory_mask (the source padding) to the cross-attention.",
            _DecoderMasksSwapped,
        ),
        Mistake(
            "cross-reads-block-input",
            "the cross-attention's queries come from the block's input x: they must come from "
            "the self-attention sub-layer's result, the sub-layers run one after the other.",
            _DecoderCrossReadsInput,
        ),
        Mistake(
            "residual-from-input",
            "every residual adds the block's input x: each sub-layer's sum adds its own input, "
            "the running x that the previous sub-layer returned.",
            _DecoderResidualFromInput,
        ),
        Mistake(
            "no-ffn-residual",
            "the residual connection around the feed-forward layer is missing: add its output "
            "to x (pre-norm: x + ffn(norm3(x)); post-norm: norm3(x + ffn(x))).",
            _DecoderNoFFNResidual,
        ),
        Mistake(
            "norms-2-3-swapped",
            "norm2 and norm3 are swapped: norm2 goes with the cross-attention and norm3 with the "
            "feed-forward layer.",
            _DecoderNorms23Swapped,
        ),
        Mistake(
            "own-causal-mask",
            "the self-attention builds its own causal mask and ignores self_mask: pass self_mask "
            "on, self.self_attn(..., mask=self_mask); it may hold the target's padding too.",
            _DecoderOwnCausal,
        ),
        Mistake(
            "cross-first-norm1",
            "cross-attention (with norm1) runs before the masked self-attention: the decoder "
            "first attends to its own prefix with norm1, then to the memory with norm2, then "
            "the FFN with norm3.",
            _DecoderCrossFirstNormsByPosition,
        ),
        Mistake(
            "pre-norm-ffn-post-norm",
            "the pre-norm block ends post-norm, norm3(x + ffn(x)): with norm_first=True every "
            "sub-layer is x + f(norm(x)), so the FFN's is x + ffn(norm3(x)).",
            _DecoderFFNPostNorm,
        ),
        Mistake(
            "roles-swapped-unmasked",
            "the roles in cross-attention are swapped, and memory_mask is left out since it no "
            "longer fits: the queries come from the decoder (x), the keys and values from the "
            "memory, self.cross_attn(x, context=memory, mask=memory_mask), whose L_t rows need "
            "no cutting.",
            _DecoderRolesSwappedUnmasked,
        ),
    ],
    driver=ModuleDriver(_decoder_cases, outputs=("output",)),
    doc="DecoderBlock(d_model, n_heads, d_ff, dropout=0.0, norm_first=False), "
    "forward(x, memory, self_mask=None, memory_mask=None) -> (B, L_t, d_model)",
)


# ==============================================================================================
# Exercise 2 — greedy_decode: token outputs on random Transformers, one trial per model (exact).


@torch.no_grad()
def _greedy_no_stop(model, src, bos_id, eos_id, max_len):
    """Keeps decoding after EOS (no padding, no early stop)."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
    return ys


@torch.no_grad()
def _greedy_first_position(model, src, bos_id, eos_id, max_len):
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, 0].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def _greedy_no_bos(model, src, bos_id, eos_id, max_len):
    """Starts the decoder from PAD instead of BOS."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), model.pad_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def _greedy_stop_at_first_eos(model, src, bos_id, eos_id, max_len):
    """Stops the whole batch as soon as any sequence emits EOS."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        if (nxt == eos_id).any():
            break
    return ys


@torch.no_grad()
def _greedy_pad_not_stop(model, src, bos_id, eos_id, max_len):
    """Pads after EOS but never stops early: always max_len new tokens."""
    memory, src_mask = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos_id
    return ys


@torch.no_grad()
def _greedy_slip(
    model,
    src,
    bos_id,
    eos_id,
    max_len,
    *,
    after_eos="pad",
    eos_padded=False,
    src_mask=True,
    last_only=False,
    values=False,
    done_from_last=False,
):
    """The right loop with one slip: `after_eos` "eos" appends eos_id (not PAD) to a finished
    sequence; `eos_padded` marks a sequence done before appending, so its EOS itself becomes PAD;
    `src_mask` False decodes without the source mask (padded source positions are attended);
    `last_only` feeds the decoder the newest token alone, not the whole prefix; `values` takes
    the largest logit's value (.max(-1)[0]) as the token, not its index; `done_from_last` reads
    whether a sequence is done from its newest token alone, so decoding resumes after a PAD."""
    memory, mask = model.encode(src)
    mask = mask if src_mask else None
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    fill = eos_id if after_eos == "eos" else model.pad_id
    for _ in range(max_len):
        if done_from_last:
            done = ys[:, -1] == eos_id
        logits = model.decode(ys[:, -1:] if last_only else ys, memory, mask)[:, -1]
        nxt = logits.max(-1).values.long() if values else logits.argmax(-1)
        if eos_padded:
            done = done | (nxt == eos_id)
        nxt = torch.where(done, torch.full_like(nxt, fill), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done = done | (nxt == eos_id)
        if (ys[:, 1:] == eos_id).any(1).all() if done_from_last else done.all():
            break
    return ys


def _random_model(vocab: int, d_model: int, n_layers: int, norm_first: bool, seed: int):
    """A small Transformer whose weights come from the check's own generator (not the global one)."""
    with torch.random.fork_rng(devices=[]):
        cfg = _ed.TransformerConfig(
            vocab,
            vocab,
            d_model=d_model,
            n_heads=2,
            n_layers=n_layers,
            d_ff=2 * d_model,
            dropout=0.0,
            max_len=64,
            norm_first=norm_first,
        )
        model = _ed.Transformer(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:  # weight matrices and embeddings
                p.copy_(torch.randn(p.shape, generator=g) * 2.0 / math.sqrt(p.shape[-1]))
            elif "norm" in name and name.endswith("weight"):  # LayerNorm gains near 1
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        # the model never predicts PAD or BOS (as a trained one would not)
        model.generator.bias[model.pad_id] = -1e4
        model.generator.bias[1] = -1e4
    return model.eval()


def _greedy_grid(thorough: bool) -> list[dict]:
    # (batch, source length, max_len, vocab, d_model, layers, norm_first)
    grid = [(6, 5, 6, 8, 16, 1, False), (4, 3, 4, 6, 8, 1, True)]
    if thorough:
        grid += [
            (1, 1, 1, 6, 8, 1, False),
            (1, 4, 7, 10, 16, 2, False),
            (8, 6, 8, 7, 16, 2, True),
            (5, 2, 5, 5, 8, 1, False),
            (7, 7, 9, 9, 16, 1, True),
        ]
    specs = [
        dict(B=b, L_s=ls, max_len=m, vocab=v, d_model=d, n_layers=n, norm_first=nf, seed=4000 + i)
        for i, (b, ls, m, v, d, n, nf) in enumerate(grid)
    ]
    # padded sources (every other one ends in PAD): the decoder must be given the source mask
    padded = dict(B=6, L_s=6, max_len=5, vocab=8, d_model=16, n_layers=1, norm_first=False)
    # every sequence ends, at different steps, well before max_len: the loop must stop then
    ends = dict(B=4, L_s=4, max_len=8, vocab=6, d_model=16, n_layers=1, norm_first=False, eos=3)
    return specs + [dict(padded, pad=3, seed=4106), dict(ends, seed=4200)]


def _pick_eos(model, src, bos_id: int, max_len: int) -> int:
    """The EOS id that exercises the most: some sequences end early, not all at the first step."""
    best, best_score = 2, -1
    for eos in range(2, model.generator.out_features):
        out = _ed.greedy_decode(model, src, bos_id, eos, max_len)
        ended = (out[:, 1:] == eos).any(1)
        first = (out[:, 1] == eos).sum().item()
        score = int(ended.sum().item() > 0) * 4 + int(not ended.all()) * 2 - first / len(src)
        score += int(out.shape[1] < max_len + 1)
        if score > best_score:
            best, best_score = eos, score
    return best


@torch.no_grad()
def _greedy_inputs(spec: dict, device) -> tuple:
    """The trial's random Transformer and source batch, from the spec's seed."""
    model = _random_model(
        spec["vocab"], spec["d_model"], spec["n_layers"], spec["norm_first"], spec["seed"]
    ).to(device)
    g = torch.Generator().manual_seed(spec["seed"] + 1)
    src = torch.randint(3, spec["vocab"], (spec["B"], spec["L_s"]), generator=g)
    if spec.get("pad"):
        src[1::2, -spec["pad"] :] = model.pad_id
    return model, src.to(device)


@functools.lru_cache(maxsize=64)
def _greedy_eos(spec_items: tuple, device: str) -> int:
    """The trial's EOS id (the costly part of a trial, the same for every implementation)."""
    spec = dict(spec_items)
    if "eos" in spec:
        return spec["eos"]
    model, src = _greedy_inputs(spec, torch.device(device))
    return _pick_eos(model, src, 1, spec["max_len"])


def _greedy_trial(impl, spec: dict, device: torch.device, call) -> Finding | None:
    """Decode with `impl` on a random Transformer; a Finding when its tokens are not the
    reference's (the tokens are the evidence a catalogued mistake is matched by)."""
    model, src = _greedy_inputs(spec, device)
    bos_id, max_len = 1, spec["max_len"]
    eos_id = _greedy_eos(tuple(sorted(spec.items())), str(device))
    expected = _ed.greedy_decode(model, src, bos_id, eos_id, max_len)
    text = f"greedy_decode(model, src {tuple(src.shape)}, bos_id=1, eos_id={eos_id}, max_len={max_len})"
    if spec.get("pad"):
        text += f" (src rows 1, 3, ... end in {spec['pad']} PAD)"
    label = (
        f"{text} on a random Transformer (d_model={spec['d_model']}, "
        f"{spec['n_layers']} layer(s), norm_first={spec['norm_first']}, {device.type})"
    )
    got = call(lambda: impl(model, src.clone(), bos_id, eos_id, max_len), text, label)
    problem = _compare_tokens(expected, got)
    if problem is None:
        return None
    shown = got.tolist() if isinstance(got, torch.Tensor) else repr(got)
    problem += f"\n  expected {expected.tolist()}\n  got      {shown}"
    return Finding(problem, label, "tokens", got)


def _equal(a, b) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.shape == b.shape
        and torch.equal(a.cpu().long(), b.cpu().long())
    )


def _compare_tokens(expected: torch.Tensor, got) -> str | None:
    if not isinstance(got, torch.Tensor):
        return f"the result should be a tensor of token ids but is a {type(got).__name__}"
    if got.dtype != torch.long:
        return f"the token ids have dtype {got.dtype} but should be torch.int64 (torch.long)"
    if got.device.type != expected.device.type:
        return f"the tokens are on device {got.device} but src is on {expected.device}"
    if tuple(got.shape) != tuple(expected.shape):
        return (
            f"the tokens have shape {tuple(got.shape)} but should have shape "
            f"{tuple(expected.shape)} (B, 1 + number of decoding steps)"
        )
    if not torch.equal(got, expected):
        row, col = (got != expected).nonzero()[0].tolist()
        return (
            f"sequence {row} differs at position {col}: got token {got[row, col].item()}, "
            f"expected {expected[row, col].item()}"
        )
    return None


greedy_decode = Exercise(
    name="greedy_decode",
    lesson="07",
    module="encoder_decoder",
    reference=_ed.greedy_decode,
    forbidden=(
        "transformer_lab.encoder_decoder.greedy_decode",
        "transformer_lab.encoder_decoder.beam_search",
        "transformer_lab.greedy_decode",
        "transformer_lab.beam_search",
        "transformer_lab.seq2seq.greedy_decode",
        "transformer_lab.seq2seq.beam_search",
        "transformer_lab.seq2seq.translate",
    ),
    mistakes=[
        Mistake(
            "no-stop-after-eos",
            "decoding goes on after EOS: once a sequence has emitted eos_id, append "
            "model.pad_id to it, and stop when every sequence is done.",
            _greedy_no_stop,
        ),
        Mistake(
            "first-position",
            "the next token is the argmax at the first position: take the logits of the last "
            "position, logits[:, -1].",
            _greedy_first_position,
        ),
        Mistake(
            "no-bos",
            "the output must start with BOS: begin with a (B, 1) column of bos_id, feed it to "
            "the decoder and keep it in the result.",
            _greedy_no_bos,
        ),
        Mistake(
            "stop-at-first-eos",
            "the whole batch stops when one sequence emits EOS: stop only when every sequence "
            "is done (pad the finished ones meanwhile).",
            _greedy_stop_at_first_eos,
        ),
        Mistake(
            "never-stops-early",
            "the loop never stops early: break as soon as every sequence has emitted EOS.",
            _greedy_pad_not_stop,
        ),
        Mistake(
            "eos-repeated",
            "a finished sequence gets eos_id again at every step: after its EOS, append "
            "model.pad_id.",
            functools.partial(_greedy_slip, after_eos="eos"),
        ),
        Mistake(
            "eos-padded",
            "a sequence's EOS itself is replaced by PAD: append the token first, then mark the "
            "sequence done if it was eos_id (only later tokens become PAD).",
            functools.partial(_greedy_slip, eos_padded=True),
        ),
        Mistake(
            "no-src-mask",
            "the decoder is not given the source mask: pass the src_mask from "
            "model.encode(src) on, model.decode(ys, memory, src_mask), or padded source "
            "positions are attended.",
            functools.partial(_greedy_slip, src_mask=False),
        ),
        Mistake(
            "last-token-only",
            "the decoder is given only the newest token: feed it the whole prefix so far, "
            "model.decode(ys, memory, src_mask) (its self-attention reads every earlier "
            "token), and take the logits of the last position.",
            functools.partial(_greedy_slip, last_only=True),
        ),
        Mistake(
            "max-values",
            "the next token is the largest logit's value, .max(-1)[0] (.values), turned into an "
            "id: the token is where that maximum lies, its index, logits[:, -1].argmax(-1) (or "
            ".max(-1).indices).",
            functools.partial(_greedy_slip, values=True),
        ),
        Mistake(
            "done-from-last-token",
            "a sequence counts as finished only while its newest token is EOS (ys[:, -1] == "
            "eos_id), so after one PAD it decodes again: keep a done flag per sequence that "
            "stays set, done |= next_token == eos_id (or test (ys == eos_id).any(1)).",
            functools.partial(_greedy_slip, done_from_last=True),
        ),
    ],
    driver=TrialDriver(_greedy_grid, _greedy_trial, matches=_equal, settings=devices),
    doc="greedy_decode(model, src, bos_id, eos_id, max_len) -> tokens (B, 1 + n)",
)
