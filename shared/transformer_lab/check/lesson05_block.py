"""Checks for lesson 05, exercise 3 — `EncoderBlock`: the attention and FFN sub-layers, each with
a residual connection and a LayerNorm, post-norm or pre-norm (`norm_first`)."""

from __future__ import annotations

import torch
from torch import nn

from .. import add_norm as _add_norm
from .drivers import CustomDriver, ModuleDriver
from .exercise import Case, Exercise, Mistake, fail

__all__ = ["EncoderBlock"]

# ==============================================================================================
# EncoderBlock: attention and FFN sub-layers, each with a residual connection and a LayerNorm.


class _BlockNormSwapped(_add_norm.EncoderBlock):
    """Pre-norm where post-norm is asked for, and the other way round."""

    def forward(self, x, mask=None):
        if not self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm2(x))
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(x))


class _BlockPostNormOnly(_add_norm.EncoderBlock):
    def forward(self, x, mask=None):
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(x))


class _BlockNoFFNResidual(_add_norm.EncoderBlock):
    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            return self.ffn(self.norm2(x))
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(self.ffn(x))


class _BlockNormedResidual(_add_norm.EncoderBlock):
    """norm(x) + sublayer(...): the residual path carries the normalised input."""

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = h + self.self_attn(h, mask=mask)
            h = self.norm2(x)
            return h + self.ffn(h)
        x = self.norm1(x) + self.self_attn(x, mask=mask)
        return self.norm2(x) + self.ffn(x)


class _BlockIgnoresMask(_add_norm.EncoderBlock):
    def forward(self, x, mask=None):
        return super().forward(x, mask=None)


class _BlockSharedNorm(_add_norm.EncoderBlock):
    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm1(x))
        x = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm1(x + self.ffn(x))


class _BlockNormsSwapped(_add_norm.EncoderBlock):
    """norm2 on the attention sub-layer, norm1 on the feed-forward one."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.self_attn(self.norm2(x), mask=mask)
            return x + self.ffn(self.norm1(x))
        x = self.norm2(x + self.self_attn(x, mask=mask))
        return self.norm1(x + self.ffn(x))


class _BlockFFNReadsInput(_add_norm.EncoderBlock):
    """The FFN sub-layer reads the block's input x instead of the attention sub-layer's output."""

    def forward(self, x, mask=None):
        if self.norm_first:
            h = x + self.self_attn(self.norm1(x), mask=mask)
            return h + self.ffn(self.norm2(x))
        h = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(h + self.ffn(x))


class _BlockFFNResidualFromInput(_add_norm.EncoderBlock):
    """The FFN sub-layer reads the attention's result, but its residual adds the block's input."""

    def forward(self, x, mask=None):
        if self.norm_first:
            h = x + self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm2(h))
        h = self.norm1(x + self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(h))


class _BlockResidualAfterNorm(_add_norm.EncoderBlock):
    """Post-norm written as norm(sublayer(x)) + x: the residual is added after the norm."""

    def forward(self, x, mask=None):
        if self.norm_first:
            return super().forward(x, mask=mask)
        x = x + self.norm1(self.self_attn(x, mask=mask))
        return x + self.norm2(self.ffn(x))


class _BlockFinalNorm(_add_norm.EncoderBlock):
    """Pre-norm with norm2 applied once more to the block's output."""

    def forward(self, x, mask=None):
        out = super().forward(x, mask=mask)
        return self.norm2(out) if self.norm_first else out


class _BlockAttentionResidualShadowed(_add_norm.EncoderBlock):
    """Post-norm with x overwritten by the attention output a: norm1(a + a)."""

    def forward(self, x, mask=None):
        if self.norm_first:
            return super().forward(x, mask=mask)
        a = self.self_attn(x, mask=mask)
        x = self.norm1(a + a)
        return self.norm2(x + self.ffn(x))


class _BlockNoAttentionResidual(_add_norm.EncoderBlock):
    """No residual around the attention sub-layer."""

    def forward(self, x, mask=None):
        if self.norm_first:
            x = self.self_attn(self.norm1(x), mask=mask)
            return x + self.ffn(self.norm2(x))
        x = self.norm1(self.self_attn(x, mask=mask))
        return self.norm2(x + self.ffn(x))


