"""Checks for lesson 08, exercise 4 — `sample_next`: random draws, judged by their statistics.

The frequencies of N draws from one row of logits are compared with the exact distribution
(the tolerance is argued below), greedy cases must give the argmax, and a generator seeded alike
must reproduce the draws: one whole trial per case, run by a ``TrialDriver``.

Lesson 08's checks span three modules, imported in course order: ``lesson08`` (shift_targets,
lm_loss, next_token_probs), this one, and ``lesson08_kvcache`` (KVCache). Together with their
trials they are twice the ~600 lines a check module should stay under.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import gpt as _gpt
from .answer_drivers import Finding, TrialDriver
from .devices import settings
from .exercise import Exercise, Mistake

__all__ = ["sample_next"]


def _where(dtype, device) -> str:
    return f"({str(dtype).replace('torch.', '')} on {device.type})"


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
    if temperature == 0 or top_k == 1:
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(z < torch.topk(z, top_k, dim=-1).values[:, -1:], float("-inf"))
    return torch.softmax(z, dim=-1)


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


def _sample_squeeze_all(logits, temperature=1.0, top_k=None, generator=None):
    probs = _true_probs(logits, temperature, top_k).float()
    return torch.multinomial(probs, 1, generator=generator).squeeze()


def _sample_softmax_of_probs(logits, temperature=1.0, top_k=None, generator=None):
    """Takes a softmax of the probabilities again: a flatter distribution."""
    probs = torch.softmax(_true_probs(logits, temperature, top_k).float(), dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _sample_int32(logits, temperature=1.0, top_k=None, generator=None):
    probs = _true_probs(logits, temperature, top_k).float()
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1).int()


def _sample_reseeds(logits, temperature=1.0, top_k=None, generator=None):
    """Reseeds the global generator from generator.initial_seed(): every call draws the same."""
    if generator is not None:
        torch.manual_seed(generator.initial_seed())
    probs = _true_probs(logits, temperature, top_k).float()
    return torch.multinomial(probs, 1).squeeze(-1)


def _sample_fixed_default(logits, temperature=1.0, top_k=None, generator=None):
    """Without a generator, one made and seeded inside: every such call draws alike."""
    if generator is None:
        generator = torch.Generator(device=logits.device).manual_seed(0)
    probs = _true_probs(logits, temperature, top_k).float()
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _sample_temperature_twice(logits, temperature=1.0, top_k=None, generator=None):
    """Divides by T, then next_token_probs divides again: the logits over T²."""
    scaled = logits / temperature if temperature > 0 else logits
    probs = _true_probs(scaled, temperature, top_k).float()
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


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
    # the stated shape (B,) for a batch of one, visible too: a squeeze() would give a 0-d draw;
    # its logits are large (about 1000), where exp(logits) unnormalised overflows
    specs.append(("one-row", (1, 6), 1.0, None))
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


def _cuda_indices(device: torch.device) -> list[int]:
    if device.type != "cuda":
        return []
    return [device.index if device.index is not None else torch.cuda.current_device()]


def _sample_trial(impl, case: tuple[int, tuple], setting, call) -> Finding | None:
    """`case` is (index, (kind, rows, temperature, top_k)); `setting` is (device, dtype). The
    evidence is (tag, what was seen): the frequencies, the greedy ids or the result's shape."""
    device, dtype = setting
    with torch.random.fork_rng(devices=_cuda_indices(device)):
        return _sample_finding(impl, *case, device, dtype, call)


