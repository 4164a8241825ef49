"""Lesson 11: patchify and the ViT, checked against Conv2d and Hugging Face transformers' ViT."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_lab import vit as vit_module
from transformer_lab.vit import ViT, ViTConfig, _hf_key, patchify, unpatchify

transformers = pytest.importorskip("transformers")

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    ),
]
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
# transformers' eager ViT attention takes its softmax in float32 even for float64 models, so the
# float64 comparison with it can only be as good as float32 rounding of the weights.
HF_TOL = {torch.float64: 1e-6, torch.float32: 1e-5}


# ----------------------------------------------------------------------------- patchify


def patchify_column_major(images, p):
    """Mutant: patches numbered down the columns first."""
    B, C, H, W = images.shape
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 4, 2, 1, 3, 5)
    return x.reshape(B, -1, C * p * p)


def patchify_channels_last(images, p):
    """Mutant: each patch flattened as (p, p, C) instead of (C, p, p)."""
    B, C, H, W = images.shape
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(B, -1, C * p * p)


def matches_conv(patchify_fn, C, H, W, p, dtype, device="cpu", d_model=5) -> bool:
    """Does Linear(patchify_fn(x)) equal a Conv2d(kernel = stride = p) with the same weights?"""
    g = torch.Generator().manual_seed(C * 1000 + H * 10 + W)
    x = torch.randn(2, C, H, W, generator=g, dtype=dtype).to(device)
    conv = nn.Conv2d(C, d_model, kernel_size=p, stride=p).to(device, dtype)
    linear = nn.Linear(C * p * p, d_model).to(device, dtype)
    with torch.no_grad():
        linear.weight.copy_(conv.weight.reshape(d_model, -1))  # (d, C, p, p) -> (d, C·p·p)
        linear.bias.copy_(conv.bias)
    expected = conv(x).flatten(2).transpose(1, 2)  # (B, N, d), row-major patch order
    got = linear(patchify_fn(x, p))
    return got.shape == expected.shape and torch.allclose(got, expected, atol=TOL[dtype], rtol=0)


SHAPES = [(1, 8, 8, 4), (3, 8, 8, 2), (3, 8, 12, 4), (2, 12, 4, 4), (4, 6, 9, 3)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("C,H,W,p", SHAPES)
def test_patchify_equals_conv2d_patch_embedding(C, H, W, p, dtype, device):
    assert matches_conv(patchify, C, H, W, p, dtype, device)
    out = patchify(torch.zeros(2, C, H, W, dtype=dtype, device=device), p)
    assert out.shape == (2, (H // p) * (W // p), C * p * p)
    assert out.dtype == dtype and out.device.type == device


@pytest.mark.parametrize(
    "mutant,shapes",
    [
        (patchify_column_major, [(1, 8, 8, 4), (3, 8, 12, 4)]),
        (patchify_channels_last, [(3, 8, 8, 2), (2, 12, 4, 4)]),
    ],
)
def test_patchify_check_catches_mutants(mutant, shapes):
    for C, H, W, p in shapes:
        assert not matches_conv(mutant, C, H, W, p, torch.float64)


def test_patchify_first_patch_is_top_left_and_second_is_to_its_right():
    img = torch.arange(2 * 4 * 6, dtype=torch.float64).reshape(1, 2, 4, 6)
    patches = patchify(img, 2)  # grid 2 x 3
    assert torch.equal(patches[0, 0], img[0, :, 0:2, 0:2].reshape(-1))
    assert torch.equal(patches[0, 1], img[0, :, 0:2, 2:4].reshape(-1))
    assert torch.equal(patches[0, 3], img[0, :, 2:4, 0:2].reshape(-1))


def test_unpatchify_inverts_patchify():
    x = torch.randn(3, 3, 8, 12)
    assert torch.equal(unpatchify(patchify(x, 4), 4, (8, 12), 3), x)
    with pytest.raises(ValueError, match="do not fit"):
        unpatchify(patchify(x, 4), 4, (8, 8), 3)


def test_patchify_errors_name_the_shapes():
    with pytest.raises(ValueError, match=r"\(B, C, H, W\).*\(3, 8, 8\)"):
        patchify(torch.zeros(3, 8, 8), 4)
    with pytest.raises(ValueError, match=r"\(8, 10\).*patch_size=4"):
        patchify(torch.zeros(1, 1, 8, 10), 4)
    with pytest.raises(TypeError, match="torch.Tensor"):
        patchify([[1.0]], 1)


# ----------------------------------------------------------------------------- ViT vs transformers


def hf_config(image_size=16, n_channels=3, **kw):
    return transformers.ViTConfig(
        image_size=image_size,
        patch_size=4,
        num_channels=n_channels,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=7,
        attn_implementation="eager",
        **kw,
    )


def randomise(model, seed=0):
    """Random LayerNorm affine and biases too (the defaults 1 and 0 would hide swapped norms)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.2 + (p.dim() == 1) * 0.1)
    return model.eval()


