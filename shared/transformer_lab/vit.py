"""Lesson 11 — the Vision Transformer (ViT): an image is a sequence of patches.

Cut a (C, H, W) image into N = (H/p)·(W/p) non-overlapping p x p patches, flatten each patch to a
vector of C·p·p numbers and project it linearly to d_model: the patches are now "tokens". Prepend
a learned [CLS] token, add learned position embeddings (N + 1 of them), run a stack of pre-norm
encoder blocks, and classify from the final [CLS] vector:

    z_0 = [x_cls; x_1 E; ...; x_N E] + E_pos          E: (C·p·p, d_model), E_pos: (N + 1, d_model)
    z_l = EncoderBlock(z_{l-1}),  l = 1..L             (pre-norm, GELU)
    y   = head(LayerNorm(z_L)[:, 0])

The linear patch projection is exactly a Conv2d with kernel = stride = p: each output position of
the convolution is a dot product of its filter with one patch. `patchify` lays out each patch in
the convolution's (C, p, p) order, so the two give the same numbers (see `ViT.from_hf`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ._validate import require_ndim
from .encoder_decoder import Parts


def _pair(size) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


def patchify(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, N, C·p·p), N = (H/p)·(W/p).

    Patches are numbered row by row (row-major: left to right, then top to bottom); each is
    flattened in (C, p, p) order, the layout of a Conv2d weight (d_model, C, p, p).
    """
    require_ndim("images", images, 4, "(B, C, H, W)")
    B, C, H, W = images.shape
    p = patch_size
    if H % p or W % p:
        raise ValueError(
            f"image height and width ({H}, {W}) must be divisible by patch_size={p} "
            f"(images of shape {tuple(images.shape)})"
        )
    x = images.reshape(B, C, H // p, p, W // p, p)  # (B, C, rows, p, cols, p)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (B, rows, cols, C, p, p)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


def unpatchify(patches: torch.Tensor, patch_size: int, image_size, n_channels: int) -> torch.Tensor:
    """The inverse of `patchify`: (B, N, C·p·p) -> (B, C, H, W)."""
    require_ndim("patches", patches, 3, "(B, N, C·p·p)")
    H, W = _pair(image_size)
    p, C = patch_size, n_channels
    B, N, D = patches.shape
    if N != (H // p) * (W // p) or D != C * p * p:
        raise ValueError(
            f"patches of shape {tuple(patches.shape)} do not fit a {C}x{H}x{W} image with p={p} "
            f"(expected N={(H // p) * (W // p)}, C·p·p={C * p * p})"
        )
    x = patches.reshape(B, H // p, W // p, C, p, p).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(B, C, H, W)


@dataclass
class ViTConfig:
    """The sizes and settings of a ViT. The defaults are a small model trained from scratch on the
    course's 8 x 8 digits (lesson 11): 16 patches of 2 x 2, one channel, 10 classes.

        image_size:  int or (H, W); both divisible by patch_size.
        patch_size, n_channels: the side p of a square patch; the channels C of an image.
        n_classes:   size of the classification head; 0 means no head (forward returns the
                     final [CLS] vector, as a feature extractor).
        d_model, n_heads, n_layers, d_ff: width, heads, number of blocks, FFN hidden size.
        dropout, eps: dropout on the embeddings and sublayers; the LayerNorm epsilon.
        activation:  the FFN's ("gelu"; CLIP's weights use "quick_gelu").
        pre_norm:    add a LayerNorm `ln_pre` on the embeddings before the first block (CLIP's
                     image encoder).
    """

    image_size: int | tuple[int, int] = 8
    patch_size: int = 2
    n_channels: int = 1
    n_classes: int = 10
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 128
    dropout: float = 0.0
    eps: float = 1e-12
    activation: str = "gelu"
    pre_norm: bool = False

    def __post_init__(self):
        H, W = _pair(self.image_size)
        if H % self.patch_size or W % self.patch_size:
            raise ValueError(
                f"image_size ({H}, {W}) must be divisible by patch_size={self.patch_size}"
            )

    @classmethod
    def from_hf(cls, config, n_classes: int = 0) -> ViTConfig:
        """Our ViTConfig for a `transformers.ViTConfig` (`n_classes`: the classifier's rows)."""
        if getattr(config, "hidden_act", "gelu") != "gelu":
            raise ValueError(f"only hidden_act='gelu' is supported, got {config.hidden_act!r}")
        return cls(
            image_size=config.image_size,
            patch_size=config.patch_size,
            n_channels=config.num_channels,
            n_classes=n_classes,
            d_model=config.hidden_size,
            n_heads=config.num_attention_heads,
            n_layers=config.num_hidden_layers,
            d_ff=config.intermediate_size,
            eps=config.layer_norm_eps,
        )

    def to_hf(self, **overrides):
        """A `transformers.ViTConfig` with these sizes (needs `transformers`; its image_size is
        square, so a (H, W) image_size must have H == W)."""
        from transformers import ViTConfig as HFViTConfig

        H, W = _pair(self.image_size)
        if H != W or self.pre_norm or self.activation != "gelu":
            raise ValueError("transformers' ViT has square images, no ln_pre and the exact GELU")
        kwargs = dict(
            image_size=H,
            patch_size=self.patch_size,
            num_channels=self.n_channels,
            hidden_size=self.d_model,
            num_attention_heads=self.n_heads,
            num_hidden_layers=self.n_layers,
            intermediate_size=self.d_ff,
            hidden_dropout_prob=self.dropout,
            attention_probs_dropout_prob=self.dropout,
            layer_norm_eps=self.eps,
            hidden_act="gelu",
        )
        if self.n_classes:  # the rows of ViTForImageClassification's classifier
            kwargs["num_labels"] = self.n_classes
        return HFViTConfig(**kwargs | overrides)


class ViT(nn.Module):
    """Vision Transformer for image classification.

    ViT(cfg: ViTConfig, parts=None)

    forward(images (B, C, H, W)) -> logits (B, n_classes)
    forward(images, return_attention=True) -> (logits, cls_attention (B, n_layers, h, N + 1)):
        how much [CLS] attends to itself (index 0) and to each patch, per layer and head
        (detached: for plots).
    features(images) -> (B, N + 1, d_model), the final LayerNorm'd sequence ([CLS] first).

    parts: what it is built from (`Parts()`, the reference, by default): n_layers pre-norm
    `parts.encoder_block`s given `parts.sublayers`, and the final `ln_f` is a `parts.norm`.
    """

    def __init__(self, cfg: ViTConfig, parts: Parts | None = None):
        super().__init__()
        parts = Parts() if parts is None else parts
        self.cfg = cfg
        H, W = _pair(cfg.image_size)
        p, d_model = cfg.patch_size, cfg.d_model
        self.image_size, self.patch_size, self.n_channels = (H, W), p, cfg.n_channels
        self.grid = (H // p, W // p)  # (rows, columns) of patches
        self.n_patches = self.grid[0] * self.grid[1]
        self.d_model, self.n_classes = d_model, cfg.n_classes

        self.patch_embed = nn.Linear(cfg.n_channels * p * p, d_model)  # E
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))  # x_cls
        self.pos_embed = nn.Parameter(torch.zeros(1, self.n_patches + 1, d_model))  # E_pos
        self.dropout = nn.Dropout(cfg.dropout)
        self.ln_pre = parts.norm(d_model, cfg.eps) if cfg.pre_norm else nn.Identity()  # CLIP's
        block = dict(norm_first=True, activation=cfg.activation, eps=cfg.eps, **parts.sublayers)
        self.blocks = nn.ModuleList(
            parts.encoder_block(d_model, cfg.n_heads, cfg.d_ff, cfg.dropout, **block)
            for _ in range(cfg.n_layers)
        )
        self.ln_f = parts.norm(d_model, cfg.eps)
        self.head = nn.Linear(d_model, cfg.n_classes) if cfg.n_classes else nn.Identity()
        self.apply(self._init_weights)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        parts.built(self)

    def to_hf_config(self, **overrides):
        """A `transformers.ViTConfig` with this model's shape (needs `transformers`)."""
        return self.cfg.to_hf(**overrides)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.trunc_normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> z_0 (B, N + 1, d_model): [CLS] then the projected patches, plus positions."""
        require_ndim("images", images, 4, "(B, C, H, W)")
        if tuple(images.shape[1:]) != (self.n_channels, *self.image_size):
            raise ValueError(
                f"this ViT expects images of shape (B, {self.n_channels}, {self.image_size[0]}, "
                f"{self.image_size[1]}), got {tuple(images.shape)}"
            )
        x = self.patch_embed(patchify(images, self.patch_size))  # (B, N, d_model)
        cls = self.cls_token.expand(x.shape[0], -1, -1)  # (B, 1, d_model)
        return self.dropout(torch.cat([cls, x], dim=1) + self.pos_embed)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, N + 1, d_model) after the blocks and the final LayerNorm."""
        z = self.ln_pre(self.embed(images))
        for block in self.blocks:
            z = block(z)
        return self.ln_f(z)

    def forward(self, images: torch.Tensor, return_attention: bool = False):
        if not return_attention:
            return self.head(self.features(images)[:, 0])
        logits, weights = self.attention_weights(images, keep_output=True)
        return logits, weights[:, :, :, 0, :]  # the [CLS] row: (B, n_layers, h, N + 1)

    def attention_weights(self, images: torch.Tensor, keep_output: bool = False):
        """All attention weights, (B, n_layers, h, N + 1, N + 1); with keep_output also the logits.

        Runs every block on the written-out softmax(QKᵀ/√d_k) path, which records its weights.
        """
        saved = [block.self_attn.explicit for block in self.blocks]
        try:
            for block in self.blocks:
                block.self_attn.explicit = True
            logits = self.forward(images)
            weights = torch.stack([block.self_attn.last_weights for block in self.blocks], dim=1)
        finally:
            for block, flag in zip(self.blocks, saved):
                block.self_attn.explicit = flag
        return (logits, weights) if keep_output else weights

    def cls_attention_map(self, images: torch.Tensor) -> torch.Tensor:
        """Last layer's [CLS]-to-patch attention, averaged over heads, as an image grid
        (B, H/p, W/p): which patches the classifier reads."""
        _, cls = self.forward(images, return_attention=True)
        return cls[:, -1, :, 1:].mean(dim=1).reshape(-1, *self.grid)

    # ---------------------------------------------------------------------------------------
    # Hugging Face weights
    # ---------------------------------------------------------------------------------------

    @classmethod
    def from_hf(cls, hf_model, parts: Parts | None = None) -> ViT:
        """Build a ViT with the weights of a transformers ViTModel or ViTForImageClassification,
        from `parts` (the reference by default; `student.parts()` for your own).

        Their patch embedding is a Conv2d(C, d_model, kernel=stride=p) whose weight
        (d_model, C, p, p) reshapes to our Linear's (d_model, C·p·p), because `patchify` flattens
        each patch in (C, p, p) order. ViTModel's optional pooler (dense + tanh on [CLS]) is not
        part of the classification path and is not copied; from a ViTModel, n_classes = 0.
        """
        config = hf_model.config
        sd = {_hf_key(k): v for k, v in hf_model.state_dict().items()}
        has_head = "classifier.weight" in sd
        n_classes = sd["classifier.weight"].shape[0] if has_head else 0
        if has_head and not isinstance(hf_model.classifier, nn.Linear):
            raise ValueError("the classifier must be a single nn.Linear")
        model = cls(ViTConfig.from_hf(config, n_classes), parts=parts)
        param = next(hf_model.parameters())
        model.to(device=param.device, dtype=param.dtype)

        conv_w = sd["embeddings.patch.weight"]  # (d_model, C, p, p)
        ours = {
            "patch_embed.weight": conv_w.reshape(conv_w.shape[0], -1),
            "patch_embed.bias": sd["embeddings.patch.bias"],
            "cls_token": sd["embeddings.cls_token"],
            "pos_embed": sd["embeddings.position_embeddings"],
            "ln_f.weight": sd["layernorm.weight"],
            "ln_f.bias": sd["layernorm.bias"],
        }
        if has_head:
            ours["head.weight"], ours["head.bias"] = sd["classifier.weight"], sd["classifier.bias"]
        pairs = {
            "self_attn.w_q": "q",
            "self_attn.w_k": "k",
            "self_attn.w_v": "v",
            "self_attn.w_o": "o",
            "ffn.w_1": "fc1",
            "ffn.w_2": "fc2",
            "norm1": "layernorm_before",
            "norm2": "layernorm_after",
        }
        for i in range(config.num_hidden_layers):
            for mine, theirs in pairs.items():
                ours[f"blocks.{i}.{mine}.weight"] = sd[f"layers.{i}.{theirs}.weight"]
                bias = sd.get(f"layers.{i}.{theirs}.bias")  # q, k, v have none if qkv_bias=False
                ours[f"blocks.{i}.{mine}.bias"] = (
                    bias
                    if bias is not None
                    else torch.zeros_like(model.state_dict()[f"blocks.{i}.{mine}.bias"])
                )
        model.load_state_dict(ours)
        return model


_HF_RENAMES = (  # transformers 4.x name -> our short name; 5.x names are handled alongside
    (".attention.attention.query.", ".q."),
    (".attention.attention.key.", ".k."),
    (".attention.attention.value.", ".v."),
    (".attention.output.dense.", ".o."),
    (".intermediate.dense.", ".fc1."),
    (".output.dense.", ".fc2."),
    (".attention.q_proj.", ".q."),
    (".attention.k_proj.", ".k."),
    (".attention.v_proj.", ".v."),
    (".attention.o_proj.", ".o."),
    (".mlp.fc1.", ".fc1."),
    (".mlp.fc2.", ".fc2."),
    ("embeddings.patch_embeddings.projection.", "embeddings.patch."),
    ("encoder.layer.", "layers."),
)


def _hf_key(key: str) -> str:
    """Normalise a transformers ViT state_dict key (4.x or 5.x naming) to one short scheme."""
    if key.startswith("vit."):
        key = key[len("vit.") :]
    for old, new in _HF_RENAMES:
        key = key.replace(old, new)
    return key


# ---------------------------------------------------------------------------------------------
# The parts of ViT as stand-alone pieces (lesson 11's exercises check against these).
# ---------------------------------------------------------------------------------------------


class ViTEmbedding(nn.Module):
    """The ViT input: z_0 = [x_cls; x_1 E; ...; x_N E] + E_pos, the same computation as `ViT.embed`.

    ViTEmbedding(image_size, patch_size, n_channels, d_model)
        patch_embed: nn.Linear(C·p·p, d_model)        E (and its bias)
        cls_token:   parameter (1, 1, d_model)       x_cls, shared by every image
        pos_embed:   parameter (1, N + 1, d_model)   E_pos, row 0 belongs to [CLS]
    (the names and shapes of ViT's, so a ViT's state_dict entries load into it)

    forward(images (B, C, H, W)) -> z_0 (B, N + 1, d_model), [CLS] first.
    """

    def __init__(self, image_size, patch_size: int, n_channels: int, d_model: int):
        super().__init__()
        H, W = _pair(image_size)
        if H % patch_size or W % patch_size:
            raise ValueError(f"image_size ({H}, {W}) must be divisible by patch_size={patch_size}")
        self.image_size, self.patch_size, self.n_channels = (H, W), patch_size, n_channels
        self.n_patches = (H // patch_size) * (W // patch_size)
        self.patch_embed = nn.Linear(n_channels * patch_size * patch_size, d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.n_patches + 1, d_model))
        nn.init.trunc_normal_(self.patch_embed.weight, std=0.02)
        nn.init.zeros_(self.patch_embed.bias)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(patchify(images, self.patch_size))  # (B, N, d_model)
        cls = self.cls_token.expand(x.shape[0], -1, -1)  # (B, 1, d_model)
        return torch.cat([cls, x], dim=1) + self.pos_embed  # (B, N + 1, d_model)


def cls_attention_map(weights: torch.Tensor, grid) -> torch.Tensor:
    """How much [CLS] attends to each patch, averaged over heads, laid out on the patch grid.

    weights: one layer's attention weights (B, h, N + 1, N + 1), token 0 = [CLS], rows = queries
    grid:    (rows, cols) of patches (an int means square), rows·cols = N
    returns  (B, rows, cols): row 0 of each head (the [CLS] query) without its [CLS] column,
             mean over the h heads, patch i at (i // cols, i % cols) (row-major, as `patchify`)
    """
    require_ndim("weights", weights, 4, "(B, h, N + 1, N + 1)")
    rows, cols = _pair(grid)
    n = rows * cols
    if weights.shape[-2:] != (n + 1, n + 1):
        raise ValueError(
            f"weights of shape {tuple(weights.shape)} do not fit a {rows}x{cols} patch grid "
            f"plus [CLS]: expected (B, h, {n + 1}, {n + 1})"
        )
    return weights[:, :, 0, 1:].mean(dim=1).reshape(weights.shape[0], rows, cols)
