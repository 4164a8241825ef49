"""Checks for lesson 13 — CLIP: `clip_loss`, the symmetric contrastive (InfoNCE) loss, and
`zero_shot_classify`, class probabilities from ensembles of prompts."""

from __future__ import annotations

import math
import sys

import torch

from .. import clip as _clip
from .drivers import FunctionDriver
from .exercise import Case, Exercise, Mistake

__all__ = ["clip_loss", "zero_shot_classify"]

# ==============================================================================================
# clip_loss(image_features, text_features, logit_scale) -> scalar
#   ½ · [CE(exp(t) · cos(I, T), arange(B)) + CE(exp(t) · cos(T, I), arange(B))]
#
# The mutants below must not call the reference (it is forbidden while they run): they share the
# private helpers _unit, _cross_entropy.


def _unit(x):
    return x / x.norm(dim=-1, keepdim=True)


def _cross_entropy(logits, labels, reduction="mean"):
    """-log softmax(logits)[i, labels[i]], averaged (or summed) over the rows."""
    picked = logits.log_softmax(dim=-1).gather(1, labels[:, None])[:, 0]
    return -(picked.mean() if reduction == "mean" else picked.sum())


def _logits(image_features, text_features, logit_scale):
    return logit_scale.exp() * _unit(image_features) @ _unit(text_features).T


def _labels(logits):
    return torch.arange(logits.shape[0], device=logits.device)


def _image_to_text_only(image_features, text_features, logit_scale):
    logits = _logits(image_features, text_features, logit_scale)
    return _cross_entropy(logits, _labels(logits))


def _text_to_image_only(image_features, text_features, logit_scale):
    logits = _logits(image_features, text_features, logit_scale)
    return _cross_entropy(logits.T, _labels(logits))


def _no_normalisation(image_features, text_features, logit_scale):
    logits = logit_scale.exp() * image_features @ text_features.T
    labels = _labels(logits)
    return (_cross_entropy(logits, labels) + _cross_entropy(logits.T, labels)) / 2


def _normalise_batch_axis(image_features, text_features, logit_scale):
    image = image_features / image_features.norm(dim=0, keepdim=True)
    text = text_features / text_features.norm(dim=0, keepdim=True)
    logits = logit_scale.exp() * image @ text.T
    labels = _labels(logits)
    return (_cross_entropy(logits, labels) + _cross_entropy(logits.T, labels)) / 2


def _whole_matrix_norm(image_features, text_features, logit_scale):
    """x / x.norm(): the norm of the whole matrix, not of each row."""
    logits = (
        logit_scale.exp()
        * (image_features / image_features.norm())
        @ (text_features / text_features.norm()).T
    )
    labels = _labels(logits)
    return (_cross_entropy(logits, labels) + _cross_entropy(logits.T, labels)) / 2


def _divide_by_scale(image_features, text_features, logit_scale):
    logits = _unit(image_features) @ _unit(text_features).T / logit_scale.exp()
    labels = _labels(logits)
    return (_cross_entropy(logits, labels) + _cross_entropy(logits.T, labels)) / 2


def _scale_without_exp(image_features, text_features, logit_scale):
    logits = logit_scale * _unit(image_features) @ _unit(text_features).T
    labels = _labels(logits)
    return (_cross_entropy(logits, labels) + _cross_entropy(logits.T, labels)) / 2


def _no_scale(image_features, text_features, logit_scale):
    logits = _unit(image_features) @ _unit(text_features).T
    labels = _labels(logits)
    return (_cross_entropy(logits, labels) + _cross_entropy(logits.T, labels)) / 2


def _labels_reversed(image_features, text_features, logit_scale):
    logits = _logits(image_features, text_features, logit_scale)
    labels = _labels(logits).flip(0)
    return (_cross_entropy(logits, labels) + _cross_entropy(logits.T, labels)) / 2


