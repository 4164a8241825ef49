"""Checks for lesson 12 — attention at scale: `online_softmax` and `tiled_attention`.

Both are compared with the reference (outputs and gradients, float64 and float32, every device when
thorough). Then one structural case each, watched through a torch function mode: `online_softmax`
must never reduce a whole row at once (it works block by block), and `tiled_attention` must never
build a tensor as large as the (L_q, L_k) score matrix.
"""

from __future__ import annotations

import math

import torch
from torch.overrides import TorchFunctionMode

from .. import efficient as _efficient
from .drivers import CustomDriver, FunctionDriver
from .exercise import Case, CheckFailed, Exercise, Mistake, fail
from .forbid import ImplementThisYourself

__all__ = ["online_softmax", "tiled_attention"]

# ==============================================================================================
# Mutants: the reference with one bug each (private copies: the reference is forbidden while a
# mutant runs as a "student" in the tests).

_NEG_INF = float("-inf")


def _finite(m):
    return torch.where(torch.isneginf(m), torch.zeros_like(m), m)


def _softmax_blocks(scores, block_size, bug=""):
    def safe(m):
        return m if bug == "unguarded-max" else _finite(m)

    m = scores.new_full(scores.shape[:-1], 0.0 if bug == "zero-start" else _NEG_INF)
    row_sum = scores.new_zeros(scores.shape[:-1])
    parts = []
    for start in range(0, scores.shape[-1], block_size):
        x = scores[..., start : start + block_size]
        if bug == "partial-block-dropped" and start > 0 and x.shape[-1] < block_size:
            break  # range(L // block_size) full blocks only
        if bug == "no-max":
            row_sum = row_sum + torch.exp(x).sum(-1)
            continue
        if bug == "block-normalised":
            e = torch.exp(x - safe(x.amax(-1))[..., None])
            parts.append(e / e.sum(-1, keepdim=True))
            continue
        m_new = x.amax(-1) if bug == "block-max" else torch.maximum(m, x.amax(-1))
        alpha = 1.0 if bug == "sum-not-rescaled" else torch.exp(m - safe(m_new))
        if bug == "factor-flipped":  # exp(m' − m), 0 while m is still −inf
            alpha = torch.where(
                torch.isneginf(m), torch.zeros_like(m), torch.exp(safe(m_new) - safe(m))
            )
        against = m if bug == "stale-max" else m_new
        row_sum = row_sum * alpha + torch.exp(x - safe(against)[..., None]).sum(-1)
        m = m_new
    if bug == "no-max":
        return torch.exp(scores) / row_sum[..., None]
    if bug == "block-normalised":
        return torch.cat(parts, -1)
    return torch.exp(scores - safe(m)[..., None]) / row_sum[..., None]


def _softmax_bug(bug: str):
    """The catalogued online-softmax mistake `bug`, with the exercise's signature."""

    def impl(scores, block_size):
        return _softmax_blocks(scores, block_size, bug)

    impl.__name__ = impl.__qualname__ = f"online_softmax_{bug.replace('-', '_')}"
    return impl


def _softmax_whole_row(scores, block_size):
    """Right numbers, but not online: the max and the sum of the whole row at once."""
    e = torch.exp(scores - _finite(scores.amax(-1, keepdim=True)))
    return e / e.sum(-1, keepdim=True)


