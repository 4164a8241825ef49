"""Generic diagnosers: a "Likely mistake" read from how a wrong tensor relates to the right one.

When no catalogued mistake of an exercise matches, ``name(got, expected, same, sizes)`` looks at
the first output that differs and asks, in order, whether the student's tensor is

- a Python number or a NumPy array where a tensor belongs, or of another dtype (a habit named);
- more values than belong, the first of them right; the right values in the wrong order;
- off by float32's rounding only in a float64 case (part of it computed in float32);
- the right values with a size-1 axis too many, too few or misplaced, with neighbouring axes
  merged (torch.cat for torch.stack) or split, or with its axes permuted;
- the right result with its first or last slice along one axis missing, or one slice too many;
- the right values repeated (expanded) along an axis that should have size 1;
- NaN on whole rows only (a softmax over a row of −inf scores);
- the right result rounded down to whole numbers (a floor division `//` where `/` belongs);
- a constant multiple of the right one (√d, 1/√d, d, 2, −1 … named);
- the right slices along one axis in another order (reversed, rolled, halves for interleaved,
  blocks such as heads in reverse), or shifted by one position;
- normalised (summing to 1, or of unit length) along another axis than the right one;
- each vector along the last axis scaled by its own factor (a wrong count or norm).

Each diagnoser names a mistake only on unambiguous evidence: the student's result *equals* a
simple transformation of the reference's under the check's own comparison `same`; a resemblance
is never enough, and an axis whose slices repeat is left alone (its order cannot be read).
``name_gradient`` does the same for a gradient: none, or zero, where the reference's is not, or
(under a right output) NaN where the reference's is finite.
"""

from __future__ import annotations

import itertools
import math

import torch

Named = tuple[str, str]  # (a stable key, the one-sentence "Likely mistake")
MAX_SLICES = 128  # an axis longer than this is not searched for a reordering (cost n²)


def name(got, expected, same, sizes=()) -> Named | None:
    """The generic mistake that explains the first wrong output of `got`, or None.

    `same(a, b)` is the check's comparison (within tolerance, or exact); `sizes` are the sizes
    of the case's inputs (its tensors' axes and its integer arguments), by which a constant
    factor such as √d_k is named.
    """
    got_t = tuple(got) if isinstance(got, (tuple, list)) else (got,)
    exp_t = tuple(expected) if isinstance(expected, (tuple, list)) else (expected,)
    if len(got_t) != len(exp_t):
        return _extra_values(got_t, exp_t, same)
    if len(exp_t) > 1 and _same(same, got_t[::-1], exp_t):
        return (
            "generic-swapped-results",
            "your results are the right ones in the wrong order: return them in the order the "
            "exercise gives (for example (output, weights))",
        )
    for g, e in zip(got_t, exp_t):
        if not isinstance(e, torch.Tensor):
            return None
        if isinstance(g, torch.Tensor) and g.dtype == e.dtype and _same(same, g, e):
            continue  # this output is right: the mistake is in a later one
        try:
            return _diagnose(g, e, same, sorted({int(s) for s in sizes if int(s) > 1}))
        except Exception:  # a diagnoser must never turn a failure into a crash
            return None
    return None


def _extra_values(got_t, exp_t, same) -> Named | None:
    """A tuple returned where fewer values belong, its first ones the right ones (the output
    returned with the attention weights)."""
    if len(got_t) <= len(exp_t) or not _same(same, got_t[: len(exp_t)], exp_t):
        return None
    extra = len(got_t) - len(exp_t)
    return (
        "generic-extra-values",
        f"your result has {len(got_t)} items where {len(exp_t)} belong, and the first "
        f"{len(exp_t)} are right: {'one more item' if extra == 1 else 'more items'} than asked "
        "(a loop that runs once too often, range(n + 1), or a value returned beside the result, "
        "such as the attention weights): return only what the exercise asks for",
    )


