"""Checks for lesson 11 — the Vision Transformer: `patchify`, `ViTEmbedding`, `cls_attention_map`."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import vit as _vit
from .answer_drivers import RaisesDriver, Reject
from .compare import compare_tensor
from .devices import exact_float32, settings
from .drivers import CustomDriver, FunctionDriver, ModuleDriver
from .exercise import Case, Exercise, Mistake, fail
from .forbid import ImplementThisYourself

__all__ = ["ViTEmbedding", "cls_attention_map", "patchify"]

# ==============================================================================================
# Exercise 1 — patchify(images, patch_size): (B, C, H, W) -> (B, N, C·p·p), row-major patches,
# each flattened as (C, p, p). It must equal a Conv2d(kernel_size=p, stride=p) patch embedding,
# and it must reject an image whose height or width is not a multiple of p with a ValueError.


def _grid(images, p):
    """(B, C, rows, cols); the layout mistakes below reject indivisible sizes as they should."""
    B, C, H, W = images.shape
    if H % p or W % p:
        raise ValueError(f"({H}, {W}) is not a multiple of patch_size={p}")
    return B, C, H // p, W // p


def _patchify_column_major(images, patch_size):
    """Patches numbered down the columns first (top to bottom, then left to right)."""
    p = patch_size
    B, C, rows, cols = _grid(images, p)
    x = images.reshape(B, C, rows, p, cols, p).permute(0, 4, 2, 1, 3, 5)  # (B, cols, rows, C, p, p)
    return x.reshape(B, rows * cols, C * p * p)


def _patchify_channels_last(images, patch_size):
    """Each patch flattened as (p, p, C), the channels-last layout."""
    p = patch_size
    B, C, rows, cols = _grid(images, p)
    x = images.reshape(B, C, rows, p, cols, p).permute(0, 2, 4, 3, 5, 1)  # (B, rows, cols, p, p, C)
    return x.reshape(B, rows * cols, C * p * p)


def _patchify_plain_reshape(images, patch_size):
    """A reshape without the permute: each 'patch' is a run of C·p·p consecutive pixels."""
    p = patch_size
    B, C, rows, cols = _grid(images, p)
    return images.reshape(B, rows * cols, C * p * p)


def _patchify_hw_swapped(images, patch_size):
    """The reshape splits the height by W/p and the width by H/p (H and W swapped)."""
    p = patch_size
    B, C, H, W = images.shape
    _grid(images, p)
    x = images.reshape(B, C, W // p, p, H // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


def _patchify_patch_transposed(images, patch_size):
    """Each patch flattened column by column: (C, p_w, p_h) instead of (C, p_h, p_w)."""
    p = patch_size
    B, C, rows, cols = _grid(images, p)
    x = images.reshape(B, C, rows, p, cols, p).permute(
        0, 2, 4, 1, 5, 3
    )  # (B, rows, cols, C, pw, ph)
    return x.reshape(B, rows * cols, C * p * p)


def _patchify_axes_swapped(images, patch_size):
    """Returns (B, C·p·p, N), the layout F.unfold gives, instead of (B, N, C·p·p)."""
    _grid(images, patch_size)
    return _patchify_unchecked(images, patch_size).transpose(1, 2)


def _patchify_crops(images, patch_size):
    """Silently drops the pixels that do not fill a whole patch (no error for H % p != 0)."""
    p = patch_size
    B, C, H, W = images.shape
    return _patchify_unchecked(images[:, :, : H - H % p, : W - W % p], p)


def _patchify_vague_error(images, patch_size):
    """Rejects indivisible sizes with a ValueError that does not say which sizes."""
    _, _, H, W = images.shape
    if H % patch_size or W % patch_size:
        raise ValueError("the image size is not a multiple of the patch size")
    B, C, rows, cols, p = *images.shape[:2], H // patch_size, W // patch_size, patch_size
    x = images.reshape(B, C, rows, p, cols, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, rows * cols, C * p * p)


def _patchify_unchecked(images, patch_size):
    """No divisibility check: an indivisible image fails inside reshape with a RuntimeError."""
    p = patch_size
    B, C, H, W = images.shape
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


def _patchify_split_inverted(images, patch_size):
    """Each axis split as (p, H/p) instead of (H/p, p): a 'patch' gathers pixels H/p apart."""
    p = patch_size
    B, C, rows, cols = _grid(images, p)
    x = images.reshape(B, C, p, rows, p, cols).permute(0, 3, 5, 1, 2, 4)  # (B, rows, cols, C, p, p)
    return x.reshape(B, rows * cols, C * p * p)


def _patchify_cases(thorough: bool) -> list[Case]:
    def case(B, C, H, W, p):
        def make(g):
            return {
                "images": torch.randn(B, C, H, W, generator=g, dtype=torch.float64),
                "patch_size": p,
            }

        return Case(f"images {(B, C, H, W)}, patch_size={p}", make)

    # The first case tells every catalogued mistake apart: C > 1, p > 1, H != W, a 2 x 3 grid.
    cases = [case(2, 3, 4, 6, 2), case(2, 1, 8, 8, 4)]
    if thorough:
        cases += [
            case(1, 1, 1, 1, 1),
            case(3, 2, 6, 4, 2),
            case(2, 3, 8, 8, 8),  # one patch: the whole image
            case(1, 1, 28, 28, 7),
            case(2, 3, 12, 12, 4),
            case(4, 1, 8, 8, 2),
            case(1, 2, 3, 9, 3),
            case(2, 1, 5, 10, 1),
        ]
    return cases


def _student_patches(ex: Exercise, student_fn, images, p, label: str):
    """The student's patchify(images, p) under the exercise's forbidden names; their own
    exception fails the check, naming the case."""
    try:
        return ex.run_student(student_fn, lambda: student_fn(images=images, patch_size=p))
    except (ImplementThisYourself, NotImplementedError):
        raise
    except Exception as err:
        fail(ex, f"your function raised {type(err).__name__}: {err}", label, cause=err)


def _check_conv_equivalence(ex: Exercise, student_fn, thorough: bool) -> int:
    """patchify(images, p) @ W.reshape(d_model, C·p·p).T + b == Conv2d(kernel=stride=p)(images)."""
    specs = [(2, 3, 4, 6, 2, 5)]  # (B, C, H, W, p, d_model)
    if thorough:
        specs += [(2, 1, 8, 8, 2, 16), (1, 3, 28, 28, 7, 8), (3, 2, 6, 9, 3, 4)]
    n = 0
    for device, dtype in settings(thorough):
        for i, (B, C, H, W, p, d) in enumerate(specs):
            g = torch.Generator().manual_seed(5000 + i)
            images = torch.randn(B, C, H, W, generator=g, dtype=torch.float64)
            weight = torch.randn(d, C, p, p, generator=g, dtype=torch.float64)
            bias = torch.randn(d, generator=g, dtype=torch.float64)
            images, weight, bias = (t.to(device, dtype) for t in (images, weight, bias))
            label = (
                f"images {(B, C, H, W)}, a Conv2d({C}, {d}, kernel_size={p}, stride={p}) with "
                f"random weights ({str(dtype).replace('torch.', '')} on {device.type})"
            )
            patches = _student_patches(ex, student_fn, images, p, label)
            shape = (B, (H // p) * (W // p), C * p * p)
            if not isinstance(patches, torch.Tensor):
                fail(
                    ex,
                    f"the patches should be a tensor but are a {type(patches).__name__}",
                    label,
                )
            if tuple(patches.shape) != shape or patches.dtype != dtype:
                fail(
                    ex,
                    f"the patches should have shape {shape} and dtype {dtype} but have "
                    f"shape {tuple(patches.shape)} and dtype {patches.dtype}",
                    label,
                )
            with exact_float32():  # no TF32 for the convolution either
                conv = F.conv2d(images, weight, bias, stride=p)  # (B, d, H/p, W/p)
                expected = conv.flatten(2).transpose(1, 2)  # (B, N, d), positions row-major
                got = patches @ weight.reshape(d, -1).T + bias  # the Linear with the conv's W
            problem = compare_tensor(expected, got, "your patch embedding", dtype, device)
            if problem:
                fail(
                    ex,
                    "your patches times the Conv2d weight reshaped to (d_model, C·p·p) do not "
                    "reproduce the Conv2d(kernel_size=p, stride=p) output, flattened to "
                    f"(B, N, d_model): {problem}",
                    label,
                )
            n += 1
    return n


def _indivisible_cases(thorough: bool) -> list[tuple[tuple[int, ...], int]]:
    cases = [((1, 1, 6, 8), 4), ((1, 1, 8, 6), 4)]  # the height, then the width, not a multiple
    if thorough:
        cases += [((2, 3, 5, 5), 2), ((1, 1, 28, 28), 5), ((1, 2, 9, 12), 4)]
    return cases


def _indivisible_rejects(thorough: bool) -> list[Reject]:
    rejects = []
    for n, (shape, p) in enumerate(_indivisible_cases(thorough)):
        images = torch.randn(*shape, generator=torch.Generator().manual_seed(6000 + n))
        H, W = shape[2:]
        bad = " and ".join(
            f"{what} {size} is not a multiple of {p}"
            for what, size in (("height", H), ("width", W))
            if size % p
        )
        label = f"images {shape}, patch_size={p} ({bad})"
        # the text asks for a message naming the sizes: the size at fault and p
        names = tuple(dict.fromkeys(str(n) for n in (*(s for s in (H, W) if s % p), p)))
        rejects.append(
            Reject(label, lambda impl, x=images, p=p: impl(images=x, patch_size=p), names)
        )
    return rejects


def _check_patchify(ex: Exercise, student_fn, thorough: bool):
    """The reference comparison, then the Conv2d equivalence, then the ValueError."""
    n = FunctionDriver(_patchify_cases, outputs=("patches",)).run(ex, student_fn, thorough)
    n += _check_conv_equivalence(ex, student_fn, thorough)
    n += RaisesDriver(_indivisible_rejects).run(ex, student_fn, thorough)
    where = "every device" if thorough else "cpu"
    what = (
        f"forward and gradients in float64 and float32 on {where}, equal to a Conv2d(kernel=stride=p) "
        "patch embedding, ValueError for indivisible sizes"
    )
    return n, what


patchify = Exercise(
    name="patchify",
    lesson="11",
    module="vit",
    reference=_vit.patchify,
    forbidden=(
        "transformer_lab.vit.patchify",
        "transformer_lab.vit.unpatchify",
        "transformer_lab.patchify",
        "transformer_lab.unpatchify",
        "torch.nn.functional.unfold",
        "torch.nn.Unfold",
    ),
    mistakes=[
        Mistake(
            "column-major",
            "the patches are numbered column by column: number them row by row, left to right "
            "and then top to bottom (patch i sits at grid row i // (W/p), column i % (W/p)).",
            _patchify_column_major,
        ),
        Mistake(
            "channels-last",
            "each patch is flattened channels-last, as (p, p, C): flatten it as (C, p, p), the "
            "layout of a Conv2d weight (all of channel 0's pixels first).",
            _patchify_channels_last,
        ),
        Mistake(
            "plain-reshape",
            "a reshape alone does not cut patches: reshape to (B, C, H/p, p, W/p, p), permute "
            "to (B, H/p, W/p, C, p, p) and only then flatten (a plain reshape takes runs of "
            "consecutive pixels that mix rows of different patches).",
            _patchify_plain_reshape,
        ),
        Mistake(
            "hw-swapped",
            "height and width are swapped in the reshape: split H into (H/p, p) and W into "
            "(W/p, p), in that order (it only shows when H != W).",
            _patchify_hw_swapped,
        ),
        Mistake(
            "patch-transposed",
            "the pixels inside each patch are read column by column: within a patch keep the "
            "image's row-major order, (C, p rows, p columns).",
            _patchify_patch_transposed,
        ),
        Mistake(
            "axes-swapped",
            "the last two axes are swapped: return (B, N, C·p·p), one row per patch, not "
            "(B, C·p·p, N).",
            _patchify_axes_swapped,
        ),
        Mistake(
            "not-rejected",
            "an image whose height or width is not a multiple of patch_size must be rejected: "
            "raise a ValueError that names the size and patch_size instead of returning patches "
            "(the leftover pixels would be dropped or padded without a word).",
            _patchify_crops,
        ),
        Mistake(
            "wrong-error",
            "an image whose height or width is not a multiple of patch_size must be rejected "
            "with a ValueError raised by your own check (if H % p or W % p: raise "
            "ValueError(...)); yours fails later with an error that does not say what is wrong.",
            _patchify_unchecked,
        ),
        Mistake(
            "vague-error",
            "the ValueError must say what is wrong: name the size that is not a multiple and "
            'patch_size in its message, e.g. f"height {H} is not a multiple of patch_size={p}".',
            _patchify_vague_error,
        ),
        Mistake(
            "split-inverted",
            "each axis is split the wrong way round, (p, H/p) instead of (H/p, p), so a patch "
            "gathers pixels H/p apart: reshape to (B, C, H/p, p, W/p, p), the grid position "
            "first and the pixel within the patch second.",
            _patchify_split_inverted,
        ),
    ],
    driver=CustomDriver(_check_patchify),
    doc="patchify(images (B, C, H, W), patch_size) -> (B, N, C·p·p)",
)


# ==============================================================================================
# Exercise 2 — ViTEmbedding: patchify, project, prepend [CLS], add learned positions.


class _EmbedClsLast(_vit.ViTEmbedding):
    def forward(self, images):
        x = self.patch_embed(_vit.patchify(images, self.patch_size))
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([x, cls], dim=1) + self.pos_embed


class _EmbedPositionsBeforeCls(_vit.ViTEmbedding):
    """Patches get rows 1..N of E_pos, then [CLS] is prepended with no position at all."""

    def forward(self, images):
        x = self.patch_embed(_vit.patchify(images, self.patch_size)) + self.pos_embed[:, 1:]
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1)


class _EmbedPositionsShifted(_vit.ViTEmbedding):
    """Patches get rows 0..N-1 of E_pos (row 0 is [CLS]'s), [CLS] none."""

    def forward(self, images):
        x = self.patch_embed(_vit.patchify(images, self.patch_size))
        x = x + self.pos_embed[:, : x.shape[1]]
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1)


