"""Checks for lesson 07, exercise 3 — `label_smoothed_loss`, the paper's label smoothing.

The convention taught (and PyTorch's): q = (1 - eps) * onehot(y) + eps / V, the mass eps spread
over all V classes, the true one included; the mean over the positions whose target is not
`ignore_index`.
"""

from __future__ import annotations

import torch

from .. import seq2seq as _seq2seq
from .drivers import FunctionDriver
from .exercise import Case, Exercise, Mistake

__all__ = ["label_smoothed_loss"]

# ==============================================================================================
# Mutants: each a full wrong implementation (none calls the reference, which is forbidden).


def _per_position(logits, targets, ignore_index, true_weight, other_weight):
    """-sum_k q_k log p_k at every position for q = true_weight on y, other_weight elsewhere;
    and the mask of the positions not ignored."""
    keep = targets != ignore_index
    log_p = logits.log_softmax(-1)
    nll = -log_p.gather(-1, targets.masked_fill(~keep, 0)[..., None]).squeeze(-1)
    total = -log_p.sum(-1)
    return true_weight * nll + other_weight * (total - nll), keep


def _smooth_v_minus_1(logits, targets, eps=0.1, ignore_index=0):
    """1 - eps on the true class, eps / (V - 1) on each other one (fairseq's convention)."""
    V = logits.shape[-1]
    loss, keep = _per_position(logits, targets, ignore_index, 1 - eps, eps / (V - 1))
    return loss[keep].mean()


def _pad_column_excluded(logits, targets, eps=0.1, ignore_index=0):
    """The Annotated Transformer's: eps / (V - 2) on every class but the true one and PAD."""
    V = logits.shape[-1]
    keep = targets != ignore_index
    log_p = logits.log_softmax(-1)
    q = torch.full_like(log_p, eps / (V - 2))
    q[..., ignore_index] = 0.0
    q.scatter_(-1, targets.masked_fill(~keep, 0)[..., None], 1 - eps)
    return -(q * log_p).sum(-1)[keep].mean()


def _pad_not_ignored(logits, targets, eps=0.1, ignore_index=0):
    """PAD positions are scored like any other (their target is the PAD class)."""
    V = logits.shape[-1]
    log_p = logits.log_softmax(-1)
    nll = -log_p.gather(-1, targets[..., None]).squeeze(-1)
    return ((1 - eps) * nll - eps * log_p.sum(-1) / V).mean()


def _mean_over_pads(logits, targets, eps=0.1, ignore_index=0):
    """PAD positions contribute 0, but still count in the denominator."""
    V = logits.shape[-1]
    loss, keep = _per_position(logits, targets, ignore_index, 1 - eps + eps / V, eps / V)
    return torch.where(keep, loss, torch.zeros_like(loss)).sum() / targets.numel()


def _sum_not_mean(logits, targets, eps=0.1, ignore_index=0):
    V = logits.shape[-1]
    loss, keep = _per_position(logits, targets, ignore_index, 1 - eps + eps / V, eps / V)
    return loss[keep].sum()


def _true_class_only(logits, targets, eps=0.1, ignore_index=0):
    """(1 - eps) * (-log p_y): the eps taken from the true class is never spread."""
    loss, keep = _per_position(logits, targets, ignore_index, 1 - eps, 0.0)
    return loss[keep].mean()


def _true_class_not_reduced(logits, targets, eps=0.1, ignore_index=0):
    """q = onehot + eps / V: the uniform part added, the true class not lowered (sum 1 + eps)."""
    V = logits.shape[-1]
    loss, keep = _per_position(logits, targets, ignore_index, 1 + eps / V, eps / V)
    return loss[keep].mean()


def _uniform_summed(logits, targets, eps=0.1, ignore_index=0):
    """eps * sum_k(-log p_k) instead of eps * mean_k(-log p_k): eps on every class."""
    loss, keep = _per_position(logits, targets, ignore_index, 1 - eps + eps, eps)
    return loss[keep].mean()


def _log_of_softmax(logits, targets, eps=0.1, ignore_index=0):
    """log(softmax(x)): a probability that underflows to 0 gives -inf, and the loss inf."""
    V = logits.shape[-1]
    keep = targets != ignore_index
    log_p = torch.log(torch.softmax(logits, -1))
    nll = -log_p.gather(-1, targets.masked_fill(~keep, 0)[..., None]).squeeze(-1)
    loss = (1 - eps) * nll - eps * log_p.sum(-1) / V
    return loss[keep].mean()


