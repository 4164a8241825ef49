"""The student's process: runs the student's cells like nbgrader's kernel would (those the spec
names at its start, then each batch the judge sends with a "run" request, outputs captured), and
answers the judge's describe/getattr/call/backward requests in between.

Started by the judge (`verify_session.CHILD_MAIN`), which calls `child_main`.

While the student's code runs for a request, `verify_guard.Guard` switches the exercise's
forbidden names off and watches for calls of them; such a call refuses the request; and the
earlier exercises of the notebook that the exercise calls are the course's (`verify_earlier`).
Every step of a request that touches the student's objects (the call, reading its result back
as data with `verify_read`, an attribute, a name's description, a module's state, gradients) runs
under the guard.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
from collections.abc import Callable
from pathlib import Path

from .cell_limits import TimeoutBudget
from .verify_cells import Cells
from .verify_earlier import course_parts, in_place
from .verify_guard import NOTHING_FORBIDDEN, Guard, Trusted, capture
from .verify_read import REFUSALS, Unreadable, plain, requires_grad, tensor_out
from .verify_wire import (
    BUILTIN_PROTOCOL,
    GENERATOR_MARK,
    MAX_LEAVES,
    MAX_TEXT,
    OBJECT_MARK,
    TENSOR_MARK,
    pack_reply,
    read_message,
    unpack_request,
    write_message,
)

_NOTHING = contextlib.nullcontext()

# ----------------------------------------------------------------------------------------------
# Answering the parent's requests.


class Answers:
    """The child's side of the requests: objects stay here (the parent holds handles), only
    plain data and tensors go back."""

    def __init__(self, cells: Cells, trusted: Trusted, torch, forbid: Callable, earlier=None):
        self.cells, self.ns = cells, cells.ns
        self.trusted, self.torch, self.forbid = trusted, torch, forbid
        self.earlier = earlier or {}  # exercise -> {notebook name: the course's stand-in}
        self.functional_call = torch.func.functional_call
        self.instances: dict[int, object] = {}
        self.registry: dict[int, object] = {}
        self.pending: dict[int, tuple] = {}
        self.counter = 0

    def keep(self, obj) -> int:
        self.counter += 1
        self.instances[self.counter] = obj
        return self.counter

    def guard(self, exercise) -> Guard:
        return Guard(self.trusted, self.forbid, exercise)

    def guarded(self, exercise, work: Callable[[], dict], around=_NOTHING) -> dict:
        """`work()`'s reply, run under the exercise's guard (inside `around`); or, when the guard
        noted something or the result cannot be read, the refusal."""
        guard = self.guard(exercise)
        try:
            with around, guard:
                reply = work()
        except BaseException as err:
            if type(err) is Unreadable and type(err.what) is str and err.what in REFUSALS:
                guard.note(err.what)  # a fixed text, whoever raised it
            elif not guard.refused:
                raise
        if guard.refused:
            return {"refused": guard.refused}
        return reply

    # -- data -----------------------------------------------------------------------------------
    def plain(self, value, tensors) -> dict:
        """A result -> a description of plain data, without running the student's code
        (`verify_read.plain`); its tensors go to `tensors`."""
        return plain(value, tensors, self.keep)

    def decode(self, obj, tensors, generators):
        if type(obj) is tuple and len(obj) == 2 and obj[0] == OBJECT_MARK:
            return self.instances[obj[1]]
        if type(obj) is tuple and len(obj) == 2 and obj[0] == TENSOR_MARK:
            return tensors[obj[1]]
        if type(obj) is tuple and len(obj) == 2 and obj[0] == GENERATOR_MARK:
            return generators[obj[1]]
        if type(obj) in (list, tuple):
            return type(obj)(self.decode(x, tensors, generators) for x in obj)
        if type(obj) is dict:
            return {k: self.decode(v, tensors, generators) for k, v in obj.items()}
        return obj

    def value_reply(self, value) -> dict:
        found: list = []
        value = self.plain(value, found)
        return {"kind": "value", "value": value, "tensors": [tensor_out(t) for t in found]}

    # -- requests -------------------------------------------------------------------------------
    def handle(self, req: dict) -> dict:
        op = req.get("op")
        if op == "usage":  # CPU seconds of this process and what it reaped (for the record)
            me, kids = (
                resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
            )
            return {"cpu": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime}
        if op == "run":  # the student's next cells, their outputs captured
            if req.get("budget") is not None:  # the judge's, charged by the tests too
                self.cells.budget = TimeoutBudget.from_json(req["budget"])
            errors, outputs = self.cells.run(req["cells"], capture=True)
            return {"cell_errors": errors, "outputs": outputs}
        if op == "describe":
            return self.guarded(req.get("exercise"), lambda: self.describe(req["name"]))
        if op == "getattr":
            return self.guarded(req.get("exercise"), lambda: self.attribute(req))
        if op == "backward":
            return self.backward(req)
        if op != "call":
            return {"error": f"unknown request {op!r}", "error_type": "RuntimeError"}
        return self.call(req)

    def attribute(self, req: dict) -> dict:
        value = getattr(self.instances[req["handle"]], req["attr"])
        if callable(value) and not issubclass(type(value), self.torch.Tensor):
            return {"kind": "function"}
        return self.value_reply(value)

    def describe(self, name: str) -> dict:
        if name not in self.ns:
            return {"kind": "missing"}
        obj = self.ns[name]
        if issubclass(type(obj), type(os)):
            module = type(os).__dict__["__dict__"].__get__(obj).get("__name__")
            return {"kind": "module", "module": module if type(module) is str else "?"}
        if issubclass(type(obj), type):
            return {"kind": "class"}
        if callable(obj):
            return {"kind": "function"}
        return self.value_reply(obj)

    def backward(self, req: dict) -> dict:
        outs, leaves = self.pending.pop(req["token"], (None, None))
        if outs is None:
            return {"grads": []}
        pairs = [(o, g) for o, g in zip(outs, req["grads"]) if g is not None and requires_grad(o)]
        grads = [None] * len(leaves)
        alive = [i for i, leaf in enumerate(leaves) if leaf is not None]
        if not (pairs and alive):
            return {"grads": grads}

        def work():
            got = self.torch.autograd.grad(
                [o for o, _ in pairs],
                [leaves[i] for i in alive],
                [g.to(o.dtype) for o, g in pairs],
                allow_unused=True,
            )
            for i, g in zip(alive, got):
                grads[i] = None if g is None else tensor_out(g)
            return {"grads": grads}

        return self.guarded(req.get("exercise"), work)

    def run_student(self, req, args, kwargs, tensors):
        """The student's code the request calls (under the guard)."""
        if "method" in req:
            obj, method = self.instances[req["handle"]], req["method"]
            if method in BUILTIN_PROTOCOL:
                return BUILTIN_PROTOCOL[method](obj, *args, **kwargs)
            return getattr(obj, method)(*args, **kwargs)
        if "handle" in req:
            module = self.instances[req["handle"]]
            module.train(bool(req["training"]))
            state = dict(zip(req["state_keys"], tensors[req["n_args"] :]))
            return self.functional_call(module, state, tuple(args), kwargs)
        if req.get("construct"):
            with self.torch.random.fork_rng(devices=[]):
                return self.ns[req["name"]](*args, **kwargs)
        return self.ns[req["name"]](*args, **kwargs)

    def call(self, req: dict) -> dict:
        exercise = req.get("exercise")
        around = in_place(self.ns, self.earlier.get(exercise, {}))
        return self.guarded(exercise, lambda: self.call_guarded(req), around)

    def call_guarded(self, req: dict) -> dict:
        torch, exercise = self.torch, req.get("exercise")
        tensors = [
            t.detach().requires_grad_(bool(w)) if t.is_floating_point() else t.detach()
            for t, w in zip(req["tensors"], req["grad"])
        ]
        generators = []
        for state in req["generators"]:
            g = torch.Generator()
            g.set_state(state)
            generators.append(g)
        args = self.decode(req["args"], tensors, generators)
        kwargs = self.decode(req["kwargs"], tensors, generators)
        for t, tid in zip(tensors, req["tids"]):
            if tid is not None:
                self.registry[tid] = t
        while len(self.registry) > 2 * MAX_LEAVES:
            self.registry.pop(min(self.registry))
        leaves = [t for t, w in zip(tensors, req["grad"]) if w]
        leaves += [self.registry.get(tid) for tid in req["extra_tids"]]
        if req.get("construct"):
            cls = self.ns[req["name"]]
            reference = self.trusted.forbidden.get(exercise, NOTHING_FORBIDDEN).reference
            if reference is not None and isinstance(cls, type) and issubclass(cls, reference):
                dotted = f"{reference.__module__}.{reference.__qualname__}"
                return {"refused": [f"subclassed the reference {dotted}"]}
        result = self.run_student(req, args, kwargs, tensors)
        gen_states = [g.get_state() for g in generators]
        if req.get("construct"):
            return self.constructed(result, gen_states)
        out_tensors: list = []
        description = self.plain(result, out_tensors)
        differentiable = [requires_grad(t) for t in out_tensors]
        token = None
        if leaves and any(differentiable):
            self.counter += 1
            token = self.counter
            self.pending[token] = (out_tensors, leaves)
            while len(self.pending) > 64:
                self.pending.pop(min(self.pending))
        return {
            "result": description,
            "tensors": [tensor_out(t) for t in out_tensors],
            "differentiable": differentiable,
            "token": token,
            "generators": gen_states,
        }

    def constructed(self, result, gen_states: list) -> dict:
        """What the parent learns of an object the student's class made: a handle, and for a
        module its state (so that the parent's stand-in mirrors the weights)."""
        if not issubclass(type(result), self.torch.nn.Module):
            reply = {"handle": self.keep(result), "module": False}
            return {"construct": reply, "tensors": [], "generators": gen_states}
        handle = self.keep(result)
        canonical = {}
        for key, value in list(result.named_parameters()) + list(result.named_buffers()):
            canonical.setdefault(id(value), key)
        params = {id(p) for p in result.parameters()}
        state = []
        for key, value in result.state_dict(keep_vars=True).items():
            state.append(
                [key, canonical.get(id(value), key), tensor_out(value), id(value) in params]
            )
        reply = {
            "handle": handle,
            "module": True,
            "state": state,
            "training": bool(result.training),
        }
        return {"result": {"v": None}, "construct": reply, "tensors": [], "generators": gen_states}