class _EmbedNoPositions(_vit.ViTEmbedding):
    def forward(self, images):
        x = self.patch_embed(_vit.patchify(images, self.patch_size))
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)


class _EmbedClsAdded(_vit.ViTEmbedding):
    """[CLS] added to every patch vector instead of being a token of its own."""

    def forward(self, images):
        x = self.patch_embed(_vit.patchify(images, self.patch_size))
        return x + self.cls_token + self.pos_embed[:, 1:]


class _EmbedPlainReshape(_vit.ViTEmbedding):
    def forward(self, images):
        x = self.patch_embed(_patchify_plain_reshape(images, self.patch_size))
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class _EmbedPatchesScaled(_vit.ViTEmbedding):
    """The projected patches multiplied by √d_model, as a text model's token embeddings are."""

    def forward(self, images):
        x = self.patch_embed(_vit.patchify(images, self.patch_size))
        x = x * x.shape[-1] ** 0.5
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class _EmbedNoBias(_vit.ViTEmbedding):
    """The projection written out as patches @ weight.T, its bias left out."""

    def forward(self, images):
        x = _vit.patchify(images, self.patch_size) @ self.patch_embed.weight.T
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, x], dim=1) + self.pos_embed


class _EmbedClsLastPosition(_vit.ViTEmbedding):
    """Patches get rows 0..N-1 of E_pos and [CLS] the last row, N."""

    def forward(self, images):
        x = self.patch_embed(_vit.patchify(images, self.patch_size))
        n = x.shape[1]
        cls = self.cls_token.expand(x.shape[0], -1, -1) + self.pos_embed[:, n:]
        return torch.cat([cls, x + self.pos_embed[:, :n]], dim=1)