class _BlockPreNormFFNPostNorm(_add_norm.EncoderBlock):
    """norm_first=True: pre-norm around the attention, post-norm around the FFN."""

    def forward(self, x, mask=None):
        if not self.norm_first:
            return super().forward(x, mask=mask)
        x = x + self.self_attn(self.norm1(x), mask=mask)
        return self.norm2(x + self.ffn(x))


class _BlockPreNormKeysUnnormed(_add_norm.EncoderBlock):
    """Pre-norm with the queries from norm1(x) but the keys and values from x itself."""

    def forward(self, x, mask=None):
        if not self.norm_first:
            return super().forward(x, mask=mask)
        x = x + self.self_attn(self.norm1(x), context=x, mask=mask)
        return x + self.ffn(self.norm2(x))


class _BlockTorchLayerNorm(_add_norm.EncoderBlock):
    """norm1 and norm2 built as torch's nn.LayerNorm instead of the student's own LayerNorm."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first, norm=nn.LayerNorm)


_TORCH_LAYER_NORM = Mistake(
    "torch-layer-norm",
    "norm1 and norm2 are torch's nn.LayerNorm: build them from your own LayerNorm class of "
    "exercise 1, LayerNorm(d_model), as the exercise asks.",
    _BlockTorchLayerNorm,
)


def _check_block(ex: Exercise, student_cls, thorough: bool):
    """Outputs and gradients, then the parts the text names: norm1 and norm2 are not torch's."""
    driver = ModuleDriver(_block_cases, outputs=("output",))
    n = driver.run(ex, student_cls, thorough)
    case = _block_cases(False)[0]
    block = ex.run_student(student_cls, lambda: student_cls(**case.init))
    torch_norms = [
        k for k in ("norm1", "norm2") if isinstance(getattr(block, k, None), nn.LayerNorm)
    ]
    if torch_norms:
        fail(
            ex,
            f"{' and '.join(torch_norms)} {'is' if len(torch_norms) == 1 else 'are'} "
            "torch.nn.LayerNorm, not your LayerNorm",
            case.label,
            _TORCH_LAYER_NORM,
        )
    return n + 1, f"{driver.covered(thorough)}; norm1 and norm2 are your LayerNorm"


