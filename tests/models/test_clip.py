"""Lesson 13: clip_loss and the CLIP model, checked against a direct formula and against Hugging
Face transformers' CLIPModel (small random config, weights copied across, offline)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from transformer_lab import CLIP, CLIPConfig, clip_loss, zero_shot_classify
from transformer_lab.add_norm import ACTIVATIONS
from transformer_lab.clip import CLIPTextEncoder, clip_logits

transformers = pytest.importorskip("transformers")
modeling_clip = pytest.importorskip("transformers.models.clip.modeling_clip")

# transformers' eager attention takes its softmax in float32 even for float64 models (see
# test_vit.py), so the float64 comparison can only be as good as float32 rounding.
# transformers 5 calls it image_text_contrastive_loss, 4.x clip_loss
HF_CLIP_LOSS = getattr(modeling_clip, "image_text_contrastive_loss", None)
HF_CLIP_LOSS = HF_CLIP_LOSS or modeling_clip.clip_loss
HF_TOL = {torch.float64: 1e-6, torch.float32: 2e-5}


# ----------------------------------------------------------------------------- clip_loss


def direct_clip_loss(image_features, text_features, logit_scale):
    """The formula written out with loops: -log softmax of the diagonal, both ways, averaged."""
    B = image_features.shape[0]
    scale = math.exp(float(logit_scale))
    cos = [
        [
            float(image_features[i] @ text_features[j])
            / (float(image_features[i].norm()) * float(text_features[j].norm()))
            for j in range(B)
        ]
        for i in range(B)
    ]
    image_to_text = text_to_image = 0.0
    for i in range(B):
        row = [scale * cos[i][j] for j in range(B)]
        col = [scale * cos[j][i] for j in range(B)]
        image_to_text += -row[i] + math.log(sum(math.exp(x) for x in row))
        text_to_image += -col[i] + math.log(sum(math.exp(x) for x in col))
    return (image_to_text + text_to_image) / (2 * B)


def features(B, d, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    scales = torch.rand(B, 1, generator=g, dtype=dtype) * 3 + 0.1  # rows of different norms
    image = torch.randn(B, d, generator=g, dtype=dtype) * scales
    text = torch.randn(B, d, generator=g, dtype=dtype) * scales.flip(0)
    return image, text


@pytest.mark.parametrize(
    "B,d,t", [(1, 4, 2.0), (2, 3, 0.0), (5, 8, math.log(1 / 0.07)), (7, 2, -1)]
)
def test_clip_loss_equals_the_direct_formula(B, d, t):
    image, text = features(B, d, seed=B)
    got = clip_loss(image, text, torch.tensor(float(t), dtype=torch.float64))
    assert got.shape == () and got.dtype == torch.float64
    assert got.item() == pytest.approx(direct_clip_loss(image, text, t), rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_clip_loss_equals_transformers_clip_loss(dtype):
    image, text = features(6, 16, seed=3, dtype=dtype)
    t = torch.tensor(2.3, dtype=dtype)
    image_n, text_n = F.normalize(image, dim=-1), F.normalize(text, dim=-1)
    logits_per_text = text_n @ image_n.T * t.exp()  # what CLIPModel.forward hands to clip_loss
    expected = HF_CLIP_LOSS(logits_per_text)
    torch.testing.assert_close(clip_loss(image, text, t), expected)


def test_clip_loss_is_symmetric_in_images_and_texts_and_ignores_the_norms():
    image, text = features(5, 8, seed=4)
    t = torch.tensor(1.5, dtype=torch.float64)
    loss = clip_loss(image, text, t)
    torch.testing.assert_close(clip_loss(text, image, t), loss)
    torch.testing.assert_close(clip_loss(image * 7.0, text * 0.01, t), loss)
    # the same permutation of both sides keeps every pair: the loss is unchanged
    perm = torch.tensor([3, 0, 4, 1, 2])
    torch.testing.assert_close(clip_loss(image[perm], text[perm], t), loss)
    # shuffling only the texts breaks the pairs: the loss changes
    assert not torch.allclose(clip_loss(image, text[perm], t), loss)


def test_clip_loss_of_perfect_pairs_goes_to_zero_and_of_one_pair_is_zero():
    image = torch.eye(4, dtype=torch.float64)
    assert clip_loss(image, image.clone(), torch.tensor(math.log(100.0))).item() < 1e-10
    one, other = features(1, 3)
    assert clip_loss(one, other, torch.tensor(0.3)).item() == 0.0
    # at temperature 1 (t = 0) orthogonal features: every logit 1 on the diagonal, 0 elsewhere
    expected = -1 + math.log(math.e + 3)
    assert clip_loss(image, image, torch.tensor(0.0)).item() == pytest.approx(expected)


def test_clip_loss_gradients_match_autograd_of_the_formula_and_reach_logit_scale():
    image, text = features(4, 5, seed=5)
    image.requires_grad_(True)
    text.requires_grad_(True)
    t = torch.tensor(1.2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(clip_loss, (image, text, t))
    loss = clip_loss(image, text, t)
    loss.backward()
    assert t.grad is not None and t.grad.abs() > 0
    # features only matter through their direction: the gradient is orthogonal to each row
    assert torch.allclose((image.grad * image).sum(-1), torch.zeros(4, dtype=torch.float64))


def test_clip_loss_accepts_a_float_logit_scale():
    image, text = features(3, 4)
    torch.testing.assert_close(
        clip_loss(image, text, 1.0), clip_loss(image, text, torch.tensor(1.0, dtype=torch.float64))
    )


@pytest.mark.parametrize(
    "image,text,t,error,match",
    [
        (torch.zeros(3, 4, 2), torch.zeros(3, 4), 0.0, ValueError, "image_features"),
        (torch.zeros(3, 4), torch.zeros(4), 0.0, ValueError, "text_features"),
        (torch.zeros(3, 4), torch.zeros(2, 4), 0.0, ValueError, "same shape"),
        (torch.zeros(3, 4), torch.zeros(3, 5), 0.0, ValueError, "same shape"),
        (torch.zeros(0, 4), torch.zeros(0, 4), 0.0, ValueError, "empty"),
        (torch.zeros(3, 4), torch.zeros(3, 4), torch.zeros(2), ValueError, "scalar"),
        (torch.zeros(3, 4, dtype=torch.long), torch.zeros(3, 4), 0.0, TypeError, "floating"),
        ([[1.0]], torch.zeros(1, 1), 0.0, TypeError, "torch.Tensor"),
    ],
)
def test_clip_loss_bad_inputs_are_named(image, text, t, error, match):
    with pytest.raises(error, match=match):
        clip_loss(image, text, t)


def test_zero_shot_classify_is_prompt_ensembling_then_one_softmax():
    g = torch.Generator().manual_seed(0)
    image = torch.randn(4, 6, generator=g, dtype=torch.float64)
    prompts = torch.randn(3, 5, 6, generator=g, dtype=torch.float64) * torch.rand(
        3, 5, 1, generator=g, dtype=torch.float64
    )
    t = torch.tensor(2.0, dtype=torch.float64)
    probs = zero_shot_classify(image, prompts, t)
    assert probs.shape == (4, 3)
    torch.testing.assert_close(probs.sum(-1), torch.ones(4, dtype=torch.float64))
    # written out: unit prompts, their mean per class, unit again; cosines times e^t; softmax
    class_vectors = []
    for k in range(3):
        mean = sum(prompts[k, p] / prompts[k, p].norm() for p in range(5)) / 5
        assert mean.norm() < 1  # the mean of unit vectors is shorter: why it is renormalised
        class_vectors.append(mean / mean.norm())
    for b in range(4):
        logits = [
            math.exp(2.0) * float(image[b] @ c) / float(image[b].norm()) for c in class_vectors
        ]
        for k in range(3):
            expected = math.exp(logits[k]) / sum(math.exp(x) for x in logits)
            assert probs[b, k].item() == pytest.approx(expected, rel=1e-9)
    # with one prompt per class it is the softmax of clip_logits' rows
    one = prompts[:, :1]
    square_image = image[:3]
    torch.testing.assert_close(
        zero_shot_classify(square_image, one, t),
        clip_logits(square_image, one[:, 0], t).softmax(-1),
    )


@pytest.mark.parametrize(
    "image,classes,match",
    [
        (torch.zeros(2, 4), torch.zeros(3, 4), r"\(K, P, d\)"),
        (torch.zeros(2, 5), torch.zeros(3, 2, 4), "share d"),
        (torch.zeros(2, 2, 4), torch.zeros(3, 2, 4), r"\(B, d\)"),
        (torch.zeros(2, 4), torch.zeros(0, 2, 4), "no classes"),
    ],
)
def test_zero_shot_classify_bad_shapes_are_named(image, classes, match):
    with pytest.raises(ValueError, match=match):
        zero_shot_classify(image, classes, 1.0)


def test_quick_gelu_is_x_sigmoid_1_702_x():
    x = torch.linspace(-5, 5, 101, dtype=torch.float64)
    torch.testing.assert_close(ACTIVATIONS["quick_gelu"](x), x * torch.sigmoid(1.702 * x))


# ----------------------------------------------------------------------------- the model


def small_cfg(**kw) -> CLIPConfig:
    base = dict(
        d_embed=12,
        image_size=8,
        patch_size=4,
        n_channels=3,
        vision_d_model=16,
        vision_n_heads=2,
        vision_n_layers=2,
        vision_d_ff=24,
        vocab_size=20,
        max_len=7,
        text_d_model=8,
        text_n_heads=2,
        text_n_layers=2,
        text_d_ff=20,
        eos_id=3,
    )
    return CLIPConfig(**(base | kw))


def pairs(B=4, L=6, seed=0, cfg=None, dtype=torch.float32):
    cfg = small_cfg() if cfg is None else cfg
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(B, cfg.n_channels, cfg.image_size, cfg.image_size, generator=g)
    tokens = torch.randint(4, cfg.vocab_size, (B, L), generator=g)
    for b in range(B):  # an end-of-text token at a different place in every row, then padding
        end = 1 + (b % (L - 1))
        tokens[b, end] = cfg.eos_id
        tokens[b, end + 1 :] = 0
    return images.to(dtype), tokens


def test_shapes_logits_and_loss_agree():
    torch.manual_seed(0)
    model = CLIP(small_cfg()).eval()
    images, tokens = pairs()
    assert model.encode_image(images).shape == (4, 12)
    assert model.encode_text(tokens).shape == (4, 12)
    logits_per_image, logits_per_text = model(images, tokens[:3])
    assert logits_per_image.shape == (4, 3) and logits_per_text.shape == (3, 4)
    torch.testing.assert_close(logits_per_text, logits_per_image.T)
    assert model.logit_scale.item() == pytest.approx(math.log(1 / 0.07))
    i, t = model.encode_image(images), model.encode_text(tokens)
    torch.testing.assert_close(model(images, tokens)[0], clip_logits(i, t, model.logit_scale))
    torch.testing.assert_close(model.loss(images, tokens), clip_loss(i, t, model.logit_scale))


def test_text_vector_is_read_at_the_end_of_text_token_and_ignores_what_follows():
    torch.manual_seed(1)
    model = CLIP(small_cfg()).eval()
    _, tokens = pairs()
    changed = tokens.clone()
    changed[0, 3:] = 5  # row 0 ends at position 1: everything after it is padding
    with torch.no_grad():
        torch.testing.assert_close(model.encode_text(changed)[0], model.encode_text(tokens)[0])
        # the same with an attention mask that hides the padding
        mask = torch.ones_like(tokens)
        mask[0, 2:] = 0
        torch.testing.assert_close(
            model.encode_text(changed, attention_mask=mask), model.encode_text(tokens)
        )
        # a word before the end-of-text token does change it
        changed[0, 0] = 6 if tokens[0, 0] != 6 else 7
        assert not torch.allclose(model.encode_text(changed)[0], model.encode_text(tokens)[0])
    assert model.text.eos_positions(tokens).tolist() == [1, 2, 3, 4]


def test_gradients_reach_every_parameter():
    torch.manual_seed(2)
    model = CLIP(small_cfg())
    images, tokens = pairs(L=7)
    model.loss(images, tokens).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()]
    assert missing == []


def test_bad_inputs_are_named():
    model = CLIP(small_cfg())
    images, tokens = pairs()
    with pytest.raises(ValueError, match="images"):
        model.encode_image(images[0])
    with pytest.raises(ValueError, match="expects images of shape"):
        model.encode_image(images[:, :1])
    with pytest.raises(ValueError, match="tokens"):
        model.encode_text(tokens[0])
    with pytest.raises(TypeError, match="integer ids"):
        model.encode_text(tokens.float())
    with pytest.raises(ValueError, match="max_len=7"):
        model.encode_text(torch.full((2, 8), 3))
    with pytest.raises(ValueError, match="no end-of-text token"):
        model.encode_text(torch.full((2, 5), 4))
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 20\)"):
        model.encode_text(torch.full((2, 5), 25))
    with pytest.raises(ValueError, match="attention_mask"):
        model.encode_text(tokens, attention_mask=torch.ones(4, 2))
    with pytest.raises(ValueError, match="pairs"):
        model.loss(images, tokens[:2])
    with pytest.raises(ValueError, match="eos_id"):
        CLIPTextEncoder(10, 5, 8, 2, 1, 16, eos_id=10)


def test_student_parts_build_it(student_dir):
    from transformer_lab.encoder_decoder import Parts

    built = []
    model = CLIP(small_cfg(), parts=Parts(report=built.append))
    assert model in built and model.vision in built and model.text in built


# ----------------------------------------------------------------------------- vs transformers


def hf_config(eos_token_id=3, act="quick_gelu", **kw):
    text = dict(
        vocab_size=20,
        hidden_size=8,
        intermediate_size=20,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=7,
        hidden_act=act,
        eos_token_id=eos_token_id,
        bos_token_id=1,
        pad_token_id=0,
    )
    vision = dict(
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=8,
        patch_size=4,
        num_channels=3,
        hidden_act=act,
    )
    config = transformers.CLIPConfig(
        text_config=text, vision_config=vision, projection_dim=12, **kw
    )
    config._attn_implementation = "eager"
    for sub in (config.text_config, config.vision_config):
        sub._attn_implementation = "eager"
    return config


def randomise(model, seed=0):
    """Random LayerNorm affine and biases too (the defaults 1 and 0 would hide swapped norms)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name == "logit_scale":
                p.fill_(1.7)
                continue
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.2 + (p.dim() == 1) * 0.1)
    return model.eval()