def name_gradient(expected_grad, got_grad, key: str, output_right: bool) -> Named | None:
    """The mistake behind a wrong gradient with respect to input or parameter `key`: none at all
    (autograd finds no path) where the reference's is not zero, or (when the output itself is
    right) a NaN where the reference's gradient is finite (an unsafe division hidden by a
    torch.where) or a non-zero gradient that differs, which only a cut in the autograd graph
    explains. An all-zero gradient names nothing: a clamp or a ReLU at its edge gives one too."""
    if expected_grad is None or not bool((expected_grad != 0).any()):
        return None
    if got_grad is None:
        return (
            "generic-no-gradient",
            f"`{key}` is cut off from the autograd graph: a .detach(), .data, .item(), "
            "torch.no_grad() or a tensor rebuilt from its values (torch.tensor(...)) stops every "
            "gradient on its way back",
        )
    if output_right and _nan_where_finite(got_grad, expected_grad):
        return (
            "generic-nan-gradient",
            "your output is right but its gradient holds NaN where the reference's is finite: a "
            "value the output leaves out is still NaN in the backward pass, most often "
            "torch.where(cond, a / b, 0), which computes a / b (0/0 = NaN) in every entry and "
            "sends its gradient back through both branches; make the division itself safe, "
            "a / torch.where(cond, b, 1). Or -inf added to scores (scores + mask) where a whole "
            "row is masked: fill them with masked_fill instead, which sends them no gradient",
        )
    if output_right and _grossly_different(got_grad, expected_grad):
        return (
            "generic-partly-detached",
            "your output is right but its gradient is not, so part of the computation is cut off "
            "from the autograd graph (a .detach(), .data or torch.no_grad() on an intermediate "
            "value)",
        )
    return None


def _nan_where_finite(got, expected) -> bool:
    """NaN in the student's gradient where the reference's is finite everywhere."""
    got, expected = got.detach().cpu(), expected.detach().cpu()
    return bool(torch.isfinite(expected).all()) and bool(torch.isnan(got).any())


def _grossly_different(got, expected) -> bool:
    """A finite, non-zero gradient off by more than 1 % of the reference's largest entry: what a
    cut path leaves (a rounding difference, or NaN from a torch.where, is something else)."""
    got, expected = got.detach().double().cpu(), expected.detach().double().cpu()
    if not bool(torch.isfinite(got).all()) or not bool((got != 0).any()):
        return False
    return float((got - expected).abs().max()) > 0.01 * float(expected.abs().max())


def _same(same, a, b) -> bool:
    try:
        return bool(same(a, b))
    except Exception:
        return False


def _diagnose(g, e, same, sizes) -> Named | None:
    if not isinstance(g, torch.Tensor):
        return _not_a_tensor(g, e)
    if g.dtype != e.dtype:
        return _dtype(g, e)
    if tuple(g.shape) != tuple(e.shape):
        return (
            _size_one_axes(g, e, same)
            or _merged_axes(g, e, same)
            or _permuted_axes(g, e, same)
            or _one_slice_more_or_less(g, e, same)
            or _expanded(g, e, same)
        )
    for diagnoser in (
        _precision,
        _nan_rows,
        _floored,
        _permuted_axes,
        _constant_factor,
        _reordered,
        _shifted,
    ):
        found = (
            diagnoser(g, e, same, sizes) if diagnoser is _constant_factor else diagnoser(g, e, same)
        )
        if found is not None:
            return found
    return _normalised_elsewhere(g, e) or _vector_factors(g, e, same)


# ----------------------------------------------------------------------------------------------
# Type, dtype and shape


def _not_a_tensor(g, e) -> Named | None:
    if type(g).__module__ == "numpy":
        return (
            "generic-numpy",
            "a NumPy array (np.tril, np.ones, .numpy()) where a torch tensor belongs: build it "
            "with torch's own functions (torch.tril, torch.ones), which keep dtype, device and "
            "gradients",
        )
    if isinstance(g, (int, float)) and not isinstance(g, bool) and e.numel() == 1:
        return (
            "generic-python-number",
            "`.item()`, `float(...)` or `int(...)` turned the result into a Python number; "
            "return the tensor itself (it keeps its dtype, device and gradient)",
        )
    return None