def _labels_zero(image_features, text_features, logit_scale):
    logits = _logits(image_features, text_features, logit_scale)
    labels = torch.zeros_like(_labels(logits))
    return (_cross_entropy(logits, labels) + _cross_entropy(logits.T, labels)) / 2


def _sum_of_directions(image_features, text_features, logit_scale):
    logits = _logits(image_features, text_features, logit_scale)
    labels = _labels(logits)
    return _cross_entropy(logits, labels) + _cross_entropy(logits.T, labels)


def _sum_over_batch(image_features, text_features, logit_scale):
    logits = _logits(image_features, text_features, logit_scale)
    labels = _labels(logits)
    image_to_text = _cross_entropy(logits, labels, "sum")
    return (image_to_text + _cross_entropy(logits.T, labels, "sum")) / 2


def _scale_clamped(image_features, text_features, logit_scale):
    logits = logit_scale.exp().clamp(max=100.0) * _unit(image_features) @ _unit(text_features).T
    labels = _labels(logits)
    return (_cross_entropy(logits, labels) + _cross_entropy(logits.T, labels)) / 2


class _TransformersOnceImported(tuple):
    """Forbidden names whose `transformers.*` entries count only once transformers is imported.

    Switching a name off means importing its module, and importing transformers costs seconds:
    every first check would pay it. Code that calls transformers' CLIP loss has imported
    transformers before the check runs it (an import inside the function itself is the exception).
    """

    def __iter__(self):
        loaded = "transformers" in sys.modules
        names = tuple.__iter__(self)
        return iter([n for n in names if loaded or not n.startswith("transformers.")])


def _second_unscaled(image_features, text_features, logit_scale):
    """logits_per_text built again as t @ iᵀ, without exp(logit_scale)."""
    logits = _logits(image_features, text_features, logit_scale)
    per_text = _unit(text_features) @ _unit(image_features).T
    labels = _labels(logits)
    return (_cross_entropy(logits, labels) + _cross_entropy(per_text, labels)) / 2


def _one_side_unit(image_features, text_features, logit_scale, side):
    image = _unit(image_features) if side == "image" else image_features
    text = _unit(text_features) if side == "text" else text_features
    logits = logit_scale.exp() * image @ text.T
    labels = _labels(logits)
    return (_cross_entropy(logits, labels) + _cross_entropy(logits.T, labels)) / 2


def _text_not_unit(image_features, text_features, logit_scale):
    return _one_side_unit(image_features, text_features, logit_scale, "image")


def _image_not_unit(image_features, text_features, logit_scale):
    return _one_side_unit(image_features, text_features, logit_scale, "text")


def _log_of_softmax(image_features, text_features, logit_scale):
    logits = _logits(image_features, text_features, logit_scale)
    per_image = -logits.softmax(dim=1).diagonal().log().mean()
    per_text = -logits.softmax(dim=0).diagonal().log().mean()
    return (per_image + per_text) / 2


def _one_direction_halved(image_features, text_features, logit_scale):
    """a + b / 2 without brackets: only the text → image cross-entropy is halved."""
    logits = _logits(image_features, text_features, logit_scale)
    labels = _labels(logits)
    return _cross_entropy(logits, labels) + _cross_entropy(logits.T, labels) / 2


def _other_direction_halved(image_features, text_features, logit_scale):
    """a / 2 + b without brackets: only the image → text cross-entropy is halved."""
    logits = _logits(image_features, text_features, logit_scale)
    labels = _labels(logits)
    return _cross_entropy(logits, labels) / 2 + _cross_entropy(logits.T, labels)


def _sigmoid_pairs(image_features, text_features, logit_scale):
    """Each of the B² pairs scored alone: a binary cross-entropy against the identity matrix."""
    logits = _logits(image_features, text_features, logit_scale)
    target = torch.eye(logits.shape[0], dtype=logits.dtype, device=logits.device)
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, target)