def _sample_finding(fn, i: int, spec: tuple, device, dtype, call) -> Finding | None:
    kind, rows, temperature, top_k = spec
    seed = 5000 + i
    label = _describe_call(rows, temperature, top_k, _N_SAMPLES if kind == "sampled" else None)
    if kind == "one-row":
        label = label.replace("random logits", "random logits + 1000,")
    case = f"{label} {_where(dtype, device)}"

    def draw(logits):
        generator = _new_generator(device, seed)
        return call(
            lambda: fn(logits.clone(), temperature, top_k, generator), "your function", case
        )

    if kind == "one-row":
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(*rows, generator=g, dtype=torch.float64) + 1000.0
        got = draw(logits.to(device, dtype))
        problem = _draws_problem(got, rows[0], rows[1], device)
        return Finding(problem, case, "shape", ("shape", problem)) if problem else None
    if kind == "greedy":
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(*rows, generator=g, dtype=torch.float64).to(device, dtype)
        got = draw(logits)
        expected = logits.argmax(dim=-1)
        problem = _draws_problem(got, rows[0], rows[1], device)
        if problem:
            return Finding(problem, case, "shape", ("shape", problem))
        if not torch.equal(got, expected):
            problem = (
                f"with temperature={temperature}, top_k={top_k} the result must be the argmax of "
                f"each row {expected.tolist()}, got {got.tolist()}"
            )
            return Finding(problem, case, "greedy", ("greedy", got.cpu()))
        return None

    V, N = len(rows), _N_SAMPLES
    row = torch.tensor(rows, dtype=torch.float64)
    logits = row.to(device, dtype).expand(N, V).contiguous()
    p = _gpt.next_token_probs(row[None], temperature, top_k)[0]  # the exact distribution
    got = draw(logits)
    problem = _draws_problem(got, N, V, device)
    if problem:
        return Finding(problem, case, "shape", ("shape", problem))
    freq = torch.bincount(got.cpu(), minlength=V).double() / N
    impossible = (p == 0) & (freq > 0)
    if impossible.any():
        token = int(impossible.nonzero()[0])
        problem = (
            f"token {token} has probability 0 here (it is not among the top_k={top_k} logits) "
            f"but was drawn {int(freq[token] * N)} times out of {N}"
        )
        return Finding(problem, case, "impossible", ("impossible", freq))
    t = _sample_tolerance()
    error = (freq - p).abs()
    if error.max() > t:
        token = int(error.argmax())
        problem = (
            f"token {token} was drawn with frequency {freq[token]:.4f} but its probability is "
            f"{p[token]:.4f} (a correct sampler stays within {t:.3f} except with probability "
            f"< 1e-10)\n  frequencies {[round(x, 3) for x in freq.tolist()]}\n  probabilities "
            f"{[round(x, 3) for x in p.tolist()]}"
        )
        return Finding(problem, case, "frequency", ("frequency", freq))
    # Reproducible: the same seed gives the same draws, whatever the global generator's state.
    with torch.random.fork_rng(devices=_cuda_indices(device)):
        _reseed_global(device, 12345)
        first = draw(logits)
        _reseed_global(device, 54321)
        again = draw(logits)
    if not (isinstance(first, torch.Tensor) and isinstance(again, torch.Tensor)) or not (
        first.shape == again.shape and torch.equal(first, again)
    ):
        problem = (
            "two calls with generators seeded alike gave different tokens: the draws must come "
            "from `generator`, not from torch's global random state"
        )
        return Finding(problem, case, "reproducible", ("reproducible", None))
    # ...and a generator's state moves on: two calls with one generator draw different tokens
    # (all N = 20,000 alike happens to a correct sampler with probability far below 1e-100).
    generator = _new_generator(device, seed)
    first, again = (
        call(lambda: fn(logits.clone(), temperature, top_k, generator), "your function", case)
        for _ in range(2)
    )
    if (
        isinstance(first, torch.Tensor)
        and isinstance(again, torch.Tensor)
        and torch.equal(first, again)
    ):
        problem = (
            f"two calls with one generator drew the same {N:,} tokens: the draws must come from "
            "the generator's state, which moves on with each draw (torch.multinomial(probs, 1, "
            "generator=generator)); do not reseed anything from it"
        )
        return Finding(problem, case, "repeats", ("repeats", None))
    return _unseeded_finding(fn, logits, temperature, top_k, device, case, call)


