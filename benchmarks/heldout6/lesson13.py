"""Lesson 13 (CLIP): held-out wrong and right implementations, from the exercise text only."""

import math

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- clip_loss


def clip_loss_right(image_features, text_features, logit_scale):
    """Right: F.normalize rows, exp(t) I T^T, mean of the two cross-entropies against arange(B)."""
    i = F.normalize(image_features, dim=-1)
    t = F.normalize(text_features, dim=-1)
    logits_per_image = logit_scale.exp() * i @ t.T
    labels = torch.arange(i.shape[0], device=i.device)
    return (
        F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_image.T, labels)
    ) / 2


def clip_loss_right2(image_features, text_features, logit_scale):
    """Right: rsqrt norms, einsum cosines, cross-entropies written as logsumexp minus the diagonal."""
    i = image_features * torch.rsqrt((image_features * image_features).sum(1, keepdim=True))
    t = text_features * torch.rsqrt((text_features * text_features).sum(1, keepdim=True))
    logits = torch.einsum("id,jd->ij", i, t) * torch.exp(logit_scale)
    diag = torch.diagonal(logits)
    image_to_text = (torch.logsumexp(logits, dim=1) - diag).mean()
    text_to_image = (torch.logsumexp(logits, dim=0) - diag).mean()
    return 0.5 * image_to_text + 0.5 * text_to_image


def _logits(i, t, scale):
    return scale * F.normalize(i, dim=-1) @ F.normalize(t, dim=-1).T


def clip_loss_frobenius(image_features, text_features, logit_scale):
    """Wrong: x / x.norm() divides by the whole matrix's norm (dim= forgotten), not row by row."""
    i = image_features / image_features.norm()
    t = text_features / text_features.norm()
    logits = logit_scale.exp() * i @ t.T
    labels = torch.arange(len(i))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_loss_divides_by_t(image_features, text_features, logit_scale):
    """Wrong: logit_scale read as the temperature itself: cosines divided by t."""
    logits = _logits(image_features, text_features, 1.0) / logit_scale
    labels = torch.arange(len(logits))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_loss_no_transpose(image_features, text_features, logit_scale):
    """Wrong: logits_per_text is the same matrix, not its transpose (only image -> text, twice)."""
    logits_per_image = _logits(image_features, text_features, logit_scale.exp())
    logits_per_text = logits_per_image
    labels = torch.arange(len(logits_per_image))
    return (
        F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text, labels)
    ) / 2


def clip_loss_scale_item(image_features, text_features, logit_scale):
    """Wrong: math.exp(logit_scale.item()) cuts the gradient to logit_scale."""
    logits = _logits(image_features, text_features, math.exp(logit_scale.item()))
    labels = torch.arange(len(logits))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_loss_clamped(image_features, text_features, logit_scale):
    """Wrong: clamps exp(t) at 100 (CLIP's training trick), which the text's loss does not have."""
    logits = _logits(image_features, text_features, logit_scale.exp().clamp(max=100))
    labels = torch.arange(len(logits))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_loss_sum(image_features, text_features, logit_scale):
    """Wrong: reduction="sum" in both cross-entropies (summed over the batch, not a mean)."""
    logits = _logits(image_features, text_features, logit_scale.exp())
    labels = torch.arange(len(logits))
    ce = F.cross_entropy(logits, labels, reduction="sum") + F.cross_entropy(
        logits.T, labels, reduction="sum"
    )
    return ce / 2


def clip_loss_text_unnormalised(image_features, text_features, logit_scale):
    """Wrong: normalises the image features only, the text features go in raw."""
    logits = logit_scale.exp() * F.normalize(image_features, dim=-1) @ text_features.T
    labels = torch.arange(len(logits))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


# ---------------------------------------------------------------- zero_shot_classify


def zero_shot_right(image_features, class_features, logit_scale):
    """Right: normalise prompts, mean over P, normalise again; softmax over classes of exp(t) cosines."""
    img = F.normalize(image_features, dim=-1)
    cls = F.normalize(F.normalize(class_features, dim=-1).mean(dim=1), dim=-1)
    return torch.softmax(logit_scale.exp() * img @ cls.T, dim=-1)


