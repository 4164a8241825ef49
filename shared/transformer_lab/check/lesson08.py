"""Checks for lesson 08 — GPT: `shift_targets`, `lm_loss`, `next_token_probs`, `sample_next`
and `KVCache`.

- `shift_targets` returns token ids, compared exactly (dtype, shape, every entry);
- `lm_loss` and `next_token_probs` are differentiable functions: the engine's function driver
  compares forward and gradients in float64 and float32 on every device;
- `sample_next` draws at random, so it is checked by its statistics (see `_sample_tolerance`);
- `KVCache` is checked step by step (what each `append` returns, what `len` says) and then at
  work inside a GPT: cached logits must equal the full recomputation.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from .. import gpt as _gpt
from ..multihead import KVCache as _RefKVCache
from .engine import (
    Case,
    CheckFailed,
    Exercise,
    ImplementThisYourself,
    Mistake,
    _compare_tensor,
    _identical,
    _init_parameters,
    _register,
    _run,
    _run_student,
    _same,
    _settings,
    available_devices,
)

__all__ = ["KVCache", "lm_loss", "next_token_probs", "sample_next", "shift_targets"]

IGNORE = _gpt.IGNORE_INDEX  # -100


def _raised(label: str, err: Exception) -> str:
    return f"{label} raised {type(err).__name__}: {err}"


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


_SHIFT_EX = _register(
    Exercise(
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
                "the targets are not shifted: the target at position t is the *next* token, "
                "targets[:, t] = idx[:, t + 1].",
                _shift_no_shift,
            ),
            Mistake(
                "the targets are shifted the wrong way (targets[:, t] = idx[:, t - 1], the "
                "previous token): the model must predict the next token, idx[:, t + 1].",
                _shift_backwards,
            ),
            Mistake(
                "the last position wraps around to the first token (torch.roll): it has no next "
                "token, so its target must be -100 (ignored).",
                _shift_roll,
            ),
            Mistake(
                "ignored positions must hold -100 (IGNORE_INDEX, the ignore_index of "
                "F.cross_entropy), not -1.",
                _shift_minus_one,
            ),
            Mistake(
                "padding is still a target: where the next token is pad_id, the target must "
                "be -100 so that the loss skips it.",
                _shift_keeps_padding,
            ),
            Mistake(
                "you ignored the positions whose *input* is padding; what counts is the target: "
                "set -100 where the target (the next token) is pad_id.",
                _shift_masks_inputs,
            ),
        ],
    )
)


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
    grid = [(2, 6, 9, None), (3, 7, 10, 0)]
    if thorough:
        grid += [(1, 1, 5, None), (1, 2, 5, 4), (4, 9, 20, 19), (2, 5, 7, 3), (3, 12, 50, None)]
    calls = []
    for i, (B, L, vocab, pad_id) in enumerate(grid):
        idx = _token_rows(300 + i, B, L, vocab, pad_id)
        kwargs = {"idx": idx} if pad_id is None else {"idx": idx, "pad_id": pad_id}
        arg = "" if pad_id is None else f", pad_id={pad_id}"
        calls.append((f"shift_targets(idx{arg}) with idx={idx.tolist()}", kwargs))
    return calls


def _check_shift(ex: Exercise, student_fn, thorough: bool):
    devices = available_devices() if thorough else [torch.device("cpu")]
    n = 0
    for device in devices:
        for label, kwargs in _shift_calls(thorough):
            kwargs = {
                k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()
            }
            expected = ex.reference(**kwargs)
            given = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
            try:
                got = _run_student(ex, student_fn, lambda: student_fn(**given))  # noqa: B023
            except (ImplementThisYourself, NotImplementedError):
                raise
            except Exception as err:
                raise CheckFailed(f"{ex.name}: {_raised(label, err)}") from None
            if not torch.equal(given["idx"], kwargs["idx"]):
                raise CheckFailed(
                    f"{ex.name}: your function changed its input idx in place; build the "
                    f"targets in a new tensor (torch.full_like(idx, -100), then fill it)\n"
                    f"  case: {label}"
                )
            if _identical(got, expected):
                n += 1
                continue
            hint = ""
            for mistake in ex.mistakes:
                try:
                    wrong = mistake.impl(**{k: _clone(v) for k, v in kwargs.items()})
                except Exception:
                    continue
                if _identical(wrong, got) and not _identical(wrong, expected):
                    hint = f"\nLikely mistake: {mistake.sentence}"
                    break
            raise CheckFailed(
                f"{ex.name}: {_describe_ids(expected, got)}\n  case: {label} on {device.type}{hint}"
            )
    return n, "exact dtype, shape and values"


def _clone(v):
    return v.clone() if isinstance(v, torch.Tensor) else v


def shift_targets(student_fn, thorough: bool = False) -> bool:
    """Check shift_targets(idx (B, L), pad_id=None) -> targets (B, L): idx[:, t + 1], -100 where
    there is no next token or it is padding."""
    return _run(_SHIFT_EX, student_fn, None, None, thorough, _check_shift)


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


_LM_EX = _register(
    Exercise(
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
                "the mean runs over every position, ignored ones (-100) included: divide by the "
                "number of positions that count, (targets != -100).sum().",
                _lm_mean_over_all,
            ),
            Mistake(
                "the loss is a sum over positions: take the mean over the positions that count.",
                _lm_sum,
            ),
            Mistake(
                "you averaged each sequence, then the sequences: the loss is the mean over all "
                "counted positions of the batch together (a row with more targets weighs more).",
                _lm_row_means,
            ),
            Mistake(
                "the positions to skip are those whose target is -100 (IGNORE_INDEX), not token 0.",
                _lm_ignore_zero,
            ),
            Mistake(
                "the targets are shifted a second time: lm_loss gets targets already aligned "
                "with the logits (targets[:, t] is the token after position t), so compare "
                "logits[:, t] with targets[:, t].",
                _lm_shift_again,
            ),
            Mistake(
                "the sign is wrong: the loss is the *negative* log-likelihood, "
                "-log P(target), which training minimises.",
                _lm_no_minus,
            ),
            Mistake(
                "torch.log(torch.softmax(...)) underflows to log(0) = -inf for large logits: use "
                "torch.log_softmax, which subtracts the maximum first.",
                _lm_log_of_softmax,
            ),
        ],
    )
)


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

    cases = [case(3, 6, 7), case(2, 5, 4, p_ignore=0.0)]
    if thorough:
        cases += [
            case(1, 1, 3, p_ignore=0.0),
            case(4, 8, 11, p_ignore=0.5),
            case(2, 4, 2),
            case(2, 6, 9, scale=1000.0, label_extra=" with logits of size ~1000"),
            case(5, 3, 30, p_ignore=0.6),
        ]
    return cases


def lm_loss(student_fn, thorough: bool = False) -> bool:
    """Check lm_loss(logits (B, L, V), targets (B, L)) -> the mean cross-entropy (a 0-dim tensor)
    over the positions whose target is not -100."""
    return _run(_LM_EX, student_fn, _lm_cases(thorough), ("loss",), thorough, "function")


# ==============================================================================================
# Exercise 3 — next_token_probs(logits, temperature=1.0, top_k=None): the sampling distribution.


def _greedy(logits):
    return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)


def _probs_with(logits, temperature, top_k, keep: Callable):
    """softmax(logits / T) over the positions `keep(logits, k)` says to keep (greedy at T = 0)."""
    if temperature == 0 or top_k == 1:
        return _greedy(logits)
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(~keep(z, top_k), float("-inf"))
    return torch.softmax(z, dim=-1)


def _keep_ties(z, k):
    return z >= torch.topk(z, k, dim=-1).values[:, -1:]


def _probs_times_t(logits, temperature=1.0, top_k=None):
    if temperature == 0 or top_k == 1:
        return _greedy(logits)
    return _probs_with(logits * temperature, 1.0, top_k, _keep_ties)


def _probs_k_minus_1(logits, temperature=1.0, top_k=None):
    return _probs_with(
        logits, temperature, top_k, lambda z, k: z > torch.topk(z, k, dim=-1).values[:, -1:]
    )


def _probs_k_plus_1(logits, temperature=1.0, top_k=None):
    def keep(z, k):
        return z >= z.sort(dim=-1, descending=True).values[:, k : k + 1]

    return _probs_with(logits, temperature, top_k, keep)


def _probs_exactly_k(logits, temperature=1.0, top_k=None):
    def keep(z, k):
        chosen = torch.zeros_like(z, dtype=torch.bool)
        return chosen.scatter(-1, torch.topk(z, k, dim=-1).indices, True)

    return _probs_with(logits, temperature, top_k, keep)


def _probs_softmax_first(logits, temperature=1.0, top_k=None):
    if temperature == 0 or top_k == 1:
        return _greedy(logits)
    p = torch.softmax(logits / temperature, dim=-1)
    if top_k is not None and top_k < p.shape[-1]:
        p = p.masked_fill(~_keep_ties(p, top_k), 0.0)
    return p


def _probs_zero_fill(logits, temperature=1.0, top_k=None):
    if temperature == 0 or top_k == 1:
        return _greedy(logits)
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(~_keep_ties(z, top_k), 0.0)
    return torch.softmax(z, dim=-1)


def _probs_no_greedy(logits, temperature=1.0, top_k=None):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(~_keep_ties(z, top_k), float("-inf"))
    return torch.softmax(z, dim=-1)


_PROBS_EX = _register(
    Exercise(
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
                "the temperature multiplies the logits: divide them by T (T < 1 sharpens the "
                "distribution, T > 1 flattens it).",
                _probs_times_t,
            ),
            Mistake(
                "top-k keeps k - 1 tokens: the k-th largest logit itself must be kept (compare "
                "with `logits < kth_largest`, not `<=`).",
                _probs_k_minus_1,
            ),
            Mistake(
                "top-k keeps k + 1 tokens: the k-th largest logit is "
                "torch.topk(logits, k).values[:, -1] (sorted index k - 1, not k).",
                _probs_k_plus_1,
            ),
            Mistake(
                "with ties at the k-th largest logit you kept exactly k tokens: keep every token "
                "whose logit is >= the k-th largest (as nanoGPT and Hugging Face do).",
                _probs_exactly_k,
            ),
            Mistake(
                "the softmax ran before the top-k filter and the kept probabilities were not "
                "renormalised: filter the logits (to -inf) first, then take the softmax.",
                _probs_softmax_first,
            ),
            Mistake(
                "the removed logits were set to 0, which still gives them probability: set them "
                "to -inf so that the softmax gives them exactly 0.",
                _probs_zero_fill,
            ),
            Mistake(
                "temperature 0 divides by zero: T = 0 (and top_k = 1) means greedy decoding, a "
                "one-hot row at the argmax.",
                _probs_no_greedy,
            ),
        ],
    )
)

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
        what = f"logits {_TIED} (ties at the k-th largest)" if tied else f"logits {shape}"
        if scale != 2.0:
            what += f" of size ~{scale:g}"
        return Case(f"next_token_probs({what}{args})", make)

    cases = [
        case(3, 7, 1.0, None, defaults=True),
        case(4, 10, 0.7, 3),
        case(0, 0, 1.5, 2, tied=True),
        case(5, 6, 0.0, None),
    ]
    if thorough:
        cases += [
            case(2, 9, 2.5, None),
            case(3, 8, 0.8, 1),
            case(2, 6, 1.2, 6),
            case(2, 5, 0.9, 12),
            case(4, 12, 0.5, 4, scale=100.0),
            case(1, 2, 3.0, None),
            case(3, 30, 1.0, 10),
            case(2, 7, 0.0, 3),
        ]
    return cases


def next_token_probs(student_fn, thorough: bool = False) -> bool:
    """Check next_token_probs(logits (B, V), temperature=1.0, top_k=None) -> probabilities (B, V)."""
    return _run(_PROBS_EX, student_fn, _probs_cases(thorough), ("probs",), thorough, "function")


# ==============================================================================================
# Exercise 4 — sample_next(logits, temperature=1.0, top_k=None, generator=None): random draws.
#
# One row of logits is repeated N times and sampled in one call; the N draws are independent, so
# each token's frequency p̂ is a mean of N Bernoulli(p) variables, and Hoeffding's inequality
# gives P(|p̂ - p| >= t) <= 2 exp(-2 N t²) for the correct distribution p. With N = 20,000 and
# t = 0.025 that is 2·e^-25 ≈ 2.8e-11 per token. A thorough check compares at most 9 sampling
# cases × 12 tokens × 4 settings (CPU and CUDA, float64 and float32) = 432 frequencies, so a
# correct implementation fails with probability below 432 × 2.8e-11 ≈ 1.2e-8 (union bound);
# a visible check compares far fewer. Tokens of probability 0 (outside the top k) can never be
# drawn by a correct implementation, so any draw of one fails at once. Every catalogued mistake
# moves some token's probability by at least 0.1 in a case of the visible check (see the test
# file), i.e. twice the tolerance plus a margin that Hoeffding also covers, so it always fails.

_N_SAMPLES = 20_000


def _sample_tolerance(n: int = _N_SAMPLES, delta: float = 2.8e-11) -> float:
    """The t with 2 exp(-2 n t²) = delta: the largest frequency error a correct sampler makes
    (with probability 1 - delta)."""
    return math.sqrt(math.log(2 / delta) / (2 * n))


def _true_probs(logits, temperature, top_k):
    """next_token_probs written out again (the reference is switched off while a mutant runs)."""
    return _probs_with(logits, temperature, top_k, _keep_ties)


def _sample_argmax(logits, temperature=1.0, top_k=None, generator=None):
    return logits.argmax(dim=-1)


def _sample_global_rng(logits, temperature=1.0, top_k=None, generator=None):
    probs = _true_probs(logits, temperature, top_k).float()
    return torch.multinomial(probs, 1).squeeze(-1)


def _sample_no_temperature(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = _true_probs(logits, 1.0, top_k).float()
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _sample_no_top_k(logits, temperature=1.0, top_k=None, generator=None):
    probs = _true_probs(logits, temperature, None).float()
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _sample_column(logits, temperature=1.0, top_k=None, generator=None):
    probs = _true_probs(logits, temperature, top_k).float()
    return torch.multinomial(probs, 1, generator=generator)


def _sample_softmax_of_probs(logits, temperature=1.0, top_k=None, generator=None):
    """Takes a softmax of the probabilities again: a flatter distribution."""
    probs = torch.softmax(_true_probs(logits, temperature, top_k).float(), dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


_SAMPLE_EX = _register(
    Exercise(
        name="sample_next",
        lesson="08",
        module="gpt",
        reference=_gpt.sample_next,
        forbidden=(
            "transformer_lab.gpt.sample_next",
            "transformer_lab.sample_next",
            "transformer_lab.gpt.next_token_probs",
            "transformer_lab.gpt.GPT.generate",
        ),
        mistakes=[
            Mistake(
                "you always take the argmax: sample_next must *draw* a token from "
                "next_token_probs(...) (torch.multinomial), greedy only when T = 0 or top_k = 1.",
                _sample_argmax,
            ),
            Mistake(
                "the draws ignore `generator`, so they are not reproducible: pass it on, "
                "torch.multinomial(probs, 1, generator=generator).",
                _sample_global_rng,
            ),
            Mistake(
                "the temperature is ignored: pass it to next_token_probs (the logits are divided "
                "by T before the softmax).",
                _sample_no_temperature,
            ),
            Mistake(
                "top_k is ignored: tokens outside the k largest logits were drawn; pass top_k to "
                "next_token_probs.",
                _sample_no_top_k,
            ),
            Mistake(
                "the result has shape (B, 1): torch.multinomial returns one column of draws, "
                "squeeze it to (B,).",
                _sample_column,
            ),
            Mistake(
                "the probabilities went through a second softmax, which flattens them: draw from "
                "next_token_probs(...) as it is.",
                _sample_softmax_of_probs,
            ),
        ],
    )
)


# (label, logits rows (B, V) as a list, temperature, top_k, sampled?) — a sampled case repeats its
# single row N times; a greedy case must return exactly the argmax of each row.
_ROW_A = [2.0, 1.0, 0.5, 0.0, -0.5, -1.0]
_ROW_B = [1.5, 1.2, 0.3, 2.0, -1.0, 0.8, -0.2, 0.0]
_ROW_C = [0.0, 0.4, -0.3, 0.8, 0.1, -0.6, 0.3, 0.5, -0.1, 0.2, 0.6, -0.4]


def _sample_specs(thorough: bool) -> list[tuple]:
    specs = [
        ("sampled", _ROW_A, 1.0, None),
        ("sampled", _ROW_B, 0.5, 3),
        ("greedy", (5, 9), 0.0, None),
    ]
    if thorough:
        specs += [
            ("sampled", _ROW_C, 2.0, None),
            ("sampled", _ROW_B, 1.3, 5),
            ("sampled", [1.0, 0.0, 1.0, 0.0, 1.0, -1.0], 1.0, 3),  # ties: all three 1s kept
            ("sampled", _ROW_A, 0.7, 12),  # k above V keeps everything
            ("sampled", [4.0, 2.0, 0.0, -5.0, -20.0, -80.0], 3.0, None),
            ("sampled", [20.0, 19.0, 18.0, -40.0, 10.0], 4.0, 2),
            ("greedy", (3, 7), 0.8, 1),
            ("greedy", (2, 30), 0.0, 5),
            ("greedy", (1, 2), 0.0, None),
        ]
    return specs


def _describe_call(rows, temperature, top_k, N=None) -> str:
    what = f"logits {rows} repeated N = {N} times" if N else f"random logits {rows}"
    return f"sample_next({what}, temperature={temperature}, top_k={top_k}, generator=g)"


def _new_generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def _reseed_global(device: torch.device, seed: int) -> None:
    """Reseed the global generator of `device` (inside a fork_rng, so the caller's is restored)."""
    if device.type == "cuda":
        torch.cuda.manual_seed(seed)
    else:
        torch.random.default_generator.manual_seed(seed)


def _draws_problem(got, B: int, V: int, device) -> str | None:
    if not isinstance(got, torch.Tensor):
        return f"the result should be a tensor of token ids but is a {type(got).__name__}"
    if tuple(got.shape) != (B,):
        return (
            f"the result has shape {tuple(got.shape)} but should have shape {(B,)}: one token id "
            "per row of logits"
        )
    if got.dtype != torch.long:
        return f"the token ids have dtype {got.dtype} but should be torch.int64 (torch.long)"
    if got.device.type != device.type:
        return f"the token ids are on device {got.device} but the logits are on {device}"
    if got.numel() and (got.min() < 0 or got.max() >= V):
        return f"token ids must lie in 0 .. {V - 1}, got values in [{int(got.min())}, {int(got.max())}]"
    return None


def _sample_trial(
    fn, spec, i: int, device, dtype, guard: Callable
) -> tuple[str, str, object] | None:
    """Run one case on `fn`; None when it passes, else (tag, message, evidence)."""
    kind, rows, temperature, top_k = spec
    seed = 5000 + i
    if kind == "greedy":
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(*rows, generator=g, dtype=torch.float64).to(device, dtype)
        label = _describe_call(rows, temperature, top_k)
        got = guard(lambda: fn(logits.clone(), temperature, top_k, _new_generator(device, seed)))
        expected = logits.argmax(dim=-1)
        problem = _draws_problem(got, rows[0], rows[1], device)
        if problem:
            return "shape", f"{problem}\n  case: {label}", _shape_of(got)
        if not torch.equal(got, expected):
            return (
                "greedy",
                f"with temperature={temperature}, top_k={top_k} the result must be the argmax of "
                f"each row {expected.tolist()}, got {got.tolist()}\n  case: {label}",
                got.cpu(),
            )
        return None

    V, N = len(rows), _N_SAMPLES
    row = torch.tensor(rows, dtype=torch.float64)
    logits = row.to(device, dtype).expand(N, V).contiguous()
    label = _describe_call(rows, temperature, top_k, N)
    p = _gpt.next_token_probs(row[None], temperature, top_k)[0]  # the exact distribution
    got = guard(lambda: fn(logits.clone(), temperature, top_k, _new_generator(device, seed)))
    problem = _draws_problem(got, N, V, device)
    if problem:
        return "shape", f"{problem}\n  case: {label}", _shape_of(got)
    freq = torch.bincount(got.cpu(), minlength=V).double() / N
    impossible = (p == 0) & (freq > 0)
    if impossible.any():
        token = int(impossible.nonzero()[0])
        return (
            "impossible",
            f"token {token} has probability 0 here (it is not among the top_k={top_k} logits) "
            f"but was drawn {int(freq[token] * N)} times out of {N}\n  case: {label}",
            freq,
        )
    t = _sample_tolerance()
    error = (freq - p).abs()
    if error.max() > t:
        token = int(error.argmax())
        return (
            "frequency",
            f"token {token} was drawn with frequency {freq[token]:.4f} but its probability is "
            f"{p[token]:.4f} (a correct sampler stays within {t:.3f} except with probability "
            f"< 1e-10)\n  frequencies {[round(x, 3) for x in freq.tolist()]}\n  probabilities "
            f"{[round(x, 3) for x in p.tolist()]}\n  case: {label}",
            freq,
        )
    # Reproducible: the same seed gives the same draws, whatever the global generator's state.
    with torch.random.fork_rng(devices=_cuda_indices(device)):
        _reseed_global(device, 12345)
        first = guard(lambda: fn(logits.clone(), temperature, top_k, _new_generator(device, seed)))
        _reseed_global(device, 54321)
        again = guard(lambda: fn(logits.clone(), temperature, top_k, _new_generator(device, seed)))
    if not (isinstance(first, torch.Tensor) and isinstance(again, torch.Tensor)) or not (
        first.shape == again.shape and torch.equal(first, again)
    ):
        return (
            "reproducible",
            "two calls with generators seeded alike gave different tokens: the draws must come "
            f"from `generator`, not from torch's global random state\n  case: {label}",
            None,
        )
    return None


def _shape_of(got):
    return tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__


def _cuda_indices(device: torch.device) -> list[int]:
    if device.type != "cuda":
        return []
    return [device.index if device.index is not None else torch.cuda.current_device()]


def _evidence_matches(tag: str, mine, theirs) -> bool:
    if tag in ("frequency", "impossible"):
        return (mine - theirs).abs().max().item() <= 2 * _sample_tolerance()
    if tag == "greedy":
        return torch.equal(mine, theirs)
    return mine == theirs  # "shape": the shapes; "reproducible": None == None


def _check_sample(ex: Exercise, student_fn, thorough: bool):
    n = 0
    for device, dtype in _settings(thorough):
        for i, spec in enumerate(_sample_specs(thorough)):

            def guard(call):
                try:
                    return _run_student(ex, student_fn, call)
                except (ImplementThisYourself, NotImplementedError):
                    raise
                except Exception as err:
                    raise CheckFailed(
                        f"{ex.name}: {_raised('your function', err)}\n  case: "
                        f"{_describe_call(*spec[1:], N=_N_SAMPLES if spec[0] == 'sampled' else None)} "  # noqa: B023
                        f"({str(dtype).replace('torch.', '')} on {device.type})"  # noqa: B023
                    ) from None

            with torch.random.fork_rng(devices=_cuda_indices(device)):
                failure = _sample_trial(student_fn, spec, i, device, dtype, guard)
            if failure is None:
                n += 1
                continue
            tag, message, evidence = failure
            hint = ""
            for mistake in ex.mistakes:
                try:
                    with torch.random.fork_rng(devices=_cuda_indices(device)):
                        theirs = _sample_trial(mistake.impl, spec, i, device, dtype, lambda c: c())
                except Exception:
                    continue
                if (
                    theirs is not None
                    and theirs[0] == tag
                    and _evidence_matches(tag, evidence, theirs[2])
                ):
                    hint = f"\nLikely mistake: {mistake.sentence}"
                    break
            where = f" ({str(dtype).replace('torch.', '')} on {device.type})"
            raise CheckFailed(f"{ex.name}: {message}{where}{hint}")
    return n, f"distribution of {_N_SAMPLES:,} draws per case, greedy cases, reproducibility"


def sample_next(student_fn, thorough: bool = False) -> bool:
    """Check sample_next(logits (B, V), temperature=1.0, top_k=None, generator=None) -> (B,) ids:
    draws follow next_token_probs, greedy cases give the argmax, a seeded generator reproduces."""
    return _run(_SAMPLE_EX, student_fn, None, None, thorough, _check_sample)


# ==============================================================================================
# Exercise 5 — KVCache: append(k, v) keeps the keys and values seen so far; len = positions.


class _KVWrongAxis(_RefKVCache):
    def append(self, k, v):
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=-1)
            self.v = torch.cat([self.v, v], dim=-1)
        return self.k, self.v


