"""Checks for lesson 08 — GPT: `shift_targets`, `lm_loss`, `next_token_probs`, `sample_next`,
`KVCache` and `training_flops`.

- `shift_targets` returns token ids, compared exactly (dtype, shape, every entry);
- `lm_loss` and `next_token_probs` are differentiable functions: the engine's function driver
  compares forward and gradients in float64 and float32 on every device;
- `sample_next` draws at random, so it is checked by its statistics;
- `KVCache` is checked step by step (what each `append` returns, what `len` says) and then at
  work inside a GPT: cached logits must equal the full recomputation.

They are declared in modules imported in name order: this one (the first three; the top-p half
of `next_token_probs`, its mutants and cases, is in ``lesson08_nucleus``), ``lesson08_kvcache``
(KVCache), ``lesson08_sampling`` (sample_next) and ``lesson08_training_flops`` (training_flops,
6·N·D), whose trials would make one module several times the ~600 lines a check module should
stay under.
"""

from __future__ import annotations

import torch

from .. import gpt as _gpt
from .answer_drivers import Finding, TrialDriver, exactly_equal
from .answers import letters
from .devices import devices
from .drivers import FunctionDriver
from .exercise import Case, Exercise, Mistake, fail, practice
from .lesson08_nucleus import (
    TOP_P_MISTAKES,
    greedy,
    keep_nucleus,
    keep_top_k,
    probs_with,
    top_p_cases,
)

__all__ = ["lm_loss", "next_token_probs", "practice_transformers", "shift_targets"]

IGNORE = _gpt.IGNORE_INDEX  # -100


# ==============================================================================================
# Exercise 1 — shift_targets(idx, pad_id=None): token ids, compared exactly.


def _shift_no_shift(idx, pad_id=None):
    targets = idx.clone()
    if pad_id is not None:
        targets[targets == pad_id] = IGNORE
    return targets


def _shift_backwards(idx, pad_id=None):
    targets = torch.full_like(idx, IGNORE)
    targets[:, 1:] = idx[:, :-1]
    if pad_id is not None:
        targets[targets == pad_id] = IGNORE
    return targets


def _shift_roll(idx, pad_id=None):
    targets = torch.roll(idx, shifts=-1, dims=1)
    if pad_id is not None:
        targets[targets == pad_id] = IGNORE
    return targets


def _shift_minus_one(idx, pad_id=None):
    targets = torch.full_like(idx, -1)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[targets == pad_id] = -1
    return targets


def _shift_keeps_padding(idx, pad_id=None):
    targets = torch.full_like(idx, IGNORE)
    targets[:, :-1] = idx[:, 1:]
    return targets


def _shift_masks_inputs(idx, pad_id=None):
    """Ignores the positions whose *input* is padding instead of those whose *target* is."""
    targets = torch.full_like(idx, IGNORE)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[idx == pad_id] = IGNORE
    return targets


def _shift_int64(idx, pad_id=None):
    """Builds the targets with torch.full, whose default dtype is int64 whatever idx's dtype."""
    targets = torch.full(idx.shape, IGNORE, device=idx.device)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        targets[targets == pad_id] = IGNORE
    return targets


def _shift_in_place(idx, pad_id=None):
    """Shifts idx itself and returns it."""
    idx[:, :-1] = idx[:, 1:].clone()
    idx[:, -1] = IGNORE
    if pad_id is not None:
        idx[idx == pad_id] = IGNORE
    return idx


def _shift_last_zero(idx, pad_id=None):
    """The last position gets pad_id (or 0 without one) instead of -100."""
    targets = torch.empty_like(idx)
    targets[:, :-1] = idx[:, 1:]
    targets[:, -1] = 0 if pad_id is None else pad_id
    if pad_id is not None:
        targets[targets == pad_id] = IGNORE
    return targets


def _shift_first_pad_only(idx, pad_id=None):
    """Only the first target of each row that is pad_id becomes -100 (a search that stops)."""
    targets = torch.full_like(idx, IGNORE)
    targets[:, :-1] = idx[:, 1:]
    if pad_id is not None:
        for row in targets:
            hits = (row == pad_id).nonzero()
            if len(hits):
                row[hits[0, 0]] = IGNORE
    return targets


