"""Lesson 11 checks: patchify, ViTEmbedding and cls_attention_map.

Correct implementations written the way a student would pass; every catalogued mistake is named
by the visible check (the thorough one is covered for all lessons in test_check.py); further wrong
variants are caught; forbidden built-ins are refused; bad input gets a clear message. All three
checks are deterministic (fixed inputs from the check's own generators, exact reference
comparison), so there is no false-failure probability to bound.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_lab import check, vit
from transformer_lab.check import lesson11

# ---------------------------------------------------------------------------------------------
# Correct student implementations, each by another route than the reference.


def good_patchify(images, patch_size):
    """Tensor.unfold twice (a sliding window with step p), then (C, p, p) to the back."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p or W % p:
        raise ValueError(f"({H}, {W}) is not a multiple of patch_size={p}")
    x = images.unfold(2, p, p).unfold(3, p, p)  # (B, C, rows, cols, p, p)
    return x.permute(0, 2, 3, 1, 4, 5).reshape(B, -1, C * p * p)


def loop_patchify(images, patch_size):
    """Slices patch by patch, row by row, the most literal reading of the definition."""
    B, C, H, W = images.shape
    p = patch_size
    if H % p != 0 or W % p != 0:
        raise ValueError(f"image size {H}x{W} must be divisible by the patch size {p}")
    patches = [
        images[:, :, r : r + p, c : c + p].reshape(B, -1)
        for r in range(0, H, p)
        for c in range(0, W, p)
    ]
    return torch.stack(patches, dim=1)