def _unseeded_finding(fn, logits, temperature, top_k, device, case, call) -> Finding | None:
    """Without a generator the draws come from torch's global random state: two calls after
    reseeding it differently draw different tokens (a generator made and seeded inside the
    function draws alike on every call, whatever the program's seed). 2,000 rows: all alike
    twice happens to a correct sampler with probability far below 1e-100 here too."""
    few = logits[:2000].clone()
    with torch.random.fork_rng(devices=_cuda_indices(device)):
        unseeded = []
        for global_seed in (2024, 4202):
            _reseed_global(device, global_seed)
            unseeded.append(
                call(lambda: fn(few.clone(), temperature, top_k, None), "your function", case)
            )
    first, again = unseeded
    if (
        isinstance(first, torch.Tensor)
        and isinstance(again, torch.Tensor)
        and torch.equal(first, again)
    ):
        problem = (
            "without a generator, two calls with torch's global generator seeded differently "
            f"drew the same {len(few):,} tokens: with generator=None the draws must come from "
            "the global random state (torch.multinomial(probs, 1, generator=None) does that)"
        )
        return Finding(problem, case, "unseeded-repeats", ("unseeded-repeats", None))
    return None


def _sample_matches(mine, theirs) -> bool:
    """Frequencies within twice the tolerance; greedy ids and shapes equal."""
    tag, a = mine
    b = theirs[1]
    if tag in ("frequency", "impossible"):
        return (a - b).abs().max().item() <= 2 * _sample_tolerance()
    if tag == "greedy":
        return torch.equal(a, b)
    return a == b  # "shape": the shapes; "reproducible", "repeats", "unseeded-repeats": None


sample_next = Exercise(
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
            "argmax",
            "you always take the argmax: sample_next must draw a token from "
            "next_token_probs(...) (torch.multinomial), greedy only when T = 0 or top_k = 1.",
            _sample_argmax,
        ),
        Mistake(
            "global-rng",
            "the draws ignore `generator`, so they are not reproducible: pass it on, "
            "torch.multinomial(probs, 1, generator=generator).",
            _sample_global_rng,
        ),
        Mistake(
            "no-temperature",
            "the temperature is ignored: pass it to next_token_probs (the logits are divided "
            "by T before the softmax).",
            _sample_no_temperature,
        ),
        Mistake(
            "no-top-k",
            "top_k is ignored: tokens outside the k largest logits were drawn; pass top_k to "
            "next_token_probs.",
            _sample_no_top_k,
        ),
        Mistake(
            "column",
            "the result has shape (B, 1): torch.multinomial returns one column of draws, "
            "squeeze it to (B,).",
            _sample_column,
        ),
        Mistake(
            "squeeze-all",
            "squeeze() drops every size-1 axis, so a batch of one row gives a 0-d tensor, not "
            "shape (1,): squeeze only the draws' axis, squeeze(-1).",
            _sample_squeeze_all,
        ),
        Mistake(
            "softmax-twice",
            "the probabilities went through a second softmax, which flattens them: draw from "
            "next_token_probs(...) as it is.",
            _sample_softmax_of_probs,
        ),
        Mistake(
            "int32",
            "the ids were cast to another dtype: token ids are torch.long (int64), as "
            "torch.multinomial returns them and nn.Embedding and F.cross_entropy expect; do not "
            "cast them.",
            _sample_int32,
        ),
        Mistake(
            "reseeds",
            "each call reseeds torch's global generator from generator.initial_seed(), so every "
            "call draws the same tokens (and the program's own random state is reset): draw with "
            "torch.multinomial(probs, 1, generator=generator) and touch no seed.",
            _sample_reseeds,
        ),
        Mistake(
            "fixed-default-generator",
            "without a generator your function draws the same tokens whatever torch's seed: "
            "a torch.Generator made and seeded inside it repeats itself on every call. With "
            "generator=None pass None on to torch.multinomial, which then draws from torch's "
            "global random state.",
            _sample_fixed_default,
        ),
        Mistake(
            "temperature-twice",
            "the logits are divided by the temperature twice (by you, then by "
            "next_token_probs): pass the raw logits and T to next_token_probs, which divides "
            "once.",
            _sample_temperature_twice,
        ),
    ],
    driver=TrialDriver(
        lambda thorough: list(enumerate(_sample_specs(thorough))),
        _sample_trial,
        covered=f"distribution of {_N_SAMPLES:,} draws per case, greedy cases, reproducibility",
        matches=_sample_matches,
        settings=settings,
    ),
    doc="sample_next(logits (B, V), temperature=1.0, top_k=None, generator=None) -> (B,) ids: "
    "draws follow next_token_probs, greedy cases give the argmax, a seeded generator reproduces",
    uses=("next_token_probs",),
)
