"""Checks for lesson 08, exercise 5 — `KVCache`: followed step by step, then at work in a GPT.

What each ``append`` returns and what ``len`` says are compared with the reference after every
step, gradients must flow back through the cache to every chunk, and a GPT decoding chunk by
chunk with the student's caches must give the logits of the full recomputation: one whole trial
per case, run by a ``TrialDriver``.

Lesson 08's checks span three modules, imported in course order: ``lesson08`` (shift_targets,
lm_loss, next_token_probs), ``lesson08_sampling`` (sample_next) and this one.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import torch

from .. import gpt as _gpt
from ..multihead import KVCache as _RefKVCache
from .answer_drivers import Finding, TrialDriver
from .compare import compare_tensor, same_within_tolerance
from .devices import settings
from .drivers import init_parameters
from .exercise import CheckFailed, Exercise, Mistake
from .forbid import ImplementThisYourself

__all__ = ["KVCache"]


def _where(dtype, device) -> str:
    return f"({str(dtype).replace('torch.', '')} on {device.type})"


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


class _KVCountsAppends(_RefKVCache):
    """len(cache) counts the calls to append, not the positions."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __len__(self):
        return self.calls

    def append(self, k, v):
        self.calls += 1
        return super().append(k, v)


class _KVValuesFromKeys(_RefKVCache):
    """Copy-paste slip: the stored values are joined with the new keys."""

    def append(self, k, v):
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=-2)
            self.v = torch.cat([self.v, k], dim=-2)
        return self.k, self.v


class _KVTruthiness(_RefKVCache):
    """`if self.k:` on a tensor: fine while it is None, ambiguous once it holds keys."""

    def append(self, k, v):
        if self.k:
            self.k = torch.cat([self.k, k], dim=-2)
            self.v = torch.cat([self.v, v], dim=-2)
        else:
            self.k, self.v = k, v
        return self.k, self.v


class _KVLenWhenEmpty(_RefKVCache):
    """len reads self.k.shape[-2] even before the first append, when self.k is None."""

    def __len__(self):
        return self.k.shape[-2]