class _EmbedClsAddedExtraRow(_vit.ViTEmbedding):
    """[CLS] added to every patch vector; the first row is pos_embed's row 0 alone."""

    def forward(self, images):
        x = self.patch_embed(_vit.patchify(images, self.patch_size)) + self.cls_token
        first = self.pos_embed[:, :1].expand(x.shape[0], -1, -1)
        return torch.cat([first, x + self.pos_embed[:, 1:]], dim=1)


def _embed_cases(thorough: bool) -> list[Case]:
    def case(B, C, H, W, p, d):
        image_size = H if H == W else (H, W)

        def make(g):
            return {"images": torch.randn(B, C, H, W, generator=g, dtype=torch.float64)}

        init = {"image_size": image_size, "patch_size": p, "n_channels": C, "d_model": d}
        return Case(
            f"ViTEmbedding({image_size}, {p}, {C}, {d}) on images {(B, C, H, W)}", make, init
        )

    cases = [case(2, 3, 4, 6, 2, 8), case(2, 1, 8, 8, 2, 8)]
    if thorough:
        cases += [
            case(1, 1, 4, 4, 4, 6),  # one patch: N + 1 = 2 tokens
            case(3, 1, 3, 3, 1, 4),
            case(1, 1, 28, 28, 7, 16),
            case(2, 2, 6, 4, 2, 5),
        ]
    return cases


