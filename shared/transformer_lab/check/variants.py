"""Generic diagnosers that rerun the reference on altered inputs: a "Likely mistake" read from
which small change of the case's inputs makes the right computation give the student's result.

``check.generic`` compares the student's result with the reference's result. Some mistakes leave
no trace there but one in the inputs: a mean over the wrong axis, a scale taken from the wrong
dimension, a loop that stops one step early. ``name(reference, run, got, expected, same, sizes)``
reruns the reference, through the check's own `run` (the case's inputs, as for a catalogued
mistake), with one input changed in a fixed, cheap way, and names the change that gives exactly
the student's result:

- two axes of one tensor input swapped (the result's too, when it has the same axes): a dim=, an
  index or a transpose on the wrong axis;
- one floating input multiplied by −1, 2, 1/2, √d, 1/√d or √a/√b for the case's sizes (a scale
  factor applied, left out or taken from the wrong dimension);
- a scalar stored as a logarithm (a log-scale) used itself, divided by, or exponentiated twice;
- one integer argument one more or one less, or the size of a piece where the number of pieces
  belongs (named only when the result's shape changes with it);
- one boolean input inverted (a mask read the wrong way round).

As in ``check.generic``, a change is named only when the student's result *equals* the altered
reference's under the check's own comparison and differs from the right one; a change that leaves
the reference's result as it was names nothing. The reference runs at most ``MAX_TRIES`` times
(``MAX_MODULE_TRIES`` for a module), on the failing case only, in a fixed order (axes, masks,
log-scales, integers, then scales), so that what is named never depends on the machine's speed.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

Named = tuple[str, str]  # (a stable key, the one-sentence "Likely mistake")
MAX_AXES = 4  # a tensor input with more axes than this is not searched for a swapped pair
MAX_TRIES = 200  # altered inputs tried at most per failing case (a function: ~1 ms each)
MAX_MODULE_TRIES = 30  # ... of a module exercise (each try rebuilds the module: ~10 ms)


def name(reference, run: Callable, got, expected, same: Callable, sizes=()) -> Named | None:
    """The altered input under which `reference` gives the student's result `got`, or None.

    `run(impl)` runs an implementation with the reference's signature on the failing case (a
    function, or an nn.Module class); `same(a, b)` is the check's comparison; `sizes` the case's
    sizes, by which a scale such as √d_k is named.
    """
    if not _has_tensor(expected) or not _has_tensor(got):
        return None
    for impl, out_change, named in candidates(reference, run, sizes):
        try:
            with torch.no_grad():
                out = run(impl)
            if out_change is not None:
                out = _map_tensors(out, out_change)
            if same(out, got) and not same(out, expected):
                return named
        except Exception:  # an altered input the reference cannot take: not this mistake
            continue
    return None


class _Probed(Exception):
    """Raised by the probe on a second call: the case calls the implementation more than once."""


def probe(reference, run: Callable) -> tuple[dict, object] | None:
    """The failing case's arguments and the reference's result on them, read by running
    `run(impl)` once with the reference wrapped; None when the case calls its implementation
    more than once (a statistical trial) or not at all."""
    seen: list[dict] = []
    outputs: list = []

    def record(arguments: dict) -> dict:
        if seen:
            raise _Probed
        seen.append(dict(arguments))
        return arguments

    try:
        with torch.no_grad():
            run(_altered(reference, record, after=outputs.append))
    except Exception:
        return None
    if len(seen) != 1 or len(outputs) != 1:
        return None
    return seen[0], outputs[0]


def candidates(reference, run: Callable, sizes=()):
    """(implementation, change of its result or None, (key, sentence)) for each altered input
    tried, in order (none when the case's inputs cannot be read, see `probe`)."""
    probed = probe(reference, run)
    if probed is None:
        return
    arguments, output = probed
    shapes = _shapes(output)
    sizes = sorted({int(s) for s in set(sizes) | case_sizes(arguments) if int(s) > 1})
    out_dims = {len(shape) for shape in shapes if isinstance(shape, tuple)}
    variants = (
        v
        for v in _changes(arguments, sizes, out_dims)
        if not (v.reshapes and isinstance(reference, type))  # a module's offset is not altered
    )
    limit = MAX_MODULE_TRIES if isinstance(reference, type) else MAX_TRIES
    for variant in itertools.islice(variants, limit):
        impl = _altered(reference, variant.change)
        yield (_reshaping(impl, shapes) if variant.reshapes else impl), variant.out, variant.named


def case_sizes(arguments: dict) -> set[int]:
    """The sizes of a case's tensors and its integer arguments."""
    sizes = {s for v in arguments.values() if isinstance(v, torch.Tensor) for s in v.shape}
    return sizes | {v for v in arguments.values() if isinstance(v, int) and not isinstance(v, bool)}


def _has_tensor(value) -> bool:
    if isinstance(value, (tuple, list)):
        return any(isinstance(v, torch.Tensor) for v in value)
    return isinstance(value, torch.Tensor)


def _map_tensors(value, fn):
    if isinstance(value, tuple):
        return tuple(_map_tensors(v, fn) for v in value)
    return fn(value) if isinstance(value, torch.Tensor) else value


@dataclass(frozen=True)
class _Variant:
    """One altered input: `change` maps the case's arguments to the altered ones, `out` (or None)
    maps the reference's result before it is compared, `named` is what a match names; with
    `reshapes`, only a change that alters the result's shape counts (an integer argument)."""

    change: Callable[[dict], dict]
    named: Named
    out: Callable | None = None
    reshapes: bool = False


class _SameShape(Exception):
    """An altered integer argument that leaves the result's shape as it was: not evidence."""


def _reshaping(impl, shapes: list):
    """`impl`, raising when its result has the unaltered result's `shapes`."""

    def checked(*args, **kwargs):
        out = impl(*args, **kwargs)
        if _shapes(out) == shapes:
            raise _SameShape
        return out

    return checked


def _altered(reference, change: Callable[[dict], dict], after: Callable | None = None):
    """An implementation with the reference's signature that calls the reference on
    change(its bound arguments): a function, or a subclass whose forward does so; `after`, if
    given, is called with each result."""
    if isinstance(reference, type):
        forward = reference.forward
        signature = inspect.signature(forward)

        def altered_forward(self, *args, **kwargs):
            return _call(forward, signature, change, after, (self, *args), kwargs, skip="self")

        return type(reference.__name__, (reference,), {"forward": altered_forward})
    signature = inspect.signature(reference)
    return lambda *args, **kwargs: _call(reference, signature, change, after, args, kwargs)


def _call(fn, signature, change, after, args, kwargs, skip=None):
    """fn(*args, **kwargs) with its named arguments (all but `skip`) passed through change."""
    bound = signature.bind(*args, **kwargs)
    named = {k: v for k, v in bound.arguments.items() if k != skip}
    bound.arguments.update(change(named))
    out = fn(*bound.args, **bound.kwargs)
    if after is not None:
        after(out)
    return out


def _shapes(value) -> list:
    """The shapes of a result's tensors (and the lengths of its sequences)."""
    values = value if isinstance(value, (tuple, list)) else (value,)
    return [
        tuple(v.shape) if isinstance(v, torch.Tensor) else getattr(v, "__len__", lambda: None)()
        for v in values
    ]


def _replace(arguments: dict, key: str, value) -> dict:
    out = dict(arguments)
    out[key] = value
    return out


def _changes(arguments: dict, sizes: list[int], out_dims: set):
    """Each alteration tried, in order: swapped axes, inverted masks, log-scales, integers, then
    scales (the simple factors of every input before the ratios of sizes). `out_dims`: the
    numbers of axes of the reference's result tensors."""
    for key, value in arguments.items():
        if isinstance(value, torch.Tensor) and 2 <= value.dim() <= MAX_AXES:
            yield from _swaps(key, value, value.dim() in out_dims)
    for key, value in arguments.items():
        if isinstance(value, torch.Tensor) and value.dtype == torch.bool:
            yield _Variant(
                lambda a, key=key: _replace(a, key, ~a[key]),
                (
                    "variant-inverted-mask",
                    f"your result is the right one for `{key}` inverted (~{key}): True marks "
                    "what to keep (a key that may be attended, a real token), so fill or drop "
                    f"where `{key}` is False, for example masked_fill(~{key}, ...)",
                ),
            )
    for key, value in arguments.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim() == 0:
            yield from _log_scale(key, value)
    for key, value in arguments.items():
        if isinstance(value, int) and not isinstance(value, bool):
            yield from _other_integers(key, value, sizes)
    floats = [
        k for k, v in arguments.items() if isinstance(v, torch.Tensor) and v.is_floating_point()
    ]
    for simple in (True, False):
        for key in floats:
            for factor, text in _factors(sizes, simple):
                yield _Variant(
                    lambda a, key=key, factor=factor: _replace(a, key, a[key] * factor),
                    (
                        "variant-scaled-input",
                        f"your result is the right one computed with `{key}` multiplied by "
                        f"{text}: a scale factor is applied, left out or taken from the wrong "
                        "dimension (√d of another size than the exercise's)",
                    ),
                )


def _log_scale(key: str, value: torch.Tensor):
    """A scalar stored as a logarithm (a log-scale, a log-temperature) used another way: its
    value itself where exp(value) belongs, divided by where exp(value) multiplies, or exp
    applied twice."""
    uses = [
        (torch.exp, f"exp({key})", f"exp is applied twice to `{key}`"),
    ]
    if float(value) > 0:
        uses = [
            (torch.log, f"log({key})", f"your code uses `{key}` itself where exp({key}) belongs"),
            (
                lambda t: -torch.log(t),
                f"−log({key})",
                f"your code divides by `{key}` (as by a temperature) where it should multiply "
                f"by exp({key})",
            ),
            *uses,
        ]
    for fn, text, what in uses:
        yield _Variant(
            lambda a, key=key, fn=fn: _replace(a, key, fn(a[key])),
            (
                "variant-log-scale",
                f"your result is the right one for `{key}` = {text}: {what}; `{key}` is a "
                f"logarithm, so the factor it stands for is exp({key})",
            ),
        )


def _other_integers(key: str, value: int, sizes: list[int]):
    """`value` one more or one less, or the size of one piece where the number of pieces
    belongs (d // value for a size d that value divides): named only when the result's shape
    changes with it, so that an id or a flag (eos_id) is never taken for a size."""
    for step in (1, -1):
        yield _Variant(
            lambda a, key=key, step=step: _replace(a, key, a[key] + step),
            (
                "variant-off-by-one-argument",
                f"your result is the right one for `{key}` = {value + step} instead of "
                f"{value}: an off-by-one in how `{key}` is used (a loop or slice that "
                f"stops one step {'late' if step == 1 else 'early'}, such as "
                f"range({key} {'+ 1' if step == 1 else '- 1'}), or < for <=)",
            ),
            reshapes=True,
        )
    pieces = sorted({d // value for d in sizes if value > 1 and d % value == 0} - {1, value})
    for other in pieces:
        yield _Variant(
            lambda a, key=key, other=other: _replace(a, key, other),
            (
                "variant-piece-size",
                f"your result is the right one for `{key}` = {other} instead of {value}: "
                f"{other * value} is cut into pieces of size {value} where it should be cut "
                f"into {value} pieces (of size {other}): put the count where the exercise "
                "puts it (view(..., n, -1), not view(..., -1, n); chunk takes a count, split "
                "a size)",
            ),
            reshapes=True,
        )


def _swaps(key: str, value: torch.Tensor, result_alike: bool):
    """Axes i and j of `value` swapped; when a result has as many axes (`result_alike`), also
    with the same axes of the result swapped back."""
    n = value.dim()
    for i, j in itertools.combinations(range(n), 2):
        if value.shape[i] == 1 and value.shape[j] == 1:
            continue
        sentence = (
            "variant-swapped-axes",
            f"your result is the right one computed with axes {i} and {j} of `{key}` (sizes "
            f"{value.shape[i]} and {value.shape[j]}) swapped: your code takes axis {i} for axis "
            f"{j}, in a dim=, an index or a transpose; count axes from the end (dim=-1, "
            "transpose(-2, -1)) as the exercise's shapes give them",
        )
        swap = lambda a, key=key, i=i, j=j: _replace(a, key, a[key].transpose(i, j))  # noqa: E731
        yield _Variant(swap, sentence)
        if result_alike:
            back = lambda t, i=i, j=j, n=n: t.transpose(i, j) if t.dim() == n else t  # noqa: E731
            yield _Variant(swap, sentence, out=back)


def _factors(sizes: list[int], simple: bool) -> list[tuple[float, str]]:
    """The scale factors tried: the simple ones (−1, 2, 1/2, √d, 1/√d) or the ratios √a/√b of
    sizes not already among them, each with how a sentence names it (every name of the same
    value: √2 may also be √8/√4, a division by √4 where √8 belongs)."""
    factors = [(-1.0, "−1 (the sign flipped)"), (2.0, "2"), (0.5, "1/2")]
    for d in sizes:
        factors += [(math.sqrt(d), f"√{d}"), (1 / math.sqrt(d), f"1/√{d}")]
    n_simple = len(factors)
    for a, b in itertools.permutations(sizes, 2):
        factors.append((math.sqrt(a / b), f"√{a}/√{b}, a division by √{b} where √{a} belongs"))
    names: dict[float, tuple[float, list[str], bool]] = {}
    for index, (factor, text) in enumerate(factors):
        entry = names.setdefault(round(factor, 9), (factor, [], index < n_simple))
        entry[1].append(text)
    return [
        (factor, texts[0] + (f" (= {'; = '.join(texts[1:])})" if len(texts) > 1 else ""))
        for factor, texts, is_simple in names.values()
        if is_simple == simple
    ]
