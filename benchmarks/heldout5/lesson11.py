"""Lesson 11 (ViT): held-out wrong and right implementations, from the exercise text only."""

import math

import torch
from torch import nn

# ---------------------------------------------------------------- patchify


def patchify_permute(images, patch_size):
    """Right: reshape to (B, C, H/p, p, W/p, p), permute the grid axes first, reshape."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p or W % p:
        raise ValueError(f"image size {H}x{W} is not a multiple of the patch size {p}")
    x = images.reshape(B, C, H // p, p, W // p, p)
    x = x.permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


def patchify_slices(images, patch_size):
    """Right: a loop over the grid, each window sliced and flattened, then torch.stack."""
    p = patch_size
    B, C, H, W = images.shape
    if H % p != 0 or W % p != 0:
        raise ValueError(f"height {H} and width {W} must be multiples of patch_size {p}")
    patches = []
    for r in range(0, H, p):
        for c in range(0, W, p):
            patches.append(images[:, :, r : r + p, c : c + p].reshape(B, C * p * p))
    return torch.stack(patches, dim=1)


def patchify_one_reshape(images, patch_size):
    """Wrong: a single reshape to (B, N, C*p*p): consecutive memory is not a patch."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p or W % p:
        raise ValueError(f"image size {H}x{W} is not a multiple of the patch size {p}")
    return images.reshape(B, (H // p) * (W // p), C * p * p)


def patchify_channels_last(images, patch_size):
    """Wrong: permute(0, 2, 4, 3, 5, 1): each patch flattened as (p, p, C)."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p or W % p:
        raise ValueError(f"image size {H}x{W} is not a multiple of the patch size {p}")
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(B, -1, C * p * p)


def patchify_split_order(images, patch_size):
    """Wrong: reshape to (B, C, p, H/p, p, W/p): splits each axis the wrong way round (strided pixels)."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p or W % p:
        raise ValueError(f"image size {H}x{W} is not a multiple of the patch size {p}")
    x = images.reshape(B, C, p, H // p, p, W // p).permute(0, 3, 5, 1, 2, 4)
    return x.reshape(B, -1, C * p * p)


def patchify_grid_transposed(images, patch_size):
    """Wrong: permute(0, 4, 2, 1, 3, 5): the grid's column axis comes before its row axis."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p or W % p:
        raise ValueError(f"image size {H}x{W} is not a multiple of the patch size {p}")
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 4, 2, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


def patchify_inner_transposed(images, patch_size):
    """Wrong: permute(0, 2, 4, 1, 5, 3): inside a patch the pixels are read column by column."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p or W % p:
        raise ValueError(f"image size {H}x{W} is not a multiple of the patch size {p}")
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 5, 3)
    return x.reshape(B, -1, C * p * p)


def patchify_crop(images, patch_size):
    """Wrong: leftover rows and columns are cropped silently instead of raising a ValueError."""
    B, C, H, W = images.shape
    p = patch_size
    images = images[:, :, : H // p * p, : W // p * p]
    H, W = images.shape[-2:]
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


def patchify_assert(images, patch_size):
    """Wrong: the size test is an assert (AssertionError), not the ValueError the text asks for."""
    B, C, H, W = images.shape
    p = patch_size
    assert H % p == 0 and W % p == 0, f"image size {H}x{W} is not a multiple of {p}"
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


def patchify_height_only(images, patch_size):
    """Wrong: only the height is tested against p (square images in mind); the width is not."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p:
        raise ValueError(f"image height {H} is not a multiple of the patch size {p}")
    W = W // p * p
    x = images[..., :W].reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


def patchify_hw_swapped(images, patch_size):
    """Wrong: the shape is unpacked as (B, C, W, H): fine for squares, scrambled otherwise."""
    B, C, W, H = images.shape
    p = patch_size
    if H % p or W % p:
        raise ValueError(f"image size {H}x{W} is not a multiple of the patch size {p}")
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


# ---------------------------------------------------------------- ViTEmbedding


class _EmbeddingBase(nn.Module):
    """The constructor the exercise gives (names kept)."""

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


class EmbeddingCat(_EmbeddingBase):
    """Right: patchify, patch_embed, expanded [CLS] in front, + pos_embed."""

    def forward(self, images):
        x = self.patch_embed(patchify_permute(images, self.patch_size))
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class EmbeddingSplitPositions(_EmbeddingBase):
    """Right: F.linear by hand, positions added to [CLS] and to the patches separately, then cat."""

    def forward(self, images):
        patches = patchify_slices(images, self.patch_size)
        x = patches @ self.patch_embed.weight.T + self.patch_embed.bias
        cls = self.cls_token.repeat(images.shape[0], 1, 1) + self.pos_embed[:, :1]
        return torch.cat((cls, x + self.pos_embed[:, 1:]), dim=1)


class EmbeddingClsLast(_EmbeddingBase):
    """Wrong: [CLS] is concatenated after the patches."""

    def forward(self, images):
        x = self.patch_embed(patchify_permute(images, self.patch_size))
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([x, cls], dim=1) + self.pos_embed


class EmbeddingClsNoPosition(_EmbeddingBase):
    """Wrong: the patches get pos_embed[:, 1:], [CLS] is prepended afterwards with no position."""

    def forward(self, images):
        x = self.patch_embed(patchify_permute(images, self.patch_size)) + self.pos_embed[:, 1:]
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1)


class EmbeddingPositionsOffByOne(_EmbeddingBase):
    """Wrong: the patches take rows 0..N-1 of pos_embed and [CLS] the last row."""

    def forward(self, images):
        x = self.patch_embed(patchify_permute(images, self.patch_size))
        n = x.shape[1]
        x = x + self.pos_embed[:, :n]
        cls = self.cls_token.expand(x.shape[0], -1, -1) + self.pos_embed[:, n:]
        return torch.cat([cls, x], dim=1)


class EmbeddingNoPositions(_EmbeddingBase):
    """Wrong: pos_embed is never added."""

    def forward(self, images):
        x = self.patch_embed(patchify_permute(images, self.patch_size))
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)


class EmbeddingScaled(_EmbeddingBase):
    """Wrong: the patch embeddings are multiplied by sqrt(d_model), a habit from token embeddings."""

    def forward(self, images):
        x = self.patch_embed(patchify_permute(images, self.patch_size))
        x = x * math.sqrt(x.shape[-1])
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class EmbeddingFlattenPixels(_EmbeddingBase):
    """Wrong: the image is cut with one reshape to (B, N, C*p*p) instead of patchify: wrong patches."""

    def forward(self, images):
        B = images.shape[0]
        n_in = self.patch_embed.in_features
        x = self.patch_embed(images.reshape(B, -1, n_in))
        cls = self.cls_token.expand(B, -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class EmbeddingClsAdded(_EmbeddingBase):
    """Wrong: cls_token is added to every patch vector; the extra row is pos_embed's first row."""

    def forward(self, images):
        x = self.patch_embed(patchify_permute(images, self.patch_size)) + self.cls_token
        first = self.pos_embed[:, :1].expand(x.shape[0], -1, -1)
        return torch.cat([first, x + self.pos_embed[:, 1:]], dim=1)


# ---------------------------------------------------------------- cls_attention_map


def cls_map_index(weights, grid):
    """Right: row 0, columns 1:, mean over the heads, reshape to the grid."""
    rows, cols = grid
    return weights[:, :, 0, 1:].mean(dim=1).reshape(weights.shape[0], rows, cols)


def cls_map_einsum(weights, grid):
    """Right: a one-hot query selector with einsum, heads averaged by a division, unflatten."""
    B, h, n1, _ = weights.shape
    select = torch.zeros(n1, dtype=weights.dtype, device=weights.device)
    select[0] = 1
    row = torch.einsum("bhqk,q->bk", weights, select) / h
    return row[:, 1:].unflatten(1, tuple(grid))


def cls_map_column(weights, grid):
    """Wrong: column 0 (what attends to [CLS]) instead of [CLS]'s own row."""
    rows, cols = grid
    return weights[:, :, 1:, 0].mean(dim=1).reshape(-1, rows, cols)


def cls_map_last_row(weights, grid):
    """Wrong: the last token's row (as if [CLS] sat at the end, as in GPT's readout)."""
    rows, cols = grid
    return weights[:, :, -1, 1:].mean(dim=1).reshape(-1, rows, cols)


def cls_map_drop_last(weights, grid):
    """Wrong: weights[:, :, 0, :-1]: drops the last patch and keeps [CLS]'s own entry."""
    rows, cols = grid
    return weights[:, :, 0, :-1].mean(dim=1).reshape(-1, rows, cols)


def cls_map_max_heads(weights, grid):
    """Wrong: the heads are combined with max, not averaged."""
    rows, cols = grid
    return weights[:, :, 0, 1:].amax(dim=1).reshape(-1, rows, cols)


def cls_map_renormalised(weights, grid):
    """Wrong: after dropping [CLS]'s entry the row is renormalised to sum to 1."""
    rows, cols = grid
    row = weights[:, :, 0, 1:].mean(dim=1)
    row = row / row.sum(-1, keepdim=True)
    return row.reshape(-1, rows, cols)


def cls_map_column_major(weights, grid):
    """Wrong: reshaped to (B, cols, rows) and transposed: the map is laid out column by column."""
    rows, cols = grid
    return weights[:, :, 0, 1:].mean(dim=1).reshape(-1, cols, rows).transpose(1, 2)


def cls_map_batch_mean(weights, grid):
    """Wrong: mean(dim=0), over the batch, where the heads (dim 1) were meant."""
    rows, cols = grid
    return weights[:, :, 0, 1:].mean(dim=0).reshape(-1, rows, cols)


def cls_map_query_mean(weights, grid):
    """Wrong: the average over all queries of the attention to each patch, not [CLS]'s row."""
    rows, cols = grid
    return weights[:, :, :, 1:].mean(dim=(1, 2)).reshape(-1, rows, cols)


WRONG = {
    "patchify": [
        patchify_one_reshape,
        patchify_channels_last,
        patchify_split_order,
        patchify_grid_transposed,
        patchify_inner_transposed,
        patchify_crop,
        patchify_assert,
        patchify_height_only,
        patchify_hw_swapped,
    ],
    "ViTEmbedding": [
        EmbeddingClsLast,
        EmbeddingClsNoPosition,
        EmbeddingPositionsOffByOne,
        EmbeddingNoPositions,
        EmbeddingScaled,
        EmbeddingFlattenPixels,
        EmbeddingClsAdded,
    ],
    "cls_attention_map": [
        cls_map_column,
        cls_map_last_row,
        cls_map_drop_last,
        cls_map_max_heads,
        cls_map_renormalised,
        cls_map_column_major,
        cls_map_batch_mean,
        cls_map_query_mean,
    ],
}

RIGHT = {
    "patchify": patchify_permute,
    "ViTEmbedding": EmbeddingCat,
    "cls_attention_map": cls_map_index,
}

RIGHT2 = {
    "patchify": patchify_slices,
    "ViTEmbedding": EmbeddingSplitPositions,
    "cls_attention_map": cls_map_einsum,
}
