"""Lesson 13 (CLIP): held-out wrong and right implementations, from the exercise text."""

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- clip_loss


def clip_right(image_features, text_features, logit_scale):
    """Right: F.normalize, one logits matrix, F.cross_entropy both ways."""
    img = F.normalize(image_features, dim=-1)
    txt = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp() * img @ txt.T
    labels = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_right2(image_features, text_features, logit_scale):
    """Right: manual norms, log_softmax over rows and columns, the diagonal's mean."""
    img = image_features / image_features.norm(dim=1, keepdim=True)
    txt = text_features / text_features.norm(dim=1, keepdim=True)
    logits = torch.einsum("id,jd->ij", img, txt) * torch.exp(logit_scale)
    i2t = -torch.log_softmax(logits, dim=1).diagonal().mean()
    t2i = -torch.log_softmax(logits, dim=0).diagonal().mean()
    return 0.5 * (i2t + t2i)


def clip_frobenius_norm(image_features, text_features, logit_scale):
    """Wrong: divides by x.norm() without dim, the norm of the whole matrix."""
    img = image_features / image_features.norm()
    txt = text_features / text_features.norm()
    logits = logit_scale.exp() * img @ txt.T
    labels = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_divide_by_t(image_features, text_features, logit_scale):
    """Wrong: treats logit_scale as the temperature and divides the cosines by it."""
    img = F.normalize(image_features, dim=-1)
    txt = F.normalize(text_features, dim=-1)
    logits = img @ txt.T / logit_scale
    labels = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_in_place_norm(image_features, text_features, logit_scale):
    """Wrong: normalises the inputs in place with /=."""
    image_features /= image_features.norm(dim=-1, keepdim=True)
    text_features /= text_features.norm(dim=-1, keepdim=True)
    logits = logit_scale.exp() * image_features @ text_features.T
    labels = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_both_columns(image_features, text_features, logit_scale):
    """Wrong: a manual version that takes log_softmax over dim 0 for both directions."""
    img = F.normalize(image_features, dim=-1)
    txt = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp() * img @ txt.T
    i2t = -torch.log_softmax(logits, dim=0).diagonal().mean()
    t2i = -torch.log_softmax(logits.T, dim=1).diagonal().mean()
    return (i2t + t2i) / 2


def clip_not_transposed(image_features, text_features, logit_scale):
    """Wrong: the text direction reuses logits_per_image without the transpose."""
    img = F.normalize(image_features, dim=-1)
    txt = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp() * img @ txt.T
    labels = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits, labels)) / 2


def clip_sum_no_half(image_features, text_features, logit_scale):
    """Wrong: adds the two cross-entropies without the 1/2."""
    img = F.normalize(image_features, dim=-1)
    txt = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp() * img @ txt.T
    labels = torch.arange(logits.shape[0], device=logits.device)
    return F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)


# ---------------------------------------------------------------- zero_shot_classify


def zs_right(image_features, class_features, logit_scale):
    """Right: normalise, mean over prompts, normalise, scaled cosines, softmax over classes."""
    t = F.normalize(class_features, dim=-1)
    c = F.normalize(t.mean(dim=1), dim=-1)
    img = F.normalize(image_features, dim=-1)
    return torch.softmax(logit_scale.exp() * img @ c.T, dim=-1)


def zs_right2(image_features, class_features, logit_scale):
    """Right: explicit norms and einsum, the softmax written as exp over its sum."""
    t = class_features / class_features.norm(dim=2, keepdim=True)
    u = t.sum(dim=1) / t.shape[1]
    c = u / u.norm(dim=1, keepdim=True)
    img = image_features / image_features.norm(dim=1, keepdim=True)
    z = torch.exp(logit_scale) * torch.einsum("bd,kd->bk", img, c)
    z = z - z.max(dim=1, keepdim=True).values
    e = torch.exp(z)
    return e / e.sum(dim=1, keepdim=True)


def zs_mean_over_classes(image_features, class_features, logit_scale):
    """Wrong: averages over dim 0 (the classes) instead of the prompts."""
    t = F.normalize(class_features, dim=-1)
    c = F.normalize(t.mean(dim=0), dim=-1)
    img = F.normalize(image_features, dim=-1)
    return torch.softmax(logit_scale.exp() * img @ c.T, dim=-1)


def zs_normalise_prompt_axis(image_features, class_features, logit_scale):
    """Wrong: normalises the prompt vectors over dim 1 (the prompts), not the features."""
    t = F.normalize(class_features, dim=1)
    c = F.normalize(t.mean(dim=1), dim=-1)
    img = F.normalize(image_features, dim=-1)
    return torch.softmax(logit_scale.exp() * img @ c.T, dim=-1)


def zs_logits(image_features, class_features, logit_scale):
    """Wrong: returns the scaled logits, the softmax forgotten."""
    t = F.normalize(class_features, dim=-1)
    c = F.normalize(t.mean(dim=1), dim=-1)
    img = F.normalize(image_features, dim=-1)
    return logit_scale.exp() * img @ c.T


def zs_mean_then_normalise(image_features, class_features, logit_scale):
    """Wrong: averages the raw prompt vectors, then normalises once."""
    c = F.normalize(class_features.mean(dim=1), dim=-1)
    img = F.normalize(image_features, dim=-1)
    return torch.softmax(logit_scale.exp() * img @ c.T, dim=-1)


def zs_no_renorm(image_features, class_features, logit_scale):
    """Wrong: the mean of the unit prompt vectors is not normalised again."""
    c = F.normalize(class_features, dim=-1).mean(dim=1)
    img = F.normalize(image_features, dim=-1)
    return torch.softmax(logit_scale.exp() * img @ c.T, dim=-1)


WRONG = {
    "clip_loss": [
        clip_frobenius_norm,
        clip_divide_by_t,
        clip_in_place_norm,
        clip_both_columns,
        clip_not_transposed,
        clip_sum_no_half,
    ],
    "zero_shot_classify": [
        zs_mean_over_classes,
        zs_normalise_prompt_axis,
        zs_logits,
        zs_mean_then_normalise,
        zs_no_renorm,
    ],
}
RIGHT = {"clip_loss": clip_right, "zero_shot_classify": zs_right}
RIGHT2 = {"clip_loss": clip_right2, "zero_shot_classify": zs_right2}