def _clip_loss_cases(thorough: bool) -> list[Case]:
    def case(B, d, t, spread=3.0, label=""):
        def make(g):
            scales = torch.rand(B, 1, generator=g, dtype=torch.float64) * spread + 0.2
            image = torch.randn(B, d, generator=g, dtype=torch.float64) * scales
            text = torch.randn(B, d, generator=g, dtype=torch.float64) * scales.flip(0)
            return {
                "image_features": image,
                "text_features": text,
                "logit_scale": torch.tensor(float(t), dtype=torch.float64),
            }

        text = f"B={B}, d={d}, logit_scale={t:.4g}"
        return Case(text + (f", {label}" if label else ""), make)

    t0 = math.log(1 / 0.07)  # CLIP's initial value, exp(t) ≈ 14.3
    # The first case tells every catalogued mistake apart: rows of different norms, B != d,
    # exp(t) neither 1 nor t.
    cases = [case(4, 6, t0), case(3, 5, 0.5)]
    # the stated scale, visible too: exp(logit_scale) as given, even above CLIP's training clamp
    cases.append(case(3, 5, math.log(200.0), label="exp(logit_scale) = 200"))
    if thorough:
        cases += [
            case(1, 4, 1.0, label="one pair"),
            case(2, 2, t0),
            case(8, 16, 1.0),
            case(16, 4, 0.3, label="B > d"),
            case(5, 1, 1.5, label="d = 1"),
            case(6, 32, math.log(100.0), label="exp(logit_scale) = 100, CLIP's clamp"),
            case(4, 8, -1.0, label="logit_scale < 0"),
            case(7, 12, 2.0, spread=1e3, label="norms from 0.2 to 1000"),
            case(32, 24, t0),
        ]
    return cases