def _tiled(q, k, v, mask, block_size, bug=""):
    def safe(m):  # with finite fills the max is never -inf, so that mutant needs no guard
        return m if bug in ("unguarded-max", "mask-finite") else _finite(m)

    scale = 1.0 if bug == "no-scale" else 1.0 / math.sqrt(q.shape[-1])
    m = row_sum = o = None
    for start in range(0, k.shape[-2], block_size):
        k_b, v_b = k[..., start : start + block_size, :], v[..., start : start + block_size, :]
        n = k_b.shape[-2]
        if bug == "partial-block-dropped" and start > 0 and n < block_size:
            break  # range(L_k // block_size) whole blocks only
        s = q @ k_b.transpose(-2, -1) * scale
        if mask is not None:
            cols = slice(0, n) if bug == "mask-block-local" else slice(start, start + n)
            fill = -1e9 if bug == "mask-finite" else _NEG_INF
            keep_whole = mask.shape[-1] == 1 and bug != "broadcast-mask-sliced"
            s = s.masked_fill(~(mask if keep_whole else mask[..., cols]), fill)
        if m is None:
            m = s.new_full(s.shape[:-1], _NEG_INF)
            row_sum = s.new_zeros(s.shape[:-1])
            o = s.new_zeros((*s.shape[:-1], v.shape[-1]))
        m_new = s.amax(-1) if bug == "block-max" else torch.maximum(m, s.amax(-1))
        alpha = torch.exp(m - safe(m_new))
        if bug == "rescale-after-update":
            alpha = torch.exp(safe(m_new) - safe(m_new))
        p = torch.exp(s - safe(m if bug == "stale-max" else m_new)[..., None])
        row_sum = row_sum * (1.0 if bug == "sum-not-rescaled" else alpha) + p.sum(-1)
        o = o * (1.0 if bug == "output-not-rescaled" else alpha[..., None]) + p @ v_b
        m = m_new
    if bug == "no-final-normalisation":
        return o
    if bug == "nan-rows":
        return o / row_sum[..., None]
    return o / torch.where(row_sum == 0, torch.ones_like(row_sum), row_sum)[..., None]


def _tiled_bug(bug: str):
    """The catalogued tiled-attention mistake `bug`, with the exercise's signature."""

    def impl(q, k, v, mask=None, block_size=64):
        return _tiled(q, k, v, mask, block_size, bug)

    impl.__name__ = impl.__qualname__ = f"tiled_attention_{bug.replace('-', '_')}"
    return impl


def catalogued_crash(ex: Exercise, cases, thorough: bool, student, failed: CheckFailed):
    """The catalogued mistake behind a crash no mistake was named for (`failed`: a
    FunctionDriver(cases) failure whose cause is the student's error). A mistake that crashes
    alike on the same case is named by the driver already (`drivers._same_crash`); this names the
    first one whose result the student's code gives on another case, where it does not raise (a
    head index i // h_kv runs past the last K/V head only when n_rep > h_kv). None otherwise."""
    if failed.cause is None or failed.mistake_key is not None:
        return None
    keys = {m.key for m in ex.mistakes}
    for case in cases(thorough):
        try:
            FunctionDriver(lambda _thorough, case=case: [case]).run(ex, student, False)
        except CheckFailed as other:
            if other.mistake_key in keys:
                return ex.mistake(other.mistake_key)
    return None


def run_naming_crashes(ex: Exercise, driver: FunctionDriver, cases, student, thorough: bool):
    """driver.run(ex, student, thorough); a crash that names no mistake is named by
    `catalogued_crash` where it can be."""
    try:
        return driver.run(ex, student, thorough)
    except CheckFailed as failed:
        mistake = catalogued_crash(ex, cases, thorough, student, failed)
        if mistake is None:
            raise
        fail(ex, failed.problem, failed.case, mistake, cause=failed.cause)


def _tiled_query_tiles(q, k, v, mask=None, block_size=64):
    """Right numbers, but tiles the queries: each block of queries against every key at once."""
    outs = []
    for start in range(0, q.shape[-2], block_size):
        rows = slice(start, start + block_size)
        m = mask
        if mask is not None and mask.dim() >= 2 and mask.shape[-2] != 1:
            m = mask[..., rows, :]
        outs.append(_tiled(q[..., rows, :], k, v, m, max(k.shape[-2], 1)))
    return torch.cat(outs, dim=-2)


def _tiled_full_matrix(q, k, v, mask=None, block_size=64):
    """Right numbers, but the whole (L_q, L_k) score matrix at once (block_size ignored)."""
    return _tiled(q, k, v, mask, max(k.shape[-2], 1))


