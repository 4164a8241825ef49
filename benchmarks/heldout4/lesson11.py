"""Lesson 11 (ViT): held-out wrong and right implementations, from the exercise text only."""

import torch
from torch import nn

# ---------------------------------------------------------------- patchify


def _sizes(images, p):
    B, C, H, W = images.shape
    if H % p or W % p:
        raise ValueError(f"image of {H}x{W} pixels cannot be cut into {p}x{p} patches")
    return B, C, H, W


def patchify(images, patch_size):
    """Right: reshape to (B, C, H/p, p, W/p, p), permute grid axes first, reshape."""
    p = patch_size
    B, C, H, W = _sizes(images, p)
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


def patchify_loops(images, patch_size):
    """Right: explicit loops over the grid rows then columns, each slice flattened (C, p, p)."""
    p = patch_size
    B, C, H, W = images.shape
    if H % p != 0 or W % p != 0:
        raise ValueError(f"height {H} and width {W} must both be multiples of patch_size={p}")
    patches = []
    for r in range(H // p):
        for c in range(W // p):
            patches.append(images[:, :, r * p : (r + 1) * p, c * p : (c + 1) * p].flatten(1))
    return torch.stack(patches, dim=1)


def patchify_column_major(images, patch_size):
    """Wrong: the grid permuted as (W/p, H/p): patches numbered column by column."""
    p = patch_size
    B, C, H, W = _sizes(images, p)
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 4, 2, 1, 3, 5)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


def patchify_channels_last(images, patch_size):
    """Wrong: each patch flattened as (p, p, C), channels last."""
    p = patch_size
    B, C, H, W = _sizes(images, p)
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


def patchify_inner_transposed(images, patch_size):
    """Wrong: the pixels inside a patch are read column by column (p_w before p_h)."""
    p = patch_size
    B, C, H, W = _sizes(images, p)
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 5, 3)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


def patchify_hw_swapped(images, patch_size):
    """Wrong: reshape to (B, C, W/p, p, H/p, p): height and width swapped (fine when square)."""
    p = patch_size
    B, C, H, W = _sizes(images, p)
    x = images.reshape(B, C, W // p, p, H // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


def patchify_crops(images, patch_size):
    """Wrong: leftover rows and columns are silently cropped instead of raising ValueError."""
    p = patch_size
    B, C, H, W = images.shape
    H, W = H // p * p, W // p * p
    x = images[:, :, :H, :W].reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


def patchify_assert(images, patch_size):
    """Wrong: the size test is an assert (AssertionError), not a ValueError."""
    p = patch_size
    B, C, H, W = images.shape
    assert H % p == 0 and W % p == 0, f"{H}x{W} not divisible by {p}"
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


def patchify_height_only(images, patch_size):
    """Wrong: only H is tested; a width that is not a multiple of p gets through."""
    p = patch_size
    B, C, H, W = images.shape
    if H % p:
        raise ValueError(f"height {H} is not a multiple of patch size {p}")
    x = images[..., : W // p * p].reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


# ---------------------------------------------------------------- ViTEmbedding


class ViTEmbedding(nn.Module):
    """Right: patchify, project, prepend the expanded [CLS], add all N + 1 positions."""

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

    def forward(self, images):
        x = self.patch_embed(patchify(images, self.patch_size))
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class ViTEmbeddingSplitAdd(ViTEmbedding):
    """Right: positions added piecewise (row 0 to [CLS], rows 1..N to patches), then concatenated."""

    def forward(self, images):
        patches = patchify(images, self.patch_size)
        tokens = patches @ self.patch_embed.weight.T + self.patch_embed.bias
        tokens = tokens + self.pos_embed[:, 1:]
        cls = (self.cls_token + self.pos_embed[:, :1]).repeat(images.shape[0], 1, 1)
        return torch.cat((cls, tokens), dim=1)


class ViTEmbeddingClsLast(ViTEmbedding):
    """Wrong: [CLS] concatenated after the patches."""

    def forward(self, images):
        x = self.patch_embed(patchify(images, self.patch_size))
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([x, cls], dim=1) + self.pos_embed


class ViTEmbeddingPosFirstRows(ViTEmbedding):
    """Wrong: patches get pos_embed rows 0..N-1 before [CLS] is prepended; [CLS] gets none."""

    def forward(self, images):
        x = self.patch_embed(patchify(images, self.patch_size))
        x = x + self.pos_embed[:, : x.shape[1]]
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1)


class ViTEmbeddingClsNoPos(ViTEmbedding):
    """Wrong: patches get rows 1..N, but row 0 is never added to [CLS]."""

    def forward(self, images):
        x = self.patch_embed(patchify(images, self.patch_size)) + self.pos_embed[:, 1:]
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1)


class ViTEmbeddingNoPos(ViTEmbedding):
    """Wrong: the position embeddings are never added."""

    def forward(self, images):
        x = self.patch_embed(patchify(images, self.patch_size))
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)


