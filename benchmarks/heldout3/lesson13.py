"""Lesson 13 (CLIP): held-out wrong and right implementations, from the exercise text."""

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- clip_loss


def clip_right(image_features, text_features, logit_scale):
    """Right: F.normalize, one logits matrix and its transpose, F.cross_entropy."""
    i = F.normalize(image_features, dim=-1)
    t = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp() * i @ t.T
    labels = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_right2(image_features, text_features, logit_scale):
    """Right: norms by hand, log_softmax over rows and over columns, the diagonal."""
    i = image_features / torch.linalg.vector_norm(image_features, dim=1, keepdim=True)
    t = text_features / torch.linalg.vector_norm(text_features, dim=1, keepdim=True)
    logits = torch.exp(logit_scale) * torch.einsum("id,jd->ij", i, t)
    per_image = -torch.log_softmax(logits, dim=1).diagonal().mean()
    per_text = -torch.log_softmax(logits, dim=0).diagonal().mean()
    return 0.5 * (per_image + per_text)


def clip_frobenius(image_features, text_features, logit_scale):
    """Divides each feature matrix by its whole-matrix norm (.norm()), not row by row."""
    i = image_features / image_features.norm()
    t = text_features / text_features.norm()
    logits = logit_scale.exp() * i @ t.T
    labels = torch.arange(logits.shape[0])
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_no_transpose(image_features, text_features, logit_scale):
    """Forgets the .T in the text direction: the same cross-entropy twice."""
    i = F.normalize(image_features, dim=-1)
    t = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp() * i @ t.T
    labels = torch.arange(logits.shape[0])
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits, labels)) / 2


def clip_clamped(image_features, text_features, logit_scale):
    """Clamps exp(t) at 100 as CLIP's training code does."""
    i = F.normalize(image_features, dim=-1)
    t = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp().clamp(max=100) * i @ t.T
    labels = torch.arange(logits.shape[0])
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_second_unscaled(image_features, text_features, logit_scale):
    """Builds logits_per_text as t @ i.T again, without the exp(t) scale."""
    i = F.normalize(image_features, dim=-1)
    t = F.normalize(text_features, dim=-1)
    per_image = logit_scale.exp() * i @ t.T
    per_text = t @ i.T
    labels = torch.arange(i.shape[0])
    return (F.cross_entropy(per_image, labels) + F.cross_entropy(per_text, labels)) / 2


def clip_scale_item(image_features, text_features, logit_scale):
    """Takes logit_scale.exp().item(): no gradient reaches logit_scale."""
    i = F.normalize(image_features, dim=-1)
    t = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp().item() * i @ t.T
    labels = torch.arange(logits.shape[0])
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_text_not_normalised(image_features, text_features, logit_scale):
    """Normalises the image features and forgets the text features."""
    i = F.normalize(image_features, dim=-1)
    logits = logit_scale.exp() * i @ text_features.T
    labels = torch.arange(logits.shape[0])
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_log_of_softmax(image_features, text_features, logit_scale):
    """Cross-entropy by hand as -log(softmax(...)) of the diagonal."""
    i = F.normalize(image_features, dim=-1)
    t = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp() * i @ t.T
    a = -torch.log(torch.softmax(logits, dim=1).diagonal()).mean()
    b = -torch.log(torch.softmax(logits, dim=0).diagonal()).mean()
    return (a + b) / 2


# ---------------------------------------------------------------- zero_shot_classify


def zs_right(image_features, class_features, logit_scale):
    """Right: normalise, mean over P, normalise again, scaled cosines, softmax."""
    prompts = F.normalize(class_features, dim=-1)
    classes = F.normalize(prompts.mean(dim=1), dim=-1)
    images = F.normalize(image_features, dim=-1)
    return torch.softmax(logit_scale.exp() * images @ classes.T, dim=-1)


def zs_right2(image_features, class_features, logit_scale):
    """Right: einsum, the sum of unit prompt vectors (same direction as the mean) normalised."""
    unit = class_features / class_features.norm(dim=-1, keepdim=True)
    summed = unit.sum(dim=1)
    classes = summed / summed.norm(dim=-1, keepdim=True)
    images = image_features / image_features.norm(dim=-1, keepdim=True)
    logits = torch.einsum("bd,kd->bk", images, classes) * torch.exp(logit_scale)
    return logits.softmax(dim=1)


def zs_class_norm_dim0(image_features, class_features, logit_scale):
    """Normalises the averaged class vectors over dim 0 (across the classes)."""
    prompts = F.normalize(class_features, dim=-1)
    classes = F.normalize(prompts.mean(dim=1), dim=0)
    images = F.normalize(image_features, dim=-1)
    return torch.softmax(logit_scale.exp() * images @ classes.T, dim=-1)


def zs_mean_over_classes(image_features, class_features, logit_scale):
    """Averages over dim 0 (the K classes) instead of the P prompts."""
    prompts = F.normalize(class_features, dim=-1)
    classes = F.normalize(prompts.mean(dim=0), dim=-1)
    images = F.normalize(image_features, dim=-1)
    return torch.softmax(logit_scale.exp() * images @ classes.T, dim=-1)


def zs_scale_item(image_features, class_features, logit_scale):
    """Uses logit_scale.exp().item(), a Python float: no gradient for logit_scale."""
    prompts = F.normalize(class_features, dim=-1)
    classes = F.normalize(prompts.mean(dim=1), dim=-1)
    images = F.normalize(image_features, dim=-1)
    return torch.softmax(logit_scale.exp().item() * images @ classes.T, dim=-1)


def zs_logits(image_features, class_features, logit_scale):
    """Returns the scaled logits; the softmax is forgotten."""
    prompts = F.normalize(class_features, dim=-1)
    classes = F.normalize(prompts.mean(dim=1), dim=-1)
    images = F.normalize(image_features, dim=-1)
    return logit_scale.exp() * images @ classes.T


def zs_log_softmax(image_features, class_features, logit_scale):
    """Returns log_softmax (log-probabilities) instead of probabilities."""
    prompts = F.normalize(class_features, dim=-1)
    classes = F.normalize(prompts.mean(dim=1), dim=-1)
    images = F.normalize(image_features, dim=-1)
    return torch.log_softmax(logit_scale.exp() * images @ classes.T, dim=-1)


def zs_view_pkd(image_features, class_features, logit_scale):
    """Views the (K, P, d) input as (P, K, d), as the notebook's stack was built, and averages dim 0."""
    K, P, d = class_features.shape
    prompts = F.normalize(class_features.reshape(P, K, d), dim=-1)
    classes = F.normalize(prompts.mean(dim=0), dim=-1)
    images = F.normalize(image_features, dim=-1)
    return torch.softmax(logit_scale.exp() * images @ classes.T, dim=-1)


WRONG = {
    "clip_loss": [
        clip_frobenius,
        clip_no_transpose,
        clip_clamped,
        clip_second_unscaled,
        clip_scale_item,
        clip_text_not_normalised,
        clip_log_of_softmax,
    ],
    "zero_shot_classify": [
        zs_class_norm_dim0,
        zs_mean_over_classes,
        zs_scale_item,
        zs_logits,
        zs_log_softmax,
        zs_view_pkd,
    ],
}

RIGHT = {"clip_loss": clip_right, "zero_shot_classify": zs_right}

RIGHT2 = {"clip_loss": clip_right2, "zero_shot_classify": zs_right2}