class _KVForgetsOld(_RefKVCache):
    def append(self, k, v):
        self.k, self.v = k, v
        return self.k, self.v


class _KVReturnsNew(_RefKVCache):
    def append(self, k, v):
        super().append(k, v)
        return k, v


class _KVPrepends(_RefKVCache):
    def append(self, k, v):
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([k, self.k], dim=-2)
            self.v = torch.cat([v, self.v], dim=-2)
        return self.k, self.v


class _KVLenBatch(_RefKVCache):
    def __len__(self):
        return 0 if self.k is None else self.k.shape[0]


class _KVSwapped(_RefKVCache):
    def append(self, k, v):
        keys, values = super().append(k, v)
        return values, keys


_KV_EX = _register(
    Exercise(
        name="KVCache",
        lesson="08",
        module="gpt",
        reference=_RefKVCache,
        forbidden=(
            "transformer_lab.multihead.KVCache",
            "transformer_lab.gpt.KVCache",
            "transformer_lab.KVCache",
            "transformer_lab.gpt.GPT.new_cache",
        ),
        mistakes=[
            Mistake(
                "the new keys and values are joined along the wrong axis: the positions are "
                "axis -2 of (B, h, L, d_k), so use torch.cat([old, new], dim=-2).",
                _KVWrongAxis,
            ),
            Mistake(
                "the cache forgets the old keys and values: append must concatenate the new ones "
                "to those already stored, not replace them.",
                _KVForgetsOld,
            ),
            Mistake(
                "append returned only the new keys and values: it must return everything cached "
                "so far (old and new together), which the attention then uses.",
                _KVReturnsNew,
            ),
            Mistake(
                "the new keys and values went in front of the old ones: positions must stay in "
                "order, torch.cat([self.k, k], dim=-2).",
                _KVPrepends,
            ),
            Mistake(
                "len(cache) counts the wrong axis: it is the number of cached positions, "
                "self.k.shape[-2] (0 before the first append).",
                _KVLenBatch,
            ),
            Mistake(
                "append returned (values, keys): return (keys, values) in that order.",
                _KVSwapped,
            ),
        ],
    )
)