class ViTEmbeddingReshapeOnly(ViTEmbedding):
    """Wrong: patches made with a plain images.reshape(B, N, -1) instead of patchify."""

    def forward(self, images):
        B = images.shape[0]
        n = self.pos_embed.shape[1] - 1
        x = self.patch_embed(images.reshape(B, n, -1))
        cls = self.cls_token.expand(B, -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class ViTEmbeddingScaled(ViTEmbedding):
    """Wrong: the projected patches multiplied by sqrt(d_model), as text token embeddings were."""

    def forward(self, images):
        x = self.patch_embed(patchify(images, self.patch_size))
        x = x * x.shape[-1] ** 0.5
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class ViTEmbeddingNoBias(ViTEmbedding):
    """Wrong: the projection written as patches @ weight.T, the Linear's bias forgotten."""

    def forward(self, images):
        x = patchify(images, self.patch_size) @ self.patch_embed.weight.T
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


# ---------------------------------------------------------------- cls_attention_map


def _grid(grid):
    return (grid, grid) if isinstance(grid, int) else tuple(grid)


def cls_attention_map(weights, grid):
    """Right: row 0, columns 1:, mean over heads, reshape row-major."""
    rows, cols = _grid(grid)
    return weights[:, :, 0, 1:].mean(dim=1).reshape(weights.shape[0], rows, cols)


def cls_attention_map_einsum(weights, grid):
    """Right: select via narrow, average with an einsum against 1/h, index into the grid."""
    rows, cols = _grid(grid)
    B, h = weights.shape[:2]
    cls_row = weights.select(2, 0).narrow(-1, 1, rows * cols)  # (B, h, N)
    avg = torch.einsum("bhn,h->bn", cls_row, torch.full((h,), 1.0 / h, dtype=weights.dtype))
    out = weights.new_zeros(B, rows, cols)
    for i in range(rows * cols):
        out[:, i // cols, i % cols] = avg[:, i]
    return out


def cls_map_column0(weights, grid):
    """Wrong: column 0 (how much each patch attends to [CLS]) instead of row 0."""
    rows, cols = _grid(grid)
    return weights[:, :, 1:, 0].mean(dim=1).reshape(weights.shape[0], rows, cols)


def cls_map_keeps_cls_drops_last(weights, grid):
    """Wrong: columns :-1 (keeps [CLS]'s own entry, drops the last patch): off by one."""
    rows, cols = _grid(grid)
    return weights[:, :, 0, :-1].mean(dim=1).reshape(weights.shape[0], rows, cols)


def cls_map_head_sum(weights, grid):
    """Wrong: the heads are summed, not averaged."""
    rows, cols = _grid(grid)
    return weights[:, :, 0, 1:].sum(dim=1).reshape(weights.shape[0], rows, cols)


def cls_map_renormalised(weights, grid):
    """Wrong: after dropping [CLS] the patch weights are renormalised to sum to 1."""
    rows, cols = _grid(grid)
    row = weights[:, :, 0, 1:]
    row = row / row.sum(dim=-1, keepdim=True)
    return row.mean(dim=1).reshape(weights.shape[0], rows, cols)


def cls_map_column_major(weights, grid):
    """Wrong: laid out column by column (reshape to (cols, rows), then transpose)."""
    rows, cols = _grid(grid)
    m = weights[:, :, 0, 1:].mean(dim=1)
    return m.reshape(weights.shape[0], cols, rows).transpose(1, 2)


def cls_map_head_max(weights, grid):
    """Wrong: the strongest head (max over heads) instead of the mean."""
    rows, cols = _grid(grid)
    return weights[:, :, 0, 1:].amax(dim=1).reshape(weights.shape[0], rows, cols)


def cls_map_last_row(weights, grid):
    """Wrong: the last query row (-1) is read, as if [CLS] were at the end."""
    rows, cols = _grid(grid)
    return weights[:, :, -1, 1:].mean(dim=1).reshape(weights.shape[0], rows, cols)


WRONG = {
    "patchify": [
        patchify_column_major,
        patchify_channels_last,
        patchify_inner_transposed,
        patchify_hw_swapped,
        patchify_crops,
        patchify_assert,
        patchify_height_only,
    ],
    "ViTEmbedding": [
        ViTEmbeddingClsLast,
        ViTEmbeddingPosFirstRows,
        ViTEmbeddingClsNoPos,
        ViTEmbeddingNoPos,
        ViTEmbeddingReshapeOnly,
        ViTEmbeddingScaled,
        ViTEmbeddingNoBias,
    ],
    "cls_attention_map": [
        cls_map_column0,
        cls_map_keeps_cls_drops_last,
        cls_map_head_sum,
        cls_map_renormalised,
        cls_map_column_major,
        cls_map_head_max,
        cls_map_last_row,
    ],
}
RIGHT = {"patchify": patchify, "ViTEmbedding": ViTEmbedding, "cls_attention_map": cls_attention_map}
RIGHT2 = {
    "patchify": patchify_loops,
    "ViTEmbedding": ViTEmbeddingSplitAdd,
    "cls_attention_map": cls_attention_map_einsum,
}
