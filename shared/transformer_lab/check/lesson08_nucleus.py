"""Lesson 08, exercise 3 (`next_token_probs`), its top-p half: nucleus sampling's mutants and cases.

`next_token_probs` is declared in ``lesson08``; this module holds what its top-p rule adds, which
would take that module past ~600 lines: the distribution written out again for the mutants (the
reference is switched off while they run: `probs_with`), one mutant per way of getting top-p wrong
(`TOP_P_MISTAKES`), and the cases that tell them apart (`top_p_cases`).

The rule, Hugging Face's order and convention: divide by T, keep the top-k logits, then keep the
*nucleus*, the fewest most likely tokens whose probability sums to at least p (a token is kept
when the tokens more likely than it hold less than p, so the token that crosses p is kept), with
every token tied with the last one kept; softmax over what is left. Hugging Face's
``TopPLogitsWarper`` keeps exactly one of the tied tokens instead (whichever its sort puts first):
the two agree whenever the last token kept has no tie.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .exercise import Case, Mistake

__all__ = ["TOP_P_MISTAKES", "greedy", "keep_nucleus", "keep_top_k", "probs_with", "top_p_cases"]

_INF = float("-inf")


def greedy(logits):
    return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)


def keep_top_k(z, k):
    """The k largest of each row and every value tied with the k-th."""
    return z >= torch.topk(z, k, dim=-1).values[:, -1:]


def _threshold_keep(z, n_kept):
    """Keep every logit >= the n_kept-th largest of its row (ties with it kept)."""
    sorted_z = z.sort(dim=-1, descending=True).values
    return z >= sorted_z.gather(-1, n_kept.clamp(min=1) - 1)


def keep_nucleus(z, p):
    """The top-p nucleus of softmax(z), ties with its last token kept."""
    probs = torch.softmax(z.sort(dim=-1, descending=True).values, dim=-1)
    return _threshold_keep(z, ((probs.cumsum(-1) - probs) < p).sum(-1, keepdim=True))


def probs_with(
    logits,
    temperature,
    top_k,
    top_p,
    keep_k: Callable = keep_top_k,
    keep_p: Callable = keep_nucleus,
):
    """softmax(logits / T) over what `keep_k(z, k)`, then `keep_p(z, p)` keep (greedy at T = 0)."""
    if temperature == 0 or top_k == 1:
        return greedy(logits)
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(~keep_k(z, top_k), _INF)
    if top_p is not None and top_p < 1:
        z = z.masked_fill(~keep_p(z, top_p), _INF)
    return torch.softmax(z, dim=-1)


# -- the mutants: next_token_probs right in everything but its top-p rule ------------------------


def _p_drop_crossing(logits, temperature=1.0, top_k=None, top_p=None):
    def keep(z, p):  # keeps the tokens whose running total stays <= p: the crossing one is lost
        probs = torch.softmax(z.sort(dim=-1, descending=True).values, dim=-1)
        return _threshold_keep(z, (probs.cumsum(-1) <= p).sum(-1, keepdim=True))

    return probs_with(logits, temperature, top_k, top_p, keep_p=keep)


def _p_no_renormalise(logits, temperature=1.0, top_k=None, top_p=None):
    probs = probs_with(logits, temperature, top_k, None)
    if top_p is None or top_p >= 1 or temperature == 0 or top_k == 1:
        return probs
    return probs.masked_fill(~keep_nucleus(probs.log(), top_p), 0.0)  # not divided by the rest


def _p_ascending(logits, temperature=1.0, top_k=None, top_p=None):
    def keep(z, p):  # the nucleus of the *least* likely tokens
        probs = torch.softmax(z.sort(dim=-1).values, dim=-1)
        n_kept = ((probs.cumsum(-1) - probs) < p).sum(-1, keepdim=True)
        return z <= z.sort(dim=-1).values.gather(-1, n_kept - 1)

    return probs_with(logits, temperature, top_k, top_p, keep_p=keep)


def _p_before_temperature(logits, temperature=1.0, top_k=None, top_p=None):
    def keep(z, p):  # the nucleus of softmax(logits), at T = 1
        return keep_nucleus(z * temperature, p)

    return probs_with(logits, temperature, top_k, top_p, keep_p=keep)


def _p_ties_dropped(logits, temperature=1.0, top_k=None, top_p=None):
    def keep(z, p):  # exactly the sorted positions up to the crossing token
        probs, order = torch.softmax(z, dim=-1).sort(dim=-1, descending=True)
        in_sorted = (probs.cumsum(-1) - probs) < p
        return torch.zeros_like(in_sorted).scatter(-1, order, in_sorted)

    return probs_with(logits, temperature, top_k, top_p, keep_p=keep)


def _p_before_top_k(logits, temperature=1.0, top_k=None, top_p=None):
    if temperature == 0 or top_k == 1:
        return greedy(logits)
    z = logits / temperature
    if top_p is not None and top_p < 1:
        z = z.masked_fill(~keep_nucleus(z, top_p), _INF)  # the nucleus of the whole distribution
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(~keep_top_k(z, top_k), _INF)
    return torch.softmax(z, dim=-1)


def _p_unsorted(logits, temperature=1.0, top_k=None, top_p=None):
    def keep(z, p):  # the mask is worked out in sorted order but applied to the unsorted logits
        probs = torch.softmax(z.sort(dim=-1, descending=True).values, dim=-1)
        return (probs.cumsum(-1) - probs) < p

    return probs_with(logits, temperature, top_k, top_p, keep_p=keep)


def _p_cumsum_of_logits(logits, temperature=1.0, top_k=None, top_p=None):
    def keep(z, p):  # a running total of the logits, not of the probabilities
        sorted_z = z.sort(dim=-1, descending=True).values.nan_to_num(neginf=0.0)
        return _threshold_keep(z, ((sorted_z.cumsum(-1) - sorted_z) < p).sum(-1, keepdim=True))

    return probs_with(logits, temperature, top_k, top_p, keep_p=keep)


def _p_ignored(logits, temperature=1.0, top_k=None, top_p=None):
    return probs_with(logits, temperature, top_k, None)


def _greedy_tie_topk(logits, temperature=1.0, top_k=None, top_p=None):
    """T = 0's one-hot where torch.topk(logits, 1) puts it: on tied maxima, not always the first."""
    if temperature == 0:
        return F.one_hot(torch.topk(logits, 1, dim=-1).indices[:, 0], logits.shape[-1]).to(
            logits.dtype
        )
    return probs_with(logits, temperature, top_k, top_p)