clip_loss = Exercise(
    name="clip_loss",
    lesson="13",
    module="clip",
    reference=_clip.clip_loss,
    forbidden=_TransformersOnceImported(
        (
            "transformer_lab.clip.clip_loss",
            "transformer_lab.clip.clip_logits",
            "transformer_lab.clip_loss",
            "transformers.models.clip.modeling_clip.clip_loss",  # transformers < 5
            "transformers.models.clip.modeling_clip.image_text_contrastive_loss",
            "transformers.models.clip.modeling_clip.contrastive_loss",
        )
    ),
    mistakes=[
        Mistake(
            "image-to-text-only",
            "only the image → text cross-entropy is there (or it is taken twice): CLIP's loss is "
            "the mean of both directions, so add the text → image one, on the transposed logits.",
            _image_to_text_only,
        ),
        Mistake(
            "text-to-image-only",
            "only the text → image cross-entropy is there (or the transposed logits are used for "
            "both): CLIP's loss is the mean of the image → text cross-entropy (rows of "
            "logits_per_image) and the text → image one (its transpose).",
            _text_to_image_only,
        ),
        Mistake(
            "no-normalisation",
            "the features are not normalised: divide each row by its L2 norm so that the logits "
            "are exp(logit_scale) times cosine similarities.",
            _no_normalisation,
        ),
        Mistake(
            "normalised-over-batch",
            "the features are normalised over the batch axis (dim=0): each row (one image or one "
            "text) must have unit length, so normalise over dim=-1.",
            _normalise_batch_axis,
        ),
        Mistake(
            "whole-matrix-norm",
            "x / x.norm() divides by the norm of the whole matrix: each row (each image, each "
            "caption) is made unit length, x / x.norm(dim=-1, keepdim=True).",
            _whole_matrix_norm,
        ),
        Mistake(
            "divided-by-scale",
            "the cosine similarities are divided by exp(logit_scale): logit_scale is the log of "
            "the inverse temperature, so multiply by exp(logit_scale).",
            _divide_by_scale,
        ),
        Mistake(
            "scale-without-exp",
            "the similarities are multiplied by logit_scale itself: it is a log, multiply by "
            "exp(logit_scale).",
            _scale_without_exp,
        ),
        Mistake(
            "no-scale",
            "the similarities are not multiplied by exp(logit_scale) at all: without the learned "
            "temperature the logits stay in [-1, 1].",
            _no_scale,
        ),
        Mistake(
            "labels-not-diagonal",
            "the targets are not the diagonal: image i belongs with text i, so the labels are "
            "torch.arange(B) (not reversed).",
            _labels_reversed,
        ),
        Mistake(
            "labels-zero",
            "every row's target is 0: image i belongs with text i, so the labels are "
            "torch.arange(B).",
            _labels_zero,
        ),
        Mistake(
            "sum-of-directions",
            "the two cross-entropies are added, not averaged: divide their sum by 2.",
            _sum_of_directions,
        ),
        Mistake(
            "sum-over-batch",
            "the cross-entropies are summed over the batch: each is a mean over its B rows "
            "(F.cross_entropy's default reduction).",
            _sum_over_batch,
        ),
        Mistake(
            "scale-clamped",
            "exp(logit_scale) is clamped (at 100, as CLIP's training code does to the parameter): "
            "the loss takes the scale as given, logits = exp(logit_scale) · cosine similarities.",
            _scale_clamped,
        ),
        Mistake(
            "second-unscaled",
            "the text-to-image logits lack the scale: they are the transpose of the same "
            "logits, exp(logit_scale) · cosines (logits.T), not t @ iᵀ again.",
            _second_unscaled,
        ),
        Mistake(
            "text-not-unit",
            "the text features are not normalised: both sides go to unit length "
            "(F.normalize(..., dim=-1)) before the similarities.",
            _text_not_unit,
        ),
        Mistake(
            "image-not-unit",
            "the image features are not normalised: both sides go to unit length "
            "(F.normalize(..., dim=-1)) before the similarities.",
            _image_not_unit,
        ),
        Mistake(
            "log-of-softmax",
            "log(softmax(...)) underflows to log 0 = -inf once the scaled logits are large: use "
            "log_softmax (or the cross-entropy, which takes it).",
            _log_of_softmax,
        ),
        Mistake(
            "one-direction-halved",
            "only one of the two cross-entropies is halved (a + b / 2 without brackets): the loss "
            "is their mean, (CE_image + CE_text) / 2.",
            _one_direction_halved,
        ),
        Mistake(
            "other-direction-halved",
            "only one of the two cross-entropies is halved (a / 2 + b without brackets): the loss "
            "is their mean, (CE_image + CE_text) / 2.",
            _other_direction_halved,
        ),
        Mistake(
            "sigmoid-loss",
            "each image-caption pair is scored on its own, a binary cross-entropy against the "
            "identity matrix (SigLIP's sigmoid loss): CLIP's is a softmax cross-entropy over each "
            "row (image → text) and each column (text → image), with labels torch.arange(B).",
            _sigmoid_pairs,
        ),
    ],
    driver=FunctionDriver(_clip_loss_cases, outputs=("loss",)),
    doc="clip_loss(image_features, text_features, logit_scale) -> loss",
)


# ==============================================================================================
# zero_shot_classify(image_features (B, d), class_features (K, P, d), logit_scale) -> (B, K)
#   c_k = unit(mean_p unit(class_features[k, p]));  probs = softmax(exp(t) · unit(I) c_kᵀ, -1)


def _zs(image, classes, logit_scale, dim=-1):
    return (logit_scale.exp() * image @ classes.T).softmax(dim=dim)


def _zs_no_renormalisation(image_features, class_features, logit_scale):
    classes = _unit(class_features).mean(dim=1)
    return _zs(_unit(image_features), classes, logit_scale)


def _zs_mean_of_raw_prompts(image_features, class_features, logit_scale):
    classes = _unit(class_features.mean(dim=1))
    return _zs(_unit(image_features), classes, logit_scale)