def _clamped_targets(logits, targets, eps=0.1, ignore_index=0):
    """targets.clamp(min=0) before the mask: an ignore_index of -100 is scored as class 0."""
    V = logits.shape[-1]
    loss, keep = _per_position(
        logits, targets.clamp(min=0), ignore_index, 1 - eps + eps / V, eps / V
    )
    return loss[keep].mean()


def _true_class_without_share(logits, targets, eps=0.1, ignore_index=0):
    """1 - eps on the true class, eps / V on each other one: the true class misses its eps / V."""
    V = logits.shape[-1]
    loss, keep = _per_position(logits, targets, ignore_index, 1 - eps, eps / V)
    return loss[keep].mean()


def _mean_per_sequence(logits, targets, eps=0.1, ignore_index=0):
    """The mean over each sequence's positions, then the mean over the sequences."""
    V = logits.shape[-1]
    loss, keep = _per_position(logits, targets, ignore_index, 1 - eps + eps / V, eps / V)
    loss = torch.where(keep, loss, torch.zeros_like(loss))
    return (loss.sum(-1) / keep.sum(-1).clamp(min=1)).mean()


def _pad_class_left_out(logits, targets, eps=0.1, ignore_index=0):
    """The uniform part over the V - 1 classes other than ignore_index (when it is a class)."""
    V = logits.shape[-1]
    if not 0 <= ignore_index < V:
        loss, keep = _per_position(logits, targets, ignore_index, 1 - eps + eps / V, eps / V)
        return loss[keep].mean()
    loss, keep = _per_position(logits, targets, ignore_index, 1 - eps, 0.0)
    others = torch.ones(V, dtype=torch.bool, device=logits.device)
    others[ignore_index] = False
    loss = loss - eps * logits.log_softmax(-1)[..., others].sum(-1) / (V - 1)
    return loss[keep].mean()


def _log_of_mean_probability(logits, targets, eps=0.1, ignore_index=0):
    """eps * (-log mean_k p_k): the log of the mean probability, always log V."""
    V = logits.shape[-1]
    loss, keep = _per_position(logits, targets, ignore_index, 1 - eps, 0.0)
    return (loss + eps * torch.log(torch.tensor(float(V), dtype=loss.dtype)))[keep].mean()


def _hard_coded_pad(logits, targets, eps=0.1, ignore_index=0):
    """Padding found as targets > 0 (PAD = 0 hard-coded), whatever ignore_index is."""
    V = logits.shape[-1]
    loss, _ = _per_position(logits, targets.clamp(min=0), -1, 1 - eps + eps / V, eps / V)
    return loss[targets > 0].mean()


def _smoothed_prediction(logits, targets, eps=0.1, ignore_index=0):
    """-log((1 - eps) p_y + eps / V): the prediction smoothed, not the target."""
    V = logits.shape[-1]
    keep = targets != ignore_index
    p_y = logits.softmax(-1).gather(-1, targets.masked_fill(~keep, 0)[..., None]).squeeze(-1)
    return -torch.log((1 - eps) * p_y + eps / V)[keep].mean()


def _eps_fixed(logits, targets, eps=0.1, ignore_index=0):
    """eps hard-coded to the paper's 0.1, the argument ignored."""
    V = logits.shape[-1]
    loss, keep = _per_position(logits, targets, ignore_index, 0.9 + 0.1 / V, 0.1 / V)
    return loss[keep].mean()


def _pad_id_zero(logits, targets, eps=0.1, ignore_index=0):
    """The positions dropped are those whose target is 0, whatever ignore_index is (it is scored
    as class 0)."""
    V = logits.shape[-1]
    loss, _ = _per_position(logits, targets.clamp(min=0), -1, 1 - eps + eps / V, eps / V)
    return loss[targets != 0].mean()


def _above_ignore_index(logits, targets, eps=0.1, ignore_index=0):
    """keep = targets > ignore_index: the classes below ignore_index are dropped too."""
    V = logits.shape[-1]
    loss, _ = _per_position(logits, targets.clamp(min=0), -1, 1 - eps + eps / V, eps / V)
    return loss[targets > ignore_index].mean()


