"""Checks for lesson 08, the generation side: `sample_next` and `KVCache`.

- `sample_next` draws at random, so it is checked by its statistics: the frequencies of N draws
  against the exact distribution, greedy cases against the argmax, and a seeded generator must
  reproduce its draws;
- `KVCache` is followed step by step (what each `append` returns, what `len` says), gradients
  must flow back through it, and a GPT decoding with it must give the full recomputation's logits.

Both are judged by a whole trial per case (``TrialDriver``). Lesson 08's first three exercises
are in ``lesson08``, imported first (course order); these two are apart because their trials
would make the lesson twice the ~600 lines a check module should stay under.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .. import gpt as _gpt
from ..multihead import KVCache as _RefKVCache
from .drivers import Finding, TrialDriver
from .engine import (
    CheckFailed,
    Exercise,
    ImplementThisYourself,
    Mistake,
    compare_tensor,
    init_parameters,
    same_within_tolerance,
    settings,
)
from .lesson08 import _keep_ties, _probs_with

__all__ = ["KVCache", "sample_next"]


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


def _shape_of(got):
    return tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__


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
    case = f"{label} {_where(dtype, device)}"

    def draw(logits):
        generator = _new_generator(device, seed)
        return call(
            lambda: fn(logits.clone(), temperature, top_k, generator), "your function", case
        )

    if kind == "greedy":
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(*rows, generator=g, dtype=torch.float64).to(device, dtype)
        got = draw(logits)
        expected = logits.argmax(dim=-1)
        problem = _draws_problem(got, rows[0], rows[1], device)
        if problem:
            return Finding(problem, case, "shape", ("shape", _shape_of(got)))
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
        return Finding(problem, case, "shape", ("shape", _shape_of(got)))
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
    return None


def _sample_matches(mine, theirs) -> bool:
    """Frequencies within twice the tolerance; greedy ids and shapes equal."""
    tag, a = mine
    b = theirs[1]
    if tag in ("frequency", "impossible"):
        return (a - b).abs().max().item() <= 2 * _sample_tolerance()
    if tag == "greedy":
        return torch.equal(a, b)
    return a == b  # "shape": the shapes; "reproducible": None == None


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
            "you always take the argmax: sample_next must *draw* a token from "
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
            "softmax-twice",
            "the probabilities went through a second softmax, which flattens them: draw from "
            "next_token_probs(...) as it is.",
            _sample_softmax_of_probs,
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
)


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


def _kv_cases(thorough: bool) -> list[tuple[int, object]]:
    # (B, h, chunk lengths, d_k, d_v): B, h, d_k and the lengths differ so axis mix-ups show;
    # then a GPT decoding with the cache.
    specs = [(2, 3, [4, 1, 1, 2], 5, 5)]
    if thorough:
        specs += [(1, 1, [1, 1, 1], 2, 2), (3, 2, [2, 3, 1, 1], 4, 6), (2, 4, [6, 1, 1], 3, 3)]
    return [*enumerate(specs), (0, _GPT_CASE)]


_GPT_CASE = "a GPT decoding with the cache"  # the last case: not a chunk spec


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


def _attempt(thunk: Callable) -> tuple[bool, object]:
    """(True, result), or (False, "Error: message") when the step raised (the trace records it)."""
    try:
        return True, thunk()
    except (ImplementThisYourself, NotImplementedError, CheckFailed):
        raise
    except Exception as err:
        return False, f"{type(err).__name__}: {err}"


def _kv_trace(cls, chunks, call: Callable) -> list[tuple[str, object]]:
    """[("len", n) | ("append", (k, v)) | ("error", name), ...] for: new, len, then each
    append followed by len. Stops at the first error."""
    trace: list[tuple[str, object]] = []

    def step(kind, thunk):
        ok, value = call(lambda: _attempt(thunk), "your KVCache")
        trace.append((kind, value) if ok else ("error", value))
        return ok

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
        return isinstance(a[1], (tuple, list)) and same_within_tolerance(a[1], b[1], dtype, device)
    return a[1] == b[1]


def _kv_entry_problem(expected, got, n_appended: int, dtype, device) -> str | None:
    if expected[0] == "append":
        what = f"at append number {n_appended + 1}"
    else:
        what = "before any append" if n_appended == 0 else f"after append number {n_appended}"
    if got[0] == "error":
        step = {"new": "KVCache()", "len": "len(cache)"}.get(expected[0], "cache.append(k, v)")
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
            problem = compare_tensor(e, o, f"the cached {name} returned {what}", dtype, device)
            if problem:
                return problem
    return None


def _kv_trial(impl, case: tuple[int, object], setting, call) -> Finding | None:
    """`case` is (index, (B, h, chunk lengths, d_k, d_v)) or (index, _GPT_CASE). A failing
    step's evidence is the whole trace (a cache that forgets and one that only returns the new
    part look alike at the failing step, not at len); gradient and GPT findings name no mistake."""
    i, spec = case
    device, dtype = setting
    if spec == _GPT_CASE:
        return _kv_model_finding(impl, device, dtype, i, call)
    label = (
        f"KVCache() then append(k, v) for chunks of {spec[2]} positions, k "
        f"(B={spec[0]}, h={spec[1]}, n, d_k={spec[3]}), v (.., d_v={spec[4]})"
    )
    where = f"{label} {_where(dtype, device)}"
    chunks = _kv_chunks(spec, 7000 + i, dtype, device)
    expected = _kv_trace(_RefKVCache, chunks, lambda thunk, *_: thunk())
    got = _kv_trace(impl, chunks, call)
    appended = 0
    for j, e in enumerate(expected):
        if j >= len(got):
            break
        problem = _kv_entry_problem(e, got[j], appended, dtype, device)
        if problem:
            return Finding(problem, where, "step", (got, j, e, dtype, device))
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
        problem = "no gradient flows back through your cache to the keys and values (.detach()?)"
        return Finding(problem, where, "gradient")
    stu_grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    for m, (rg, sg) in enumerate(zip(ref_grads, stu_grads)):
        name = f"{'kv'[m % 2]} of chunk {m // 2}"
        if sg is None:
            return Finding(f"no gradient reaches {name}", where, "gradient")
        problem = compare_tensor(rg, sg, f"the gradient with respect to {name}", dtype, device)
        if problem:
            return Finding(problem, where, "gradient")
    return None


def _kv_model_finding(cls, device, dtype, i: int, call) -> Finding | None:
    """A GPT run with the caches, prompt then chunks, must give the full logits."""
    case = f"a 2-layer GPT on idx (2, 9) {_where(dtype, device)}"
    what = "a GPT generating with your KVCache"
    with torch.random.fork_rng(devices=[]):
        model = _gpt.GPT(vocab_size=11, n_positions=16, d_model=8, n_heads=2, n_layers=2)
    init_parameters(model, seed=6000 + i)
    model.to(device=device, dtype=dtype).eval()
    g = torch.Generator().manual_seed(6100 + i)
    idx = torch.randint(0, 11, (2, 9), generator=g).to(device)
    chunks = [3, 1, 2, 1, 1, 1]
    with torch.no_grad():
        expected = model(idx)
        caches = call(lambda: [cls() for _ in model.blocks], what, case)
        pieces, start = [], 0
        for n in chunks:
            piece = idx[:, start : start + n]
            pieces.append(call(lambda p=piece: model(p, cache=caches), what, case))
            start += n
        got = torch.cat(pieces, dim=1)
    what_differs = "the logits of a GPT fed one chunk at a time with your KVCache"
    problem = compare_tensor(expected, got, what_differs, dtype, device)
    if problem:
        problem += f" (chunks of {chunks} tokens; the reference: all tokens at once)"
        return Finding(problem, case, "gpt")
    return None


def _kv_matches(mine, theirs) -> bool:
    """A failing step: the mistake's whole trace equals the student's, and differs from the
    reference's where the student's first does."""
    if mine is None or theirs is None:
        return False  # gradients and the GPT name no mistake
    got, j, expected_j, dtype, device = mine
    trace = theirs[0]
    same_trace = len(trace) == len(got) and all(
        _kv_entry_equal(a, b, dtype, device) for a, b in zip(trace, got)
    )
    return same_trace and not _kv_entry_equal(trace[j], expected_j, dtype, device)


KVCache = Exercise(
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
            "wrong-axis",
            "the new keys and values are joined along the wrong axis: the positions are "
            "axis -2 of (B, h, L, d_k), so use torch.cat([old, new], dim=-2).",
            _KVWrongAxis,
        ),
        Mistake(
            "forgets-old",
            "the cache forgets the old keys and values: append must concatenate the new ones "
            "to those already stored, not replace them.",
            _KVForgetsOld,
        ),
        Mistake(
            "returns-new",
            "append returned only the new keys and values: it must return everything cached "
            "so far (old and new together), which the attention then uses.",
            _KVReturnsNew,
        ),
        Mistake(
            "prepends",
            "the new keys and values went in front of the old ones: positions must stay in "
            "order, torch.cat([self.k, k], dim=-2).",
            _KVPrepends,
        ),
        Mistake(
            "len-batch",
            "len(cache) counts the wrong axis: it is the number of cached positions, "
            "self.k.shape[-2] (0 before the first append).",
            _KVLenBatch,
        ),
        Mistake(
            "swapped",
            "append returned (values, keys): return (keys, values) in that order.",
            _KVSwapped,
        ),
    ],
    driver=TrialDriver(
        _kv_cases,
        _kv_trial,
        covered="every append and len, gradients, and a GPT decoding with your cache",
        matches=_kv_matches,
        settings=settings,
    ),
    doc="KVCache(): len(cache) -> cached positions; append(k (B, h, n, d_k), v (B, h, n, d_v)) "
    "-> (all keys (B, h, L, d_k), all values (B, h, L, d_v)) so far; then inside a GPT",
)
