"""The parent's stand-ins for the student's objects: calling one sends the call to the child
(`verify_session.Session.call`) and rebuilds what comes back from plain data.

A function becomes a function that forwards its calls; an ``nn.Module`` class a class whose
instances mirror the child's weights (so the check can load its own); any other object a
`RemoteObject` whose methods, ``len``, ``[]`` and attributes are forwarded. ``TestNames`` is a test
cell's namespace (the notebook's names looked up in the child) and ``CheckFront`` its ``check``.
"""

from __future__ import annotations

import builtins
import sys
from typing import TYPE_CHECKING

import torch
from torch import nn

from .verify_earlier import note
from .verify_wire import GENERATOR_MARK, MAX_TEXT, OBJECT_MARK, TENSOR_MARK, ChildGone

if TYPE_CHECKING:
    from .verify_session import Session


class RemoteObject:
    """An object of the student's that lives in the child (e.g. a KVCache instance): methods,
    len(), float(), [] and attributes are forwarded to it; only data comes back."""

    def __init__(self, session, handle: int, type_name: str):
        object.__setattr__(self, "_tl_session", session)
        object.__setattr__(self, "_tl_handle", handle)
        object.__setattr__(self, "_tl_type", type_name)

    def _tl_call(self, method, *args, **kwargs):
        return self._tl_session.call({"handle": self._tl_handle, "method": method}, args, kwargs)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return remote_attribute(self._tl_session, self._tl_handle, name)

    def __setattr__(self, name, value):
        raise AttributeError("the re-check cannot set attributes on the notebook's objects")

    def __call__(self, *args, **kwargs):
        return self._tl_call("__call__", *args, **kwargs)

    def __len__(self):
        return self._tl_call("__len__")

    def __float__(self):
        return self._tl_call("__float__")

    def __int__(self):
        return self._tl_call("__int__")

    def __index__(self):
        return self._tl_call("__index__")

    def __bool__(self):
        return self._tl_call("__bool__")

    def __getitem__(self, key):
        return self._tl_call("__getitem__", key)

    def __contains__(self, key):
        return self._tl_call("__contains__", key)

    def __repr__(self):
        return f"<{self._tl_type} from the notebook>"


def remote_attribute(session: Session, handle: int, name: str):
    """Attribute `name` of the child's object `handle`: a method forwards its calls, data comes
    back rebuilt; the child's AttributeError is raised here."""
    reply = session.request({"op": "getattr", "handle": handle, "attr": name})
    if reply.get("kind") == "function":
        target = {"handle": handle, "method": name}
        return lambda *args, **kwargs: session.call(target, args, kwargs)
    tensors = reply.get("tensors", [])
    if not isinstance(tensors, list):
        raise ChildGone("sent a malformed reply")
    return rebuild(reply.get("value"), tensors, session)


class Opaque:
    """A value of the student's that cannot travel as data (a module instance, an object, ...)."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self):
        return f"<{self.type_name} from the notebook>"


SAFE_MODULES = {
    "torch",
    "math",
    "numpy",
    "transformer_lab",
    *getattr(sys, "stdlib_module_names", ()),
}


def encode(obj, tensors: list, generators: list, depth: int = 0):
    """Tensors and generators become markers (sent beside); the rest is pickled as it is."""
    if depth > 20:
        raise TypeError("arguments nested too deeply for the re-check")
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return (TENSOR_MARK, len(tensors) - 1)
    handle = (
        getattr(obj, "_tl_handle", None) if isinstance(obj, (RemoteObject, nn.Module)) else None
    )
    if type(handle) is int:
        return (OBJECT_MARK, handle)
    if isinstance(obj, torch.Generator):
        generators.append(obj)
        return (GENERATOR_MARK, len(generators) - 1)
    if type(obj) in (list, tuple):
        return type(obj)(encode(x, tensors, generators, depth + 1) for x in obj)
    if type(obj) is dict:
        return {k: encode(v, tensors, generators, depth + 1) for k, v in obj.items()}
    return obj


def rebuild(spec, tensors: list, session=None):
    """The child's description of a result -> the value, with its tensors put back in."""
    if isinstance(spec, dict):
        if "t" in spec and len(spec) == 1:
            i = spec["t"]
            if type(i) is not int or not 0 <= i < len(tensors):
                raise ChildGone("sent a malformed result")
            return tensors[i]
        if "v" in spec and len(spec) == 1:
            return spec["v"]
        if "seq" in spec and "items" in spec:
            items = [rebuild(x, tensors, session) for x in spec["items"]]
            return tuple(items) if spec["seq"] == "tuple" else items
        if "dict" in spec:
            return {k: rebuild(v, tensors, session) for k, v in spec["dict"].items()}
        if "other" in spec:
            return Opaque(str(spec["other"]))
        if "object" in spec and type(spec["object"]) is int:
            return RemoteObject(session, spec["object"], str(spec.get("type")))
        if "ellipsis" in spec:
            return ...
    raise ChildGone("sent a malformed result")