def _uniform_over_everything(logits, targets, eps=0.1, ignore_index=0):
    """The uniform part is the mean of -log p over every position and class, padding included."""
    loss, keep = _per_position(logits, targets, ignore_index, 1.0, 0.0)
    return (1 - eps) * loss[keep].mean() - eps * logits.log_softmax(-1).mean()


def _softmax_axis_1(logits, targets, eps=0.1, ignore_index=0):
    """log_softmax over axis 1 (the positions of (B, L, V) logits), not over the classes."""
    V = logits.shape[-1]
    keep = targets != ignore_index
    log_p = logits.log_softmax(1)
    nll = -log_p.gather(-1, targets.masked_fill(~keep, 0)[..., None]).squeeze(-1)
    loss = (1 - eps) * nll - eps * log_p.sum(-1) / V
    return loss[keep].mean()


# ==============================================================================================
# Cases.


def _smoothing_cases(thorough: bool) -> list[Case]:
    def case(shape, eps, ignore_index, pad_fraction=0.3, boost=0.0):
        V = shape[-1]

        def make(g):
            logits = torch.randn(shape, generator=g, dtype=torch.float64)
            if boost:  # one class per position far above the rest (probabilities ~e^-boost)
                top = torch.randint(0, V, shape[:-1], generator=g)
                logits = logits + boost * torch.nn.functional.one_hot(top, V)
            low = 1 if ignore_index == 0 else 0
            targets = torch.randint(low, V, shape[:-1], generator=g)
            if ignore_index in range(V):  # the PAD class is never a real target
                targets = torch.where(targets == ignore_index, (ignore_index + 1) % V, targets)
            pad = torch.rand(shape[:-1], generator=g) < pad_fraction
            pad.view(-1)[0] = False  # at least one position is real
            if pad_fraction > 0:
                pad.view(-1)[-1] = True  # and at least one is padding
            targets = targets.masked_fill(pad, ignore_index)
            return {"logits": logits, "targets": targets, "eps": eps, "ignore_index": ignore_index}

        text = f"logits {shape}, eps={eps}, ignore_index={ignore_index}"
        if boost:
            text += f", one logit per position {boost:g} above the others"
        return Case(text, make)

    cases = [
        case((2, 5, 7), 0.1, 0),
        # one logit 1000 above the rest: softmax underflows to 0 elsewhere, log_softmax does not
        case((6, 4), 0.2, 0, boost=1000.0),
        # ignore_index may be any integer (the text): one that is no class, and PAD not at 0
        case((3, 4, 9), 0.1, -100),  # PyTorch's default ignore_index, not a class
        case((2, 6, 5), 0.1, 4),  # PAD is the last class
    ]
    if thorough:
        cases += [
            case((4, 3), 0.0, 0),  # plain cross-entropy
            case((5, 2), 0.5, -1, pad_fraction=0.0),  # two classes, nothing ignored
            case((1, 1, 3), 0.3, 1, pad_fraction=0.0),
            case((8, 11), 1.0, 0),  # all of the mass spread: uniform targets
        ]
    return cases