def _token_rows(seed: int, B: int, L: int, vocab: int, pad_id: int | None) -> torch.Tensor:
    """Random ids in [0, vocab); with pad_id, rows are right-padded by different amounts."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, vocab, (B, L), generator=g)
    if pad_id is not None:
        idx[idx == pad_id] = (pad_id + 1) % vocab
        for b in range(B):
            n_pad = (b * 2 + 1) % L if L > 1 else 0  # 1, 3, 5, ... padded positions
            if n_pad:
                idx[b, L - n_pad :] = pad_id
    return idx


def _shift_calls(thorough: bool) -> list[tuple[str, dict]]:
    # the last visible case has int32 ids: the text asks for idx's dtype, not int64 always
    grid = [(2, 6, 9, None), (3, 7, 10, 0), (2, 5, 8, None, torch.int32)]
    if thorough:
        grid += [(1, 1, 5, None), (1, 2, 5, 4), (4, 9, 20, 19), (2, 5, 7, 3), (3, 12, 50, None)]
    calls = []
    for i, (B, L, vocab, pad_id, *dtype) in enumerate(grid):
        idx = _token_rows(300 + i, B, L, vocab, pad_id).to(*dtype)
        kwargs = {"idx": idx} if pad_id is None else {"idx": idx, "pad_id": pad_id}
        arg = "" if pad_id is None else f", pad_id={pad_id}"
        kind = f" ({str(idx.dtype).replace('torch.', '')})" if dtype else ""
        calls.append((f"shift_targets(idx{arg}) with idx={idx.tolist()}{kind}", kwargs))
    return calls


def _describe_ids(expected: torch.Tensor, got, what: str = "the targets") -> str:
    if not isinstance(got, torch.Tensor):
        return f"{what} should be a tensor but is a {type(got).__name__}"
    if got.dtype != expected.dtype:
        return f"{what} have dtype {got.dtype} but should have dtype {expected.dtype} (as idx)"
    if tuple(got.shape) != tuple(expected.shape):
        return f"{what} have shape {tuple(got.shape)} but should have shape {tuple(expected.shape)}"
    if got.device.type != expected.device.type:
        return f"{what} are on device {got.device} but the input is on {expected.device}"
    wrong = (got.cpu() != expected.cpu()).nonzero()
    row, col = wrong[0].tolist()
    return (
        f"{what} differ at index ({row}, {col}): got {got[row, col].item()}, expected "
        f"{expected[row, col].item()} ({len(wrong)} of {got.numel()} entries differ)\n"
        f"  expected {expected.tolist()}\n  got      {got.tolist()}"
    )


def _shift_trial(impl, case: tuple[str, dict], device: torch.device, call) -> Finding | None:
    """The ids exactly (dtype, shape, every entry; they are the evidence), and idx unchanged."""
    label, kwargs = case
    kwargs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    expected = _gpt.shift_targets(**kwargs)
    given = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    got = call(lambda: impl(**given), label)
    if not torch.equal(given["idx"], kwargs["idx"]):
        problem = (
            "your function changed its input idx in place; build the targets in a new tensor "
            "(torch.full_like(idx, -100), then fill it)"
        )
        return Finding(problem, label, "in-place")
    if exactly_equal(got, expected):
        return None
    return Finding(_describe_ids(expected, got), f"{label} on {device.type}", "ids", got)


shift_targets = Exercise(
    name="shift_targets",
    lesson="08",
    module="gpt",
    reference=_gpt.shift_targets,
    forbidden=(
        "transformer_lab.gpt.shift_targets",
        "transformer_lab.shift_targets",
        "transformer_lab.data.get_lm_batch",
    ),
    mistakes=[
        Mistake(
            "no-shift",
            "the targets are not shifted: the target at position t is the next token, "
            "targets[:, t] = idx[:, t + 1].",
            _shift_no_shift,
        ),
        Mistake(
            "shifted-backwards",
            "the targets are shifted the wrong way (targets[:, t] = idx[:, t - 1], the "
            "previous token): the model must predict the next token, idx[:, t + 1].",
            _shift_backwards,
        ),
        Mistake(
            "roll-wraps",
            "the last position wraps around to the first token (torch.roll): it has no next "
            "token, so its target must be -100 (ignored).",
            _shift_roll,
        ),
        Mistake(
            "ignore-minus-one",
            "ignored positions must hold -100 (IGNORE_INDEX, the ignore_index of "
            "F.cross_entropy), not -1.",
            _shift_minus_one,
        ),
        Mistake(
            "padding-kept",
            "padding is still a target: where the next token is pad_id, the target must "
            "be -100 so that the loss skips it.",
            _shift_keeps_padding,
        ),
        Mistake(
            "masks-inputs",
            "you ignored the positions whose input is padding; what counts is the target: "
            "set -100 where the target (the next token) is pad_id.",
            _shift_masks_inputs,
        ),
        Mistake(
            "in-place",
            "you changed idx in place: the caller still needs its tokens; build the targets in "
            "a new tensor, torch.full_like(idx, -100), then fill it.",
            _shift_in_place,
        ),
        Mistake(
            "last-not-ignored",
            "the last position has no next token: its target must be -100 (ignored), not 0 or "
            "pad_id, which would teach the model a token that is not there.",
            _shift_last_zero,
        ),
        Mistake(
            "int64-always",
            "the targets must have idx's dtype: torch.full(shape, -100) makes int64 whatever "
            "idx is; use torch.full_like(idx, -100) (or pass dtype=idx.dtype).",
            _shift_int64,
        ),
        Mistake(
            "first-pad-only",
            "only the first padding target of each row became -100: every position whose "
            "target is pad_id must, targets[targets == pad_id] = -100 (a row may end in several "
            "[PAD]s).",
            _shift_first_pad_only,
        ),
    ],
    driver=TrialDriver(
        _shift_calls,
        _shift_trial,
        covered="exact dtype, shape and values",
        matches=exactly_equal,
        settings=devices,
    ),
    doc="shift_targets(idx (B, L), pad_id=None) -> targets (B, L): idx[:, t + 1], -100 where "
    "there is no next token or it is padding",
)


# ==============================================================================================
# Exercise 2 — lm_loss(logits, targets): mean cross-entropy over the positions that count.


def _nll_parts(logits, targets, ignore=IGNORE):
    """(-log P(target) per position with ignored ones at 0, the bool mask of counted positions)."""
    keep = targets != ignore
    log_p = torch.log_softmax(logits, dim=-1)
    picked = log_p.gather(-1, targets.clamp(min=0)[..., None]).squeeze(-1)
    return -picked * keep, keep


def _lm_mean_over_all(logits, targets):
    nll, _ = _nll_parts(logits, targets)
    return nll.sum() / targets.numel()


def _lm_sum(logits, targets):
    nll, _ = _nll_parts(logits, targets)
    return nll.sum()


def _lm_row_means(logits, targets):
    nll, keep = _nll_parts(logits, targets)
    return (nll.sum(1) / keep.sum(1)).mean()


def _lm_ignore_zero(logits, targets):
    nll, keep = _nll_parts(logits, targets, ignore=0)
    return nll.sum() / keep.sum()


def _lm_shift_again(logits, targets):
    nll, keep = _nll_parts(logits[:, :-1], targets[:, 1:])
    return nll.sum() / keep.sum()


def _lm_no_minus(logits, targets):
    nll, keep = _nll_parts(logits, targets)
    return -nll.sum() / keep.sum()


def _lm_log_of_softmax(logits, targets):
    keep = targets != IGNORE
    p = torch.softmax(logits, dim=-1).gather(-1, targets.clamp(min=0)[..., None]).squeeze(-1)
    return -(torch.log(p) * keep).sum() / keep.sum()


def _lm_log_of_softmax_kept(logits, targets):
    """log(softmax) on the kept positions only: no 0 · (-inf) = NaN, the loss is inf instead."""
    keep = targets != IGNORE
    log_p = torch.log(torch.softmax(logits[keep], dim=-1))
    return -log_p.gather(-1, targets[keep][:, None]).mean()


def _lm_divided_by_batch(logits, targets):
    nll, _ = _nll_parts(logits, targets)
    return nll.sum() / targets.shape[0]


def _lm_ignored_as_token_zero(logits, targets):
    """-100 clamped to 0 and every position averaged: skipped positions count as token 0."""
    log_p = torch.log_softmax(logits, dim=-1)
    return -log_p.gather(-1, targets.clamp(min=0)[..., None]).mean()


def _lm_log_softmax_positions(logits, targets):
    keep = targets != IGNORE
    log_p = torch.log_softmax(logits, dim=1)
    picked = log_p.gather(-1, targets.clamp(min=0)[..., None]).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def _lm_positive_only(logits, targets):
    """Keeps the targets > 0: drops every -100, and every target of token id 0 too."""
    keep = targets > 0
    logp = torch.log_softmax(logits, dim=-1)
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def _lm_ignored_summed(logits, targets):
    """-100 clamped to 0 and summed with the rest, but divided by the number counted."""
    log_p = torch.log_softmax(logits, dim=-1)
    picked = log_p.gather(-1, targets.clamp(min=0)[..., None]).squeeze(-1)
    return -picked.sum() / (targets != IGNORE).sum()


def _lm_cases(thorough: bool) -> list[Case]:
    def case(B, L, V, p_ignore=0.3, scale=2.0, label_extra=""):
        def make(g):
            logits = scale * torch.randn(B, L, V, generator=g, dtype=torch.float64)
            targets = torch.randint(0, V, (B, L), generator=g)
            if p_ignore:
                drop = torch.rand(B, L, generator=g) < p_ignore
                drop[:, 0] = False  # every row keeps a target
                if B > 1 and L > 2:
                    drop[0, 1:] = True  # rows with different numbers of targets
                targets = targets.masked_fill(drop, IGNORE)
            return {"logits": logits, "targets": targets}

        ignore = f", about {p_ignore:.0%} of them -100" if p_ignore else ", none -100"
        return Case(f"lm_loss(logits {(B, L, V)}, targets {(B, L)}{ignore}){label_extra}", make)

    # The task states that log(softmax) underflows for large logits: a visible case has them.
    cases = [
        case(3, 6, 7),
        case(2, 5, 4, p_ignore=0.0),
        case(2, 6, 9, scale=1000.0, label_extra=" with logits of size ~1000"),
    ]
    if thorough:
        cases += [
            case(1, 1, 3, p_ignore=0.0),
            case(4, 8, 11, p_ignore=0.5),
            case(2, 4, 2),
            case(5, 3, 30, p_ignore=0.6),
        ]
    return cases


lm_loss = Exercise(
    name="lm_loss",
    lesson="08",
    module="gpt",
    reference=_gpt.lm_loss,
    forbidden=(
        "transformer_lab.gpt.lm_loss",
        "transformer_lab.lm_loss",
        "transformer_lab.gpt.finetune_loss",
        "transformer_lab.finetune_loss",
        "torch.nn.functional.cross_entropy",
        "torch.nn.functional.nll_loss",
        "torch.nn.CrossEntropyLoss",
        "torch.nn.NLLLoss",
    ),
    mistakes=[
        Mistake(
            "mean-over-all",
            "the mean runs over every position, ignored ones (-100) included: divide by the "
            "number of positions that count, (targets != -100).sum().",
            _lm_mean_over_all,
        ),
        Mistake(
            "sum",
            "the loss is a sum over positions: take the mean over the positions that count.",
            _lm_sum,
        ),
        Mistake(
            "row-means",
            "you averaged each sequence, then the sequences: the loss is the mean over all "
            "counted positions of the batch together (a row with more targets weighs more).",
            _lm_row_means,
        ),
        Mistake(
            "ignore-zero",
            "the positions to skip are those whose target is -100 (IGNORE_INDEX), not token 0.",
            _lm_ignore_zero,
        ),
        Mistake(
            "shift-again",
            "the targets are shifted a second time: lm_loss gets targets already aligned "
            "with the logits (targets[:, t] is the token after position t), so compare "
            "logits[:, t] with targets[:, t].",
            _lm_shift_again,
        ),
        Mistake(
            "no-minus",
            "the sign is wrong: the loss is the negative log-likelihood, "
            "-log P(target), which training minimises.",
            _lm_no_minus,
        ),
        Mistake(
            "log-of-softmax",
            "torch.log(torch.softmax(...)) underflows to log(0) = -inf for large logits: use "
            "torch.log_softmax, which subtracts the maximum first.",
            _lm_log_of_softmax,
        ),
        Mistake(
            "log-of-softmax-inf",
            "torch.log(torch.softmax(...)): for large logits a target's probability rounds to 0, "
            "its log is -inf and the loss inf. Use torch.log_softmax, which subtracts the "
            "maximum first.",
            _lm_log_of_softmax_kept,
        ),
        Mistake(
            "divided-by-batch",
            "the summed loss is divided by the batch size B: the mean is over the positions "
            "that count (targets != -100), so divide by their number.",
            _lm_divided_by_batch,
        ),
        Mistake(
            "ignored-as-token-zero",
            "the -100 positions are counted as if their target were token 0: leave them out of "
            "the sum and of the count (a mask, or F.cross_entropy's ignore_index=-100).",
            _lm_ignored_as_token_zero,
        ),
        Mistake(
            "log-softmax-positions",
            "log_softmax is taken over the positions axis (dim=1): it normalises over the "
            "vocabulary, the last axis (dim=-1).",
            _lm_log_softmax_positions,
        ),
        Mistake(
            "positive-only",
            "you kept the targets > 0, which drops every target of token id 0 as well: keep "
            "the positions whose target is not -100 (targets != -100).",
            _lm_positive_only,
        ),
        Mistake(
            "ignored-summed",
            "the -100 positions are scored as token 0 (clamped) and summed with the rest, "
            "though the count leaves them out: mask them out of the sum too, (nll * keep).sum() "
            "/ keep.sum().",
            _lm_ignored_summed,
        ),
    ],
    driver=FunctionDriver(_lm_cases, outputs=("loss",)),
    doc="lm_loss(logits (B, L, V), targets (B, L)) -> the mean cross-entropy (a 0-dim tensor) "
    "over the positions whose target is not -100",
)


# ==============================================================================================
# Exercise 3 — next_token_probs(logits, temperature=1.0, top_k=None, top_p=None): the sampling
# distribution. Its top-p rule's mutants and cases are in lesson08_nucleus.


def _probs_times_t(logits, temperature=1.0, top_k=None, top_p=None):
    if temperature == 0 or top_k == 1:
        return greedy(logits)
    return probs_with(logits * temperature, 1.0, top_k, top_p)


def _probs_k_minus_1(logits, temperature=1.0, top_k=None, top_p=None):
    return probs_with(
        logits, temperature, top_k, top_p, lambda z, k: z > torch.topk(z, k, dim=-1).values[:, -1:]
    )


def _probs_k_plus_1(logits, temperature=1.0, top_k=None, top_p=None):
    def keep(z, k):
        return z >= z.sort(dim=-1, descending=True).values[:, k : k + 1]

    return probs_with(logits, temperature, top_k, top_p, keep)


def _probs_exactly_k(logits, temperature=1.0, top_k=None, top_p=None):
    def keep(z, k):
        chosen = torch.zeros_like(z, dtype=torch.bool)
        return chosen.scatter(-1, torch.topk(z, k, dim=-1).indices, True)

    return probs_with(logits, temperature, top_k, top_p, keep)


def _probs_softmax_first(logits, temperature=1.0, top_k=None, top_p=None):
    if temperature == 0 or top_k == 1:
        return greedy(logits)
    z = logits / temperature
    if top_p is not None and top_p < 1:  # the right nucleus (of the top k), renormalised
        z = z.masked_fill(probs_with(logits, temperature, top_k, top_p) == 0, float("-inf"))
    p = torch.softmax(z, dim=-1)
    if top_k is not None and top_k < p.shape[-1]:
        p = p.masked_fill(~keep_top_k(p, top_k), 0.0)
    return p


def _probs_zero_fill(logits, temperature=1.0, top_k=None, top_p=None):
    if temperature == 0 or top_k == 1:
        return greedy(logits)
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(~keep_top_k(z, top_k), 0.0)
    if top_p is not None and top_p < 1:
        z = z.masked_fill(~keep_nucleus(z, top_p), 0.0)
    return torch.softmax(z, dim=-1)


def _probs_tiny_temperature(logits, temperature=1.0, top_k=None, top_p=None):
    """T = 0 read as a tiny T: one-hot, except that tied maxima share the probability."""
    if top_k == 1:
        return greedy(logits)
    return probs_with(logits, max(temperature, 1e-10), top_k, top_p)


def _probs_falsy_temperature(logits, temperature=1.0, top_k=None, top_p=None):
    """`if temperature:` skips the division when T = 0, which gives a plain softmax."""
    return probs_with(logits, temperature or 1.0, top_k, top_p)


def _probs_no_greedy(logits, temperature=1.0, top_k=None, top_p=None):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(~keep_top_k(z, top_k), float("-inf"))
    if top_p is not None and top_p < 1:
        z = z.masked_fill(~keep_nucleus(z, top_p), float("-inf"))
    return torch.softmax(z, dim=-1)


# Logits with ties at the k-th largest value: row 0 keeps 3, 1, 1, 1 for k = 2; row 1 keeps the
# three 2s for k = 2; row 2 keeps 0.5, 0.5 for k = 1... (k = 2 here: 0.5, 0.5 then stop).
_TIED = [
    [3.0, 1.0, 1.0, 1.0, 0.0, -2.0],
    [2.0, -1.0, 2.0, 0.0, 2.0, 1.0],
    [0.5, -0.5, 0.5, -1.5, -0.5, 0.0],
]


def _probs_cases(thorough: bool) -> list[Case]:
    def case(B, V, temperature, top_k, scale=2.0, tied=False, defaults=False):
        def make(g):
            if tied:
                logits = torch.tensor(_TIED, dtype=torch.float64)
            else:
                logits = scale * torch.randn(B, V, generator=g, dtype=torch.float64)
            if defaults:
                return {"logits": logits}
            return {"logits": logits, "temperature": temperature, "top_k": top_k}

        shape = (len(_TIED), len(_TIED[0])) if tied else (B, V)
        args = "" if defaults else f", temperature={temperature}, top_k={top_k}"
        ties = "tied maxima" if temperature == 0 else "ties at the k-th largest"
        what = f"logits {_TIED} ({ties})" if tied else f"logits {shape}"
        if scale != 2.0:
            what += f" of size ~{scale:g}"
        return Case(f"next_token_probs({what}{args})", make)

    # Every rule the task states has a visible case: defaults, top-k, ties, greedy at T = 0 (a
    # one-hot row even where maxima tie), and k >= V keeping everything.
    cases = [
        case(3, 7, 1.0, None, defaults=True),
        case(4, 10, 0.7, 3),
        case(0, 0, 1.5, 2, tied=True),
        case(5, 6, 0.0, None),
        case(2, 5, 0.9, 12),
        case(0, 0, 0.0, None, tied=True),
    ]
    if thorough:
        cases += [
            case(2, 9, 2.5, None),
            case(3, 8, 0.8, 1),
            case(2, 6, 1.2, 6),
            case(4, 12, 0.5, 4, scale=100.0),
            case(1, 2, 3.0, None),
            case(3, 30, 1.0, 10),
            case(2, 7, 0.0, 3),
        ]
    return cases + top_p_cases(thorough)  # top-p's cases follow (lesson08_nucleus)


next_token_probs = Exercise(
    name="next_token_probs",
    lesson="08",
    module="gpt",
    reference=_gpt.next_token_probs,
    forbidden=(
        "transformer_lab.gpt.next_token_probs",
        "transformer_lab.gpt.sample_next",
        "transformer_lab.sample_next",
    ),
    mistakes=[
        Mistake(
            "times-t",
            "the temperature multiplies the logits: divide them by T (T < 1 sharpens the "
            "distribution, T > 1 flattens it).",
            _probs_times_t,
        ),
        Mistake(
            "k-minus-1",
            "top-k keeps k - 1 tokens: the k-th largest logit itself must be kept (compare "
            "with `logits < kth_largest`, not `<=`).",
            _probs_k_minus_1,
        ),
        Mistake(
            "k-plus-1",
            "top-k keeps k + 1 tokens: the k-th largest logit is "
            "torch.topk(logits, k).values[:, -1] (sorted index k - 1, not k).",
            _probs_k_plus_1,
        ),
        Mistake(
            "exactly-k",
            "with ties at the k-th largest logit you kept exactly k tokens: keep every token "
            "whose logit is >= the k-th largest (as nanoGPT and Hugging Face do).",
            _probs_exactly_k,
        ),
        Mistake(
            "softmax-first",
            "the softmax ran before the top-k filter and the kept probabilities were not "
            "renormalised: filter the logits (to -inf) first, then take the softmax.",
            _probs_softmax_first,
        ),
        Mistake(
            "zero-fill",
            "the removed logits were set to 0, which still gives them probability: set them "
            "to -inf so that the softmax gives them exactly 0.",
            _probs_zero_fill,
        ),
        Mistake(
            "no-greedy",
            "temperature 0 divides by zero: T = 0 (and top_k = 1) means greedy decoding, a "
            "one-hot row at the argmax.",
            _probs_no_greedy,
        ),
        Mistake(
            "tiny-temperature",
            "T = 0 is greedy decoding, a one-hot row at the argmax: dividing by a tiny T instead "
            "shares the probability between tied maxima; return the one-hot row when T = 0.",
            _probs_tiny_temperature,
        ),
        *TOP_P_MISTAKES,
        Mistake(
            "falsy-temperature",
            "T = 0 gives a plain softmax (`if temperature:` is False for 0, so nothing is "
            "divided): T = 0 is greedy decoding, a one-hot row at the argmax; test "
            "temperature == 0 first.",
            _probs_falsy_temperature,
        ),
    ],
    driver=FunctionDriver(_probs_cases, outputs=("probs",)),
    doc="next_token_probs(logits (B, V), temperature=1.0, top_k=None, top_p=None) -> "
    "probabilities (B, V)",
)


# ==============================================================================================
# Practice question (one letter): which statement about Transformers is correct?
#   (A) multi-head attention costs more computation than the feed-forward layers;
#   (B) multi-head attention costs more computation than single-head attention;
#   (C) it is hard to apply a Transformer to sequences longer than its max_seq_length L;
#   (D) Transformers scale easily to long sequences.
# (C): a learned position table has n_positions rows and nothing for position n_positions. The
# wrong letters are named like mistakes, each with the numbers that refute it.


def _multiply_adds(d_model: int, L: int, n_heads: int = 1) -> dict[str, int]:
    """Multiply-adds per token of one layer: attention (projections + scores + weighted sum,
    h heads of d_model / h) and the FFN (d_ff = 4 d_model)."""
    d_head = d_model // n_heads
    return {
        "attention": 4 * d_model * d_model + n_heads * 2 * L * d_head,
        "ffn": 2 * d_model * 4 * d_model,
    }


def _practice_mistakes() -> dict[str, Mistake]:
    d, L = 512, 128  # the base Transformer's width, a typical sentence length
    one, eight = _multiply_adds(d, L, 1), _multiply_adds(d, L, 8)
    return {
        "A": Mistake(
            "attention-dearer-than-ffn",
            f"per token and layer, attention costs 4·d² + 2·L·d multiply-adds and the FFN 8·d²: "
            f"for d_model = {d} and L = {L}, {one['attention']:,} against {one['ffn']:,}. "
            f"Attention is the dearer one only once L > 2·d_model.",
        ),
        "B": Mistake(
            "heads-cost-more",
            f"h heads of size d_model / h do the same projections and h·2·L·(d_model/h) = 2·L·d_model "
            f"score multiply-adds: {eight['attention']:,} per token for 8 heads, "
            f"{one['attention']:,} for one head of the same d_model.",
        ),
        "D": Mistake(
            "scales-easily",
            "the score matrix is L × L: doubling the length quadruples its time and memory "
            "(O(L²·d_model) per layer).",
        ),
    }


@practice
def practice_transformers(value, thorough: bool = False) -> None:
    """Check the practice answer: the letter of the correct statement (A, B, C or D)."""
    name = "practice_transformers"
    letter = letters(name, value, "ABCD")
    if letter == "C":
        print("✓ practice_transformers: C is right")
        return None
    fail(name, f"({letter}) is not the correct statement", mistake=_practice_mistakes()[letter])