def construct_reply(session: Session, reply) -> dict:
    """Validate what the child says about a module it constructed."""
    if isinstance(reply, dict) and reply.get("module") is False:
        if type(reply.get("handle")) is not int:
            raise session.gone("sent a malformed description of an object")
        return reply
    ok = (
        isinstance(reply, dict)
        and type(reply.get("handle")) is int
        and isinstance(reply.get("state"), list)
        and all(
            isinstance(e, list)
            and len(e) == 4
            and isinstance(e[0], str)
            and isinstance(e[1], str)
            and isinstance(e[2], torch.Tensor)
            and isinstance(e[3], bool)
            and all(part.isidentifier() or part.isdigit() for part in e[0].split("."))
            for e in reply["state"]
        )
    )
    if not ok:
        raise session.gone("sent a malformed description of a module")
    return reply


class RemoteCall(torch.autograd.Function):
    """Forward: the child runs the student's code. Backward: the child differentiates it."""

    @staticmethod
    def forward(ctx, session, message, box, n_sent, *tensors):
        session.send_call(message, tensors[:n_sent], box)
        outs = box["tensors"]
        ctx.session, ctx.token = session, box["token"]
        ctx.like = list(tensors)
        ctx.wanted = list(message["grad"]) + [True] * (len(tensors) - n_sent)
        differentiable = box["reply"].get("differentiable", [])
        outs = [o.clone() for o in outs]
        for o, d in zip(outs, differentiable + [False] * len(outs)):
            if not (d is True and o.is_floating_point()):
                ctx.mark_non_differentiable(o)
        if not outs:
            return torch.zeros(0)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        sent = [None if g is None else g.detach() for g in grads]
        like = [t for t, w in zip(ctx.like, ctx.wanted) if w]
        got = iter(ctx.session.backward(ctx.token, sent, like))
        result = [next(got) if w else None for w in ctx.wanted]
        return (None, None, None, None, *result)


def raise_student_error(reply: dict):
    """The student's exception, rebuilt here; the line of their code that raised it (as their
    process reported it: text to show, never to judge by) kept as its `student_line`."""
    error = _student_error(reply)
    line = reply.get("line")
    error.student_line = line[:MAX_TEXT] if isinstance(line, str) else None
    raise error


def _student_error(reply: dict) -> BaseException:
    from transformer_lab.check import ImplementThisYourself

    name = reply.get("error_type")
    text = str(reply.get("error"))[:MAX_TEXT]
    if name == "NotImplementedError":
        return NotImplementedError(text or "your code raised NotImplementedError (not done yet?)")
    if name == "ImplementThisYourself":
        return ImplementThisYourself(text)
    if not isinstance(name, str) or not name.isidentifier():
        name = "Error"
    builtin = getattr(builtins, name, None)  # ValueError stays a ValueError: checks catch it
    if (
        isinstance(builtin, type)
        and issubclass(builtin, Exception)
        and not issubclass(builtin, (StopIteration, StopAsyncIteration))
    ):
        try:
            error = builtin(text)
        except Exception:  # e.g. UnicodeDecodeError wants five arguments
            error = None
        if error is not None:
            return error
    return type(name, (Exception,), {})(text)