ViTEmbedding = Exercise(
    name="ViTEmbedding",
    lesson="11",
    module="vit",
    reference=_vit.ViTEmbedding,
    forbidden=(
        "transformer_lab.vit.ViTEmbedding",
        "transformer_lab.vit.ViT",
        "transformer_lab.ViT",
        "transformer_lab.ViTEmbedding",
    ),
    mistakes=[
        Mistake(
            "cls-last",
            "[CLS] is appended at the end: it goes in front, z_0 = [x_cls; x_1 E; ...; x_N E] "
            "(torch.cat([cls, x], dim=1)), so the classifier can read it at index 0.",
            _EmbedClsLast,
        ),
        Mistake(
            "positions-before-cls",
            "the positions are added before [CLS] is prepended, so [CLS] gets no position: "
            "prepend [CLS] first, then add all N + 1 rows of pos_embed.",
            _EmbedPositionsBeforeCls,
        ),
        Mistake(
            "positions-shifted",
            "the patches took rows 0..N-1 of pos_embed and [CLS] none: E_pos has N + 1 rows, "
            "row 0 is [CLS]'s and rows 1..N belong to the patches (add it after prepending "
            "[CLS]).",
            _EmbedPositionsShifted,
        ),
        Mistake(
            "no-positions",
            "the position embeddings are missing: add pos_embed (N + 1 rows) to the sequence.",
            _EmbedNoPositions,
        ),
        Mistake(
            "cls-added",
            "[CLS] is added to every patch vector: it is an extra token, concatenated in "
            "front, so the output has N + 1 positions.",
            _EmbedClsAdded,
        ),
        Mistake(
            "plain-reshape",
            "the patches are cut wrongly (a plain reshape of the image): use your "
            "patchify(images, self.patch_size).",
            _EmbedPlainReshape,
        ),
        Mistake(
            "patches-scaled",
            "the projected patches are multiplied by √d_model (the habit of a text model's token "
            "embeddings): ViT adds the positions to x_p E as it is, z_0 = [x_cls; x_p E] + E_pos.",
            _EmbedPatchesScaled,
        ),
        Mistake(
            "no-bias",
            "the projection's bias is missing (patches @ weight.T leaves it out): call "
            "self.patch_embed(patches), the whole Linear layer.",
            _EmbedNoBias,
        ),
        Mistake(
            "cls-last-position",
            "[CLS] took the last row of pos_embed and the patches rows 0..N-1: row 0 is "
            "[CLS]'s and rows 1..N the patches', so prepend [CLS] first and then add pos_embed "
            "as a whole, z_0 = [x_cls; x_1 E; ...; x_N E] + E_pos.",
            _EmbedClsLastPosition,
        ),
        Mistake(
            "cls-added-to-patches",
            "cls_token is added to every patch vector: it is a token of its own, the first row "
            "of z_0 (x_cls + E_pos[0]), concatenated in front of the patches, which stay "
            "x_p E + E_pos[p].",
            _EmbedClsAddedExtraRow,
        ),
    ],
    driver=ModuleDriver(_embed_cases, outputs=("z_0",)),
    doc=(
        "ViTEmbedding(image_size, patch_size, n_channels, d_model), "
        "forward(images (B, C, H, W)) -> z_0 (B, N + 1, d_model)"
    ),
    uses=("patchify",),
)