def images(n_channels=3, size=16, dtype=torch.float32, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, n_channels, size, size, generator=g).to(dtype)


def classifier_parity(ours: ViT, hf, x, dtype) -> bool:
    with torch.no_grad():
        expected = hf(pixel_values=x).logits
        got = ours(x)
    return got.shape == expected.shape and torch.allclose(got, expected, atol=HF_TOL[dtype], rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("image_size,n_channels", [(16, 3), (8, 1)])
def test_vit_matches_hf_image_classification(image_size, n_channels, dtype):
    torch.manual_seed(0)
    hf = randomise(transformers.ViTForImageClassification(hf_config(image_size, n_channels)))
    hf = hf.to(dtype)
    ours = ViT.from_hf(hf).eval()
    assert next(ours.parameters()).dtype == dtype
    assert ours.n_classes == 7 and ours.n_patches == (image_size // 4) ** 2
    x = images(n_channels, image_size, dtype)
    assert classifier_parity(ours, hf, x, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_vit_matches_hf_vit_model_hidden_states(dtype):
    torch.manual_seed(0)
    hf = randomise(transformers.ViTModel(hf_config())).to(dtype)
    ours = ViT.from_hf(hf).eval()
    assert ours.n_classes == 0
    x = images(dtype=dtype)
    with torch.no_grad():
        expected = hf(pixel_values=x).last_hidden_state
        got = ours.features(x)
        assert torch.allclose(got, expected, atol=HF_TOL[dtype], rtol=0)
        assert torch.allclose(ours(x), expected[:, 0], atol=HF_TOL[dtype], rtol=0)  # no head: [CLS]


def test_vit_matches_hf_without_qkv_bias():
    hf = randomise(transformers.ViTForImageClassification(hf_config(qkv_bias=False)))
    assert classifier_parity(ViT.from_hf(hf).eval(), hf, images(), torch.float32)


def test_hf_key_names_of_transformers_4_and_5_agree():
    new = [
        "vit.layers.1.attention.q_proj.weight",
        "vit.layers.1.attention.o_proj.bias",
        "vit.layers.1.mlp.fc1.weight",
        "vit.layers.1.mlp.fc2.bias",
        "vit.embeddings.patch_embeddings.projection.weight",
    ]
    old = [
        "vit.encoder.layer.1.attention.attention.query.weight",
        "vit.encoder.layer.1.attention.output.dense.bias",
        "vit.encoder.layer.1.intermediate.dense.weight",
        "vit.encoder.layer.1.output.dense.bias",
        "vit.embeddings.patch_embeddings.projection.weight",
    ]
    assert [_hf_key(k) for k in new] == [_hf_key(k) for k in old]
    assert len({_hf_key(k) for k in new}) == len(new)


# ----------------------------------------------------------------------------- mutants of the ViT


@pytest.fixture(scope="module")
def hf_pair():
    torch.manual_seed(0)
    hf = randomise(transformers.ViTForImageClassification(hf_config()))
    return hf, images()


class NoCLS(ViT):
    """Mutant: no [CLS] token; classifies the mean of the patch vectors."""

    def features(self, images):
        x = self.patch_embed(patchify(images, self.patch_size)) + self.pos_embed[:, 1:]
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)

    def forward(self, images, return_attention=False):
        return self.head(self.features(images).mean(dim=1))


def test_parity_check_catches_a_vit_without_cls(hf_pair):
    hf, x = hf_pair
    ours = ViT.from_hf(hf).eval()
    mutant = NoCLS(ours.cfg).eval()
    mutant.load_state_dict(ours.state_dict())
    assert classifier_parity(ours, hf, x, torch.float32)
    assert not classifier_parity(mutant, hf, x, torch.float32)


def test_parity_check_catches_post_norm(hf_pair):
    hf, x = hf_pair
    mutant = ViT.from_hf(hf).eval()
    for block in mutant.blocks:
        block.norm_first = False
    assert not classifier_parity(mutant, hf, x, torch.float32)


def test_parity_check_catches_wrong_patch_order(hf_pair, monkeypatch):
    hf, x = hf_pair
    ours = ViT.from_hf(hf).eval()
    monkeypatch.setattr(vit_module, "patchify", patchify_column_major)
    assert not classifier_parity(ours, hf, x, torch.float32)
    monkeypatch.setattr(vit_module, "patchify", patchify_channels_last)
    assert not classifier_parity(ours, hf, x, torch.float32)


def test_parity_check_catches_an_unreshaped_conv_weight(hf_pair):
    """Mutant: the conv weight (d, C, p, p) laid out as (d, p, p, C) in the Linear."""
    hf, x = hf_pair
    mutant = ViT.from_hf(hf).eval()
    w = hf.vit.embeddings.patch_embeddings.projection.weight.detach()
    with torch.no_grad():
        mutant.patch_embed.weight.copy_(w.permute(0, 2, 3, 1).reshape(w.shape[0], -1))
    assert not classifier_parity(mutant, hf, x, torch.float32)


# ----------------------------------------------------------------------------- the module itself


def tiny_vit(**kw):
    args = dict(
        image_size=8,
        patch_size=4,
        n_channels=1,
        n_classes=3,
        d_model=16,
        n_heads=2,
        n_layers=2,
        d_ff=32,
    )
    args.update(kw)
    return ViT(ViTConfig(**args))


def test_cls_attention_is_the_cls_row_and_sums_to_one():
    torch.manual_seed(0)
    model = tiny_vit().eval()
    x = torch.randn(5, 1, 8, 8)
    logits, cls = model(x, return_attention=True)
    assert logits.shape == (5, 3) and cls.shape == (5, 2, 2, 5)  # (B, layers, heads, N + 1)
    assert torch.allclose(cls.sum(-1), torch.ones(5, 2, 2))
    assert torch.allclose(logits, model(x), atol=1e-6)  # explicit path == fused path
    full = model.attention_weights(x)
    assert full.shape == (5, 2, 2, 5, 5) and torch.equal(full[:, :, :, 0], cls)
    assert not any(b.self_attn.explicit for b in model.blocks)  # the flag is restored
    grid = model.cls_attention_map(x)
    assert grid.shape == (5, 2, 2)
    assert torch.allclose(grid.flatten(1), cls[:, -1, :, 1:].mean(1))


def test_non_square_images_and_gradients_reach_every_parameter():
    torch.manual_seed(0)
    model = tiny_vit(image_size=(8, 12))
    assert model.grid == (2, 3) and model.pos_embed.shape == (1, 7, 16)
    logits = model(torch.randn(2, 1, 8, 12))
    F.cross_entropy(logits, torch.tensor([0, 2])).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_the_cls_token_and_positions_matter():
    """Permuting the patches changes the output (learned positions break permutation symmetry)."""
    torch.manual_seed(0)
    model = tiny_vit(image_size=16).eval()
    x = torch.randn(2, 1, 16, 16)
    swapped = x.clone()
    swapped[..., :4, :4], swapped[..., :4, 4:8] = x[..., :4, 4:8], x[..., :4, :4]  # swap 2 patches
    assert not torch.allclose(model(x), model(swapped), atol=1e-4)
    with torch.no_grad():
        model.pos_embed.zero_()
    assert torch.allclose(
        model(x), model(swapped), atol=1e-5
    )  # without positions: a bag of patches


def test_wrong_input_shapes_are_named():
    model = tiny_vit()
    with pytest.raises(ValueError, match=r"\(B, 1, 8, 8\).*\(2, 3, 8, 8\)"):
        model(torch.randn(2, 3, 8, 8))
    with pytest.raises(ValueError, match="divisible"):
        tiny_vit(image_size=10)


@pytest.mark.parametrize("device", DEVICES)
def test_runs_in_float64_and_on_each_device(device):
    model = tiny_vit().to(device, torch.float64)
    out = model(torch.randn(2, 1, 8, 8, dtype=torch.float64, device=device))
    assert out.dtype == torch.float64 and out.device.type == device


# ----------------------------------------------------------------------------- training


@pytest.fixture
def one_thread():
    """A tiny model trains fastest on one thread, and does not fight the other xdist worker."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.mark.slow
def test_tiny_vit_learns_digits(one_thread):
    """300 steps (~21 epochs) reach 94.2% test accuracy (measured); assert 90%."""
    from transformer_lab import data, train

    x_train, y_train, x_test, y_test = data.digits()
    torch.manual_seed(0)
    model = ViT(ViTConfig(8, 2, 1, 10, d_model=64, n_heads=4, n_layers=2, d_ff=128))
    steps = 300
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.1)
    batches = train.minibatches(x_train, y_train, batch_size=64, seed=0)
    loss_fn = lambda m, b: F.cross_entropy(m(b[0]), b[1])
    train.fit(model, batches, loss_fn, opt, steps, scheduler=sched, show_progress=False)
    assert train.accuracy(model, x_test, y_test) >= 0.90