def remote_function(session: Session, name: str):
    def stand_in(*args, **kwargs):
        return session.call({"name": name}, args, kwargs)

    stand_in.__name__ = stand_in.__qualname__ = name
    return stand_in


def _register_nested(module: nn.Module, key: str, tensor, is_param: bool, shared: dict) -> None:
    *path, leaf = key.split(".")
    owner = module
    for part in path:
        if part not in owner._modules:
            owner.add_module(part, nn.Module())
        owner = owner._modules[part]
    if is_param:
        owner.register_parameter(leaf, shared.setdefault(key, nn.Parameter(tensor.clone())))
    else:
        owner.register_buffer(leaf, tensor.clone())


def remote_class(session: Session, name: str):
    """An nn.Module class whose instances live in the child (this side mirrors their weights)."""

    class StandIn(nn.Module):
        def __new__(cls, *args, **kwargs):
            reply = session.call({"name": name, "construct": True}, args, kwargs)
            if reply.get("module") is not True:
                return RemoteObject(session, reply["handle"], name)
            obj = super().__new__(cls)
            object.__setattr__(obj, "_tl_reply", reply)
            return obj

        def __init__(self, *args, **kwargs):
            reply = self.__dict__.pop("_tl_reply")
            super().__init__()
            self._tl_handle = reply["handle"]
            self._tl_canonical = []  # (key, is_param) sent to the child on each call
            params: dict = {}
            for key, canonical, tensor, is_param in reply["state"]:
                if canonical in params:  # a tied weight: the same Parameter under two names
                    *path, leaf = key.split(".")
                    owner = self
                    for part in path:
                        if part not in owner._modules:
                            owner.add_module(part, nn.Module())
                        owner = owner._modules[part]
                    owner.register_parameter(leaf, params[canonical])
                    continue
                _register_nested(self, key, tensor, is_param, params)
                if key == canonical:
                    self._tl_canonical.append((key, is_param))
            self.train(bool(reply.get("training", True)))
            self.__dict__["_tl_ready"] = True

        def __getattr__(self, attr):
            """Parameters, buffers and submodules are mirrored here; any other public attribute
            is the child's (e.g. `last_weights`, which its forward set)."""
            try:
                return super().__getattr__(attr)
            except AttributeError:
                if attr.startswith("_") or not self.__dict__.get("_tl_ready"):
                    raise  # while the mirror is built (nn.Module asks hasattr), only this side
            return remote_attribute(session, self.__dict__["_tl_handle"], attr)

        def forward(self, *args, **kwargs):
            state = {
                key: (self.get_parameter(key) if is_param else self.get_buffer(key))
                for key, is_param in self._tl_canonical
            }
            target = {"handle": self._tl_handle, "training": self.training}
            return session.call(target, args, kwargs, state=state)

    StandIn.__name__ = StandIn.__qualname__ = name
    return StandIn


class TestNames(dict):
    """The test cell's namespace: its own assignments, else the notebook's names via the child."""

    def __init__(self, session: Session):
        super().__init__()
        self.session = session

    def __setitem__(self, name, value):
        from transformer_lab import check

        if value is check:  # a test cell's own `from transformer_lab import check`
            value = CheckFront(self.session)
        super().__setitem__(name, value)

    def __missing__(self, name):
        if name in ("check",) or hasattr(builtins, name):
            raise KeyError(name)
        value = self.session.lookup(name)
        super().__setitem__(name, value)
        return value


class CheckFront:
    """``check`` in the test cell: the real checks, told which exercise is being checked. A check
    whose exercise runs on the course's earlier parts (``Exercise.uses``) says so once, first."""

    def __init__(self, session: Session):
        self._session = session
        self._noted: set[str] = set()

    def __getattr__(self, name):
        from transformer_lab import check

        real = getattr(check, name)
        if not callable(real) or isinstance(real, type):
            return real

        def run(*args, **kwargs):
            uses = getattr(real, "uses", ())
            if uses and name not in self._noted:
                self._noted.add(name)
                print(note(name, uses))
            self._session.exercise = name
            self._session.leaves = []
            try:
                return real(*args, **kwargs)
            finally:
                self._session.exercise = None

        return run