class GoodViTEmbedding(nn.Module):
    def __init__(self, image_size, patch_size, n_channels, d_model):
        super().__init__()
        H, W = (image_size, image_size) if isinstance(image_size, int) else image_size
        self.patch_size = patch_size
        self.patch_embed = nn.Linear(n_channels * patch_size**2, d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_embed = nn.Parameter(
            torch.zeros(1, (H // patch_size) * (W // patch_size) + 1, d_model)
        )

    def forward(self, images):
        x = self.patch_embed(good_patchify(images, self.patch_size))
        z = torch.cat([self.cls_token.repeat(x.shape[0], 1, 1), x], dim=1)
        return z + self.pos_embed


def good_cls_map(weights, grid):
    rows, cols = grid
    B, h = weights.shape[:2]
    return sum(weights[:, i, 0, 1:] for i in range(h)).div(h).view(B, rows, cols)


@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
@pytest.mark.parametrize(
    "name,impl",
    [
        ("patchify", good_patchify),
        ("patchify", loop_patchify),
        ("ViTEmbedding", GoodViTEmbedding),
        ("cls_attention_map", good_cls_map),
    ],
)
def test_correct_implementations_pass(name, impl, thorough, capsys):
    assert getattr(check, name)(impl, thorough=thorough) is None
    assert f"✓ {name}" in capsys.readouterr().out


def test_patchify_summary_says_what_was_proven(capsys):
    check.patchify(good_patchify)
    out = capsys.readouterr().out
    assert "Conv2d(kernel=stride=p)" in out and "ValueError" in out


def test_passing_parts_are_saved_into_the_students_package(tmp_path):
    check.patchify(good_patchify)
    check.ViTEmbedding(GoodViTEmbedding)
    check.cls_attention_map(good_cls_map)
    saved = (tmp_path / "pkg" / "transformer_lab_student" / "vit.py").read_text()
    for name in ("def good_patchify", "class GoodViTEmbedding", "def good_cls_map"):
        assert name in saved
    assert "patchify = good_patchify" in saved and "ViTEmbedding = GoodViTEmbedding" in saved


def test_checks_do_not_touch_the_global_seed():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check.patchify(good_patchify)
    check.ViTEmbedding(GoodViTEmbedding)
    check.cls_attention_map(good_cls_map)
    assert torch.equal(torch.rand(3), expected)


# ---------------------------------------------------------------------------------------------
# The reference parts added for this lesson agree with the ViT model.


def test_reference_embedding_and_map_agree_with_the_vit_model():
    torch.manual_seed(0)
    model = vit.ViT(
        vit.ViTConfig((8, 12), 4, 2, 5, d_model=16, n_heads=2, n_layers=2, d_ff=32)
    ).eval()
    embedding = vit.ViTEmbedding((8, 12), 4, 2, 16)
    embedding.load_state_dict(
        {k: v for k, v in model.state_dict().items() if k in embedding.state_dict()}
    )
    images = torch.randn(3, 2, 8, 12)
    assert torch.allclose(embedding(images), model.embed(images))
    weights = model.attention_weights(images)[:, -1]
    assert torch.allclose(
        vit.cls_attention_map(weights, model.grid), model.cls_attention_map(images)
    )


def test_reference_patchify_equals_a_strided_conv():
    g = torch.Generator().manual_seed(0)
    images = torch.randn(2, 3, 6, 9, generator=g, dtype=torch.float64)
    conv = nn.Conv2d(3, 7, kernel_size=3, stride=3).double()
    expected = conv(images).flatten(2).transpose(1, 2)
    got = vit.patchify(images, 3) @ conv.weight.reshape(7, -1).T + conv.bias
    assert torch.allclose(got, expected)


@pytest.mark.parametrize(
    "weights,grid,message",
    [
        (torch.rand(2, 2, 17, 17), (4, 3), "do not fit a 4x3 patch grid"),
        (torch.rand(2, 17, 17), (4, 4), r"\(B, h, N \+ 1, N \+ 1\)"),
        (torch.rand(2, 2, 17, 16), (4, 4), "expected"),
    ],
)
def test_reference_cls_attention_map_rejects_bad_shapes(weights, grid, message):
    with pytest.raises(ValueError, match=message):
        vit.cls_attention_map(weights, grid)


def test_reference_embedding_rejects_an_indivisible_image_size():
    with pytest.raises(ValueError, match="divisible"):
        vit.ViTEmbedding(10, 4, 1, 8)


# ---------------------------------------------------------------------------------------------
# The catalogue: the visible check already names every mistake (its first case tells them apart).


LESSON_11 = [
    (name, mistake) for name in lesson11.__all__ for mistake in check.EXERCISES[name].mistakes
]


@pytest.mark.parametrize("name,mistake", LESSON_11, ids=[f"{n}-{m.key}" for n, m in LESSON_11])
def test_visible_check_names_each_catalogued_mistake(name, mistake):
    with pytest.raises(check.CheckFailed) as info:
        getattr(check, name)(mistake.impl)
    assert f"Likely mistake: {mistake.sentence}" in str(info.value)


def test_each_exercise_has_at_least_three_named_mistakes():
    for name in lesson11.__all__:
        assert len(check.EXERCISES[name].mistakes) >= 3


def test_first_patchify_case_tells_every_mistake_apart():
    """Each catalogued wrong patchify differs from the reference and from every other one on the
    first visible case (C > 1, p > 1, H != W, a 2 x 3 grid): remove any of those properties and
    some pair coincides."""
    case = lesson11._patchify_cases(False)[0]
    inputs = case.make(torch.Generator().manual_seed(0))
    layouts = ("column-major", "channels-last", "plain-reshape", "hw-swapped")
    layouts += ("patch-transposed", "axes-swapped")
    outputs = [vit.patchify(**inputs)] + [
        check.EXERCISES["patchify"].mistake(key).impl(**inputs) for key in layouts
    ]
    for i, a in enumerate(outputs):
        for b in outputs[i + 1 :]:
            assert a.shape != b.shape or not torch.allclose(a, b)


def test_mutant_cases_with_square_images_cannot_see_swapped_height_and_width(monkeypatch):
    """Why the cases include H != W: with square images only, swapped H and W go unnoticed."""
    g = torch.Generator().manual_seed(0)
    square = [
        c
        for c in lesson11._patchify_cases(True)
        if c.make(g)["images"].shape[2] == c.make(g)["images"].shape[3]
    ]
    monkeypatch.setattr(lesson11, "_patchify_cases", lambda thorough: square)
    monkeypatch.setattr(lesson11, "_check_conv_equivalence", lambda *args: 0)  # its image: 4x6
    hw_swapped = check.EXERCISES["patchify"].mistake("hw-swapped").impl
    assert check.patchify(hw_swapped, thorough=True) is None


# ---------------------------------------------------------------------------------------------
# Wrong variants beyond the catalogue.


def only_height_checked(images, patch_size):
    B, C, H, W = images.shape
    if H % patch_size:
        raise ValueError(f"height {H} is not a multiple of {patch_size}")
    return check.EXERCISES["patchify"].mistake("not-rejected").impl(images, patch_size)


def raises_type_error(images, patch_size):
    B, C, H, W = images.shape
    if H % patch_size or W % patch_size:
        raise TypeError("bad size")
    return good_patchify(images, patch_size)


def detached_patchify(images, patch_size):
    return good_patchify(images.detach(), patch_size)


def float32_patchify(images, patch_size):
    return good_patchify(images.float(), patch_size)


def numpy_patchify(images, patch_size):
    return good_patchify(images, patch_size).detach().numpy()


@pytest.mark.parametrize(
    "wrong,message",
    [
        (only_height_checked, "returned \\(1, 2, 16\\) instead of raising ValueError"),
        (raises_type_error, "raised TypeError: bad size"),
        (detached_patchify, "no gradient flows back to `images`"),
        (float32_patchify, "dtype torch.float32 but should have dtype torch.float64"),
        (numpy_patchify, "should be a tensor but is a ndarray"),
        (lambda x, p: good_patchify(x, p), "unexpected keyword argument 'images'"),
    ],
    ids=["only-height-checked", "type-error", "detached", "float32", "numpy", "renamed-args"],
)
def test_other_wrong_patchify_are_caught(wrong, message):
    with pytest.raises(check.CheckFailed, match=message):
        check.patchify(wrong)


def test_the_conv_proof_alone_catches_a_wrong_patch_layout(monkeypatch):
    """With the reference comparison switched off, the Conv2d equivalence still fails a
    channels-last patchify: the proof is a check of its own, not a restatement."""
    monkeypatch.setattr(lesson11, "_patchify_cases", lambda thorough: [])
    with pytest.raises(check.CheckFailed, match="do not reproduce the Conv2d"):
        check.patchify(check.EXERCISES["patchify"].mistake("channels-last").impl)
    assert check.patchify(good_patchify) is None


class PositionsTwice(GoodViTEmbedding):
    def forward(self, images):
        return super().forward(images) + self.pos_embed


class NoExpand(GoodViTEmbedding):
    def forward(self, images):
        x = self.patch_embed(good_patchify(images, self.patch_size))
        return torch.cat([self.cls_token, x], dim=1) + self.pos_embed


class ShortPositions(GoodViTEmbedding):
    def __init__(self, image_size, patch_size, n_channels, d_model):
        super().__init__(image_size, patch_size, n_channels, d_model)
        self.pos_embed = nn.Parameter(self.pos_embed[:, 1:].detach().clone())

    def forward(self, images):
        raise AssertionError("never reached: the weights cannot be copied in")


class RenamedEmbedding(GoodViTEmbedding):
    def __init__(self, image_size, patch_size, n_channels, d_model):
        super().__init__(image_size, patch_size, n_channels, d_model)
        self.proj = self.patch_embed
        del self.patch_embed


@pytest.mark.parametrize(
    "wrong,message",
    [
        (PositionsTwice, "z_0 differs"),
        (NoExpand, "your forward raised RuntimeError"),
        (ShortPositions, r"parameter `pos_embed` has shape \(1, 6, 8\) but the reference's has "),
        (RenamedEmbedding, r"missing: \['patch_embed.bias', 'patch_embed.weight'\]"),
    ],
    ids=lambda v: getattr(v, "__name__", "message"),
)
def test_other_wrong_embeddings_are_caught(wrong, message):
    with pytest.raises(check.CheckFailed, match=message):
        check.ViTEmbedding(wrong)


def _map_resoftmaxed(weights, grid):
    return good_cls_map(weights.softmax(-1), grid)


def _map_renormalised(weights, grid):
    """Rescales the patch weights to sum to 1 (drops [CLS]'s own share)."""
    m = good_cls_map(weights, grid)
    return m / m.sum(dim=(1, 2), keepdim=True)


def _map_flat(weights, grid):
    return weights[:, :, 0, 1:].mean(1)


@pytest.mark.parametrize(
    "wrong,message",
    [
        (_map_resoftmaxed, "map differs"),
        (_map_renormalised, "map differs"),
        (_map_flat, r"map has shape \(2, 6\) but should have shape \(2, 2, 3\)"),
    ],
    ids=["softmax-again", "renormalised", "not-reshaped"],
)
def test_other_wrong_maps_are_caught(wrong, message):
    with pytest.raises(check.CheckFailed, match=message):
        check.cls_attention_map(wrong)


# ---------------------------------------------------------------------------------------------
# Forbidden built-ins and the reference are refused while the student's code runs, then restored.


def unfold_patchify(images, patch_size):
    B, C, H, W = images.shape
    if H % patch_size or W % patch_size:
        raise ValueError("size")
    return F.unfold(images, patch_size, stride=patch_size).transpose(1, 2)


def module_unfold_patchify(images, patch_size):
    B, C, H, W = images.shape
    if H % patch_size or W % patch_size:
        raise ValueError("size")
    return nn.Unfold(patch_size, stride=patch_size)(images).transpose(1, 2)


def wraps_reference_patchify(images, patch_size):
    return vit.patchify(images, patch_size)


class WrapsReferenceViT(GoodViTEmbedding):
    def forward(self, images):
        model = vit.ViT(vit.ViTConfig(8, 2, 1, 0, 8, 1, 1, 8))
        return model.embed(images)


def wraps_reference_map(weights, grid):
    return vit.cls_attention_map(weights, grid)


@pytest.mark.parametrize(
    "name,impl,what",
    [
        ("patchify", unfold_patchify, "F.unfold"),
        ("patchify", module_unfold_patchify, "nn.Unfold"),
        ("patchify", wraps_reference_patchify, "transformer_lab.vit.patchify"),
        ("ViTEmbedding", WrapsReferenceViT, "transformer_lab.vit.ViT"),
        ("cls_attention_map", wraps_reference_map, "transformer_lab.vit.cls_attention_map"),
    ],
    ids=["F.unfold", "nn.Unfold", "patchify", "ViT", "cls_attention_map"],
)
def test_forbidden_built_ins_are_refused_and_restored(name, impl, what):
    with pytest.raises(check.ImplementThisYourself, match=f"{what} is what the exercise"):
        getattr(check, name)(impl)
    # restored afterwards: the real ones work again
    assert F.unfold(torch.rand(1, 1, 4, 4), 2, stride=2).shape == (1, 4, 4)
    assert vit.patchify(torch.rand(1, 1, 4, 4), 2).shape == (1, 4, 4)


def test_tensor_unfold_is_allowed():
    """Tensor.unfold is a sliding window, not the answer: good_patchify uses it and passes."""
    assert check.patchify(good_patchify) is None


@pytest.mark.parametrize(
    "name,reference",
    [
        ("patchify", vit.patchify),
        ("ViTEmbedding", vit.ViTEmbedding),
        ("cls_attention_map", vit.cls_attention_map),
    ],
)
def test_passing_the_reference_itself_is_refused(name, reference):
    with pytest.raises(check.ImplementThisYourself, match="reference implementation"):
        getattr(check, name)(reference)


def test_subclass_of_the_reference_embedding_is_refused():
    class Lazy(vit.ViTEmbedding):
        pass

    with pytest.raises(check.ImplementThisYourself, match="subclasses the reference"):
        check.ViTEmbedding(Lazy)


def test_embedding_may_use_the_reference_patchify(capsys):
    """The embedding exercise is about [CLS] and positions; lesson 11's patchify is allowed."""

    class UsesCoursePatchify(GoodViTEmbedding):
        def forward(self, images):
            x = self.patch_embed(vit.patchify(images, self.patch_size))
            cls = self.cls_token.expand(len(x), -1, -1)
            return torch.cat([cls, x], 1) + self.pos_embed

    assert check.ViTEmbedding(UsesCoursePatchify) is None


@pytest.mark.parametrize("name", lesson11.__all__)
def test_nothing_passed_gets_a_clear_message(name):
    with pytest.raises(check.CheckFailed, match=f"pass your implementation, e.g. check.{name}"):
        getattr(check, name)(None)


def test_a_not_implemented_stub_propagates():
    def stub(images, patch_size):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        check.patchify(stub)


def test_conv_proof_reports_a_shape_it_cannot_multiply(monkeypatch):
    """A patchify that is right on the comparison cases but wrong elsewhere gets a sentence from
    the Conv2d proof, not a crash inside it."""
    monkeypatch.setattr(lesson11, "_patchify_cases", lambda thorough: [])

    def flat_on_big_images(images, patch_size):
        out = good_patchify(images, patch_size)
        return out.flatten(1) if images.shape[-1] > 4 else out

    with pytest.raises(check.CheckFailed, match=r"the patches should have shape \(2, 6, 12\)"):
        check.patchify(flat_on_big_images)
