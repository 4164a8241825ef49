"""Lesson 11 (ViT): held-out wrong and right implementations, from the exercise text."""

import math

import torch
from torch import nn

# ---------------------------------------------------------------- patchify


def _check(images, p):
    H, W = images.shape[-2:]
    if H % p or W % p:
        raise ValueError(f"image size {H}x{W} is not a multiple of the patch size {p}")


def patchify_right(images, patch_size):
    """Right: one reshape, one permute, one reshape."""
    _check(images, patch_size)
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, H // p, p, W // p, p)
    x = x.permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


def patchify_right2(images, patch_size):
    """Right: Python loops over the grid, slicing each square and flattening it."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p != 0 or W % p != 0:
        raise ValueError(f"H={H} and W={W} must both be multiples of patch_size={p}")
    patches = []
    for r in range(0, H, p):
        for c in range(0, W, p):
            patches.append(images[:, :, r : r + p, c : c + p].reshape(B, -1))
    return torch.stack(patches, dim=1)


def patchify_no_check(images, patch_size):
    """No ValueError: the reshape fails (or works) on its own."""
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


def patchify_checks_height_only(images, patch_size):
    """Checks H % p but forgets W."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p:
        raise ValueError(f"height {H} is not a multiple of {p}")
    x = images[..., : (W // p) * p].reshape(B, C, H // p, p, W // p, p)
    return x.permute(0, 2, 4, 1, 3, 5).reshape(B, -1, C * p * p)


def patchify_assert(images, patch_size):
    """Uses assert for the size rule (AssertionError, not ValueError)."""
    B, C, H, W = images.shape
    p = patch_size
    assert H % p == 0 and W % p == 0, "image size must be a multiple of the patch size"
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


def patchify_tensor_unfold_no_permute(images, patch_size):
    """Tensor.unfold twice, then a reshape without moving the channel axis after the grid."""
    _check(images, patch_size)
    B, C, H, W = images.shape
    p = patch_size
    x = images.unfold(2, p, p).unfold(3, p, p)  # (B, C, H/p, W/p, p, p)
    return x.contiguous().view(B, -1, C * p * p)


def patchify_view_after_permute(images, patch_size):
    """.view after the permute (the tensor is no longer contiguous)."""
    _check(images, patch_size)
    B, C, H, W = images.shape
    p = patch_size
    x = images.view(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.view(B, -1, C * p * p)


def patchify_vague_error(images, patch_size):
    """Raises ValueError("bad image size") without naming the sizes."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p or W % p:
        raise ValueError("bad image size")
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


# ---------------------------------------------------------------- ViTEmbedding


class _Given(nn.Module):
    """The constructor the exercise gives."""

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


class EmbedRight(_Given):
    """Right: expand, cat, add the whole table."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images, self.patch_size))
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class EmbedRight2(_Given):
    """Right: repeat, and the two parts of the position table added separately."""

    def forward(self, images):
        B = images.shape[0]
        tokens = self.patch_embed(patchify_right2(images, self.patch_size))
        tokens = tokens + self.pos_embed[:, 1:]
        cls = self.cls_token.repeat(B, 1, 1) + self.pos_embed[:, :1]
        return torch.cat((cls, tokens), dim=1)


class EmbedPosPatchesOnly(_Given):
    """Adds the position table's patch rows to the patches and gives [CLS] no position."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images, self.patch_size)) + self.pos_embed[:, 1:]
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)


class EmbedNoExpand(_Given):
    """Concatenates the (1, 1, d) cls_token with the (B, N, d) patches without expanding it."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images, self.patch_size))
        return torch.cat([self.cls_token, x], dim=1) + self.pos_embed


class EmbedScaledBySqrtD(_Given):
    """Multiplies the patch embeddings by sqrt(d_model), as the 2017 paper does with tokens."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images, self.patch_size))
        x = x * math.sqrt(x.shape[-1])
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class EmbedClsData(_Given):
    """Takes self.cls_token.data, so no gradient reaches the [CLS] parameter."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images, self.patch_size))
        cls = self.cls_token.data.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class EmbedNoBias(_Given):
    """Projects with x @ patch_embed.weight.T and forgets the bias."""

    def forward(self, images):
        x = patchify_right(images, self.patch_size) @ self.patch_embed.weight.T
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class EmbedZeroCls(_Given):
    """Reads "[CLS] has no content of its own" literally: a zero vector in front, not cls_token."""

    def forward(self, images):
        x = self.patch_embed(patchify_right(images, self.patch_size))
        cls = torch.zeros(x.shape[0], 1, x.shape[-1], dtype=x.dtype, device=x.device)
        return torch.cat([cls, x], dim=1) + self.pos_embed


# ---------------------------------------------------------------- cls_attention_map


def map_right(weights, grid):
    """Right: row 0, columns 1:, mean over heads, reshape."""
    rows, cols = grid
    return weights[:, :, 0, 1:].mean(dim=1).reshape(weights.shape[0], rows, cols)


def map_right2(weights, grid):
    """Right: a loop summing the heads, divided by h, then view as the grid."""
    B, h = weights.shape[:2]
    total = torch.zeros_like(weights[:, 0, 0, 1:])
    for head in range(h):
        total = total + weights[:, head, 0, 1:]
    return (total / h).reshape(B, *grid)


def map_mean_over_batch(weights, grid):
    """Averages over dim 0 (the batch) instead of the heads, then views as (B, rows, cols)."""
    rows, cols = grid
    m = weights[:, :, 0, 1:].mean(dim=0)  # (h, N)
    return m.reshape(-1, rows, cols)[: weights.shape[0]]


def map_grid_swapped(weights, grid):
    """Unpacks grid as (cols, rows) and reshapes to (B, cols, rows)."""
    cols, rows = grid
    return weights[:, :, 0, 1:].mean(1).reshape(weights.shape[0], rows, cols)


def map_renormalised(weights, grid):
    """Renormalises the N patch weights to sum to 1 after dropping [CLS]."""
    m = weights[:, :, 0, 1:].mean(1)
    m = m / m.sum(-1, keepdim=True)
    return m.reshape(weights.shape[0], *grid)


def map_max_heads(weights, grid):
    """Takes the maximum over the heads instead of the mean."""
    m = weights[:, :, 0, 1:].amax(1)
    return m.reshape(weights.shape[0], *grid)


def map_keeps_cls_entry(weights, grid):
    """Slices [0:N] instead of [1:N+1]: keeps [CLS]'s own entry and loses the last patch."""
    rows, cols = grid
    n = rows * cols
    return weights[:, :, 0, :n].mean(1).reshape(weights.shape[0], rows, cols)


def map_squeeze(weights, grid):
    """Means over the heads with keepdim, then .squeeze(): a batch of one loses its axis."""
    m = weights[:, :, 0:1, 1:].mean(1, keepdim=True).squeeze()
    return m.reshape(-1, *grid).squeeze()


WRONG = {
    "patchify": [
        patchify_no_check,
        patchify_checks_height_only,
        patchify_assert,
        patchify_tensor_unfold_no_permute,
        patchify_view_after_permute,
        patchify_vague_error,
    ],
    "ViTEmbedding": [
        EmbedPosPatchesOnly,
        EmbedNoExpand,
        EmbedScaledBySqrtD,
        EmbedClsData,
        EmbedNoBias,
        EmbedZeroCls,
    ],
    "cls_attention_map": [
        map_mean_over_batch,
        map_grid_swapped,
        map_renormalised,
        map_max_heads,
        map_keeps_cls_entry,
        map_squeeze,
    ],
}

RIGHT = {
    "patchify": patchify_right,
    "ViTEmbedding": EmbedRight,
    "cls_attention_map": map_right,
}

RIGHT2 = {
    "patchify": patchify_right2,
    "ViTEmbedding": EmbedRight2,
    "cls_attention_map": map_right2,
}
