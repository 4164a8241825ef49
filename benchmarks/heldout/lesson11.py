"""Lesson 11: patchify, the ViT embedding, the [CLS] attention map."""

import torch
from torch import nn


def patchify_right(images, patch_size):
    """Correct."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p or W % p:
        raise ValueError(f"image size {H}x{W} is not a multiple of patch size {p}")
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


def patchify_assert(images, patch_size):
    """Uses assert (AssertionError) instead of ValueError for a size that does not divide."""
    B, C, H, W = images.shape
    assert H % patch_size == 0 and W % patch_size == 0, "size must divide"
    return patchify_right(images, patch_size)


def patchify_crops(images, patch_size):
    """Crops the leftover pixels silently."""
    B, C, H, W = images.shape
    p = patch_size
    return patchify_right(images[:, :, : H - H % p, : W - W % p], p)


def patchify_unfold_tensor(images, patch_size):
    """Tensor.unfold twice, then flattens (p, p, C)-style: channels last within the patch."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p or W % p:
        raise ValueError("size")
    x = images.unfold(2, p, p).unfold(3, p, p)  # (B, C, H/p, W/p, p, p)
    return x.permute(0, 2, 3, 4, 5, 1).reshape(B, -1, C * p * p)


def patchify_permute_order(images, patch_size):
    """permute(0, 2, 4, 1, 5, 3): the pixels of a patch read column by column."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p or W % p:
        raise ValueError("size")
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 5, 3)
    return x.reshape(B, -1, C * p * p)


def patchify_only_height_checked(images, patch_size):
    """Checks H only; a width that does not divide slips through (and the reshape garbles it)."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p:
        raise ValueError("height")
    x = images[..., : W - W % p].reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


class _ViTBase(nn.Module):
    def __init__(self, image_size, patch_size, n_channels, d_model):
        super().__init__()
        H, W = (image_size, image_size) if isinstance(image_size, int) else image_size
        self.patch_size = patch_size
        n_patches = (H // patch_size) * (W // patch_size)
        self.patch_embed = nn.Linear(n_channels * patch_size * patch_size, d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_embed = nn.Parameter(torch.zeros(1, n_patches + 1, d_model))
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)

    def _patches(self, images):
        return self.patch_embed(patchify_right(images, self.patch_size))


class ViTEmbeddingRight(_ViTBase):
    """Correct."""

    def forward(self, images):
        x = self._patches(images)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class ViTEmbeddingClsNoPos(_ViTBase):
    """Adds pos_embed rows 1..N to the patches but no position to [CLS]."""

    def forward(self, images):
        x = self._patches(images) + self.pos_embed[:, 1:]
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)


class ViTEmbeddingScaled(_ViTBase):
    """Multiplies the projected patches by sqrt(d_model) (the text-embedding convention)."""

    def forward(self, images):
        x = self._patches(images) * self.pos_embed.shape[-1] ** 0.5
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class ViTEmbeddingPositionsOnPixels(_ViTBase):
    """Adds pos_embed row 0 to every token (one position for all)."""

    def forward(self, images):
        x = self._patches(images)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed[:, :1]


class ViTEmbeddingDetachedCls(_ViTBase):
    """Uses cls_token.data (no gradient reaches [CLS])."""

    def forward(self, images):
        x = self._patches(images)
        cls = self.cls_token.data.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class ViTEmbeddingGridTransposed(_ViTBase):
    """Patches numbered column by column (images transposed in H and W before patchify)."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images.transpose(-2, -1), self.patch_size))
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


def cls_map_right(weights, grid):
    """Correct."""
    rows, cols = grid
    return weights[:, :, 0, 1:].mean(1).reshape(-1, rows, cols)


def cls_map_max_heads(weights, grid):
    """Takes the max over heads, not the mean."""
    rows, cols = grid
    return weights[:, :, 0, 1:].amax(1).reshape(-1, rows, cols)


def cls_map_renormalised(weights, grid):
    """Renormalises the N patch weights to sum to 1 after dropping [CLS]."""
    rows, cols = grid
    m = weights[:, :, 0, 1:].mean(1)
    return (m / m.sum(-1, keepdim=True)).reshape(-1, rows, cols)


def cls_map_keeps_last_drops_first_patch(weights, grid):
    """Slices [:, :, 0, :-1]: drops the last patch and keeps [CLS]."""
    rows, cols = grid
    return weights[:, :, 0, :-1].mean(1).reshape(-1, rows, cols)


def cls_map_mean_over_batch(weights, grid):
    """Averages over axis 0 (batch) instead of the heads."""
    rows, cols = grid
    w = weights[:, :, 0, 1:].mean(0)
    return w.reshape(-1, rows, cols)


def cls_map_first_head(weights, grid):
    """Uses head 0 only."""
    rows, cols = grid
    return weights[:, 0, 0, 1:].reshape(-1, rows, cols)


WRONG = {
    "patchify": [
        patchify_assert,
        patchify_crops,
        patchify_unfold_tensor,
        patchify_permute_order,
        patchify_only_height_checked,
    ],
    "ViTEmbedding": [
        ViTEmbeddingClsNoPos,
        ViTEmbeddingScaled,
        ViTEmbeddingPositionsOnPixels,
        ViTEmbeddingDetachedCls,
        ViTEmbeddingGridTransposed,
    ],
    "cls_attention_map": [
        cls_map_max_heads,
        cls_map_renormalised,
        cls_map_keeps_last_drops_first_patch,
        cls_map_mean_over_batch,
        cls_map_first_head,
    ],
}
RIGHT = {
    "patchify": patchify_right,
    "ViTEmbedding": ViTEmbeddingRight,
    "cls_attention_map": cls_map_right,
}
