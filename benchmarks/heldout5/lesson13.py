"""Lesson 13 (CLIP): held-out wrong and right implementations, from the exercise text only."""

import math

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- clip_loss


def clip_normalize_ce(image_features, text_features, logit_scale):
    """Right: F.normalize rows, exp(t) I T^T, the mean of the two cross-entropies on arange(B)."""
    image = F.normalize(image_features, dim=-1)
    text = F.normalize(text_features, dim=-1)
    logits_per_image = logit_scale.exp() * image @ text.T
    labels = torch.arange(image.shape[0], device=image.device)
    return (
        F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_image.T, labels)
    ) / 2


def clip_logsumexp(image_features, text_features, logit_scale):
    """Right: norms by hand, einsum logits, both directions by logsumexp over rows and columns."""
    image = image_features / image_features.norm(dim=1, keepdim=True)
    text = text_features / text_features.norm(dim=1, keepdim=True)
    logits = torch.exp(logit_scale) * torch.einsum("id,jd->ij", image, text)
    diag = logits.diagonal()
    per_image = torch.logsumexp(logits, dim=1) - diag
    per_text = torch.logsumexp(logits, dim=0) - diag
    return 0.5 * (per_image.mean() + per_text.mean())


def clip_one_direction(image_features, text_features, logit_scale):
    """Wrong: only the image -> text cross-entropy."""
    image = F.normalize(image_features, dim=-1)
    text = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp() * image @ text.T
    return F.cross_entropy(logits, torch.arange(len(logits)))


def clip_unnormalised(image_features, text_features, logit_scale):
    """Wrong: the raw features are multiplied (dot products, not cosines)."""
    logits = logit_scale.exp() * image_features @ text_features.T
    labels = torch.arange(len(logits))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_normalise_dim0(image_features, text_features, logit_scale):
    """Wrong: F.normalize(..., dim=0): each feature column normalised over the batch."""
    image = F.normalize(image_features, dim=0)
    text = F.normalize(text_features, dim=0)
    logits = logit_scale.exp() * image @ text.T
    labels = torch.arange(len(logits))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_scale_itself(image_features, text_features, logit_scale):
    """Wrong: the logits are multiplied by logit_scale itself, not exp(logit_scale)."""
    image = F.normalize(image_features, dim=-1)
    text = F.normalize(text_features, dim=-1)
    logits = logit_scale * image @ text.T
    labels = torch.arange(len(logits))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_clamped_scale(image_features, text_features, logit_scale):
    """Wrong: exp(t) clamped at 100 inside the loss (CLIP clamps the parameter, not the loss)."""
    image = F.normalize(image_features, dim=-1)
    text = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp().clamp(max=100) * image @ text.T
    labels = torch.arange(len(logits))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_frobenius(image_features, text_features, logit_scale):
    """Wrong: each matrix divided by its whole (Frobenius) norm, not each row by its own."""
    image = image_features / image_features.norm()
    text = text_features / text_features.norm()
    logits = logit_scale.exp() * image @ text.T
    labels = torch.arange(len(logits))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_scale_one_side(image_features, text_features, logit_scale):
    """Wrong: the text -> image logits are recomputed without the exp(t) scale."""
    image = F.normalize(image_features, dim=-1)
    text = F.normalize(text_features, dim=-1)
    logits_per_image = logit_scale.exp() * image @ text.T
    logits_per_text = text @ image.T
    labels = torch.arange(len(image))
    return (
        F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text, labels)
    ) / 2


def clip_scale_item(image_features, text_features, logit_scale):
    """Wrong: math.exp(logit_scale.item()): the scale is a Python float, no gradient reaches t."""
    image = F.normalize(image_features, dim=-1)
    text = F.normalize(text_features, dim=-1)
    logits = math.exp(logit_scale.item()) * image @ text.T
    labels = torch.arange(len(logits))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_bce_eye(image_features, text_features, logit_scale):
    """Wrong: a binary cross-entropy of every logit against the identity matrix (sigmoid, not softmax)."""
    image = F.normalize(image_features, dim=-1)
    text = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp() * image @ text.T
    target = torch.eye(len(logits), dtype=logits.dtype)
    return F.binary_cross_entropy_with_logits(logits, target)


# ---------------------------------------------------------------- zero_shot_classify


def zs_normalize(image_features, class_features, logit_scale):
    """Right: normalise prompts, mean over P, normalise again; softmax over K of exp(t) cosines."""
    image = F.normalize(image_features, dim=-1)
    classes = F.normalize(F.normalize(class_features, dim=-1).mean(dim=1), dim=-1)
    return (logit_scale.exp() * image @ classes.T).softmax(dim=-1)