# ----------------------------------------------------------------------------------------------
# The process.


def warm_torch(torch) -> None:
    """Run once, before any student line, what torch imports lazily on its first use in a check:
    `torch.autograd.grad` with `grad_outputs` imports torch.fx.experimental.symbolic_shapes, and
    with it sympy (about 0.65 CPU s). In the student's process that import would otherwise run
    inside the first guarded request, under the guard's call monitor, at about three times the
    cost; the grading worker (`job._warm_caches`) does it once instead of in every job it forks
    (benchmarks/history/journal.md §38). Only a saving: if it fails, nothing is lost."""
    with contextlib.suppress(Exception):
        x = torch.ones(2, requires_grad=True)
        torch.autograd.grad(x * 2, x, torch.ones(2))


def child_main(fd_in: int, fd_out: int, cells_file: str) -> None:
    # Everything trusted is imported and captured before the first student line runs.
    import resource  # noqa: F401

    import torch

    import transformer_lab
    from transformer_lab import check

    transformer_lab.load_all()  # no model module loads later, under the guard
    torch.set_num_threads(1)
    warm_torch(torch)
    spec = json.loads(Path(cells_file).read_text())
    trusted = capture(check)
    earlier = course_parts(check.EXERCISES)
    pack, unpack, write = pack_reply, unpack_request, write_message
    forbid = check.forbid

    def send(obj):
        write(fd_out, pack(obj))

    cells = Cells(spec)
    errors, _ = cells.run(spec["cells"])
    send({"op": "ready", "cell_errors": errors})
    answers = Answers(cells, trusted, torch, forbid, earlier)
    while True:
        try:
            data = read_message(fd_in, None, limit=1 << 34)
        except (EOFError, OSError):
            return
        req = unpack(data)  # from the trusted parent
        try:
            reply = answers.handle(req)
        except BaseException as err:  # noqa: BLE001 - the student's code raised
            try:
                reply = {"error": f"{err}"[:MAX_TEXT], "error_type": type(err).__name__}
                reply["line"] = cells.student_line(err)  # kept in the failure's crash
            except BaseException:  # noqa: BLE001
                reply = {"error": "an error", "error_type": "Error"}
        seq = req.get("seq")  # the judge takes a reply only with its request's number
        try:
            send(dict(reply, seq=seq))
        except Exception as err:  # noqa: BLE001 - e.g. a result that cannot be saved
            send(
                {
                    "error": f"the result cannot be sent back: {err}"[:MAX_TEXT],
                    "error_type": "TypeError",
                    "seq": seq,
                }
            )
