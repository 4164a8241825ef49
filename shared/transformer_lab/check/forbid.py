"""Forbidden names: while the student's code runs, the built-ins and references an exercise replaces
raise "implement this yourself"; every patch is undone afterwards."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterable, Iterator

from .feedback import render


class ImplementThisYourself(RuntimeError):
    """Raised by a built-in or reference function that the graded exercise must not call."""

    refusal = True  # check/feedback.py renders it as "Implement this yourself"

    def _render_traceback_(self) -> list[str]:  # IPython shows these lines instead of a traceback
        return render(self)


def resolve(dotted: str):
    """'torch.nn.functional.scaled_dot_product_attention' -> (owner object, attribute name)."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:-1]:
            owner = getattr(owner, attr)
        return owner, parts[-1]
    raise ImportError(dotted)


# What a refusal suggests writing the exercise with, in this order, each with the names that mean
# it: an operation one of whose names the exercise forbids is never suggested.
BASIC_OPERATIONS = (
    ("@", ("matmul", "__matmul__", "mm", "bmm")),
    ("softmax", ("softmax",)),
    ("tanh", ("tanh",)),
    ("exp", ("exp",)),
    ("max", ("max", "amax")),
    ("sum", ("sum",)),
)
SUGGESTED = 5  # operations named in a refusal


def allowed_operations(forbidden: Iterable[str]) -> list[str]:
    """The basic operations to suggest for an exercise forbidding the dotted names `forbidden`:
    none of them is (an alias of) a forbidden name."""
    banned = {dotted.rsplit(".", 1)[-1] for dotted in forbidden}
    allowed = [shown for shown, names in BASIC_OPERATIONS if banned.isdisjoint(names)]
    return allowed[:SUGGESTED]


def _stub(dotted: str, exercise: str, allowed: list[str]) -> Callable:
    short = dotted.replace("torch.nn.functional.", "F.").replace("torch.nn.", "nn.")
    operations = f" ({', '.join(allowed)}, ...)" if allowed else ""

    def refuse(*args, **kwargs):
        raise ImplementThisYourself(
            f"implement this yourself: {short} is what the exercise `{exercise}` asks you to "
            "build, so it is switched off while your code is checked. Write it with basic tensor "
            f"operations{operations}."
        )

    refuse.__name__ = f"forbidden_{dotted.rsplit('.', 1)[-1]}"
    refuse._transformer_lab_forbidden = dotted
    return refuse


def _namespaces(obj) -> Iterator[dict]:
    """The global namespaces the student's function or class looks names up in."""
    seen: set[int] = set()
    functions = []
    if isinstance(obj, type):
        for klass in obj.__mro__:
            if klass.__module__.startswith(("torch", "builtins")):
                continue
            for value in vars(klass).values():
                value = getattr(value, "__func__", value)
                if callable(value) and hasattr(value, "__globals__"):
                    functions.append(value)
    elif hasattr(obj, "__globals__"):
        functions.append(obj)
    for fn in functions:
        if id(fn.__globals__) not in seen:
            seen.add(id(fn.__globals__))
            yield fn.__globals__


def _closure_cells(obj) -> Iterator:
    functions = [obj] if hasattr(obj, "__closure__") else []
    if isinstance(obj, type):
        functions = [getattr(v, "__func__", v) for v in vars(obj).values()]
    for fn in functions:
        yield from getattr(fn, "__closure__", None) or ()


def _restore(owner, attr: str, original, own: bool) -> None:
    """Put `original` back where it was; a name the owner only gave (inherited from a base class,
    or a package's lazy name, `transformer_lab.padding_mask`) is removed again, so it keeps
    following its source: a later check that switches the source off switches it off too."""
    if own:
        setattr(owner, attr, original)
    else:
        delattr(owner, attr)


@contextlib.contextmanager
def forbid(dotted_names: tuple[str, ...], student_obj, exercise: str):
    """Make each dotted name (and any alias of it the student's code holds) raise, then restore."""
    undo: list[Callable[[], None]] = []
    originals: dict[int, Callable] = {}
    allowed = allowed_operations(dotted_names)
    try:
        for dotted in dotted_names:
            try:
                owner, attr = resolve(dotted)
                original = getattr(owner, attr)
            except (ImportError, AttributeError):
                continue
            stub = originals.setdefault(id(original), _stub(dotted, exercise, allowed))
            own = attr in getattr(owner, "__dict__", {})
            setattr(owner, attr, stub)
            undo.append(lambda o=owner, a=attr, v=original, own=own: _restore(o, a, v, own))
        # Names the student bound directly: `from torch.nn.functional import scaled_dot_...`.
        for namespace in _namespaces(student_obj):
            for key, value in list(namespace.items()):
                if id(value) in originals and namespace[key] is value:
                    namespace[key] = originals[id(value)]
                    undo.append(lambda ns=namespace, k=key, v=value: ns.__setitem__(k, v))
        for cell in _closure_cells(student_obj):
            try:
                value = cell.cell_contents
            except ValueError:  # empty cell
                continue
            if id(value) in originals:
                cell.cell_contents = originals[id(value)]
                undo.append(lambda c=cell, v=value: setattr(c, "cell_contents", v))
        yield
    finally:
        for restore in reversed(undo):
            restore()