def hf_outputs(hf, images, tokens, attention_mask=None):
    with torch.no_grad():
        out = hf(
            input_ids=tokens,
            pixel_values=images,
            attention_mask=attention_mask,
            return_loss=True,
        )
    return out.logits_per_image, out.logits_per_text, out.loss


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("act", ["quick_gelu", "gelu"])
def test_matches_transformers_clip_model(dtype, act):
    torch.manual_seed(0)
    hf = randomise(transformers.CLIPModel(hf_config(act=act))).to(dtype)
    ours = CLIP.from_hf(hf).eval()
    assert next(ours.parameters()).dtype == dtype
    assert ours.cfg.activation == act and ours.cfg.eos_id == 3
    images, tokens = pairs(B=5, L=7, dtype=dtype)
    expected = hf_outputs(hf, images, tokens)
    with torch.no_grad():
        got = (*ours(images, tokens), ours.loss(images, tokens))
    tol = HF_TOL[dtype]
    for name, e, g in zip(("logits_per_image", "logits_per_text", "loss"), expected, got):
        assert g.shape == e.shape, name
        assert torch.allclose(g, e, atol=tol, rtol=tol), f"{name}: {(g - e).abs().max()}"
    # and the embeddings themselves (transformers 5 returns an output whose pooler_output
    # holds them, 4.x the tensor)
    with torch.no_grad():
        image_embeds = hf.get_image_features(pixel_values=images)
        text_embeds = hf.get_text_features(input_ids=tokens)
        image_embeds = getattr(image_embeds, "pooler_output", image_embeds)
        text_embeds = getattr(text_embeds, "pooler_output", text_embeds)
        torch.testing.assert_close(ours.encode_image(images), image_embeds, atol=tol, rtol=tol)
        torch.testing.assert_close(ours.encode_text(tokens), text_embeds, atol=tol, rtol=tol)