# ==============================================================================================
# Watching what the student's code builds: a torch function mode sees every torch call.


def _tensors(out):
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, (tuple, list)):
        for item in out:
            yield from _tensors(item)


class _Watch(TorchFunctionMode):
    """Records the largest floating tensor produced, and every reduction over a row of length
    `row` (max, amax, sum, logsumexp ... taken over the last axis, or over everything)."""

    _REDUCTIONS = {"max", "amax", "sum", "nansum", "logsumexp", "mean", "norm"}

    def __init__(self, row: int | None = None, keys: int | None = None, block: int = 1):
        super().__init__()
        self.row, self.largest, self.row_reductions = row, None, []
        # the first floating tensor of at least keys·block entries whose last axis runs over all
        # `keys` keys: scores of a block of queries against every key
        self.keys, self.block, self.all_keys = keys, block, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if self.row is not None and name in self._REDUCTIONS and args:
            self._note_reduction(name, args, kwargs)
        out = func(*args, **kwargs)
        for t in _tensors(out):
            if t.is_floating_point() and (self.largest is None or t.numel() > self.largest.numel()):
                self.largest = t
            if (
                self.all_keys is None
                and self.keys is not None
                and t.is_floating_point()
                and t.dim() >= 2
                and t.shape[-1] == self.keys
                and t.numel() >= self.keys * self.block
            ):
                self.all_keys = t
        return out

    def _note_reduction(self, name, args, kwargs):
        x = args[0]
        if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.shape[-1] != self.row:
            return
        if any(isinstance(a, torch.Tensor) for a in args[1:]) or "other" in kwargs:
            return  # torch.max(a, b): elementwise, not a reduction
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        if dim is None or any(isinstance(d, int) and d % x.dim() == x.dim() - 1 for d in dims):
            self.row_reductions.append(f"{name} over a tensor of shape {tuple(x.shape)}")


def _run_watched(ex, student, kwargs, watch, case_text):
    def call():
        with torch.no_grad(), watch:
            return student(**kwargs)

    try:
        return ex.run_student(student, call)
    except (ImplementThisYourself, NotImplementedError):
        raise
    except Exception as err:
        fail(ex, f"your function raised {type(err).__name__}: {err}", case_text, cause=err)


# ==============================================================================================
# online_softmax


def _softmax_cases(thorough: bool) -> list[Case]:
    def case(shape, block_size, scale=3.0, kind="random", label=""):
        def make(g):
            x = torch.randn(*shape, generator=g, dtype=torch.float64) * scale
            if kind == "rising":  # the max grows block after block: every rescaling matters
                x = x + torch.linspace(0, 4 * scale, shape[-1], dtype=torch.float64)
            if kind == "negative":  # exp(x) underflows to 0 for every entry
                x = x - 1000.0
            if kind == "masked":  # -inf entries; the first blocks of one row entirely
                x[..., 0, : 2 * block_size] = _NEG_INF
                x[..., -1, 1::3] = _NEG_INF
            return {"scores": x, "block_size": block_size}

        text = f"scores {tuple(shape)}, block_size={block_size}"
        return Case(text + (f", {label}" if label else ""), make)

    cases = [
        case((3, 10), 4, label="L not a multiple of block_size"),
        case((2, 3, 16), 5, kind="rising", label="the max grows from block to block"),
        case((2, 12), 4, scale=400.0, label="large scores (×400: exp overflows)"),
        case((2, 3, 12), 3, kind="masked", label="-inf entries, a row's first two blocks all -inf"),
    ]
    if thorough:
        cases += [
            case((4, 9), 1, label="block_size=1"),
            case((2, 7), 50, label="block_size > L"),
            case((3, 8), 8, label="block_size = L"),
            case((5, 1), 3, label="L = 1"),
            case((2, 2, 2, 11), 3, label="three batch dims"),
            case((17,), 4, kind="rising", label="one row"),
            case((3, 20), 6, scale=2000.0, kind="rising", label="huge rising scores (×2000)"),
            case((2, 4, 15), 4, kind="masked", label="-inf entries"),
        ]
    # the stated running max, visible too: started at 0 instead of -inf, exp(x − 0) underflows
    cases.append(case((2, 9), 4, kind="negative", label="very negative scores (all below -800)"))
    return cases


