"""Lesson 13 (CLIP): held-out wrong and right implementations, from the exercise text only."""

import torch
import torch.nn.functional as F


def _t(logit_scale, like):
    return torch.as_tensor(logit_scale, dtype=like.dtype, device=like.device)


# ---------------------------------------------------------------- clip_loss


def clip_loss_right(image_features, text_features, logit_scale):
    """Right: F.normalize rows, exp(t) * I T^T, mean of the two cross-entropies."""
    image = F.normalize(image_features, dim=-1)
    text = F.normalize(text_features, dim=-1)
    logits = _t(logit_scale, image).exp() * image @ text.T
    labels = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_loss_right_manual(image_features, text_features, logit_scale):
    """Right: norms by hand, both directions as logsumexp minus the diagonal, averaged."""
    image = image_features / image_features.norm(dim=1, keepdim=True)
    text = text_features / text_features.norm(dim=1, keepdim=True)
    scale = torch.exp(_t(logit_scale, image))
    per_image = scale * torch.einsum("id,jd->ij", image, text)
    per_text = scale * torch.einsum("jd,id->ji", text, image)
    diag = per_image.diagonal()
    loss_i = (torch.logsumexp(per_image, dim=1) - diag).mean()
    loss_t = (torch.logsumexp(per_text, dim=1) - per_text.diagonal()).mean()
    return 0.5 * loss_i + 0.5 * loss_t


def clip_loss_precedence(image_features, text_features, logit_scale):
    """Wrong: `a + b / 2` without brackets: only the text -> image term is halved."""
    image = F.normalize(image_features, dim=-1)
    text = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp() * image @ text.T
    labels = torch.arange(logits.shape[0])
    return F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels) / 2


def clip_loss_scale_item(image_features, text_features, logit_scale):
    """Wrong: exp(logit_scale.item()): a Python float, no gradient reaches logit_scale."""
    image = F.normalize(image_features, dim=-1)
    text = F.normalize(text_features, dim=-1)
    logits = float(torch.exp(logit_scale).item()) * image @ text.T
    labels = torch.arange(logits.shape[0])
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_loss_text_unscaled(image_features, text_features, logit_scale):
    """Wrong: logits_per_text recomputed as T I^T and the exp(t) scale forgotten there."""
    image = F.normalize(image_features, dim=-1)
    text = F.normalize(text_features, dim=-1)
    per_image = logit_scale.exp() * image @ text.T
    per_text = text @ image.T
    labels = torch.arange(per_image.shape[0])
    return (F.cross_entropy(per_image, labels) + F.cross_entropy(per_text, labels)) / 2


def clip_loss_batch_axis(image_features, text_features, logit_scale):
    """Wrong: F.normalize(..., dim=0): each feature column normalised over the batch."""
    image = F.normalize(image_features, dim=0)
    text = F.normalize(text_features, dim=0)
    logits = logit_scale.exp() * image @ text.T
    labels = torch.arange(logits.shape[0])
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def clip_loss_sigmoid(image_features, text_features, logit_scale):
    """Wrong: a binary cross-entropy against the identity matrix (sigmoid loss), not softmax CE."""
    image = F.normalize(image_features, dim=-1)
    text = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp() * image @ text.T
    target = torch.eye(logits.shape[0], dtype=logits.dtype)
    return F.binary_cross_entropy_with_logits(logits, target)


def clip_loss_times_t(image_features, text_features, logit_scale):
    """Wrong: logits multiplied by logit_scale itself, not by exp(logit_scale)."""
    image = F.normalize(image_features, dim=-1)
    text = F.normalize(text_features, dim=-1)
    logits = logit_scale * image @ text.T
    labels = torch.arange(logits.shape[0])
    return 0.5 * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels))


def clip_loss_unnormalised(image_features, text_features, logit_scale):
    """Wrong: raw dot products of the features, no normalisation to unit length."""
    logits = logit_scale.exp() * image_features @ text_features.T
    labels = torch.arange(logits.shape[0])
    return 0.5 * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels))


# ---------------------------------------------------------------- zero_shot_classify


def zero_shot_right(image_features, class_features, logit_scale):
    """Right: normalise prompts, mean over P, normalise again; softmax over K of exp(t) cos."""
    image = F.normalize(image_features, dim=-1)
    classes = F.normalize(F.normalize(class_features, dim=-1).mean(dim=1), dim=-1)
    logits = _t(logit_scale, image).exp() * image @ classes.T
    return logits.softmax(dim=-1)