class _KVKeepsLastChunk(_RefKVCache):
    """Returns the old and new keys joined, but stores only the new chunk (len counts right)."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __len__(self):
        return self.n

    def append(self, k, v):
        keys = k if self.k is None else torch.cat([self.k, k], dim=-2)
        values = v if self.v is None else torch.cat([self.v, v], dim=-2)
        self.k, self.v, self.n = k, v, self.n + k.shape[-2]
        return keys, values


class _KVSharedStore:
    """The chunks kept in lists that are class attributes: every cache shares them."""

    keys: list = []
    values: list = []

    @classmethod
    def _check_reset(cls):  # the check starts each trace of this mutant from empty lists
        cls.keys.clear()
        cls.values.clear()

    def __len__(self):
        return sum(k.shape[-2] for k in self.keys)

    def append(self, k, v):
        self.keys.append(k)
        self.values.append(v)
        return torch.cat(self.keys, dim=-2), torch.cat(self.values, dim=-2)


class _KVHeadsAxis(_RefKVCache):
    """Joins and counts along axis 1 of (B, h, L, d_k), the heads, not the positions."""

    def __len__(self):
        return 0 if self.k is None else self.k.shape[1]

    def append(self, k, v):
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=1)
            self.v = torch.cat([self.v, v], dim=1)
        return self.k, self.v


class _KVStartsFloat32(_RefKVCache):
    """Starts from an empty float32 tensor, not None: torch.cat promotes half keys to float32."""

    def __init__(self):
        super().__init__()
        self.k, self.v = torch.zeros(0), torch.zeros(0)

    def __len__(self):
        return 0 if self.k.dim() == 1 else self.k.shape[-2]

    def append(self, k, v):
        self.k = torch.cat([self.k, k], dim=-2)
        self.v = torch.cat([self.v, v], dim=-2)
        return self.k, self.v


_GPT_CASE = "a GPT decoding with the cache"  # not a chunk spec
_HALF_CASE = "half precision"  # the last case: chunks in float16 and bfloat16
_HALF_SPEC = (2, 2, [3, 1, 2], 4, 4)


def _kv_cases(thorough: bool) -> list[tuple[int, object]]:
    # (B, h, chunk lengths, d_k, d_v): B, h, d_k and the lengths differ so axis mix-ups show;
    # then a GPT decoding with the cache.
    specs = [(2, 3, [4, 1, 1, 2], 5, 5)]
    if thorough:
        specs += [(1, 1, [1, 1, 1], 2, 2), (3, 2, [2, 3, 1, 1], 4, 6), (2, 4, [6, 1, 1], 3, 3)]
    return [*enumerate(specs), (0, _GPT_CASE), (0, _HALF_CASE)]


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
    reset = getattr(cls, "_check_reset", None)  # a catalogued mutant's class-level state
    if reset is not None:
        reset()

    def make(key="cache"):
        holder[key] = cls()
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
    # a second cache made now starts empty: each instance keeps its own keys and values
    if not step("new", lambda: make("fresh")):
        return trace
    step("fresh-len", lambda: len(holder["fresh"]))
    return trace


def _kv_entry_equal(a, b, dtype, device) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "error":  # the same error and message, up to the sizes it quotes
        return re.sub(r"\d+", "#", a[1]) == re.sub(r"\d+", "#", b[1])
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
    if expected[0] == "fresh-len" and got[1] != expected[1]:
        return (
            f"a second KVCache() made after this one was filled has len {got[1]!r}, not 0: "
            "each cache must start empty and keep its own keys and values"
        )
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
    if spec == _HALF_CASE:
        return _kv_half_finding(impl, device, dtype, call)
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
    k_all, v_all = [entry for entry in got if entry[0] == "append"][-1][1]
    ref_k, ref_v = [entry for entry in expected if entry[0] == "append"][-1][1]
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


def _kv_half_finding(cls, device, dtype, call) -> Finding | int | None:
    """Keys and values appended in float16 and bfloat16 come back in that dtype (the cache
    joins, it does not convert). Run once per device, under the float32 setting."""
    if dtype != torch.float32:
        return 0
    B, h, lengths, d_k, d_v = _HALF_SPEC
    for half in (torch.float16, torch.bfloat16):
        name = str(half).replace("torch.", "")
        where = (
            f"KVCache() then append(k, v) for chunks of {lengths} positions, k (B={B}, h={h}, "
            f"n, d_k={d_k}), v (.., d_v={d_v}) ({name} on {device.type})"
        )
        chunks = _kv_chunks(_HALF_SPEC, 7300, half, device)
        got = _kv_trace(cls, chunks, call)
        appended = 0
        for entry in got:
            if entry[0] == "error":
                problem = _kv_entry_problem(("append",), entry, appended, dtype, device)
                return Finding(problem, where, "half-error", entry[1])
            if entry[0] != "append":
                continue
            appended += 1
            out = entry[1]
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                continue  # named by the float cases
            for tensor, what in zip(out, ("keys", "values")):
                if isinstance(tensor, torch.Tensor) and tensor.dtype != half:
                    problem = (
                        f"the cached {what} returned at append number {appended} have dtype "
                        f"{tensor.dtype}, but the keys and values appended were {half}: the "
                        "cache must hand them back in the dtype it was given"
                    )
                    return Finding(problem, where, "dtype", ("dtype", half, tensor.dtype))
    return None


def _kv_model_finding(cls, device, dtype, i: int, call) -> Finding | None:
    """A GPT run with the caches, prompt then chunks, must give the full logits."""
    case = f"a 2-layer GPT on idx (2, 9) {_where(dtype, device)}"
    what = "a GPT generating with your KVCache"
    with torch.random.fork_rng(devices=[]):
        model = _gpt.GPT(
            _gpt.GPTConfig(vocab_size=11, n_positions=16, d_model=8, n_heads=2, n_layers=2)
        )
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


def _new_cache_not_empty(evidence) -> bool:
    """Whether a trace first fails where a new cache (before any append into it) holds
    positions: state kept on the class, shared by every instance."""
    got, j, expected_j = evidence[:3]
    value = got[j][1]
    return (
        expected_j[0] in ("len", "fresh-len")
        and expected_j[1] == 0
        and got[j][0] == expected_j[0]
        and isinstance(value, int)
        and not isinstance(value, bool)
        and value > 0
    )


def _values_hold_keys(evidence) -> bool:
    """Whether a trace first fails at an append whose keys are right and whose values, at every
    position where they are wrong, are the keys of that position (a copy-paste slip between
    k and v, or self.k and self.v, whichever part of the values it hit)."""
    got, j, expected_j, dtype, device = evidence
    if got[j][0] != "append" or expected_j[0] != "append":
        return False
    out, (keys, values) = got[j][1], expected_j[1]
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        return False
    got_k, got_v = out
    if not isinstance(got_v, torch.Tensor) or got_v.shape != values.shape:
        return False
    if not same_within_tolerance(got_k, keys, dtype, device) or keys.shape[-1] < values.shape[-1]:
        return False
    keys = keys[..., : values.shape[-1]]
    wrong = 0
    for t in range(values.shape[-2]):
        if same_within_tolerance(got_v[..., t, :], values[..., t, :], dtype, device):
            continue
        if not same_within_tolerance(got_v[..., t, :], keys[..., t, :], dtype, device):
            return False
        wrong += 1
    return wrong > 0


def _kv_matches(mine, theirs) -> bool:
    """A failing step: the mistake's whole trace equals the student's, and differs from the
    reference's where the student's first does. Half precision: the same dtype came back."""
    if mine is None or theirs is None:
        return False  # gradients and the GPT name no mistake
    if not isinstance(mine[0], list) or not isinstance(theirs[0], list):
        return mine == theirs  # a half-precision finding: ("dtype", given, returned), or an error
    if _values_hold_keys(mine) and _values_hold_keys(theirs):
        return True
    if _new_cache_not_empty(mine) and _new_cache_not_empty(theirs):
        return True  # state shared by the instances: the traces depend on what ran before
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
        Mistake(
            "counts-appends",
            "len(cache) counts the calls to append: it is the number of cached positions, "
            "self.k.shape[-2], and one append may bring several.",
            _KVCountsAppends,
        ),
        Mistake(
            "values-from-keys",
            "the cached values hold keys (a copy-paste slip: k or self.k where v or self.v "
            "belongs): join the stored values with the new values, "
            "self.v = torch.cat([self.v, v], dim=-2).",
            _KVValuesFromKeys,
        ),
        Mistake(
            "tensor-truth",
            "`if self.k:` asks a tensor for one truth value, which fails once it holds more than "
            "one number: test `if self.k is None:` (start from None) to know whether anything "
            "is cached.",
            _KVTruthiness,
        ),
        Mistake(
            "len-when-empty",
            "len(cache) fails before the first append, when nothing is stored yet (self.k is "
            "None): return 0 then, 0 if self.k is None else self.k.shape[-2].",
            _KVLenWhenEmpty,
        ),
        Mistake(
            "keeps-last-chunk",
            "the cache stores only the newest chunk, so older ones are lost after two appends: "
            "store the joined keys and values, self.k = torch.cat([self.k, k], dim=-2), and "
            "return them.",
            _KVKeepsLastChunk,
        ),
        Mistake(
            "shared-state",
            "every cache shares one store (lists or tensors set on the class, not on self): "
            "create them in __init__ (self.k = None), so that each cache, one per layer, "
            "starts empty.",
            _KVSharedStore,
        ),
        Mistake(
            "heads-axis",
            "the chunks are joined and counted along axis 1, the heads of (B, h, L, d_k): the "
            "positions are axis -2, so join with torch.cat([self.k, k], dim=-2) and count with "
            "self.k.shape[-2].",
            _KVHeadsAxis,
        ),
        Mistake(
            "float32-start",
            "half-precision keys and values came back as float32: the cache starts from a "
            "float32 tensor (torch.empty(0), torch.zeros(0), torch.tensor([])) and torch.cat "
            "promotes to the wider dtype; start from None and store the first chunk as it is "
            "(self.k = k), so that the cache keeps the dtype and device it is given.",
            _KVStartsFloat32,
        ),
    ],
    driver=TrialDriver(
        _kv_cases,
        _kv_trial,
        covered="every append and len, gradients, a GPT decoding with your cache, and half "
        "precision",
        matches=_kv_matches,
        settings=settings,
    ),
    doc="KVCache(): len(cache) -> cached positions; append(k (B, h, n, d_k), v (B, h, n, d_v)) "
    "-> (all keys (B, h, L, d_k), all values (B, h, L, d_v)) so far; then inside a GPT",
)