def _zs_probabilities_averaged(image_features, class_features, logit_scale):
    per_prompt = [
        _zs(_unit(image_features), _unit(class_features[:, p]), logit_scale)
        for p in range(class_features.shape[1])
    ]
    return torch.stack(per_prompt).mean(dim=0)


def _zs_image_not_normalised(image_features, class_features, logit_scale):
    classes = _unit(_unit(class_features).mean(dim=1))
    return _zs(image_features, classes, logit_scale)


def _zs_softmax_over_images(image_features, class_features, logit_scale):
    classes = _unit(_unit(class_features).mean(dim=1))
    return _zs(_unit(image_features), classes, logit_scale, dim=0)


def _zs_no_scale(image_features, class_features, logit_scale):
    classes = _unit(_unit(class_features).mean(dim=1))
    return (_unit(image_features) @ classes.T).softmax(dim=-1)


def _zs_scale_without_exp(image_features, class_features, logit_scale):
    classes = _unit(_unit(class_features).mean(dim=1))
    return (logit_scale * _unit(image_features) @ classes.T).softmax(dim=-1)


def _zs_no_softmax(image_features, class_features, logit_scale):
    classes = _unit(_unit(class_features).mean(dim=1))
    return logit_scale.exp() * _unit(image_features) @ classes.T


def _zs_first_prompt_only(image_features, class_features, logit_scale):
    return _zs(_unit(image_features), _unit(class_features[:, 0]), logit_scale)


def _zs_class_norm_axis(image_features, class_features, logit_scale):
    """The averaged class vectors normalised over dim 0, across the classes."""
    classes = _unit(class_features).mean(dim=1)
    return _zs(_unit(image_features), classes / classes.norm(dim=0, keepdim=True), logit_scale)


def _zs_log_probs(image_features, class_features, logit_scale):
    classes = _unit(_unit(class_features).mean(dim=1))
    return (logit_scale.exp() * _unit(image_features) @ classes.T).log_softmax(dim=-1)


def _zs_read_as_pkd(image_features, class_features, logit_scale):
    """The (K, P, d) tensor reshaped as (P, K, d), then averaged over its first axis."""
    K, P, d = class_features.shape
    classes = _unit(_unit(class_features.reshape(P, K, d)).mean(dim=0))
    return _zs(_unit(image_features), classes, logit_scale)


def _zs_prompt_norm_axis(image_features, class_features, logit_scale):
    """Each prompt vector normalised over dim 1, across the class's prompts."""
    prompts = class_features / class_features.norm(dim=1, keepdim=True)
    return _zs(_unit(image_features), _unit(prompts.mean(dim=1)), logit_scale)


def _zero_shot_cases(thorough: bool) -> list[Case]:
    def case(B, K, P, d, t, spread=3.0, label=""):
        def make(g):
            image_scale = torch.rand(B, 1, generator=g, dtype=torch.float64) * spread + 0.2
            prompt_scale = torch.rand(K, P, 1, generator=g, dtype=torch.float64) * spread + 0.2
            base = torch.randn(
                K, 1, d, generator=g, dtype=torch.float64
            )  # prompts of a class agree
            prompts = base + 0.8 * torch.randn(K, P, d, generator=g, dtype=torch.float64)
            return {
                "image_features": torch.randn(B, d, generator=g, dtype=torch.float64) * image_scale,
                "class_features": prompts * prompt_scale,
                "logit_scale": torch.tensor(float(t), dtype=torch.float64),
            }

        text = f"B={B} images, K={K} classes x P={P} prompts, d={d}, logit_scale={t:.4g}"
        return Case(text + (f", {label}" if label else ""), make)

    t0 = math.log(1 / 0.07)
    # The first case tells every catalogued mistake apart: prompts of different norms, P > 1,
    # B != K, exp(t) neither 1 nor t.
    cases = [case(5, 3, 4, 6, t0), case(2, 4, 1, 5, 0.7, label="one prompt per class")]
    if thorough:
        cases += [
            case(1, 2, 3, 4, 1.0, label="one image"),
            case(6, 1, 5, 8, t0, label="one class"),
            case(16, 10, 5, 32, t0),
            case(3, 4, 3, 1, 1.5),  # d = 1 (an odd P: a class mean of ±1 is never 0)
            case(4, 3, 6, 12, math.log(100.0), label="exp(logit_scale) = 100"),
            case(8, 5, 3, 16, -0.5, label="logit_scale < 0"),
            case(4, 3, 4, 8, 2.0, spread=1e3, label="norms from 0.2 to 1000"),
        ]
    return cases