# ==============================================================================================
# Exercise 3 — cls_attention_map(weights, grid): what the [CLS] query reads, as an image.


def _map_from(rowcol, weights, grid):
    rows, cols = grid
    return rowcol.reshape(weights.shape[0], rows, cols)


def _cls_column(weights, grid):
    """How much each patch attends TO [CLS] (column 0) instead of what [CLS] attends to."""
    return _map_from(weights[:, :, 1:, 0].mean(1), weights, grid)


def _cls_last_row(weights, grid):
    return _map_from(weights[:, :, -1, 1:].mean(1), weights, grid)


def _cls_keeps_self(weights, grid):
    """Drops the last patch and keeps [CLS]'s attention to itself."""
    return _map_from(weights[:, :, 0, :-1].mean(1), weights, grid)


def _cls_sum_heads(weights, grid):
    return _map_from(weights[:, :, 0, 1:].sum(1), weights, grid)


def _cls_first_head(weights, grid):
    return _map_from(weights[:, 0, 0, 1:], weights, grid)


def _cls_column_major(weights, grid):
    rows, cols = grid
    return weights[:, :, 0, 1:].mean(1).reshape(weights.shape[0], cols, rows).transpose(1, 2)


def _cls_patch_mean(weights, grid):
    """The attention each patch receives from all patches (mean over the patch queries)."""
    return _map_from(weights[:, :, 1:, 1:].mean(2).mean(1), weights, grid)


