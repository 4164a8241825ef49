"""Lesson 13 — CLIP: images and texts in one space, trained by telling the right pairs apart.

Two encoders read a batch of B (image, caption) pairs: a ViT (lesson 11) gives one vector per image
(its final [CLS] vector), a Transformer encoder over tokens gives one vector per caption (its vector
at the end-of-text token). A linear projection (no bias) maps each into a shared space of size
d_embed. Normalised to unit length, their dot products are cosine similarities, and the B x B
matrix of them, times a learned inverse temperature exp(t), is the logits:

    I = normalise(W_i · image_encoder(images))        (B, d_embed)
    T = normalise(W_t · text_encoder(tokens))         (B, d_embed)
    logits_per_image = exp(t) · I Tᵀ                  (B, B); row i scores image i against every text
    logits_per_text  = logits_per_imageᵀ              row j scores text j against every image

Pair i matches pair i, so the right answer of every row and every column is on the diagonal. The
symmetric InfoNCE loss is the mean of the two cross-entropies: image -> text (each image picks its
caption among the B) and text -> image (each caption picks its image):

    loss = ½ · [CE(logits_per_image, arange(B)) + CE(logits_per_text, arange(B))]

Every other caption in the batch is a negative for free: a larger batch is a harder task.

Pooling: the image vector is the final LayerNorm'd [CLS] vector (as the course ViT with no head).
The text encoder is causal (as CLIP's: position i sees positions 0..i), so the vector at the
end-of-text token has read the whole caption and nothing after it; padding after the end-of-text
token changes nothing. The end-of-text position is the first token equal to `eos_id`; with
`eos_id=None`, the position of the largest token id (the original CLIP's rule: its end-of-text
token has the largest id, which is what transformers does for a config with eos_token_id == 2).

`CLIP.from_hf(hf_model)` copies the weights of a `transformers.CLIPModel`; the result gives the
same logits and loss (tests/models/test_clip.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import require_ndim
from .encoder_decoder import Parts
from .masking import causal_mask
from .vit import ViT, ViTConfig

__all__ = [
    "CLIP",
    "CLIPConfig",
    "CLIPTextEncoder",
    "clip_logits",
    "clip_loss",
    "zero_shot_classify",
]


# ----------------------------------------------------------------------------------------------
# The loss (the lesson's graded exercise)
# ----------------------------------------------------------------------------------------------


def _check_features(image_features, text_features, logit_scale) -> torch.Tensor:
    for name, t in (("image_features", image_features), ("text_features", text_features)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        require_ndim(name, t, 2, "(B, d)")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be floating point, got dtype {t.dtype}")
    if image_features.shape != text_features.shape:
        raise ValueError(
            f"image_features {tuple(image_features.shape)} and text_features "
            f"{tuple(text_features.shape)} must have the same shape (B, d): pair i is "
            "(image i, text i)"
        )
    if image_features.shape[0] == 0:
        raise ValueError("the batch is empty (B = 0)")
    return _scalar(logit_scale, image_features)


def _scalar(logit_scale, like: torch.Tensor) -> torch.Tensor:
    """logit_scale as a 0-d tensor (a Python number becomes one of `like`'s dtype and device)."""
    if not isinstance(logit_scale, torch.Tensor):
        logit_scale = torch.as_tensor(logit_scale, dtype=like.dtype, device=like.device)
    if logit_scale.numel() != 1:
        raise ValueError(
            f"logit_scale must be a scalar (the log of the inverse temperature), got shape "
            f"{tuple(logit_scale.shape)}"
        )
    return logit_scale.reshape(())


def clip_logits(
    image_features: torch.Tensor, text_features: torch.Tensor, logit_scale
) -> torch.Tensor:
    """logits_per_image (B, B) = exp(logit_scale) · cos(image i, text j).

    image_features, text_features: (B, d), not yet normalised. Row i scores image i against every
    text; its transpose is logits_per_text.
    """
    logit_scale = _check_features(image_features, text_features, logit_scale)
    image = F.normalize(image_features, dim=-1)
    text = F.normalize(text_features, dim=-1)
    return logit_scale.exp() * image @ text.T


def clip_loss(
    image_features: torch.Tensor, text_features: torch.Tensor, logit_scale
) -> torch.Tensor:
    """CLIP's symmetric contrastive (InfoNCE) loss, a scalar tensor.

    image_features: (B, d), not yet normalised; row i belongs with text_features row i
    text_features:  (B, d), not yet normalised
    logit_scale:    scalar tensor t, the log of the inverse temperature: logits = exp(t) · cos
    returns         ½ · [CE(logits_per_image, arange(B)) + CE(logits_per_text, arange(B))],
                    each cross-entropy a mean over the B rows.

    No clamping of logit_scale here (the original CLIP clamps exp(t) at 100 in its training loop).
    """
    logits_per_image = clip_logits(image_features, text_features, logit_scale)  # (B, B)
    labels = torch.arange(logits_per_image.shape[0], device=logits_per_image.device)
    image_to_text = F.cross_entropy(logits_per_image, labels)
    text_to_image = F.cross_entropy(logits_per_image.T, labels)
    return (image_to_text + text_to_image) / 2


def zero_shot_classify(
    image_features: torch.Tensor, class_features: torch.Tensor, logit_scale
) -> torch.Tensor:
    """Zero-shot class probabilities from prompts, with CLIP's prompt ensembling.

    image_features: (B, d), not yet normalised
    class_features: (K, P, d), the text features of P prompts ("the digit {}", "a handwritten
                    {}", ...) for each of K classes, not yet normalised
    logit_scale:    scalar tensor t, logits = exp(t) · cos
    returns         (B, K) probabilities: softmax over the K classes of exp(t) · cos(image, c_k),
                    where c_k is the class's prompt vectors, each normalised, averaged over the P
                    prompts and normalised again.
    """
    if not isinstance(class_features, torch.Tensor):
        raise TypeError(
            f"class_features must be a torch.Tensor, got {type(class_features).__name__}"
        )
    require_ndim("class_features", class_features, 3, "(K, P, d)")
    K, P, d = class_features.shape
    if K == 0 or P == 0:
        raise ValueError(f"class_features {tuple(class_features.shape)} has no classes or prompts")
    if not isinstance(image_features, torch.Tensor):
        raise TypeError(
            f"image_features must be a torch.Tensor, got {type(image_features).__name__}"
        )
    require_ndim("image_features", image_features, 2, "(B, d)")
    if image_features.shape[1] != d:
        raise ValueError(
            f"image_features {tuple(image_features.shape)} and class_features "
            f"{tuple(class_features.shape)} must share d (the last axis)"
        )
    logit_scale = _scalar(logit_scale, image_features)
    prompts = F.normalize(class_features, dim=-1)  # every prompt vector on the unit sphere
    classes = F.normalize(prompts.mean(dim=1), dim=-1)  # (K, d): the ensemble, back on it
    logits = logit_scale.exp() * F.normalize(image_features, dim=-1) @ classes.T  # (B, K)
    return logits.softmax(dim=-1)


# ----------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------


@dataclass
class CLIPConfig:
    """The sizes of a CLIP: an image ViT, a text Transformer encoder, a shared space.

    Defaults: a small CLIP for the course's 8 x 8 single-channel digits (16 patches of 2 x 2) and
    short captions (vocab_size ids, at most max_len tokens, end-of-text id `eos_id`).
    """

    d_embed: int = 64  # the shared space
    # image encoder (a pre-norm ViT)
    image_size: int | tuple[int, int] = 8
    patch_size: int = 2
    n_channels: int = 1
    vision_d_model: int = 64
    vision_n_heads: int = 4
    vision_n_layers: int = 2
    vision_d_ff: int = 128
    # text encoder (pre-norm, causal)
    vocab_size: int = 64
    max_len: int = 16
    text_d_model: int = 64
    text_n_heads: int = 4
    text_n_layers: int = 2
    text_d_ff: int = 128
    eos_id: int | None = 2  # None: pool at the largest token id (the original CLIP's rule)
    # both
    activation: str = "gelu"  # "quick_gelu" for OpenAI's CLIP weights
    dropout: float = 0.0
    eps: float = 1e-5
    logit_scale_init: float = math.log(1 / 0.07)


class CLIPTextEncoder(nn.Module):
    """Token + learned position embeddings, n_layers pre-norm causal encoder blocks, a final norm.

    CLIPTextEncoder(vocab_size, max_len, d_model, n_heads, n_layers, d_ff, eos_id=2,
                    activation="gelu", dropout=0.0, eps=1e-5, parts=None)

    forward(tokens (B, L), attention_mask=None) -> (B, d_model), the final vector at each row's
    end-of-text token (see `eos_positions`).
    hidden_states(tokens, attention_mask=None) -> (B, L, d_model), every position.
    attention_mask: (B, L), True / 1 at real tokens, False / 0 at padding (optional: with the
    causal mask, padding after the end-of-text token cannot reach it anyway).

    parts: `parts.encoder_block` (given `parts.sublayers`) for the blocks, `parts.norm` for ln_f.
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        d_model: int,
        n_heads: int,
        n_layers: int,
        d_ff: int,
        eos_id: int | None = 2,
        activation: str = "gelu",
        dropout: float = 0.0,
        eps: float = 1e-5,
        parts: Parts | None = None,
    ):
        super().__init__()
        parts = Parts() if parts is None else parts
        if vocab_size < 1 or max_len < 1:
            raise ValueError(f"vocab_size and max_len must be >= 1, got {vocab_size}, {max_len}")
        if eos_id is not None and not 0 <= eos_id < vocab_size:
            raise ValueError(
                f"eos_id={eos_id} is not a token id of a {vocab_size}-token vocabulary"
            )
        self.vocab_size, self.max_len, self.d_model, self.eos_id = (
            vocab_size,
            max_len,
            d_model,
            eos_id,
        )
        self.token_embed = nn.Embedding(vocab_size, d_model)
        self.pos_embed = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            parts.encoder_block(
                d_model,
                n_heads,
                d_ff,
                dropout,
                norm_first=True,
                activation=activation,
                eps=eps,
                **parts.sublayers,
            )
            for _ in range(n_layers)
        )
        self.ln_f = parts.norm(d_model, eps)
        nn.init.normal_(self.token_embed.weight, std=0.02)
        nn.init.normal_(self.pos_embed.weight, std=0.01)
        parts.built(self)

    def _check_tokens(self, tokens: torch.Tensor) -> None:
        require_ndim("tokens", tokens, 2, "(B, L)")
        if tokens.is_floating_point() or tokens.dtype == torch.bool:
            raise TypeError(f"tokens must be integer ids, got dtype {tokens.dtype}")
        if tokens.shape[1] > self.max_len:
            raise ValueError(
                f"tokens have length {tokens.shape[1]} but this text encoder has only "
                f"max_len={self.max_len} positions"
            )
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise ValueError(
                f"token ids must lie in [0, {self.vocab_size}), got min {int(tokens.min())}, "
                f"max {int(tokens.max())}"
            )

    def hidden_states(
        self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, L) ids -> (B, L, d_model) after the blocks and ln_f."""
        self._check_tokens(tokens)
        B, L = tokens.shape
        positions = torch.arange(L, device=tokens.device)
        x = self.dropout(self.token_embed(tokens) + self.pos_embed(positions))
        mask = causal_mask(L, device=tokens.device)  # (L, L): position i sees 0..i
        if attention_mask is not None:
            if attention_mask.shape != tokens.shape:
                raise ValueError(
                    f"attention_mask {tuple(attention_mask.shape)} must have the shape of "
                    f"tokens {tuple(tokens.shape)}"
                )
            mask = mask & attention_mask.bool()[:, None, None, :]  # (B, 1, L, L)
        for block in self.blocks:
            x = block(x, mask=mask)
        return self.ln_f(x)

    def eos_positions(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B,) the index of each row's end-of-text token: its first `eos_id`, or with
        eos_id=None its largest id (the first, on ties). A row without eos_id is an error."""
        if self.eos_id is None:
            return tokens.argmax(dim=-1)
        is_eos = tokens == self.eos_id
        missing = ~is_eos.any(dim=-1)
        if missing.any():
            rows = missing.nonzero().flatten().tolist()
            raise ValueError(
                f"rows {rows} of tokens have no end-of-text token (eos_id={self.eos_id}): the text "
                "vector is read at that token"
            )
        return is_eos.int().argmax(dim=-1)  # the first True

    def forward(
        self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        hidden = self.hidden_states(tokens, attention_mask)
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        return hidden[rows, self.eos_positions(tokens)]  # (B, d_model)


class CLIP(nn.Module):
    """Contrastive Language–Image Pre-training (Radford et al., 2021), small.

    CLIP(cfg: CLIPConfig, parts=None)
        vision:            the course ViT (pre-norm, n_classes=0, with ln_pre after the
                           embeddings): images -> final [CLS] vector (B, vision_d_model)
        text:              CLIPTextEncoder: tokens -> vector at end-of-text (B, text_d_model)
        visual_projection: nn.Linear(vision_d_model, d_embed, bias=False)
        text_projection:   nn.Linear(text_d_model, d_embed, bias=False)
        logit_scale:       nn.Parameter, scalar, log of the inverse temperature (init log(1/0.07))

    encode_image(images (B, C, H, W)) -> (B, d_embed), not normalised
    encode_text(tokens (B, L), attention_mask=None) -> (B, d_embed), not normalised
    forward(images, tokens, attention_mask=None) -> (logits_per_image (B_i, B_t),
                                                     logits_per_text (B_t, B_i))
    loss(images, tokens, attention_mask=None) -> clip_loss of the pairs (image i, caption i)

    parts: what both encoders' blocks are made of (`Parts()`, the reference, by default;
    `student.parts()` for your own).
    """

    def __init__(self, cfg: CLIPConfig | None = None, parts: Parts | None = None):
        super().__init__()
        cfg = CLIPConfig() if cfg is None else cfg
        parts = Parts() if parts is None else parts
        self.cfg = cfg
        vision = ViTConfig(
            image_size=cfg.image_size,
            patch_size=cfg.patch_size,
            n_channels=cfg.n_channels,
            n_classes=0,
            d_model=cfg.vision_d_model,
            n_heads=cfg.vision_n_heads,
            n_layers=cfg.vision_n_layers,
            d_ff=cfg.vision_d_ff,
            dropout=cfg.dropout,
            eps=cfg.eps,
            activation=cfg.activation,
            pre_norm=True,
        )
        self.vision = ViT(vision, parts=parts)
        self.text = CLIPTextEncoder(
            vocab_size=cfg.vocab_size,
            max_len=cfg.max_len,
            d_model=cfg.text_d_model,
            n_heads=cfg.text_n_heads,
            n_layers=cfg.text_n_layers,
            d_ff=cfg.text_d_ff,
            eos_id=cfg.eos_id,
            activation=cfg.activation,
            dropout=cfg.dropout,
            eps=cfg.eps,
            parts=parts,
        )
        self.visual_projection = nn.Linear(cfg.vision_d_model, cfg.d_embed, bias=False)
        self.text_projection = nn.Linear(cfg.text_d_model, cfg.d_embed, bias=False)
        nn.init.normal_(self.visual_projection.weight, std=cfg.vision_d_model**-0.5)
        nn.init.normal_(self.text_projection.weight, std=cfg.text_d_model**-0.5)
        self.logit_scale = nn.Parameter(torch.tensor(float(cfg.logit_scale_init)))
        parts.built(self)

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, d_embed): the projected [CLS] vector, not normalised."""
        return self.visual_projection(self.vision(images))

    def encode_text(
        self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, L) ids -> (B, d_embed): the projected end-of-text vector, not normalised."""
        return self.text_projection(self.text(tokens, attention_mask))

    def forward(
        self,
        images: torch.Tensor,
        tokens: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        image = self.encode_image(images)
        text = self.encode_text(tokens, attention_mask)
        if image.shape[0] == 0 or text.shape[0] == 0:
            raise ValueError("empty batch of images or texts")
        logits_per_image = (
            self.logit_scale.exp() * F.normalize(image, dim=-1) @ F.normalize(text, dim=-1).T
        )
        return logits_per_image, logits_per_image.T

    def loss(
        self,
        images: torch.Tensor,
        tokens: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The symmetric contrastive loss of the B pairs (images[i], tokens[i])."""
        if images.shape[0] != tokens.shape[0]:
            raise ValueError(
                f"{images.shape[0]} images but {tokens.shape[0]} captions: the loss needs pairs"
            )
        return clip_loss(
            self.encode_image(images), self.encode_text(tokens, attention_mask), self.logit_scale
        )

    # ------------------------------------------------------------------------------------------
    # Hugging Face weights
    # ------------------------------------------------------------------------------------------

    @staticmethod
    def config_from_hf(hf_config) -> CLIPConfig:
        """Our CLIPConfig for a transformers.CLIPConfig (sizes, activation, eps, eos rule)."""
        v, t = hf_config.vision_config, hf_config.text_config
        for name, sub in (("vision", v), ("text", t)):
            if sub.hidden_act not in ("quick_gelu", "gelu"):
                raise ValueError(
                    f"only hidden_act 'quick_gelu' or 'gelu' is supported, {name} has "
                    f"{sub.hidden_act!r}"
                )
        if v.hidden_act != t.hidden_act or v.layer_norm_eps != t.layer_norm_eps:
            raise ValueError(
                "the vision and text encoders must share hidden_act and layer_norm_eps"
            )
        eos = t.eos_token_id
        return CLIPConfig(
            d_embed=hf_config.projection_dim,
            image_size=v.image_size,
            patch_size=v.patch_size,
            n_channels=v.num_channels,
            vision_d_model=v.hidden_size,
            vision_n_heads=v.num_attention_heads,
            vision_n_layers=v.num_hidden_layers,
            vision_d_ff=v.intermediate_size,
            vocab_size=t.vocab_size,
            max_len=t.max_position_embeddings,
            text_d_model=t.hidden_size,
            text_n_heads=t.num_attention_heads,
            text_n_layers=t.num_hidden_layers,
            text_d_ff=t.intermediate_size,
            # transformers: eos_token_id == 2 is the legacy config -> argmax of the ids
            eos_id=None if eos == 2 else eos,
            activation=v.hidden_act,
            eps=v.layer_norm_eps,
            logit_scale_init=hf_config.logit_scale_init_value,
        )

    @classmethod
    def from_hf(cls, hf_model, parts: Parts | None = None) -> CLIP:
        """A CLIP with the weights of a transformers.CLIPModel, on its device and dtype, built from
        `parts` (the reference by default; `student.parts()` for your own).

        The vision patch embedding is a Conv2d without bias (weight (d, C, p, p)): it reshapes to
        our Linear's (d, C·p·p) weight and our bias is zero. `pre_layrnorm` is our ViT's ln_pre,
        `post_layernorm` its ln_f (theirs is applied to [CLS] only: the same numbers, since a
        LayerNorm treats each position on its own).
        """
        model = cls(cls.config_from_hf(hf_model.config), parts=parts)
        param = next(hf_model.parameters())
        model.to(device=param.device, dtype=param.dtype)
        sd = hf_model.state_dict()
        ours: dict[str, torch.Tensor] = {}

        def get(key: str) -> torch.Tensor:
            if key not in sd:
                raise KeyError(f"weight {key!r} is missing from the CLIPModel's state_dict")
            return sd[key]

        def layers(ours_prefix: str, hf_prefix: str, n: int) -> None:
            pairs = {
                "self_attn.w_q": "self_attn.q_proj",
                "self_attn.w_k": "self_attn.k_proj",
                "self_attn.w_v": "self_attn.v_proj",
                "self_attn.w_o": "self_attn.out_proj",
                "ffn.w_1": "mlp.fc1",
                "ffn.w_2": "mlp.fc2",
                "norm1": "layer_norm1",
                "norm2": "layer_norm2",
            }
            for i in range(n):
                for mine, theirs in pairs.items():
                    for p in ("weight", "bias"):
                        ours[f"{ours_prefix}.{i}.{mine}.{p}"] = get(f"{hf_prefix}.{i}.{theirs}.{p}")

        vm, tm = "vision_model", "text_model"
        conv = get(f"{vm}.embeddings.patch_embedding.weight")  # (d, C, p, p), no bias
        ours["vision.patch_embed.weight"] = conv.reshape(conv.shape[0], -1)
        ours["vision.patch_embed.bias"] = torch.zeros_like(model.vision.patch_embed.bias)
        ours["vision.cls_token"] = get(f"{vm}.embeddings.class_embedding").reshape(1, 1, -1)
        ours["vision.pos_embed"] = get(f"{vm}.embeddings.position_embedding.weight")[None]
        for p in ("weight", "bias"):
            ours[f"vision.ln_pre.{p}"] = get(f"{vm}.pre_layrnorm.{p}")
            ours[f"vision.ln_f.{p}"] = get(f"{vm}.post_layernorm.{p}")
            ours[f"text.ln_f.{p}"] = get(f"{tm}.final_layer_norm.{p}")
        layers("vision.blocks", f"{vm}.encoder.layers", model.cfg.vision_n_layers)
        layers("text.blocks", f"{tm}.encoder.layers", model.cfg.text_n_layers)
        ours["text.token_embed.weight"] = get(f"{tm}.embeddings.token_embedding.weight")
        ours["text.pos_embed.weight"] = get(f"{tm}.embeddings.position_embedding.weight")
        ours["visual_projection.weight"] = get("visual_projection.weight")
        ours["text_projection.weight"] = get("text_projection.weight")
        ours["logit_scale"] = get("logit_scale").reshape(())
        model.load_state_dict(ours)
        return model.train(hf_model.training)