def _dtype(g, e) -> Named | None:
    """Name the habit that gives a result of another dtype than the reference's."""
    if e.dtype == torch.bool:
        return (
            "generic-mask-as-numbers",
            f"the mask is made of numbers ({g.dtype}) where it should hold True/False: build it "
            "with a comparison (<=, ==, !=) or convert it with .bool()",
        )
    if e.is_floating_point() and g.is_floating_point():
        if g.dtype == torch.float64:
            habit = "dtype=torch.float64, .double(), or a NumPy array"
        else:
            habit = "torch.tensor/zeros/arange/full without dtype= give the default dtype"
        return (
            "generic-float-dtype",
            f"a tensor of another dtype ({g.dtype}; {habit}) is mixed into the result: make new "
            "tensors with the inputs' dtype and device (torch.zeros_like, x.new_zeros, "
            "dtype=x.dtype)",
        )
    if g.is_floating_point():  # integers (ids, counts) expected
        return (
            "generic-ids-as-floats",
            f"integers come back as floats ({g.dtype}): torch.full/zeros/ones and division (/) "
            f"give floating point; pass dtype={e.dtype} (or the input's dtype) or use //",
        )
    if e.is_floating_point():
        return (
            "generic-floats-as-integers",
            f"floats come back as {g.dtype}: a tensor built from integers (torch.arange(n), "
            "torch.tensor([0, 1])) or a comparison needs dtype= the inputs' dtype",
        )
    return (
        "generic-integer-dtype",
        f"the integers have dtype {g.dtype} instead of {e.dtype}: keep the input's dtype "
        "(x.new_*, *_like, dtype=x.dtype) rather than a fixed one",
    )


def _size_one_axes(g, e, same) -> Named | None:
    """The right values with a size-1 axis added, dropped or put at another place."""
    squeezed = lambda t: tuple(s for s in t.shape if s != 1)  # noqa: E731
    if squeezed(g) != squeezed(e) or not _same(same, g.reshape(e.shape), e):
        return None
    if g.dim() > e.dim():
        how = "an extra size-1 axis (an unsqueeze too many, or keepdim=True where it should go)"
    elif g.dim() < e.dim():
        how = "a size-1 axis missing (a squeeze(), or a reduction without keepdim=True)"
    else:
        how = "its size-1 axes at the wrong places (an unsqueeze or view at the wrong end)"
    return (
        "generic-size-one-axis",
        f"your result holds the right values with {how}: shape {tuple(g.shape)} where "
        f"{tuple(e.shape)} is expected",
    )


def _merged_axes(g, e, same) -> Named | None:
    """The right values, in order, with two or more neighbouring axes merged into one (torch.cat
    where torch.stack belongs, a flatten too many) or one axis split (a reshape left out)."""
    if g.dim() == e.dim() or g.numel() != e.numel() or g.numel() == 0:
        return None
    if not _same(same, g.reshape(e.shape), e):
        return None
    if g.dim() < e.dim():
        how = (
            "neighbouring axes merged into one (torch.cat joins along an axis that exists, "
            "torch.stack makes a new one; or a flatten/reshape too many)"
        )
    else:
        how = "an axis split in two (a view or reshape that should merge them is missing)"
    return (
        "generic-merged-axes",
        f"your result holds the right values in the right order with {how}: shape "
        f"{tuple(g.shape)} where {tuple(e.shape)} is expected",
    )


def _permuted_axes(g, e, same) -> Named | None:
    """The right tensor with its axes in another order (a transpose of the wrong axes)."""
    if g.dim() != e.dim() or g.dim() < 2 or g.dim() > 5:
        return None
    for order in itertools.permutations(range(e.dim())):
        if order == tuple(range(e.dim())):
            continue
        moved = e.permute(order)
        if tuple(moved.shape) == tuple(g.shape) and _same(same, g, moved):
            swapped = [i for i, j in enumerate(order) if i != j]
            if len(swapped) == 2:
                i, j = swapped
                what = f"axes {i} and {j} swapped (a transpose of the wrong pair of axes)"
            else:
                what = f"its axes in the order {order} (a permute or transpose of the wrong axes)"
            return (
                "generic-permuted-axes",
                f"your result is the right one with {what}",
            )
    return None