def _cls_max_heads(weights, grid):
    """The largest weight over the heads instead of their mean."""
    return _map_from(weights[:, :, 0, 1:].amax(1), weights, grid)


def _cls_renormalised(weights, grid):
    """[CLS]'s weights on the patches rescaled to sum to 1 after its own is dropped."""
    row = weights[:, :, 0, 1:].mean(1)
    return _map_from(row / row.sum(-1, keepdim=True), weights, grid)


def _cls_renormalised_per_head(weights, grid):
    """Each head's weights on the patches rescaled to sum to 1, then the heads averaged."""
    row = weights[:, :, 0, 1:]
    return _map_from((row / row.sum(-1, keepdim=True)).mean(1), weights, grid)


def _cls_all_queries(weights, grid):
    """The attention each patch receives, averaged over every query ([CLS] and the patches)."""
    return _map_from(weights[:, :, :, 1:].mean(2).mean(1), weights, grid)


def _cls_map_cases(thorough: bool) -> list[Case]:
    def case(B, h, rows, cols, scale=2.0):
        n = rows * cols + 1

        def make(g):
            scores = scale * torch.randn(B, h, n, n, generator=g, dtype=torch.float64)
            return {"weights": scores.softmax(-1), "grid": (rows, cols)}

        return Case(f"weights {(B, h, n, n)}, grid ({rows}, {cols})", make)

    # The first case tells every catalogued mistake apart: h > 1, a 2 x 3 grid.
    cases = [case(2, 3, 2, 3), case(1, 2, 3, 3)]
    if thorough:
        cases += [
            case(1, 1, 1, 1),
            case(3, 4, 4, 4),
            case(2, 2, 3, 2),
            case(2, 2, 7, 7, scale=6.0),
            case(1, 3, 1, 5),
        ]
    return cases


cls_attention_map = Exercise(
    name="cls_attention_map",
    lesson="11",
    module="vit",
    reference=_vit.cls_attention_map,
    forbidden=(
        "transformer_lab.vit.cls_attention_map",
        "transformer_lab.vit.ViT.cls_attention_map",
    ),
    mistakes=[
        Mistake(
            "max-over-heads",
            "the heads are combined with a max: the map is their mean, weights[:, :, 0, 1:]"
            ".mean(dim=1).",
            _cls_max_heads,
        ),
        Mistake(
            "renormalised",
            "the patch weights are rescaled to sum to 1 after [CLS]'s weight on itself is "
            "dropped: keep them as they are (they sum to 1 minus that weight).",
            _cls_renormalised,
        ),
        Mistake(
            "cls-column",
            "you took column 0 (how much each patch attends to [CLS]): the [CLS] query is "
            "row 0, weights[:, :, 0, 1:], what [CLS] attends to.",
            _cls_column,
        ),
        Mistake(
            "last-row",
            "you read the last token's row: [CLS] is token 0, so its row is weights[:, :, 0].",
            _cls_last_row,
        ),
        Mistake(
            "keeps-cls-self",
            "off by one: drop column 0 ([CLS] attending to itself) and keep all N patches, "
            "weights[:, :, 0, 1:].",
            _cls_keeps_self,
        ),
        Mistake(
            "heads-summed",
            "the heads are summed: average them (mean over dim 1).",
            _cls_sum_heads,
        ),
        Mistake(
            "first-head",
            "only the first head is used: average over all h heads.",
            _cls_first_head,
        ),
        Mistake(
            "column-major",
            "the map is laid out column by column: patch i sits at row i // cols, column "
            "i % cols, so reshape to (B, rows, cols) directly.",
            _cls_column_major,
        ),
        Mistake(
            "patch-mean",
            "you averaged what the patches attend to (mean over the patch rows): the map is "
            "the single row of the [CLS] query, row 0.",
            _cls_patch_mean,
        ),
        Mistake(
            "renormalised-per-head",
            "each head's patch weights are rescaled to sum to 1 after [CLS]'s weight on itself is "
            "dropped: keep them as they are (they sum to 1 minus that weight), then average the "
            "heads.",
            _cls_renormalised_per_head,
        ),
        Mistake(
            "all-queries-mean",
            "you averaged over all the queries (every row of the weights): the map is the "
            "single row of the [CLS] query, weights[:, :, 0, 1:], averaged over the heads.",
            _cls_all_queries,
        ),
    ],
    driver=FunctionDriver(_cls_map_cases, outputs=("map",)),
    doc="cls_attention_map(weights (B, h, N + 1, N + 1), grid (rows, cols)) -> (B, rows, cols)",
)