def test_matches_transformers_with_an_attention_mask():
    hf = randomise(transformers.CLIPModel(hf_config()), seed=1)
    ours = CLIP.from_hf(hf).eval()
    images, tokens = pairs(B=4, L=7, seed=2)
    mask = (tokens != 0).long()
    mask[:, 0] = 1
    expected = hf_outputs(hf, images, tokens, mask)
    with torch.no_grad():
        got = (*ours(images, tokens, mask), ours.loss(images, tokens, mask))
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, atol=2e-5, rtol=2e-5)


def test_matches_transformers_legacy_eos_rule_argmax():
    """eos_token_id == 2 in the config: transformers pools at the largest id (argmax)."""
    hf = randomise(transformers.CLIPModel(hf_config(eos_token_id=2)), seed=3)
    ours = CLIP.from_hf(hf).eval()
    assert ours.cfg.eos_id is None
    images, tokens = pairs(B=3, L=7, seed=4)
    tokens[:, 2] = 19  # the largest id of the vocabulary: the "end of text" for the legacy rule
    tokens[:, 3:] = 0
    expected = hf_outputs(hf, images, tokens)
    with torch.no_grad():
        got = (*ours(images, tokens), ours.loss(images, tokens))
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, atol=2e-5, rtol=2e-5)


def test_hf_parity_catches_a_wrong_pooling_and_missing_pre_norm():
    """The parity above could fail: pooling at the last position, or no ln_pre, breaks it."""
    hf = randomise(transformers.CLIPModel(hf_config()), seed=5)
    images, tokens = pairs(B=4, L=7, seed=6)
    expected = hf_outputs(hf, images, tokens)[0]
    ours = CLIP.from_hf(hf).eval()
    ours.text.eos_positions = lambda t: torch.full((t.shape[0],), t.shape[1] - 1)
    with torch.no_grad():
        assert not torch.allclose(ours(images, tokens)[0], expected, atol=1e-3)
    ours = CLIP.from_hf(hf).eval()
    ours.vision.ln_pre = torch.nn.Identity()
    with torch.no_grad():
        assert not torch.allclose(ours(images, tokens)[0], expected, atol=1e-3)