def _one_slice_more_or_less(g, e, same) -> Named | None:
    """The right result with its first or last slice along one axis missing, or with one slice
    too many there: a loop or slice one step off, or a start token left out."""
    if g.dim() != e.dim():
        return None
    differ = [a for a in range(e.dim()) if g.shape[a] != e.shape[a]]
    if len(differ) != 1:
        return None
    axis = differ[0]
    n, m = e.shape[axis], g.shape[axis]
    if m == n - 1 and n > 1:
        for start, which in ((1, "first"), (0, "last")):
            if _same(same, g, e.narrow(axis, start, n - 1)):
                return (
                    "generic-missing-slice",
                    f"your result is the right one without its {which} entry along axis {axis} "
                    f"(size {m} where {n} belongs): a loop or slice that "
                    f"{'starts one step late' if which == 'first' else 'stops one step early'}, "
                    "or an entry the exercise keeps (such as the start token) left out",
                )
    if m == n + 1:
        for start, which in ((1, "first"), (0, "last")):
            if _same(same, g.narrow(axis, start, n), e):
                return (
                    "generic-extra-slice",
                    f"your result is the right one with one entry too many along axis {axis}, "
                    f"its {which} (size {m} where {n} belongs): a loop or slice that "
                    f"{'starts one step early' if which == 'first' else 'runs one step too far'}",
                )
    return None


def _expanded(g, e, same) -> Named | None:
    """The right values repeated along an axis that should have size 1 (expand, repeat)."""
    if g.dim() != e.dim() or g.numel() <= e.numel():
        return None
    grown = [a for a in range(e.dim()) if g.shape[a] != e.shape[a]]
    if any(e.shape[a] != 1 for a in grown) or not _same(same, g, e.expand(g.shape)):
        return None
    axes = " and ".join(str(a) for a in grown)
    return (
        "generic-expanded",
        f"your result holds the right values repeated along axis {axes}, which should have "
        f"size 1 (shape {tuple(g.shape)} where {tuple(e.shape)} belongs): leave that axis of "
        "size 1 (no expand or repeat); broadcasting repeats it where it is used",
    )


# ----------------------------------------------------------------------------------------------
# Values


def _precision(g, e, same) -> Named | None:
    """A float64 result off by float32's rounding only: part of it was computed in float32."""
    if e.dtype != torch.float64 or e.numel() == 0:
        return None
    g64, e64 = g.detach().double().cpu(), e.detach().cpu()
    if not bool(torch.isfinite(g64).all()) or not bool(torch.isfinite(e64).all()):
        return None
    scale = max(float(e64.abs().max()), 1e-30)
    if float((g64 - e64).abs().max()) > 1e-6 * scale:
        return None
    return (
        "generic-float32-inside",
        "your result has float32's precision in a float64 case (it is off by about 1e-7 of its "
        "size): part of it is computed in float32, for example torch.arange(...).float() or a "
        "tensor made without dtype=x.dtype; build every tensor in the inputs' dtype",
    )


def _floored(g, e, same) -> Named | None:
    """The right result rounded down to whole numbers (``a // n`` for ``a / n``), where the right
    one has a fraction: a floor division, or an int() of a float."""
    if not e.is_floating_point() or e.numel() == 0 or not g.is_floating_point():
        return None
    e_cpu = e.detach().cpu()
    if not bool(torch.isfinite(e_cpu).all()) or bool((e_cpu == e_cpu.floor()).all()):
        return None
    if not _same(same, g, e.detach().floor()) and not _same(same, g, e.detach().trunc()):
        return None
    return (
        "generic-floored",
        "your result is the right one rounded down to a whole number: `//` is floor division "
        "(and int() drops the fraction too), so divide with `/`",
    )


