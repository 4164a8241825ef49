"""Reading what the student's code returned as plain data and tensors, in the student's process
(`verify_child`), without running any of the student's code.

Exact built-in values are read as themselves. A subclass of a built-in container or scalar is read
through the built-in's own methods (a namedtuple, `torch.return_types.max`), and refused when its
class changes how it is read (its own ``__iter__``, ``__getitem__``, ...: in a notebook it would
read differently from what the re-check would see; an attack ran the course's reference in such an
``__iter__``). A tensor subclass is read as a plain ``torch.Tensor`` with torch's Python overrides
off (``nn.Parameter`` included), and refused when it has its own ``__torch_function__`` or
``__torch_dispatch__``. Classes are looked into through ``type``'s own descriptors, so that no
metaclass of the student's runs either. Anything else stays in the child as an object the judge
holds a handle on.

The reads also run under the request's guard (`verify_guard.Guard`), in case torch itself reaches
Python code; a torch function or dispatch mode the student left on is switched off here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy
import torch

_MRO = type.__dict__["__mro__"].__get__
_DICT = type.__dict__["__dict__"].__get__
_FLAGS = type.__dict__["__flags__"].__get__
HEAP_TYPE = 1 << 9  # a class made by a class statement; the built-in C types are not
MAX_DEPTH = 20
DISABLED = torch._C._disabled_torch_function_impl  # nn.Parameter's: no override
# What reading a value of each built-in kind calls; a subclass defining one of them is refused.
_ANY = ("__getattribute__", "__getattr__", "__class__")
READS = {
    tuple: ("__iter__", "__getitem__", "__len__", *_ANY),
    list: ("__iter__", "__getitem__", "__len__", *_ANY),
    dict: ("__iter__", "__getitem__", "__len__", "items", "keys", "values", *_ANY),
    torch.Tensor: ("__torch_function__", "__torch_dispatch__"),
}
SCALARS = (
    (bool, bool.__bool__),
    (int, int.__index__),
    (float, float.__float__),
    (str, str.__str__),
)
NUMPY_SCALARS = tuple(set(numpy.sctypeDict.values()))


def refusal(base: type, name: str) -> str:
    """What a refusal says (it completes "your code ...")."""
    return (
        f"returned a {base.__name__} subclass with its own {name}, which changes how the result "
        "is read"
    )


REFUSALS = frozenset(refusal(base, name) for base, names in READS.items() for name in names)


class Unreadable(Exception):
    """A result the re-check does not read; `what` is one of `REFUSALS`."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


def _is(kind, *types) -> bool:
    return any(kind is t for t in types)  # `in` would compare with the metaclass's __eq__


def own_method(kind: type, base: type) -> str | None:
    """The first of `READS[base]` that a class between `kind` and `base` defines, or None; the
    built-in C types (OrderedDict, torch.Size) are trusted."""
    for klass in _MRO(kind):
        if klass is base:
            return None
        if not _FLAGS(klass) & HEAP_TYPE:
            continue
        defined = _DICT(klass)
        for name in READS[base]:
            if name in defined and not (name == "__torch_function__" and defined[name] is DISABLED):
                return name
    return None


def _refuse_own(kind: type, base: type) -> None:
    name = own_method(kind, base)
    if name is not None:
        raise Unreadable(refusal(base, name))


@contextlib.contextmanager
def no_overrides():
    """torch's Python overrides off: subclasses' and modes' __torch_function__ and
    __torch_dispatch__."""
    with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
        yield


def plain_tensor(value) -> torch.Tensor:
    """A tensor the student's code returned, as a plain strided torch.Tensor (an alias: it stays
    in the autograd graph)."""
    kind = type(value)
    if not issubclass(kind, torch.Tensor):
        raise TypeError(f"expected a tensor, got a {kind.__name__}"[:200])
    with no_overrides():
        if kind is not torch.Tensor:
            _refuse_own(kind, torch.Tensor)
            value = torch.Tensor.as_subclass(value, torch.Tensor)
        if torch.Tensor.layout.__get__(value) != torch.strided:
            value = torch.Tensor.to_dense(value)
    return value


def requires_grad(t: torch.Tensor) -> bool:
    with no_overrides():
        return bool(torch.Tensor.requires_grad.__get__(t))


def tensor_out(t) -> torch.Tensor:
    """A copy of a tensor to send back: plain, detached, contiguous."""
    t = plain_tensor(t)
    with no_overrides():
        return torch.Tensor.contiguous(torch.Tensor.clone(torch.Tensor.detach(t)))


def plain(value, tensors: list, keep: Callable[[object], int], depth: int = 0) -> dict:
    """A result -> a description of plain data; its tensors (plain) go to `tensors`; any other
    object is kept (`keep` gives its handle)."""
    kind = type(value)
    if depth > MAX_DEPTH:
        return {"other": "deeply nested value"}
    if issubclass(kind, torch.Tensor):
        tensors.append(plain_tensor(value))
        return {"t": len(tensors) - 1}
    if value is None or _is(kind, bool, int, float, str):
        return {"v": value}
    if value is ...:
        return {"ellipsis": True}
    for base, read in SCALARS:
        if issubclass(kind, base):
            return {"v": read(value)}
    for base in (tuple, list):
        if issubclass(kind, base):
            if kind is not base:
                _refuse_own(kind, base)
            items = [plain(v, tensors, keep, depth + 1) for v in base.__iter__(value)]
            return {"seq": base.__name__, "items": items}
    if issubclass(kind, dict):
        if kind is not dict:
            _refuse_own(kind, dict)
        pairs = list(dict.items(value))
        if all(type(k) is str for k, _ in pairs):
            return {"dict": {k: plain(v, tensors, keep, depth + 1) for k, v in pairs}}
    if _is(kind, *NUMPY_SCALARS):
        return plain(numpy.generic.item(value), tensors, keep, depth + 1)
    # any other object stays in the child; the parent gets a handle on it
    return {"object": keep(value), "type": _type_name(kind)}


def _type_name(kind: type) -> str:
    name = type.__dict__["__name__"].__get__(kind)
    return str.__str__(name)[:100]