def _kv_specs(thorough: bool) -> list[tuple]:
    # (B, h, chunk lengths, d_k, d_v): B, h, d_k and the lengths differ so axis mix-ups show.
    specs = [(2, 3, [4, 1, 1, 2], 5, 5)]
    if thorough:
        specs += [(1, 1, [1, 1, 1], 2, 2), (3, 2, [2, 3, 1, 1], 4, 6), (2, 4, [6, 1, 1], 3, 3)]
    return specs


def _kv_chunks(spec, seed: int, dtype, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    B, h, lengths, d_k, d_v = spec
    g = torch.Generator().manual_seed(seed)
    chunks = []
    for n in lengths:
        k = torch.randn(B, h, n, d_k, generator=g, dtype=torch.float64)
        v = torch.randn(B, h, n, d_v, generator=g, dtype=torch.float64)
        k = k.to(device, dtype).requires_grad_(True)
        v = v.to(device, dtype).requires_grad_(True)
        chunks.append((k, v))
    return chunks


def _kv_trace(cls, chunks, guard: Callable) -> list[tuple[str, object]]:
    """[("len", n) | ("append", (k, v)) | ("error", name), ...] for: new, len, then each
    append followed by len. Stops at the first error."""
    trace: list[tuple[str, object]] = []

    def step(kind, call):
        try:
            trace.append((kind, guard(call)))
            return True
        except (ImplementThisYourself, NotImplementedError):
            raise
        except CheckFailed:
            raise
        except Exception as err:
            trace.append(("error", f"{type(err).__name__}: {err}"))
            return False

    holder = {}

    def make():
        holder["cache"] = cls()
        return "new"

    if not step("new", make):
        return trace
    cache = holder["cache"]
    if not step("len", lambda: len(cache)):
        return trace
    for k, v in chunks:
        if not step("append", lambda k=k, v=v: cache.append(k, v)):
            return trace
        if not step("len", lambda: len(cache)):
            return trace
    return trace


def _kv_entry_equal(a, b, dtype, device) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "error":
        return a[1].split(":")[0] == b[1].split(":")[0]
    if a[0] == "append":
        return isinstance(a[1], (tuple, list)) and _same(a[1], b[1], dtype, device)
    return a[1] == b[1]


def _kv_entry_problem(expected, got, n_appended: int, dtype, device) -> str | None:
    if expected[0] == "append":
        what = f"at append number {n_appended + 1}"
    else:
        what = "before any append" if n_appended == 0 else f"after append number {n_appended}"
    if got[0] == "error":
        step = (
            "KVCache()"
            if expected[0] == "new"
            else ("len(cache)" if expected[0] == "len" else "cache.append(k, v)")
        )
        return f"{step} raised {got[1]} ({what})"
    if expected[0] == "len":
        if isinstance(got[1], bool) or not isinstance(got[1], int):
            return f"len(cache) should be an int, got {got[1]!r} ({what})"
        if got[1] != expected[1]:
            return f"len(cache) is {got[1]} but {expected[1]} positions are cached ({what})"
        return None
    if expected[0] == "append":
        out = got[1]
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            return f"append should return (keys, values), got {type(out).__name__} ({what})"
        for e, o, name in zip(expected[1], out, ("keys", "values")):
            problem = _compare_tensor(e, o, f"the cached {name} returned {what}", dtype, device)
            if problem:
                return problem
    return None


def _kv_model_problem(ex, student_cls, device, dtype, i: int) -> str | None:
    """A GPT run with the student's caches, prompt then chunks, must give the full logits."""
    with torch.random.fork_rng(devices=[]):
        model = _gpt.GPT(vocab_size=11, n_positions=16, d_model=8, n_heads=2, n_layers=2)
    _init_parameters(model, seed=6000 + i)
    model.to(device=device, dtype=dtype).eval()
    g = torch.Generator().manual_seed(6100 + i)
    idx = torch.randint(0, 11, (2, 9), generator=g).to(device)
    chunks = [3, 1, 2, 1, 1, 1]
    with torch.no_grad():
        expected = model(idx)
        try:
            caches = _run_student(ex, student_cls, lambda: [student_cls() for _ in model.blocks])
            pieces, start = [], 0
            for n in chunks:
                piece = idx[:, start : start + n]
                pieces.append(_run_student(ex, student_cls, lambda p=piece: model(p, cache=caches)))
                start += n
        except (ImplementThisYourself, NotImplementedError):
            raise
        except Exception as err:
            return _raised("a GPT generating with your KVCache", err)
        got = torch.cat(pieces, dim=1)
    problem = _compare_tensor(
        expected,
        got,
        "the logits of a GPT fed one chunk at a time with your KVCache",
        dtype,
        device,
    )
    if problem:
        return f"{problem} (chunks of {chunks} tokens; the reference: all tokens at once)"
    return None


def _check_kv(ex: Exercise, student_cls, thorough: bool):
    n = 0
    for device, dtype in _settings(thorough):
        for i, spec in enumerate(_kv_specs(thorough)):
            label = (
                f"KVCache() then append(k, v) for chunks of {spec[2]} positions, k "
                f"(B={spec[0]}, h={spec[1]}, n, d_k={spec[3]}), v (.., d_v={spec[4]})"
            )
            where = f"{label} ({str(dtype).replace('torch.', '')} on {device.type})"
            chunks = _kv_chunks(spec, 7000 + i, dtype, device)
            expected = _kv_trace(_RefKVCache, chunks, lambda c: c())
            got = _kv_trace(student_cls, chunks, lambda c: _run_student(ex, student_cls, c))
            appended = 0
            for j, e in enumerate(expected):
                if j >= len(got):
                    break
                problem = _kv_entry_problem(e, got[j], appended, dtype, device)
                if problem:
                    hint = ""
                    for mistake in ex.mistakes:
                        try:
                            theirs = _kv_trace(mistake.impl, chunks, lambda c: c())
                        except Exception:
                            continue
                        # the whole trace must agree (a cache that forgets and one that only
                        # returns the new part look alike at the failing step, not at len)
                        same_trace = len(theirs) == len(got) and all(
                            _kv_entry_equal(a, b, dtype, device) for a, b in zip(theirs, got)
                        )
                        if same_trace and not _kv_entry_equal(theirs[j], e, dtype, device):
                            hint = f"\nLikely mistake: {mistake.sentence}"
                            break
                    raise CheckFailed(f"{ex.name}: {problem}\n  case: {where}{hint}")
                appended += e[0] == "append"
            # Gradients flow back through the cache to every chunk (training with a cache).
            k_all, v_all = got[-2][1]
            ref_k, ref_v = expected[-2][1]
            cot = torch.Generator().manual_seed(7100 + i)
            ck = torch.randn(ref_k.shape, generator=cot, dtype=torch.float64).to(device, dtype)
            cv = torch.randn(ref_v.shape, generator=cot, dtype=torch.float64).to(device, dtype)
            leaves = [t for pair in chunks for t in pair]
            ref_grads = torch.autograd.grad(
                (ref_k * ck).sum() + (ref_v * cv).sum(), leaves, allow_unused=True
            )
            loss = (k_all * ck).sum() + (v_all * cv).sum()
            if not loss.requires_grad:
                raise CheckFailed(
                    f"{ex.name}: no gradient flows back through your cache to the keys and values "
                    f"(.detach()?)\n  case: {where}"
                )
            stu_grads = torch.autograd.grad(loss, leaves, allow_unused=True)
            for m, (rg, sg) in enumerate(zip(ref_grads, stu_grads)):
                name = f"{'kv'[m % 2]} of chunk {m // 2}"
                if sg is None:
                    raise CheckFailed(f"{ex.name}: no gradient reaches {name}\n  case: {where}")
                problem = _compare_tensor(
                    rg, sg, f"the gradient with respect to {name}", dtype, device
                )
                if problem:
                    raise CheckFailed(f"{ex.name}: {problem}\n  case: {where}")
            n += 1
        problem = _kv_model_problem(ex, student_cls, device, dtype, 0)
        if problem:
            raise CheckFailed(
                f"{ex.name}: {problem}\n  case: a 2-layer GPT on idx (2, 9) "
                f"({str(dtype).replace('torch.', '')} on {device.type})"
            )
        n += 1
    return n, "every append and len, gradients, and a GPT decoding with your cache"


def KVCache(student_cls, thorough: bool = False) -> bool:
    """Check KVCache(): len(cache) -> cached positions; append(k (B, h, n, d_k), v (B, h, n, d_v))
    -> (all keys (B, h, L, d_k), all values (B, h, L, d_v)) so far; then inside a GPT."""
    return _run(_KV_EX, student_cls, None, None, thorough, _check_kv)