def _nan_rows(g, e, same) -> Named | None:
    """NaN on whole rows (last axis) where the reference has numbers: a softmax of all −inf."""
    if not g.is_floating_point() or g.dim() == 0:
        return None
    bad = g.isnan() & ~e.isnan()
    if not bad.any():
        return None
    rows = bad.all(-1)
    if not bool((bad == rows.unsqueeze(-1)).all()):  # NaN only on part of some row
        return None
    return (
        "generic-nan-rows",
        "whole rows are NaN: every entry of such a row was −inf before the softmax, which "
        "gives 0/0; check what your mask or filter removes (it removed a whole row), and give "
        "a row with nothing left zeros where the exercise asks for them",
    )


def _factor_names(sizes) -> list[tuple[float, str]]:
    names = [(-1.0, "−1 (the sign flipped)"), (2.0, "2"), (0.5, "1/2")]
    for d in sizes:
        names += [
            (math.sqrt(d), f"√{d}"),
            (1 / math.sqrt(d), f"1/√{d}"),
            (float(d), f"{d}"),
            (1 / d, f"1/{d}"),
        ]
    return names


def _constant_factor(g, e, same, sizes) -> Named | None:
    """got = c · expected for one constant c ≠ 1 (c named when it is √d, 1/√d, d, 1/d, 2, −1)."""
    if not e.is_floating_point():
        return None
    e64, g64 = e.detach().double().cpu(), g.detach().double().cpu()
    norm = float((e64 * e64).sum())
    if norm == 0.0 or not torch.isfinite(g64).all():
        return None
    c = float((g64 * e64).sum()) / norm
    if abs(c) < 1e-6 or abs(c - 1) < 1e-6 or not _same(same, g, e * c):
        return None
    named = [text for value, text in _factor_names(sizes) if math.isclose(c, value, rel_tol=1e-4)]
    if not named:
        if e.numel() < 4:  # a scalar or two is always some multiple of another
            return None
        named = [f"{c:.4g}"]
    return (
        "generic-constant-factor",
        f"your result is the right one times {named[0]} everywhere: a scale factor applied "
        "twice, left out or taken from the wrong size (a sum for a mean, √d of another "
        "dimension)",
    )


def _vector_factors(g, e, same) -> Named | None:
    """Each vector along the last axis is the right one times its own factor, the factors not
    all the same: a sum or a normalisation divided by the wrong amount."""
    if not e.is_floating_point() or e.dim() < 2 or e.shape[-1] < 3:
        return None
    e64, g64 = e.detach().double().cpu(), g.detach().double().cpu()
    norms = (e64 * e64).sum(-1, keepdim=True)
    if not bool((norms > 0).all()) or not bool(torch.isfinite(g64).all()):
        return None
    c = (g64 * e64).sum(-1, keepdim=True) / norms
    if float(c.min()) <= 1e-6 * float(c.abs().max()):  # a vector zeroed or flipped: not a scale
        return None
    if float(c.max() - c.min()) < 1e-6 * float(c.abs().max()) or not _same(
        same, g, (e64 * c).to(e.dtype).to(e.device)
    ):
        return None
    return (
        "generic-vector-factors",
        f"each vector along the last axis of your result is the right one times its own factor "
        f"(from {float(c.min()):.3g} to {float(c.max()):.3g}): what each vector is scaled or "
        "divided by is wrong, for example a count of another extent (the whole batch, padding "
        "included), another norm (L1 for L2) or one taken over other entries, or a "
        "normalising term misplaced",
    )


def _distinct_slices(e, axis, same) -> bool:
    n = e.shape[axis]
    return all(
        not _same(same, e.select(axis, i), e.select(axis, j))
        for i in range(n)
        for j in range(i + 1, n)
    )


def _slice_order(g, e, axis, same) -> list[int] | None:
    """order[i] = j when slice i of `g` along `axis` equals slice j of `e` (a bijection), else
    None."""
    n = e.shape[axis]
    order = []
    for i in range(n):
        matches = [j for j in range(n) if _same(same, g.select(axis, i), e.select(axis, j))]
        if len(matches) != 1:
            return None
        order.append(matches[0])
    return order if sorted(order) == list(range(n)) else None


