"""Lesson 11 (ViT): held-out wrong and right implementations, from the exercise text."""

import torch
from torch import nn

# ---------------------------------------------------------------- patchify


def _check(images, p):
    H, W = images.shape[-2:]
    if H % p or W % p:
        raise ValueError(f"image size {H}x{W} is not a multiple of patch size {p}")


def patchify_right(images, patch_size):
    """Right: reshape, permute, reshape."""
    _check(images, patch_size)
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, H // p, p, W // p, p)
    x = x.permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


def patchify_right2(images, patch_size):
    """Right: two Python loops over the grid, slicing and flattening each patch."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p != 0 or W % p != 0:
        raise ValueError(f"H={H} and W={W} must be multiples of patch_size={p}")
    patches = []
    for r in range(H // p):
        for c in range(W // p):
            patches.append(images[:, :, r * p : (r + 1) * p, c * p : (c + 1) * p].reshape(B, -1))
    return torch.stack(patches, dim=1)


def patchify_assert(images, patch_size):
    """Wrong: checks the sizes with assert (AssertionError), not a ValueError."""
    B, C, H, W = images.shape
    p = patch_size
    assert H % p == 0 and W % p == 0, "image size must be divisible by the patch size"
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


def patchify_view(images, patch_size):
    """Wrong: .view after the permute (not contiguous: RuntimeError)."""
    _check(images, patch_size)
    B, C, H, W = images.shape
    p = patch_size
    x = images.view(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.view(B, -1, C * p * p)


def patchify_only_height(images, patch_size):
    """Wrong: only H is checked for divisibility, W is not."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p:
        raise ValueError(f"H={H} is not a multiple of {p}")
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


def patchify_channels_last(images, patch_size):
    """Wrong: permute(0, 2, 4, 3, 5, 1): each patch flattened as (p, p, C)."""
    _check(images, patch_size)
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(B, -1, C * p * p)


def patchify_grid_swapped(images, patch_size):
    """Wrong: permute(0, 4, 2, 1, 3, 5): the grid axes in the other order (column-major patches)."""
    _check(images, patch_size)
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 4, 2, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


def patchify_crop(images, patch_size):
    """Wrong: crops the leftover pixels silently instead of raising."""
    B, C, H, W = images.shape
    p = patch_size
    images = images[:, :, : H - H % p, : W - W % p]
    H, W = images.shape[-2:]
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


# ---------------------------------------------------------------- ViTEmbedding


class _Emb(nn.Module):
    """The given constructor of the exercise (not an implementation)."""

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


class ViTEmbeddingRight(_Emb):
    """Right: expand, cat, add."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images, self.patch_size))
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class ViTEmbeddingRight2(_Emb):
    """Right: a preallocated output filled by slices, the positions added per part."""

    def forward(self, images):
        x = self.patch_embed(patchify_right2(images, self.patch_size))
        B, N, d = x.shape
        cls = self.cls_token.repeat(B, 1, 1) + self.pos_embed[:, :1]
        patches = x + self.pos_embed[:, 1:]
        return torch.cat((cls, patches), dim=1)


class ViTEmbeddingNoExpand(_Emb):
    """Wrong: concatenates the (1, 1, d) cls_token without expanding it to the batch."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images, self.patch_size))
        return torch.cat([self.cls_token, x], dim=1) + self.pos_embed


class ViTEmbeddingNoBias(_Emb):
    """Wrong: projects with patches @ weight.T and forgets the Linear's bias."""

    def forward(self, images):
        x = patchify_right(images, self.patch_size) @ self.patch_embed.weight.T
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class ViTEmbeddingClsLast(_Emb):
    """Wrong: [CLS] concatenated after the patches."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images, self.patch_size))
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([x, cls], dim=1) + self.pos_embed


class ViTEmbeddingPosOnPatchesOnly(_Emb):
    """Wrong: positions added to the patches only (rows 1..N), [CLS] gets none."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images, self.patch_size)) + self.pos_embed[:, 1:]
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1)