_SOFTMAX_ROW, _SOFTMAX_BLOCK = 64, 8


def _check_online_softmax(ex, student, thorough):
    n = FunctionDriver(_softmax_cases).run(ex, student, thorough)
    scores = torch.randn(3, _SOFTMAX_ROW, generator=torch.Generator().manual_seed(12))
    text = f"scores (3, {_SOFTMAX_ROW}), block_size={_SOFTMAX_BLOCK} (float64 on cpu)"
    watch = _Watch(row=_SOFTMAX_ROW)
    _run_watched(
        ex, student, {"scores": scores.double(), "block_size": _SOFTMAX_BLOCK}, watch, text
    )
    if watch.row_reductions:
        fail(
            ex,
            f"your function reduces a whole row of {_SOFTMAX_ROW} scores at once "
            f"({watch.row_reductions[0]}); the online softmax reads a row in blocks of "
            "block_size, keeping a running max and a running sum",
            text,
            ex.mistake("whole-row"),
        )
    covered = FunctionDriver(_softmax_cases).covered(thorough) + "; block by block"
    return n + 1, covered


online_softmax = Exercise(
    name="online_softmax",
    lesson="12",
    module="efficient",
    reference=_efficient.online_softmax,
    forbidden=(
        "torch.softmax",
        "torch.nn.functional.softmax",
        "torch.Tensor.softmax",
        "torch.special.softmax",
        "torch.log_softmax",
        "torch.nn.functional.log_softmax",
        "torch.Tensor.log_softmax",
        "torch.special.log_softmax",
        "transformer_lab.efficient.online_softmax",
        "transformer_lab.online_softmax",
    ),
    mistakes=[
        Mistake(
            "zero-start",
            "for a row of very negative scores the first rescaling breaks (0/0 or 0·inf): the "
            "running max starts at −inf, not 0, and while it is still −inf exp(m − m′) is "
            "simply 0, so guard only m′ (replacing the old m by 0 gives exp(0 − m′) = inf).",
            _softmax_bug("zero-start"),
        ),
        Mistake(
            "no-max",
            "exp(scores) overflows for large scores: keep the running max m and exponentiate "
            "x − m; the rescaling l · exp(m − m′) keeps the result exact.",
            _softmax_bug("no-max"),
        ),
        Mistake(
            "sum-not-rescaled",
            "the running sum is not rescaled when the max changes: l′ = l · exp(m − m′) + "
            "Σ exp(x − m′), because the old sum was measured against the old max.",
            _softmax_bug("sum-not-rescaled"),
        ),
        Mistake(
            "factor-flipped",
            "the running sum is rescaled by exp(m′ − m), upside down: the old sum was measured "
            "against the old max m, so it shrinks to l · exp(m − m′) when the max grows to m′.",
            _softmax_bug("factor-flipped"),
        ),
        Mistake(
            "partial-block-dropped",
            "a last block shorter than block_size is never read (range(L // block_size)): loop "
            "over range(0, L, block_size), whose last slice may be shorter.",
            _softmax_bug("partial-block-dropped"),
        ),
        Mistake(
            "stale-max",
            "the new block's exponentials use the max from before the block (stale): compute "
            "m′ = max(m, max(block)) first, then Σ exp(x − m′).",
            _softmax_bug("stale-max"),
        ),
        Mistake(
            "block-normalised",
            "each block is normalised by its own sum: the denominator of the softmax is the sum "
            "over the whole row, so keep one running sum across the blocks.",
            _softmax_bug("block-normalised"),
        ),
        Mistake(
            "unguarded-max",
            "a block whose scores are all −inf leaves the running max at −inf, and "
            "exp(m − m′) = exp(−inf + inf) is NaN: use 0 in place of a max that is still −inf.",
            _softmax_bug("unguarded-max"),
        ),
        Mistake(
            "block-max",
            "the max is each block's own, not a running one: m′ = max(m, max(block)). A block "
            "smaller than an earlier one then makes exp(m − m′) and exp(x − m) overflow.",
            _softmax_bug("block-max"),
        ),
        Mistake(
            "whole-row",
            "the max and the sum are taken over the whole row at once: read the row block by "
            "block (scores[..., start:start + block_size]) and update a running max and sum.",
            _softmax_whole_row,
        ),
    ],
    driver=CustomDriver(_check_online_softmax),
    doc="online_softmax(scores, block_size) -> softmax over the last axis, block by block",
)