def zero_shot_right2(image_features, class_features, logit_scale):
    """Right: sum (not mean) of the unit prompts (the 1/P cancels in the renormalisation), einsum, softmax by hand."""
    unit = class_features / torch.linalg.vector_norm(class_features, dim=-1, keepdim=True)
    summed = unit.sum(dim=-2)
    c = summed / torch.linalg.vector_norm(summed, dim=-1, keepdim=True)
    img = image_features / torch.linalg.vector_norm(image_features, dim=-1, keepdim=True)
    logits = torch.einsum("bd,kd->bk", img, c) * logit_scale.exp()
    e = torch.exp(logits - logits.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def zs_normalize_default_dim(image_features, class_features, logit_scale):
    """Wrong: F.normalize(class_features) with the default dim=1, which is the prompt axis of (K, P, d)."""
    img = F.normalize(image_features)
    cls = F.normalize(F.normalize(class_features).mean(1))
    return torch.softmax(logit_scale.exp() * img @ cls.T, dim=-1)


def zs_returns_logits(image_features, class_features, logit_scale):
    """Wrong: returns the scaled cosine logits, not the softmax probabilities."""
    img = F.normalize(image_features, dim=-1)
    cls = F.normalize(F.normalize(class_features, dim=-1).mean(1), dim=-1)
    return logit_scale.exp() * img @ cls.T


def zs_scale_item(image_features, class_features, logit_scale):
    """Wrong: float(logit_scale.exp()) - no gradient reaches logit_scale."""
    img = F.normalize(image_features, dim=-1)
    cls = F.normalize(F.normalize(class_features, dim=-1).mean(1), dim=-1)
    return torch.softmax(float(logit_scale.exp()) * img @ cls.T, dim=-1)


def zs_mean_over_classes(image_features, class_features, logit_scale):
    """Wrong: averages over axis 0 (the classes) instead of the prompts."""
    img = F.normalize(image_features, dim=-1)
    cls = F.normalize(F.normalize(class_features, dim=-1).mean(0), dim=-1)
    return torch.softmax(logit_scale.exp() * img @ cls.T, dim=-1)


def zs_not_renormalised(image_features, class_features, logit_scale):
    """Wrong: the averaged class vector is not normalised again."""
    img = F.normalize(image_features, dim=-1)
    cls = F.normalize(class_features, dim=-1).mean(1)
    return torch.softmax(logit_scale.exp() * img @ cls.T, dim=-1)


def zs_mean_before_normalise(image_features, class_features, logit_scale):
    """Wrong: averages the raw prompt features, then normalises once."""
    img = F.normalize(image_features, dim=-1)
    cls = F.normalize(class_features.mean(1), dim=-1)
    return torch.softmax(logit_scale.exp() * img @ cls.T, dim=-1)


def zs_prob_average(image_features, class_features, logit_scale):
    """Wrong: a softmax per prompt template, then the probabilities averaged over the P prompts."""
    img = F.normalize(image_features, dim=-1)
    prompts = F.normalize(class_features, dim=-1)  # (K, P, d)
    logits = logit_scale.exp() * torch.einsum("bd,kpd->bpk", img, prompts)
    return torch.softmax(logits, dim=-1).mean(1)


WRONG = {
    "clip_loss": [
        clip_loss_frobenius,
        clip_loss_divides_by_t,
        clip_loss_no_transpose,
        clip_loss_scale_item,
        clip_loss_clamped,
        clip_loss_sum,
        clip_loss_text_unnormalised,
    ],
    "zero_shot_classify": [
        zs_normalize_default_dim,
        zs_returns_logits,
        zs_scale_item,
        zs_mean_over_classes,
        zs_not_renormalised,
        zs_mean_before_normalise,
        zs_prob_average,
    ],
}

RIGHT = {"clip_loss": clip_loss_right, "zero_shot_classify": zero_shot_right}

RIGHT2 = {"clip_loss": clip_loss_right2, "zero_shot_classify": zero_shot_right2}