def zero_shot_right_einsum(image_features, class_features, logit_scale):
    """Right: norms by hand, einsum, softmax written as exp / sum after a max shift."""
    units = class_features / class_features.norm(dim=-1, keepdim=True)
    mean = units.sum(dim=1) / units.shape[1]
    classes = mean / mean.norm(dim=-1, keepdim=True)
    image = image_features / image_features.norm(dim=-1, keepdim=True)
    logits = torch.einsum("bd,kd->bk", image, classes) * torch.exp(_t(logit_scale, image))
    logits = logits - logits.max(dim=-1, keepdim=True).values
    e = logits.exp()
    return e / e.sum(dim=-1, keepdim=True)


def zero_shot_logits(image_features, class_features, logit_scale):
    """Wrong: returns the scaled cosine logits, the softmax forgotten."""
    image = F.normalize(image_features, dim=-1)
    classes = F.normalize(F.normalize(class_features, dim=-1).mean(dim=1), dim=-1)
    return logit_scale.exp() * image @ classes.T


def zero_shot_prompt_axis_norm(image_features, class_features, logit_scale):
    """Wrong: each prompt vector normalised over the prompt axis (dim=1) instead of d."""
    image = F.normalize(image_features, dim=-1)
    classes = F.normalize(F.normalize(class_features, dim=1).mean(dim=1), dim=-1)
    return (logit_scale.exp() * image @ classes.T).softmax(dim=-1)


def zero_shot_mean_first(image_features, class_features, logit_scale):
    """Wrong: the raw prompt vectors averaged first, normalised only once after the mean."""
    image = F.normalize(image_features, dim=-1)
    classes = F.normalize(class_features.mean(dim=1), dim=-1)
    return (logit_scale.exp() * image @ classes.T).softmax(dim=-1)


def zero_shot_no_renorm(image_features, class_features, logit_scale):
    """Wrong: the mean of the unit prompt vectors is used as it is (not normalised again)."""
    image = F.normalize(image_features, dim=-1)
    classes = F.normalize(class_features, dim=-1).mean(dim=1)
    return (logit_scale.exp() * image @ classes.T).softmax(dim=-1)


def zero_shot_prob_average(image_features, class_features, logit_scale):
    """Wrong: a softmax over classes per prompt, then the P probability vectors averaged."""
    image = F.normalize(image_features, dim=-1)
    prompts = F.normalize(class_features, dim=-1)  # (K, P, d)
    logits = logit_scale.exp() * torch.einsum("bd,kpd->bpk", image, prompts)
    return logits.softmax(dim=-1).mean(dim=1)


def zero_shot_softmax_dim0(image_features, class_features, logit_scale):
    """Wrong: softmax(dim=0): each class's probabilities sum to 1 over the images."""
    image = F.normalize(image_features, dim=-1)
    classes = F.normalize(F.normalize(class_features, dim=-1).mean(dim=1), dim=-1)
    return (logit_scale.exp() * image @ classes.T).softmax(dim=0)


def zero_shot_image_raw(image_features, class_features, logit_scale):
    """Wrong: the class vectors are normalised but the image features are not."""
    classes = F.normalize(F.normalize(class_features, dim=-1).mean(dim=1), dim=-1)
    return (logit_scale.exp() * image_features @ classes.T).softmax(dim=-1)


WRONG = {
    "clip_loss": [
        clip_loss_precedence,
        clip_loss_scale_item,
        clip_loss_text_unscaled,
        clip_loss_batch_axis,
        clip_loss_sigmoid,
        clip_loss_times_t,
        clip_loss_unnormalised,
    ],
    "zero_shot_classify": [
        zero_shot_logits,
        zero_shot_prompt_axis_norm,
        zero_shot_mean_first,
        zero_shot_no_renorm,
        zero_shot_prob_average,
        zero_shot_softmax_dim0,
        zero_shot_image_raw,
    ],
}
RIGHT = {"clip_loss": clip_loss_right, "zero_shot_classify": zero_shot_right}
RIGHT2 = {"clip_loss": clip_loss_right_manual, "zero_shot_classify": zero_shot_right_einsum}