def zs_einsum(image_features, class_features, logit_scale):
    """Right: norms by hand, the prompt sum (same direction as the mean), einsum, exp/sum softmax."""
    image = image_features / image_features.norm(dim=-1, keepdim=True)
    prompts = class_features / class_features.norm(dim=-1, keepdim=True)
    summed = prompts.sum(dim=1)
    classes = summed / summed.norm(dim=-1, keepdim=True)
    logits = torch.exp(logit_scale) * torch.einsum("bd,kd->bk", image, classes)
    logits = logits - logits.max(dim=-1, keepdim=True).values
    e = logits.exp()
    return e / e.sum(dim=-1, keepdim=True)


def zs_first_prompt(image_features, class_features, logit_scale):
    """Wrong: only the first prompt of each class is used."""
    image = F.normalize(image_features, dim=-1)
    classes = F.normalize(class_features[:, 0], dim=-1)
    return (logit_scale.exp() * image @ classes.T).softmax(dim=-1)


def zs_mean_then_normalise(image_features, class_features, logit_scale):
    """Wrong: the raw prompt vectors are averaged first, then the mean is normalised."""
    image = F.normalize(image_features, dim=-1)
    classes = F.normalize(class_features.mean(dim=1), dim=-1)
    return (logit_scale.exp() * image @ classes.T).softmax(dim=-1)


def zs_no_renormalise(image_features, class_features, logit_scale):
    """Wrong: the mean of the unit prompt vectors is not normalised again."""
    image = F.normalize(image_features, dim=-1)
    classes = F.normalize(class_features, dim=-1).mean(dim=1)
    return (logit_scale.exp() * image @ classes.T).softmax(dim=-1)


def zs_normalise_prompt_axis(image_features, class_features, logit_scale):
    """Wrong: the prompt vectors are normalised over dim=1 (the P prompts), not over d."""
    image = F.normalize(image_features, dim=-1)
    classes = F.normalize(F.normalize(class_features, dim=1).mean(dim=1), dim=-1)
    return (logit_scale.exp() * image @ classes.T).softmax(dim=-1)


def zs_softmax_images(image_features, class_features, logit_scale):
    """Wrong: softmax over dim 0 (the images) instead of over the classes."""
    image = F.normalize(image_features, dim=-1)
    classes = F.normalize(F.normalize(class_features, dim=-1).mean(dim=1), dim=-1)
    return (logit_scale.exp() * image @ classes.T).softmax(dim=0)


def zs_logits(image_features, class_features, logit_scale):
    """Wrong: returns the scaled cosines (logits), not the softmax probabilities."""
    image = F.normalize(image_features, dim=-1)
    classes = F.normalize(F.normalize(class_features, dim=-1).mean(dim=1), dim=-1)
    return logit_scale.exp() * image @ classes.T


def zs_prob_average(image_features, class_features, logit_scale):
    """Wrong: a softmax per prompt over the classes, the P probability tables averaged."""
    image = F.normalize(image_features, dim=-1)
    prompts = F.normalize(class_features, dim=-1)  # (K, P, d)
    logits = logit_scale.exp() * torch.einsum("bd,kpd->bpk", image, prompts)
    return logits.softmax(dim=-1).mean(dim=1)


def zs_no_scale(image_features, class_features, logit_scale):
    """Wrong: logit_scale is ignored: the softmax of plain cosine similarities."""
    image = F.normalize(image_features, dim=-1)
    classes = F.normalize(F.normalize(class_features, dim=-1).mean(dim=1), dim=-1)
    return (image @ classes.T).softmax(dim=-1)


def zs_scale_float(image_features, class_features, logit_scale):
    """Wrong: the scale taken as float(logit_scale.exp()): no gradient reaches logit_scale."""
    image = F.normalize(image_features, dim=-1)
    classes = F.normalize(F.normalize(class_features, dim=-1).mean(dim=1), dim=-1)
    return (float(logit_scale.exp()) * image @ classes.T).softmax(dim=-1)


WRONG = {
    "clip_loss": [
        clip_one_direction,
        clip_unnormalised,
        clip_normalise_dim0,
        clip_scale_itself,
        clip_clamped_scale,
        clip_frobenius,
        clip_scale_one_side,
        clip_scale_item,
        clip_bce_eye,
    ],
    "zero_shot_classify": [
        zs_first_prompt,
        zs_mean_then_normalise,
        zs_no_renormalise,
        zs_normalise_prompt_axis,
        zs_softmax_images,
        zs_logits,
        zs_prob_average,
        zs_no_scale,
        zs_scale_float,
    ],
}

RIGHT = {
    "clip_loss": clip_normalize_ce,
    "zero_shot_classify": zs_normalize,
}

RIGHT2 = {
    "clip_loss": clip_logsumexp,
    "zero_shot_classify": zs_einsum,
}
