"""Lesson 11 (ViT): held-out wrong and right implementations, from the exercise text only."""

import math

import torch
from torch import nn

# ---------------------------------------------------------------- patchify


def patchify_right(images, patch_size):
    """Right: reshape to (B, C, H/p, p, W/p, p), permute grid axes first, reshape."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p or W % p:
        raise ValueError(f"image size {H}x{W} is not a multiple of patch_size {p}")
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


def patchify_right2(images, patch_size):
    """Right: Tensor.unfold on height then width, then (C, p, p) moved behind the grid axes."""
    B, C, H, W = images.shape
    p = patch_size
    for name, size in (("height", H), ("width", W)):
        if size % p != 0:
            raise ValueError(f"{name} {size} is not divisible by patch size {p}")
    tiles = images.unfold(2, p, p).unfold(3, p, p)  # (B, C, H/p, W/p, p, p)
    return tiles.permute(0, 2, 3, 1, 4, 5).flatten(3).flatten(1, 2)


def _check(images, p):
    H, W = images.shape[-2:]
    if H % p or W % p:
        raise ValueError(f"image size {H}x{W} is not a multiple of patch_size {p}")


def patchify_column_major(images, patch_size):
    """Wrong: the grid's column axis before its row axis, so patches are numbered column by column."""
    _check(images, patch_size)
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 4, 2, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


def patchify_channels_last(images, patch_size):
    """Wrong: each patch flattened as (p, p, C) instead of (C, p, p)."""
    _check(images, patch_size)
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(B, -1, C * p * p)


def patchify_pixels_transposed(images, patch_size):
    """Wrong: inside a patch the pixel axes are swapped (read column by column)."""
    _check(images, patch_size)
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 5, 3)
    return x.reshape(B, -1, C * p * p)


def patchify_crops(images, patch_size):
    """Wrong: silently crops the leftover pixels instead of raising a ValueError."""
    B, C, H, W = images.shape
    p = patch_size
    images = images[:, :, : H // p * p, : W // p * p]
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


def patchify_assert(images, patch_size):
    """Wrong: checks divisibility with assert (AssertionError), not the ValueError the text asks for."""
    B, C, H, W = images.shape
    p = patch_size
    assert H % p == 0 and W % p == 0, f"{H}x{W} not divisible by {p}"
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


def patchify_view(images, patch_size):
    """Wrong: .view after the permute (the permuted tensor is not contiguous; needs reshape)."""
    _check(images, patch_size)
    B, C, H, W = images.shape
    p = patch_size
    x = images.view(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.view(B, -1, C * p * p)


def patchify_hw_swapped(images, patch_size):
    """Wrong: the reshape uses W/p for the row axis and H/p for the column axis (fine only when H == W)."""
    _check(images, patch_size)
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, W // p, p, H // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


# ---------------------------------------------------------------- ViTEmbedding


class _Base(nn.Module):
    """The given constructor."""

    def __init__(self, image_size, patch_size, n_channels, d_model):
        super().__init__()
        H, W = (image_size, image_size) if isinstance(image_size, int) else image_size
        self.patch_size = patch_size
        n_patches = (H // patch_size) * (W // patch_size)
        self.patch_embed = nn.Linear(n_channels * patch_size * patch_size, d_model)  # E
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))  # x_cls
        self.pos_embed = nn.Parameter(torch.zeros(1, n_patches + 1, d_model))  # E_pos
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)


class ViTEmbeddingRight(_Base):
    """Right: patchify, project, prepend the expanded [CLS], add all N + 1 positions."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images, self.patch_size))
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class ViTEmbeddingRight2(_Base):
    """Right: positions added to [CLS] (row 0) and to the patches (rows 1..N) separately, then joined; repeat not expand."""

    def forward(self, images):
        patches = patchify_right2(images, self.patch_size)
        x = torch.nn.functional.linear(patches, self.patch_embed.weight, self.patch_embed.bias)
        x = x + self.pos_embed[:, 1:]
        cls = (self.cls_token + self.pos_embed[:, :1]).repeat(images.shape[0], 1, 1)
        return torch.cat((cls, x), 1)


class ViTEmbeddingClsLast(_Base):
    """Wrong: [CLS] concatenated after the patches."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images, self.patch_size))
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([x, cls], dim=1) + self.pos_embed


