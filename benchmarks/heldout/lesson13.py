"""Lesson 13: CLIP's contrastive loss and zero-shot classification."""

import torch
import torch.nn.functional as F


def clip_right(image_features, text_features, logit_scale):
    """Correct."""
    i = F.normalize(image_features, dim=-1)
    t = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp() * i @ t.T
    target = torch.arange(len(i), device=i.device)
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


def clip_same_direction_twice(image_features, text_features, logit_scale):
    """Uses logits (not logits.T) for both cross-entropies."""
    i = F.normalize(image_features, dim=-1)
    t = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp() * i @ t.T
    target = torch.arange(len(i))
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits, target)) / 2


def clip_bce_diagonal(image_features, text_features, logit_scale):
    """Binary cross-entropy on every pair (sigmoid loss) instead of the softmax over the batch."""
    i = F.normalize(image_features, dim=-1)
    t = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp() * i @ t.T
    return F.binary_cross_entropy_with_logits(logits, torch.eye(len(i), dtype=logits.dtype))


def clip_normalise_with_sum(image_features, text_features, logit_scale):
    """Normalises each row by its sum (L1 without abs) instead of its L2 norm."""
    i = image_features / image_features.sum(-1, keepdim=True)
    t = text_features / text_features.sum(-1, keepdim=True)
    logits = logit_scale.exp() * i @ t.T
    target = torch.arange(len(i))
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


def clip_text_unnormalised(image_features, text_features, logit_scale):
    """Normalises the image features only."""
    i = F.normalize(image_features, dim=-1)
    logits = logit_scale.exp() * i @ text_features.T
    target = torch.arange(len(i))
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


def clip_detached_scale(image_features, text_features, logit_scale):
    """Detaches logit_scale (no gradient to the scale)."""
    return clip_right(image_features, text_features, logit_scale.detach())


def clip_temperature_clamped(image_features, text_features, logit_scale):
    """Clamps exp(logit_scale) to 100 as in CLIP's training code (not asked for)."""
    i = F.normalize(image_features, dim=-1)
    t = F.normalize(text_features, dim=-1)
    logits = logit_scale.exp().clamp(max=100) * i @ t.T
    target = torch.arange(len(i))
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


def zs_right(image_features, class_features, logit_scale):
    """Correct."""
    c = F.normalize(F.normalize(class_features, dim=-1).mean(1), dim=-1)
    i = F.normalize(image_features, dim=-1)
    return torch.softmax(logit_scale.exp() * i @ c.T, dim=-1)


def zs_log_probs(image_features, class_features, logit_scale):
    """Returns log-probabilities (log_softmax)."""
    c = F.normalize(F.normalize(class_features, dim=-1).mean(1), dim=-1)
    i = F.normalize(image_features, dim=-1)
    return torch.log_softmax(logit_scale.exp() * i @ c.T, dim=-1)


def zs_sum_prompts(image_features, class_features, logit_scale):
    """Sums the normalised prompts and does not normalise again."""
    c = F.normalize(class_features, dim=-1).sum(1)
    i = F.normalize(image_features, dim=-1)
    return torch.softmax(logit_scale.exp() * i @ c.T, dim=-1)


def zs_classes_reversed(image_features, class_features, logit_scale):
    """Averages correctly but flips the class order (classes listed in reverse)."""
    c = F.normalize(F.normalize(class_features, dim=-1).transpose(0, 1).mean(0), dim=-1)
    c = c.flip(0)
    i = F.normalize(image_features, dim=-1)
    return torch.softmax(logit_scale.exp() * i @ c.T, dim=-1)


def zs_normalise_whole_tensor(image_features, class_features, logit_scale):
    """Normalises each class's (P, d) block as one vector (flattened), not each prompt."""
    K, P, d = class_features.shape
    u = F.normalize(class_features.reshape(K, P * d), dim=-1).reshape(K, P, d)
    c = F.normalize(u.mean(1), dim=-1)
    i = F.normalize(image_features, dim=-1)
    return torch.softmax(logit_scale.exp() * i @ c.T, dim=-1)


def zs_max_over_prompts(image_features, class_features, logit_scale):
    """Takes, per class, the best prompt's similarity instead of the averaged class vector."""
    i = F.normalize(image_features, dim=-1)
    t = F.normalize(class_features, dim=-1)
    sims = torch.einsum("bd,kpd->bkp", i, t).amax(-1)
    return torch.softmax(logit_scale.exp() * sims, dim=-1)


WRONG = {
    "clip_loss": [
        clip_same_direction_twice,
        clip_bce_diagonal,
        clip_normalise_with_sum,
        clip_text_unnormalised,
        clip_detached_scale,
        clip_temperature_clamped,
    ],
    "zero_shot_classify": [
        zs_log_probs,
        zs_sum_prompts,
        zs_classes_reversed,
        zs_normalise_whole_tensor,
        zs_max_over_prompts,
    ],
}
RIGHT = {"clip_loss": clip_right, "zero_shot_classify": zs_right}