def _describe_order(order: list[int], axis: int) -> str:
    n = len(order)
    where = f"along axis {axis} (size {n})"
    if order == list(range(n - 1, -1, -1)):
        return f"the right entries in reverse order {where} (counted from the other end)"
    halves = list(range(0, n, 2)) + list(range(1, n, 2))
    if order == halves:
        return (
            f"the even-indexed entries first, then the odd ones {where}: two halves where the "
            "entries should be interleaved (2k, 2k+1)"
        )
    if n % 2 == 0 and order == [halves.index(i) for i in range(n)]:
        return f"interleaved entries {where} where the first half and then the second belong"
    if n % 2 == 0 and order == [i ^ 1 for i in range(n)]:
        return f"each neighbouring pair (2k, 2k+1) swapped {where}"
    for blocks in range(2, n):
        if n % blocks:
            continue
        size = n // blocks
        flipped = [(blocks - 1 - i // size) * size + i % size for i in range(n)]
        if order == flipped:
            return (
                f"its {blocks} blocks of {size} in reverse order {where} (e.g. heads or pieces "
                "concatenated in reverse)"
            )
    for k in range(1, n):
        if order == [(i + k) % n for i in range(n)] or order == [(i - k) % n for i in range(n)]:
            return f"the right entries rolled by {k} {where}, wrapping around"
    return f"the right entries in another order {where}"


def _reordered(g, e, same) -> Named | None:
    """The right slices along one axis, in another order."""
    for axis in range(e.dim()):
        n = e.shape[axis]
        if n < 2 or n > MAX_SLICES:
            continue
        order = _slice_order(g, e, axis, same)
        if order is None or order == list(range(n)) or not _distinct_slices(e, axis, same):
            continue
        return ("generic-reordered", f"your result holds {_describe_order(order, axis)}")
    return None


def _shifted(g, e, same) -> Named | None:
    """Along one axis, entry i holds what belongs at i + 1 (or i − 1): an off-by-one."""
    for axis in range(e.dim()):
        n = e.shape[axis]
        if n < 3:
            continue
        if _same(same, e.narrow(axis, 1, n - 1), e.narrow(axis, 0, n - 1)):
            continue  # constant along the axis: a shift cannot be seen
        for step, what in ((1, "i + 1"), (-1, "i − 1")):
            lo, hi = (1, 0) if step == 1 else (0, 1)
            if _same(same, g.narrow(axis, hi, n - 1), e.narrow(axis, lo, n - 1)):
                return (
                    "generic-shifted",
                    f"along axis {axis}, your entry i holds the right value for {what}: an "
                    "off-by-one (positions counted from 1, or a slice starting one too early or "
                    "late)",
                )
    return None


def _normalised_along(t, axis) -> str | None:
    """'sums to 1' or 'unit length' when every slice of `t` along `axis` is, else None."""
    t = t.detach().double().cpu()
    if t.shape[axis] < 2:
        return None
    if bool((t >= 0).all()) and bool(((t.sum(axis) - 1).abs() < 1e-4).all()):
        return "sums to 1"
    if bool(((t.norm(dim=axis) - 1).abs() < 1e-4).all()):
        return "has unit length"
    return None


def _normalised_elsewhere(g, e) -> Named | None:
    """The reference is normalised along one axis and the student's along another instead."""
    if not e.is_floating_point() or e.dim() < 2:
        return None
    for a in range(e.dim()):
        kind = _normalised_along(e, a)
        if kind is None or _normalised_along(g, a) == kind:
            continue
        for b in range(g.dim()):
            if b != a and _normalised_along(g, b) == kind and _normalised_along(e, b) != kind:
                return (
                    "generic-normalised-axis",
                    f"your result {kind} along axis {b} where it should along axis {a}: the "
                    "softmax or normalisation is taken over the wrong dim",
                )
    return None