class ViTEmbeddingPatchesOnlyPos(_Base):
    """Wrong: the patches get rows 1..N of pos_embed but [CLS] is prepended without its row 0."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images, self.patch_size)) + self.pos_embed[:, 1:]
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1)


class ViTEmbeddingNoBias(_Base):
    """Wrong: projects with x @ patch_embed.weight.T and forgets the Linear's bias."""

    def forward(self, images):
        x = patchify_right(images, self.patch_size) @ self.patch_embed.weight.T
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class ViTEmbeddingScaled(_Base):
    """Wrong: multiplies the patch embeddings by sqrt(d_model), as for token embeddings in lesson 04."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images, self.patch_size))
        x = x * math.sqrt(x.shape[-1])
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class ViTEmbeddingClsAdded(_Base):
    """Wrong: [CLS] added to every patch vector instead of prepended (N tokens, positions 1..N)."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images, self.patch_size))
        return x + self.cls_token + self.pos_embed[:, 1:]


class ViTEmbeddingPosRows0N(_Base):
    """Wrong: positions added to the patches before [CLS] is prepended, with rows 0..N-1."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images, self.patch_size))
        x = x + self.pos_embed[:, : x.shape[1]]
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1)


# ---------------------------------------------------------------- cls_attention_map


def cls_attention_map_right(weights, grid):
    """Right: row 0, columns 1.., mean over heads, reshape to (B, rows, cols)."""
    rows, cols = grid
    return weights[:, :, 0, 1:].mean(dim=1).reshape(weights.shape[0], rows, cols)


def cls_attention_map_right2(weights, grid):
    """Right: einsum with a 1/h vector over the heads, then unflatten (grid may be a list)."""
    h = weights.shape[1]
    avg = torch.full((h,), 1.0 / h, dtype=weights.dtype, device=weights.device)
    cls_row = torch.einsum(
        "bhn,h->bn", weights.select(2, 0).narrow(-1, 1, weights.shape[-1] - 1), avg
    )
    return cls_row.unflatten(-1, tuple(grid))


def cls_map_column0(weights, grid):
    """Wrong: takes column 0 (what attends to [CLS]) instead of [CLS]'s row."""
    rows, cols = grid
    return weights[:, :, 1:, 0].mean(1).reshape(-1, rows, cols)


def cls_map_drops_last(weights, grid):
    """Wrong: drops the last entry ([:-1]) instead of [CLS]'s own entry 0."""
    rows, cols = grid
    return weights[:, :, 0, :-1].mean(1).reshape(-1, rows, cols)


def cls_map_head_sum(weights, grid):
    """Wrong: sums the heads instead of averaging them."""
    rows, cols = grid
    return weights[:, :, 0, 1:].sum(1).reshape(-1, rows, cols)


def cls_map_head_max(weights, grid):
    """Wrong: takes the max over the heads instead of the mean."""
    rows, cols = grid
    return weights[:, :, 0, 1:].amax(1).reshape(-1, rows, cols)


def cls_map_column_layout(weights, grid):
    """Wrong: laid out column by column (reshape to (cols, rows), then transpose)."""
    rows, cols = grid
    return weights[:, :, 0, 1:].mean(1).reshape(-1, cols, rows).transpose(1, 2)


def cls_map_renormalised(weights, grid):
    """Wrong: renormalises the N patch weights to sum to 1 after dropping [CLS]."""
    rows, cols = grid
    a = weights[:, :, 0, 1:].mean(1)
    return (a / a.sum(-1, keepdim=True)).reshape(-1, rows, cols)


def cls_map_batch_mean(weights, grid):
    """Wrong: .mean(0) averages over the batch axis instead of the heads."""
    rows, cols = grid
    return weights[:, :, 0, 1:].mean(0).reshape(-1, rows, cols)


WRONG = {
    "patchify": [
        patchify_column_major,
        patchify_channels_last,
        patchify_pixels_transposed,
        patchify_crops,
        patchify_assert,
        patchify_view,
        patchify_hw_swapped,
    ],
    "ViTEmbedding": [
        ViTEmbeddingClsLast,
        ViTEmbeddingPatchesOnlyPos,
        ViTEmbeddingNoBias,
        ViTEmbeddingScaled,
        ViTEmbeddingClsAdded,
        ViTEmbeddingPosRows0N,
    ],
    "cls_attention_map": [
        cls_map_column0,
        cls_map_drops_last,
        cls_map_head_sum,
        cls_map_head_max,
        cls_map_column_layout,
        cls_map_renormalised,
        cls_map_batch_mean,
    ],
}

RIGHT = {
    "patchify": patchify_right,
    "ViTEmbedding": ViTEmbeddingRight,
    "cls_attention_map": cls_attention_map_right,
}

RIGHT2 = {
    "patchify": patchify_right2,
    "ViTEmbedding": ViTEmbeddingRight2,
    "cls_attention_map": cls_attention_map_right2,
}