label_smoothed_loss = Exercise(
    name="label_smoothed_loss",
    lesson="07",
    module="seq2seq",
    reference=_seq2seq.label_smoothed_loss,
    forbidden=(
        "transformer_lab.seq2seq.label_smoothed_loss",
        "transformer_lab.seq2seq.teacher_forcing_loss",
        "torch.nn.functional.cross_entropy",
        "torch.nn.CrossEntropyLoss",
    ),
    mistakes=[
        Mistake(
            "smooth-v-minus-1",
            "eps is spread over the V - 1 wrong classes (1 - eps on the true one, eps/(V - 1) on "
            "each other): this exercise spreads it over all V classes, the true one included, "
            "q = (1 - eps)·onehot(y) + eps/V.",
            _smooth_v_minus_1,
        ),
        Mistake(
            "pad-column-excluded",
            "the PAD class gets no smoothing mass (eps/(V - 2) on the others, as in the Annotated "
            "Transformer): here eps/V goes to every one of the V classes, PAD included.",
            _pad_column_excluded,
        ),
        Mistake(
            "pad-not-ignored",
            "positions whose target is ignore_index are scored too: leave them out of the sum "
            "and of the count.",
            _pad_not_ignored,
        ),
        Mistake(
            "mean-over-pads",
            "the mean divides by every position, padding included: divide by the number of "
            "positions whose target is not ignore_index.",
            _mean_over_pads,
        ),
        Mistake(
            "sum-not-mean",
            "the loss is summed over the positions: return the mean over the positions not "
            "ignored.",
            _sum_not_mean,
        ),
        Mistake(
            "true-class-only",
            "only the true class is scored, (1 - eps)·(-log p_y): add eps times the mean of "
            "-log p_k over all V classes.",
            _true_class_only,
        ),
        Mistake(
            "true-class-not-reduced",
            "the true class keeps weight 1 while eps/V is added to every class (q sums to 1 + eps): "
            "it gets 1 - eps + eps/V.",
            _true_class_not_reduced,
        ),
        Mistake(
            "uniform-summed",
            "the uniform part is eps times the sum of -log p_k over the classes: it is eps times "
            "their mean (eps/V on each class).",
            _uniform_summed,
        ),
        Mistake(
            "log-of-softmax",
            "log(softmax(logits)) underflows: a probability too small for the dtype becomes 0 "
            "and its log -inf. Use logits.log_softmax(-1), which computes it stably.",
            _log_of_softmax,
        ),
        Mistake(
            "clamped-targets",
            "positions whose target is ignore_index are scored as class 0 (the targets were "
            "clamped before the mask was taken): take keep = targets != ignore_index from the "
            "targets as given.",
            _clamped_targets,
        ),
        Mistake(
            "true-class-without-share",
            "the true class gets 1 - eps and every other class eps/V (q sums to less than 1): "
            "the true class gets its eps/V too, 1 - eps + eps/V.",
            _true_class_without_share,
        ),
        Mistake(
            "mean-per-sequence",
            "the loss is averaged per sequence, then over the sequences: take one mean over all "
            "the positions not ignored, so that each of them weighs the same.",
            _mean_per_sequence,
        ),
        Mistake(
            "pad-class-left-out",
            "the ignore_index class is left out of the uniform part (eps/(V - 1) on the other "
            "classes): eps/V goes to every one of the V classes, the PAD class included.",
            _pad_class_left_out,
        ),
        Mistake(
            "log-of-mean-probability",
            "the uniform part is -log of the mean probability, which is always log V: it is the "
            "mean of -log p_k over the classes, -log_softmax(logits).mean(-1).",
            _log_of_mean_probability,
        ),
        Mistake(
            "hard-coded-pad",
            "padding is found with a hard-coded PAD id (targets > 0 or targets != 0): keep the "
            "positions where targets != ignore_index, whatever integer it is.",
            _hard_coded_pad,
        ),
        Mistake(
            "smoothed-prediction",
            "the prediction is smoothed, -log((1 - eps)·p_y + eps/V): smooth the target instead, "
            "(1 - eps)·(-log p_y) + eps times the mean of -log p_k over the classes.",
            _smoothed_prediction,
        ),
        Mistake(
            "eps-fixed",
            "eps is fixed at the paper's 0.1: use the eps argument (0.1 is only its default).",
            _eps_fixed,
        ),
        Mistake(
            "pad-id-zero",
            "the positions left out are those whose target is 0, whatever ignore_index is: "
            "keep = targets != ignore_index (it may be -100, or PAD at another id), and a real "
            "class 0 is scored like any other.",
            _pad_id_zero,
        ),
        Mistake(
            "above-ignore-index",
            "only targets greater than ignore_index are kept, so every class below it is "
            "dropped too (ignore_index = 4 leaves out classes 0 to 3): keep targets != "
            "ignore_index.",
            _above_ignore_index,
        ),
        Mistake(
            "uniform-over-everything",
            "the uniform part is averaged over every position and class, padding included: "
            "take eps times the mean of -log p_k over the classes at each position, and average "
            "the whole per-position loss over the positions not ignored.",
            _uniform_over_everything,
        ),
        Mistake(
            "softmax-axis-1",
            "log_softmax runs over axis 1, which for (B, L, V) logits is the positions: take it "
            "over the classes, the last axis (log_softmax(dim=-1)).",
            _softmax_axis_1,
        ),
    ],
    driver=FunctionDriver(_smoothing_cases, outputs=("loss",)),
    doc="label_smoothed_loss(logits (..., V), targets (...), eps=0.1, ignore_index=0) -> "
    "scalar mean over the positions not ignored",
)