zero_shot_classify = Exercise(
    name="zero_shot_classify",
    lesson="13",
    module="clip",
    reference=_clip.zero_shot_classify,
    forbidden=(
        "transformer_lab.clip.zero_shot_classify",
        "transformer_lab.zero_shot_classify",
    ),
    mistakes=[
        Mistake(
            "first-prompt-only",
            "only the first prompt of each class is used: average the class's P prompt vectors "
            "(each normalised) into one.",
            _zs_first_prompt_only,
        ),
        Mistake(
            "mean-of-raw-prompts",
            "the prompt vectors are averaged before they are normalised: a prompt with a large "
            "norm then outweighs the others; normalise each prompt, then average.",
            _zs_mean_of_raw_prompts,
        ),
        Mistake(
            "no-renormalisation",
            "the averaged class vector is not normalised again: a mean of unit vectors is shorter "
            "than 1, so the logits are no longer cosine similarities times exp(logit_scale).",
            _zs_no_renormalisation,
        ),
        Mistake(
            "probabilities-averaged",
            "the probabilities of each prompt are averaged: CLIP averages the prompt vectors "
            "into one vector per class, then takes one softmax.",
            _zs_probabilities_averaged,
        ),
        Mistake(
            "image-not-normalised",
            "the image features are not normalised: divide each image's row by its L2 norm.",
            _zs_image_not_normalised,
        ),
        Mistake(
            "softmax-over-images",
            "the softmax runs over the images (dim=0): each image's probabilities over the K "
            "classes must sum to 1 (dim=-1).",
            _zs_softmax_over_images,
        ),
        Mistake(
            "no-scale",
            "the cosine similarities are not multiplied by exp(logit_scale): the probabilities "
            "come out nearly uniform.",
            _zs_no_scale,
        ),
        Mistake(
            "scale-without-exp",
            "the similarities are multiplied by logit_scale itself: it is a log, multiply by "
            "exp(logit_scale).",
            _zs_scale_without_exp,
        ),
        Mistake(
            "no-softmax",
            "those are the logits, exp(t) · cos: the probabilities are their softmax over the "
            "classes, softmax(logits, dim=-1).",
            _zs_no_softmax,
        ),
        Mistake(
            "class-norm-axis",
            "each class vector is normalised over dim 0, across the classes: normalise each "
            "averaged class vector over its features (dim=-1).",
            _zs_class_norm_axis,
        ),
        Mistake(
            "log-probs",
            "those are log-probabilities (log_softmax): return the probabilities, "
            "softmax(logits, dim=-1).",
            _zs_log_probs,
        ),
        Mistake(
            "read-as-pkd",
            "class_features is (K, P, d), one row of P prompts per class: average over dim 1 "
            "(the prompts), do not reshape it as (P, K, d).",
            _zs_read_as_pkd,
        ),
        Mistake(
            "prompt-norm-axis",
            "each prompt vector is normalised over dim 1, across the class's P prompts: "
            "normalise each prompt over its features (dim=-1), then average over the prompts.",
            _zs_prompt_norm_axis,
        ),
    ],
    driver=FunctionDriver(_zero_shot_cases, outputs=("probs",)),
    doc="zero_shot_classify(image_features, class_features, logit_scale) -> probs (B, K)",
)