def test_from_hf_rejects_an_unsupported_activation():
    with pytest.raises(ValueError, match="hidden_act"):
        CLIP.from_hf(transformers.CLIPModel(hf_config(act="relu")))


# ----------------------------------------------------------------------------- the student's parts


class MyLayerNorm(torch.nn.Module):
    """A LayerNorm as a student writes it (lesson 05's contract)."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(d_model))
        self.bias = torch.nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return self.weight * (x - mu) / torch.sqrt(var + self.eps) + self.bias


def test_clip_on_the_students_parts_reproduces_transformers(student_dir, capsys):
    """student.use("CLIP").from_hf builds both encoders from the student's passing LayerNorm
    (ln_pre, the blocks' norms, ln_f of both towers) and still gives transformers' logits."""
    from transformer_lab import check, student

    student._TOLD.clear()
    check.LayerNorm(MyLayerNorm)
    hf = randomise(transformers.CLIPModel(hf_config()), seed=7)
    mine = student.use("CLIP").from_hf(hf).eval()
    out = capsys.readouterr().out
    assert "CLIP: built from YOUR LayerNorm" in out, out
    norms = [mine.vision.ln_pre, mine.vision.ln_f, mine.text.ln_f, mine.text.blocks[0].norm1]
    assert all(type(n).__module__ == "transformer_lab_student.add_norm" for n in norms)
    images, tokens = pairs(B=3, L=7, seed=8)
    expected = hf_outputs(hf, images, tokens)
    with torch.no_grad():
        got = (*mine(images, tokens), mine.loss(images, tokens))
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, atol=2e-5, rtol=2e-5)