class ViTEmbeddingPosFirstRows(_Emb):
    """Wrong: the patches get pos_embed rows 0..N-1 and [CLS] row N."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images, self.patch_size))
        N = x.shape[1]
        x = x + self.pos_embed[:, :N]
        cls = self.cls_token.expand(x.shape[0], -1, -1) + self.pos_embed[:, N:]
        return torch.cat([cls, x], dim=1)


class ViTEmbeddingRawPixels(_Emb):
    """Wrong: projects the raw images' flattened patches with a plain reshape (no permute)."""

    def forward(self, images):
        B, C, H, W = images.shape
        p = self.patch_size
        patches = images.reshape(B, (H // p) * (W // p), C * p * p)
        x = self.patch_embed(patches)
        cls = self.cls_token.expand(B, -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


# ---------------------------------------------------------------- cls_attention_map


def cls_map_right(weights, grid):
    """Right: index row 0, drop column 0, mean over heads, reshape."""
    rows, cols = grid
    return weights[:, :, 0, 1:].mean(dim=1).reshape(-1, rows, cols)


def cls_map_right2(weights, grid):
    """Right: loop over heads and sum, divide by h, view on the grid."""
    B, h = weights.shape[:2]
    rows, cols = grid
    acc = torch.zeros_like(weights[:, 0, 0, 1:])
    for i in range(h):
        acc = acc + weights[:, i, 0, 1:]
    return (acc / h).reshape(B, rows, cols)


def cls_map_batch_mean(weights, grid):
    """Wrong: averages over dim 0 (the batch) instead of the heads."""
    rows, cols = grid
    return weights[:, :, 0, 1:].mean(dim=0).reshape(-1, rows, cols)


def cls_map_renormalised(weights, grid):
    """Wrong: renormalises the N patch weights to sum to 1 after dropping [CLS]."""
    rows, cols = grid
    m = weights[:, :, 0, 1:].mean(dim=1)
    m = m / m.sum(-1, keepdim=True)
    return m.reshape(-1, rows, cols)


def cls_map_max_heads(weights, grid):
    """Wrong: takes the max over the heads instead of the mean."""
    rows, cols = grid
    return weights[:, :, 0, 1:].amax(dim=1).reshape(-1, rows, cols)


def cls_map_column(weights, grid):
    """Wrong: weights[..., 1:, 0]: how much each patch attends to [CLS] (the column)."""
    rows, cols = grid
    return weights[:, :, 1:, 0].mean(dim=1).reshape(-1, rows, cols)


def cls_map_cols_rows(weights, grid):
    """Wrong: reshapes to (B, cols, rows) and transposes."""
    rows, cols = grid
    return weights[:, :, 0, 1:].mean(dim=1).reshape(-1, cols, rows).transpose(1, 2)


def cls_map_keeps_cls_drops_last(weights, grid):
    """Wrong: off by one, keeps entries 0..N-1 ([CLS] kept, the last patch dropped)."""
    rows, cols = grid
    return weights[:, :, 0, : rows * cols].mean(dim=1).reshape(-1, rows, cols)


WRONG = {
    "patchify": [
        patchify_assert,
        patchify_view,
        patchify_only_height,
        patchify_channels_last,
        patchify_grid_swapped,
        patchify_crop,
    ],
    "ViTEmbedding": [
        ViTEmbeddingNoExpand,
        ViTEmbeddingNoBias,
        ViTEmbeddingClsLast,
        ViTEmbeddingPosOnPatchesOnly,
        ViTEmbeddingPosFirstRows,
        ViTEmbeddingRawPixels,
    ],
    "cls_attention_map": [
        cls_map_batch_mean,
        cls_map_renormalised,
        cls_map_max_heads,
        cls_map_column,
        cls_map_cols_rows,
        cls_map_keeps_cls_drops_last,
    ],
}
RIGHT = {
    "patchify": patchify_right,
    "ViTEmbedding": ViTEmbeddingRight,
    "cls_attention_map": cls_map_right,
}
RIGHT2 = {
    "patchify": patchify_right2,
    "ViTEmbedding": ViTEmbeddingRight2,
    "cls_attention_map": cls_map_right2,
}