# ==============================================================================================
# tiled_attention


def _tiled_cases(thorough: bool) -> list[Case]:
    def case(batch, Lq, Lk, d_k, d_v, block_size, mask=None, scale=1.0, label=""):
        def make(g):
            q = torch.randn(*batch, Lq, d_k, generator=g, dtype=torch.float64) * scale
            k = torch.randn(*batch, Lk, d_k, generator=g, dtype=torch.float64) * scale
            v = torch.randn(*batch, Lk, d_v, generator=g, dtype=torch.float64)
            inputs = {"q": q, "k": k, "v": v}
            if mask is not None:
                inputs["mask"] = mask(g)
            inputs["block_size"] = block_size
            return inputs

        text = f"q {(*batch, Lq, d_k)}, k {(*batch, Lk, d_k)}, v {(*batch, Lk, d_v)}"
        text += f", block_size={block_size}"
        return Case(text + (f", {label}" if label else ""), make)

    def causal(Lq, Lk):
        return lambda g: torch.ones(Lq, Lk, dtype=torch.bool).tril()

    def padded(shape, masked_row=True):
        """Random keys masked, the first keys of some rows masked (left padding) and, with
        masked_row, one query that may attend to no key at all."""

        def make(g):
            m = torch.rand(shape, generator=g) < 0.7
            m[..., 0, :] = True
            m[..., ::2, : shape[-1] // 2] = False  # every other query: the first half masked
            m[..., ::2, -1] = True
            if masked_row:
                m[..., 1, :] = False
            return m

        return make

    cases = [
        case((2,), 7, 11, 4, 3, 4, label="L_k not a multiple of block_size"),
        case((2, 2), 12, 12, 8, 8, 4, mask=causal(12, 12), label="causal mask (12, 12)"),
        case(
            (2,),
            6,
            10,
            8,
            5,
            3,
            mask=padded((2, 6, 10)),
            label="mask (2, 6, 10): the first keys masked for some queries, one query with "
            "every key masked",
        ),
        case((2,), 9, 9, 32, 4, 4, scale=6.0, label="large logits (q, k scaled by 6)"),
        case(
            (2,),
            6,
            10,
            8,
            4,
            3,
            mask=lambda g: torch.tensor([[True], [False], [True], [True], [False], [True]]),
            label="mask (6, 1) broadcast over the keys (queries 1 and 4 see no key)",
        ),
    ]
    if thorough:
        cases += [
            case((3,), 5, 9, 4, 4, 1, label="block_size=1"),
            case((2,), 5, 9, 4, 4, 100, label="block_size > L_k"),
            case((2,), 8, 8, 4, 4, 8, mask=causal(8, 8), label="block_size = L_k, causal"),
            case((1,), 1, 1, 4, 4, 3, label="length-1 sequences"),
            case((3,), 1, 13, 8, 5, 4, label="one query"),
            case((2, 3), 16, 16, 16, 8, 5, mask=causal(16, 16), label="causal, odd block_size"),
            case((2, 3, 2), 3, 7, 4, 4, 2, label="three batch dims"),
            case(
                (2, 2),
                5,
                9,
                8,
                8,
                4,
                mask=padded((2, 1, 5, 9), masked_row=False),
                label="mask (2, 1, 5, 9) broadcast over heads",
            ),
            case(
                (2, 2), 6, 7, 8, 3, 3, mask=padded((6, 7)), label="mask (6, 7) broadcast over batch"
            ),
            case((2,), 10, 10, 64, 16, 3, scale=12.0, label="large logits (q, k scaled by 12)"),
            case((2,), 20, 30, 8, 4, 7, mask=causal(20, 30), label="causal, L_q < L_k"),
            case(
                (2, 2),
                5,
                11,
                8,
                4,
                4,
                mask=lambda g: (torch.arange(11) % 3 != 1) & (torch.rand(11, generator=g) < 0.8),
                label="key mask (11,) broadcast over batch, heads and queries",
            ),
            case(
                (2, 2),
                5,
                9,
                8,
                4,
                4,
                mask=lambda g: torch.tensor([True, False]).view(1, 2, 1, 1),
                label="mask (1, 2, 1, 1): the second head sees no key",
            ),
        ]
    return cases


_TILED_L, _TILED_D, _TILED_BLOCK = 256, 2, 16


def _check_tiled_attention(ex, student, thorough):
    n = run_naming_crashes(ex, FunctionDriver(_tiled_cases), _tiled_cases, student, thorough)
    g = torch.Generator().manual_seed(12)
    L, d = _TILED_L, _TILED_D
    q, k, v = (torch.randn(1, L, d, generator=g, dtype=torch.float64) for _ in range(3))
    text = f"q, k, v (1, {L}, {d}), block_size={_TILED_BLOCK} (float64 on cpu)"
    watch = _Watch(keys=L, block=_TILED_BLOCK)
    kwargs = {"q": q, "k": k, "v": v, "block_size": _TILED_BLOCK}
    _run_watched(ex, student, kwargs, watch, text)
    # a block of scores has L·block_size = 4096 entries (a broadcast q·k product L·block·d =
    # 8192); the full matrix L·L = 65536. A quarter of it can only be many blocks at once.
    if watch.largest is not None and watch.largest.numel() >= L * L // 4:
        fail(
            ex,
            f"your function built a tensor of shape {tuple(watch.largest.shape)} "
            f"({watch.largest.numel()} entries): tiled attention keeps one block of scores, "
            f"(L_q, block_size) = ({L}, {_TILED_BLOCK}), at a time and never the (L_q, L_k) = "
            f"({L}, {L}) matrix",
            text,
            ex.mistake("full-matrix"),
        )
    if watch.all_keys is not None:  # the stated loop is over blocks of keys, not of queries
        fail(
            ex,
            f"your function built a tensor of shape {tuple(watch.all_keys.shape)} whose last "
            f"axis runs over all {L} keys: tiled attention loops over blocks of keys, "
            f"k[..., j:j + block_size, :], so a block of scores is (L_q, block_size) = ({L}, "
            f"{_TILED_BLOCK})",
            text,
            ex.mistake("query-tiles"),
        )
    covered = FunctionDriver(_tiled_cases).covered(thorough)
    return n + 1, covered + "; never the (L_q, L_k) matrix"


tiled_attention = Exercise(
    name="tiled_attention",
    lesson="12",
    module="efficient",
    reference=_efficient.tiled_attention,
    forbidden=(
        "torch.softmax",
        "torch.nn.functional.softmax",
        "torch.Tensor.softmax",
        "torch.special.softmax",
        "torch.log_softmax",
        "torch.nn.functional.log_softmax",
        "torch.Tensor.log_softmax",
        "torch.nn.functional.scaled_dot_product_attention",
        "torch._C._nn.scaled_dot_product_attention",
        "torch.nn.functional.multi_head_attention_forward",
        "torch.nn.MultiheadAttention",
        "transformer_lab.attention.scaled_dot_product_attention",
        "transformer_lab.attention.fused_attention",
        "transformer_lab.scaled_dot_product_attention",
        "transformer_lab.fused_attention",
        "transformer_lab.efficient.tiled_attention",
        "transformer_lab.tiled_attention",
        "transformer_lab.efficient.online_softmax",
        "transformer_lab.online_softmax",
    ),
    mistakes=[
        Mistake("no-scale", "your scores are not divided by √d_k.", _tiled_bug("no-scale")),
        Mistake(
            "output-not-rescaled",
            "the running output is not rescaled when the max changes: o′ = o · exp(m − m′) + "
            "p v_B, since o was summed against the old max.",
            _tiled_bug("output-not-rescaled"),
        ),
        Mistake(
            "sum-not-rescaled",
            "the running sum is not rescaled when the max changes: l′ = l · exp(m − m′) + "
            "rowsum(p).",
            _tiled_bug("sum-not-rescaled"),
        ),
        Mistake(
            "rescale-after-update",
            "the rescaling factor exp(m − m′) is computed after m was overwritten by m′, so it is "
            "always 1: compute it from the old and the new max, then update m.",
            _tiled_bug("rescale-after-update"),
        ),
        Mistake(
            "stale-max",
            "the block's probabilities use the max from before the block (stale): compute "
            "m′ = max(m, rowmax(s)) first, then p = exp(s − m′).",
            _tiled_bug("stale-max"),
        ),
        Mistake(
            "block-max",
            "the max is each block's own, not a running one: m′ = max(m, max(block)). A block "
            "smaller than an earlier one then makes exp(m − m′) and exp(s − m) overflow.",
            _tiled_bug("block-max"),
        ),
        Mistake(
            "no-final-normalisation",
            "the output is not divided by the running sum at the end: return o / l.",
            _tiled_bug("no-final-normalisation"),
        ),
        Mistake(
            "mask-block-local",
            "each block is masked with the mask's first columns (the block-local key index): block "
            "B starting at key j needs mask[..., j:j + block_size], the global key index.",
            _tiled_bug("mask-block-local"),
        ),
        Mistake(
            "mask-finite",
            "masked scores are filled with a large finite number instead of −inf, so a query "
            "with every key masked averages all the values instead of giving zeros.",
            _tiled_bug("mask-finite"),
        ),
        Mistake(
            "nan-rows",
            "a query with every key masked has l = 0 and gets 0/0 = NaN: the contract asks for "
            "zeros there; divide by torch.where(l > 0, l, 1) (o is 0 in such a row).",
            _tiled_bug("nan-rows"),
        ),
        Mistake(
            "unguarded-max",
            "a block whose keys are all masked leaves the running max at −inf, and "
            "exp(m − m′) = exp(−inf + inf) is NaN: use 0 in place of a max that is still −inf.",
            _tiled_bug("unguarded-max"),
        ),
        Mistake(
            "full-matrix",
            "the whole (L_q, L_k) score matrix is formed: loop over blocks of block_size keys "
            "(k[..., j:j + block_size, :]) and keep only one block of scores at a time.",
            _tiled_full_matrix,
        ),
        Mistake(
            "query-tiles",
            "the queries are tiled, each block of queries against every key at once: loop over "
            "blocks of keys, k[..., j:j + block_size, :], keeping a running max and sum, so no "
            "tensor spans all L_k keys.",
            _tiled_query_tiles,
        ),
        Mistake(
            "partial-block-dropped",
            "a last block shorter than block_size is never read (range(L_k // block_size)): loop "
            "over range(0, L_k, block_size), whose last slice k[..., j:j + block_size, :] may be "
            "shorter.",
            _tiled_bug("partial-block-dropped"),
        ),
        Mistake(
            "broadcast-mask-sliced",
            "a mask whose last axis is 1 (it broadcasts over the keys) is sliced per block, "
            "which leaves nothing after the first block: slice mask[..., j:j + block_size] only "
            "when its last axis has L_k entries, and use it whole when it is 1.",
            _tiled_bug("broadcast-mask-sliced"),
        ),
    ],
    driver=CustomDriver(_check_tiled_attention),
    doc="tiled_attention(q, k, v, mask=None, block_size=64) -> output, over blocks of keys",
)