def _block_cases(thorough: bool) -> list[Case]:
    def case(B, L, d_model, n_heads, d_ff, norm_first, mask=None):
        def make(g):
            inputs = {"x": torch.randn(B, L, d_model, generator=g, dtype=torch.float64)}
            if mask == "causal":
                inputs["mask"] = torch.ones(L, L, dtype=torch.bool).tril()
            elif mask == "padding":
                keep = torch.ones(B, L, dtype=torch.bool)
                keep[0, L // 2 + 1 :] = False  # the first sequence is padded
                inputs["mask"] = keep[:, None, None, :]
            return inputs

        init = {"d_model": d_model, "n_heads": n_heads, "d_ff": d_ff, "norm_first": norm_first}
        label = (
            f"EncoderBlock({d_model}, {n_heads}, {d_ff}, norm_first={norm_first}) "
            f"on x {(B, L, d_model)}" + (f", {mask} mask" if mask else "")
        )
        return Case(label, make, init)

    cases = [case(2, 5, 8, 2, 16, False, "causal"), case(2, 5, 8, 2, 16, True, "causal")]
    if thorough:
        cases += [
            case(3, 6, 16, 4, 32, False),
            case(3, 6, 16, 4, 32, True),
            case(2, 7, 12, 3, 20, False, "padding"),
            case(2, 7, 12, 3, 20, True, "padding"),
            case(1, 1, 8, 2, 8, False),
            case(1, 1, 8, 2, 8, True),
            case(4, 3, 6, 1, 10, True, "causal"),
        ]
    return cases


EncoderBlock = Exercise(
    name="EncoderBlock",
    lesson="05",
    module="add_norm",
    reference=_add_norm.EncoderBlock,
    forbidden=(
        "transformer_lab.add_norm.EncoderBlock",
        "transformer_lab.EncoderBlock",
        "torch.nn.TransformerEncoderLayer",
        "torch.nn.TransformerEncoder",
        "torch._transformer_encoder_layer_fwd",
    ),
    mistakes=[
        # norm_first ignored first: on a pre-norm case it equals the swapped mutant.
        Mistake(
            "norm_first-ignored",
            "norm_first is ignored: with norm_first=True each sub-layer sees norm(x) and the "
            "residual adds the sub-layer's output to the un-normalised x.",
            _BlockPostNormOnly,
        ),
        Mistake(
            "pre-post-swapped",
            "pre-norm and post-norm are swapped: norm_first=False (post-norm) is "
            "x = norm(x + sublayer(x)); norm_first=True (pre-norm) is x = x + sublayer(norm(x)).",
            _BlockNormSwapped,
        ),
        Mistake(
            "no-ffn-residual",
            "the residual connection around the FFN is missing: add the FFN's input back, "
            "x + ffn(...).",
            _BlockNoFFNResidual,
        ),
        Mistake(
            "normed-residual",
            "the residual adds norm(x) instead of x: the skip path must carry x itself "
            "(post-norm: norm(x + sublayer(x)); pre-norm: x + sublayer(norm(x))).",
            _BlockNormedResidual,
        ),
        Mistake(
            "mask-ignored",
            "the mask is ignored: pass it on to the attention, self.self_attn(..., mask=mask).",
            _BlockIgnoresMask,
        ),
        Mistake(
            "shared-norm",
            "norm1 is used for both sub-layers: the FFN's sub-layer has its own norm2.",
            _BlockSharedNorm,
        ),
        Mistake(
            "norms-swapped",
            "norm1 and norm2 are swapped: norm1 belongs to the attention sub-layer and norm2 to "
            "the feed-forward one (their weights differ once trained or loaded).",
            _BlockNormsSwapped,
        ),
        Mistake(
            "ffn-reads-block-input",
            "the feed-forward sub-layer reads the block's input x: it must read the attention "
            "sub-layer's result, so the two sub-layers run one after the other.",
            _BlockFFNReadsInput,
        ),
        Mistake(
            "residual-after-norm",
            "post-norm adds the residual after the norm, x + norm(sublayer(x)): the norm comes "
            "last, around the sum, x = norm(x + sublayer(x)).",
            _BlockResidualAfterNorm,
        ),
        Mistake(
            "pre-norm-final-norm",
            "the pre-norm block normalises its output once more: pre-norm ends with the "
            "residual sum x + ffn(norm2(x)); the one final norm belongs to the whole stack.",
            _BlockFinalNorm,
        ),
        Mistake(
            "attention-residual-shadowed",
            "x is overwritten by the attention's output, so post-norm adds it to itself, "
            "norm1(a + a): keep the block's input, x = norm1(x + self_attn(x)).",
            _BlockAttentionResidualShadowed,
        ),
        Mistake(
            "no-attention-residual",
            "the residual connection around the attention is missing: add the sub-layer's "
            "input back, x + self_attn(...).",
            _BlockNoAttentionResidual,
        ),
        Mistake(
            "pre-norm-ffn-post-norm",
            "with norm_first=True the FFN sub-layer is post-norm, norm2(x + ffn(x)): in "
            "pre-norm both sub-layers are x + sublayer(norm(x)), so x + ffn(norm2(x)).",
            _BlockPreNormFFNPostNorm,
        ),
        _TORCH_LAYER_NORM,
        Mistake(
            "ffn-residual-from-input",
            "the FFN's residual adds the block's input x, so the attention sub-layer's result "
            "is dropped from the skip path: each sub-layer adds its own input, the attention's "
            "result h, norm2(h + ffn(h)) (pre-norm: h + ffn(norm2(h))).",
            _BlockFFNResidualFromInput,
        ),
        Mistake(
            "pre-norm-keys-unnormed",
            "in pre-norm only the queries come from norm1(x): the keys and values are read "
            "from the un-normalised x (context=x). Self-attention reads one input for all "
            "three, h = norm1(x), then x + self_attn(h, mask=mask).",
            _BlockPreNormKeysUnnormed,
        ),
    ],
    driver=CustomDriver(_check_block),
    doc="EncoderBlock(d_model, n_heads, d_ff, dropout=0.0, norm_first=False); forward(x, mask)",
    uses=("LayerNorm", "FeedForward"),
)