def _greedy_tie_last(logits, temperature=1.0, top_k=None, top_p=None):
    """T = 0's one-hot at the last of tied maxima."""
    if temperature == 0:
        last = logits.shape[-1] - 1 - logits.flip(-1).argmax(-1)
        return F.one_hot(last, logits.shape[-1]).to(logits.dtype)
    return probs_with(logits, temperature, top_k, top_p)


_GREEDY_TIE = (
    "at T = 0 with tied maxima the one-hot went to another of them: the text asks for the "
    "first, what torch.argmax gives"
)

# The last two are T = 0's, kept here beside the top-p ones so that lesson08 stays short.
TOP_P_MISTAKES = [
    Mistake(
        "p-drops-crossing",
        "top-p dropped the token whose probability crosses p: keep a token when the tokens more "
        "likely than it hold less than p (cumsum - probs < p), so the kept mass reaches p.",
        _p_drop_crossing,
    ),
    Mistake(
        "p-no-renormalise",
        "after top-p the probabilities were zeroed but not renormalised: set the removed logits "
        "to -inf and take the softmax after the filter, so the kept ones sum to 1.",
        _p_no_renormalise,
    ),
    Mistake(
        "p-ascending",
        "top-p kept the least likely tokens: sort the probabilities in descending order "
        "(torch.sort(..., descending=True)) before the running sum.",
        _p_ascending,
    ),
    Mistake(
        "p-before-temperature",
        "top-p chose its tokens from softmax(logits) at T = 1: divide by the temperature first, "
        "then pick the nucleus of that distribution.",
        _p_before_temperature,
    ),
    Mistake(
        "p-before-top-k",
        "top-p ran before top-k, on the whole distribution: apply top-k first, then pick the "
        "nucleus of what is left (renormalised, its probabilities are larger).",
        _p_before_top_k,
    ),
    Mistake(
        "p-ties-dropped",
        "with tokens tied with the last one of the nucleus you kept exactly one: keep every "
        "token whose logit is >= that last one's (as top-k keeps ties).",
        _p_ties_dropped,
    ),
    Mistake(
        "p-unsorted",
        "the top-p mask was worked out in sorted order but applied to the unsorted logits: "
        "map it back (scatter with the sort's indices) or compare each logit with the nucleus's "
        "smallest one.",
        _p_unsorted,
    ),
    Mistake(
        "p-cumsum-logits",
        "the running sum is of the logits: top-p sums probabilities, softmax first, then cumsum.",
        _p_cumsum_of_logits,
    ),
    Mistake(
        "p-ignored",
        "top_p is ignored: keep only the nucleus, the fewest most likely tokens holding at "
        "least p of the probability.",
        _p_ignored,
    ),
    Mistake("greedy-tie-topk", _GREEDY_TIE + " (torch.topk may pick another).", _greedy_tie_topk),
    Mistake("greedy-tie-last", _GREEDY_TIE + " (not the last one).", _greedy_tie_last),
]


