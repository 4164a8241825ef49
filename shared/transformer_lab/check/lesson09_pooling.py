"""Checks for lesson 09, exercise 3 — `mean_pool`: the mean of the hidden vectors over the real
tokens, unit-normalised on request; a function of tensors, so the engine's function driver
compares outputs and gradients with the reference's.

Lesson 09's checks span three modules, imported in course order: ``lesson09`` (bert_mask_tokens),
``lesson09_wordpiece`` (wordpiece_tokenize) and this one.
"""

from __future__ import annotations

import torch

from .. import bert as _bert
from .drivers import FunctionDriver
from .exercise import Case, Exercise, Mistake

__all__ = ["mean_pool"]


# ==============================================================================================
# Exercise 3 — mean_pool(hidden, attention_mask, normalize=True) -> (B, d)


def _masked_mean(hidden, attention_mask, normalize=True):
    m = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return _unit((hidden * m).sum(dim=1) / m.sum(dim=1), normalize)


def _unit(x, normalize):
    return torch.nn.functional.normalize(x, p=2, dim=-1) if normalize else x


def _pool_over_padding(hidden, attention_mask, normalize=True):
    return _unit(hidden.mean(dim=1), normalize)


def _pool_divide_by_L(hidden, attention_mask, normalize=True):
    m = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return _unit((hidden * m).sum(dim=1) / hidden.shape[1], normalize)


def _pool_never_normalized(hidden, attention_mask, normalize=True):
    return _masked_mean(hidden, attention_mask, normalize=False)


def _pool_always_normalized(hidden, attention_mask, normalize=True):
    return _masked_mean(hidden, attention_mask, normalize=True)


def _pool_tokens_normalized(hidden, attention_mask, normalize=True):
    """Scales every token vector to unit length before averaging."""
    unit = torch.nn.functional.normalize(hidden, p=2, dim=-1)
    return _masked_mean(unit, attention_mask, normalize)


def _pool_tokens_not_mean(hidden, attention_mask, normalize=True):
    """Scales every token vector to unit length, and not the mean."""
    unit = _unit(hidden, normalize)
    return _masked_mean(unit, attention_mask, normalize=False)


def _pool_cls(hidden, attention_mask, normalize=True):
    return _unit(hidden[:, 0], normalize)


def _pool_bitwise_not(hidden, attention_mask, normalize=True):
    """Zeroes the positions where ~attention_mask is nonzero: on 0/1 integers ~ is a bitwise not
    (~1 = -2, ~0 = -1), so every position is taken for padding."""
    mask = attention_mask if attention_mask.dtype == torch.bool else attention_mask.long()
    padding = (~mask != 0).unsqueeze(-1)
    count = attention_mask.to(hidden.dtype).sum(dim=1).unsqueeze(-1)
    return _unit(hidden.masked_fill(padding, 0.0).sum(dim=1) / count, normalize)


def _pool_cases(thorough: bool) -> list[Case]:
    def case(B, L, d, lengths=None, normalize=True, kind="long", scale=1.0, scattered=False):
        def make(g):
            hidden = torch.randn(B, L, d, generator=g, dtype=torch.float64) * scale
            hidden = hidden + torch.randn(1, 1, d, generator=g, dtype=torch.float64)  # shared part
            n_real = (
                torch.tensor(lengths)
                if lengths is not None
                else torch.randint(1, L + 1, (B,), generator=g)
            )
            if scattered:  # any pattern, at least one real token per row
                mask = torch.rand(B, L, generator=g) < 0.5
                mask[torch.arange(B), torch.randint(L, (B,), generator=g)] = True
            else:  # right padding
                mask = torch.arange(L)[None, :] < n_real[:, None]
            mask = mask.long() if kind == "long" else mask if kind == "bool" else mask.double()
            inputs = {"hidden": hidden, "attention_mask": mask}
            if not normalize:
                inputs["normalize"] = False
            return inputs

        what = "right padding" if not scattered else "scattered padding"
        label = (
            f"hidden {(B, L, d)}, attention_mask {(B, L)} ({kind}, {what}), normalize={normalize}"
        )
        return Case(label, make)

    # attention_mask may be long, bool or float (the task says so): each has a visible case.
    cases = [
        case(3, 6, 8, lengths=[6, 3, 1]),
        case(3, 6, 8, lengths=[2, 6, 4], normalize=False),
        case(4, 9, 16, kind="bool"),
        case(3, 5, 8, lengths=[5, 1, 3], kind="float"),
    ]
    if thorough:
        cases += [
            case(1, 1, 4),
            case(1, 1, 4, normalize=False),
            case(5, 7, 12, scattered=True),
            case(5, 7, 12, scattered=True, normalize=False),
            case(2, 5, 384, lengths=[5, 2], scale=30.0),
            case(6, 12, 10, normalize=False, kind="float"),
        ]
    return cases


mean_pool = Exercise(
    name="mean_pool",
    lesson="09",
    module="bert",
    reference=_bert.mean_pool,
    forbidden=(
        "transformer_lab.bert.mean_pool",
        "transformer_lab.bert.sentence_embedding",
        "transformer_lab.mean_pool",
        "transformer_lab.sentence_embedding",
    ),
    mistakes=[
        Mistake(
            "padding-averaged",
            "padding is averaged in: sum the hidden vectors of the real tokens only "
            "(multiply by the mask) and divide by the number of real tokens.",
            _pool_over_padding,
        ),
        Mistake(
            "divide-by-L",
            "you divide by L, the padded length: divide by each sentence's number of real "
            "tokens, attention_mask.sum(dim=1).",
            _pool_divide_by_L,
        ),
        Mistake(
            "never-normalized",
            "with normalize=True each embedding must have unit length: divide it by its L2 "
            "norm (e.g. F.normalize(x, p=2, dim=-1)).",
            _pool_never_normalized,
        ),
        Mistake(
            "always-normalized",
            "with normalize=False return the plain mean: scale to unit length only when "
            "normalize is True.",
            _pool_always_normalized,
        ),
        Mistake(
            "tokens-normalized",
            "you normalise each token before averaging: average the raw hidden vectors, then "
            "normalise the mean.",
            _pool_tokens_normalized,
        ),
        Mistake(
            "cls-vector",
            "that is the [CLS] vector (position 0): the embedding is the mean over all the "
            "real tokens.",
            _pool_cls,
        ),
        Mistake(
            "tokens-not-mean",
            "you normalise each token vector, not the mean: a mean of unit vectors is shorter "
            "than 1; average the raw hidden vectors, then normalise the mean "
            "(F.normalize(mean, p=2, dim=-1)).",
            _pool_tokens_not_mean,
        ),
        Mistake(
            "bitwise-not-mask",
            "~ on a mask of 0/1 numbers is a bitwise not (~1 = -2, ~0 = -1, both nonzero), so "
            "every position was zeroed as padding: find the padding with attention_mask == 0 "
            "(or make the mask bool first, ~attention_mask.bool()).",
            _pool_bitwise_not,
        ),
    ],
    # a float attention_mask is data: (mask != 0).to(dtype) is right and has no gradient
    driver=FunctionDriver(_pool_cases, outputs=("embedding",), constant=("attention_mask",)),
    doc="mean_pool(hidden (B, L, d), attention_mask (B, L), normalize=True) -> (B, d)",
)