# -- the cases: every rule has a visible one ---------------------------------------------------

# Ties with the last token of the nucleus (p = 0.5 at T = 1): row 0 keeps 2.0 and its three 1.0s
# (the 2.0 holds 0.44, the first 1.0 crosses 0.5); row 1 keeps the three 0.5s (two hold 0.51).
_TIED_NUCLEUS = [
    [2.0, 1.0, 1.0, 0.0, -1.0, 1.0],
    [0.5, 0.5, -1.0, 0.5, 0.0, -2.0],
]


def top_p_cases(thorough: bool) -> list[Case]:
    """Each random case draws its logits from its own seed, chosen so that p lies at least 0.005
    from every running total of its rows (no float rounding can move a token in or out; the test
    file checks it). The first visible case names six of the mutants, the second two more
    (temperature, top-k), the third the ties."""

    def case(B, V, temperature, top_k, top_p, seed=None, scale=2.0):
        def make(g):
            if seed is None:
                logits = torch.tensor(_TIED_NUCLEUS, dtype=torch.float64)
            else:
                own = torch.Generator().manual_seed(seed)
                logits = scale * torch.randn(B, V, generator=own, dtype=torch.float64)
            return {"logits": logits, "temperature": temperature, "top_k": top_k, "top_p": top_p}

        if seed is None:
            what = f"logits {_TIED_NUCLEUS} (ties with the nucleus's last token)"
        else:
            what = f"logits {(B, V)}" + (f" of size ~{scale:g}" if scale != 2.0 else "")
        return Case(
            f"next_token_probs({what}, temperature={temperature}, top_k={top_k}, top_p={top_p})",
            make,
        )

    cases = [
        case(3, 10, 1.0, None, 0.6, seed=30),
        case(4, 12, 1.5, 5, 0.7, seed=7),
        case(2, 6, 1.0, None, 0.5),  # the ties
    ]
    if thorough:
        cases += [
            case(2, 20, 1.5, None, 0.9, seed=33),
            case(3, 9, 0.8, None, 0.3, seed=13),  # the most likely token alone holds > 0.3
            case(2, 16, 1.2, 4, 0.95, seed=1),
            case(3, 8, 0.7, 5, 1.0, seed=0),  # p = 1 keeps everything
            case(2, 10, 1.0, None, 0.6, seed=9, scale=100.0),
            case(2, 7, 0.0, None, 0.5, seed=0),  # greedy
            case(4, 30, 2.0, 12, 0.5, seed=47),
        ]
    return cases
