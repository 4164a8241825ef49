"""The judge's side of one student process (`verify_child`): starting it in its box, sending it
the student's cells to run and requests (describe a name, call, backward), checking every reply."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from .bubblewrap import PACKAGE_PARENTS
from .sandbox import GRADING_ENV
from .verify_guard import UNKNOWN_REFUSAL, known_refusals
from .verify_remote import (
    SAFE_MODULES,
    Opaque,
    RemoteCall,
    construct_reply,
    encode,
    raise_student_error,
    rebuild,
    remote_class,
    remote_function,
)
from .verify_wire import (
    MAX_LEAVES,
    MAX_TEXT,
    ChildGone,
    VerifyError,
    pack_request,
    read_message,
    unpack_reply,
    write_message,
)


def _child_env(workdir: Path) -> dict:
    """The student's process's environment: grading mode, quick mode, its own folder as home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "JPY_"))}
    env.update(GRADING_ENV, TRANSFORMER_LAB_QUICK="1")
    env.update(
        HOME=str(workdir),
        MPLCONFIGDIR=str(workdir / ".matplotlib"),
        IPYTHONDIR=str(workdir / ".ipython"),
        TRANSFORMER_LAB_STUDENT_DIR=str(workdir / "student_package"),
    )
    return env


# The student's process: an isolated interpreter (-I: no PYTHON* variables, no user site, not
# its working folder on the path) that imports the judge's own copies of transformer_lab and of
# this grader (`bubblewrap.PACKAGE_PARENTS`: their folders, which the box binds read-only).
CHILD_MAIN = (
    f"import sys; sys.path[:0] = {list(PACKAGE_PARENTS)!r}; "
    "from transformer_lab_grader.verify_child import child_main; "
    "child_main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])"
)
GRACE = 2.0  # seconds a student's process gets to answer the last request (its CPU time)
PER_TEST = " (this test ran past the per-cell time limit of {limit:g} s: an endless loop?)"
MAX_RESTARTS = 3  # fresh children after a test timed out, per notebook


# The fields of a reply to each request (`verify_child.Answers.handle`), and those of any reply.
REPLY_FIELDS = {
    "usage": {"cpu"},
    "run": {"cell_errors", "outputs"},
    "describe": {"kind", "module", "value", "tensors"},
    "getattr": {"kind", "value", "tensors"},
    "backward": {"grads", "refused"},
    "call": {"result", "tensors", "differentiable", "token", "generators", "construct", "refused"},
}
ANY_REPLY = {"error", "error_type", "line"}


class Session:
    """The child process and the stand-ins that forward calls to it."""

    def __init__(
        self,
        cells,
        workdir: Path,
        deadline: float,
        memory: int | None,
        box=None,
        budget: dict | None = None,
    ):
        """Start the student's process in `workdir` (its own folder) and run `cells` there (a
        replay: their outputs are not kept). `box`: a `sandbox.Box` (None: unboxed, for trusted
        code such as the reference solution); `memory`: its address-space limit in bytes."""
        self.deadline = deadline
        self.timeout_reason = ""  # PER_TEST while a test cell runs under its own time limit
        self.flags: list[str] = []
        self.exercise: str | None = None
        self.dead: str | None = None
        self.cell_errors: dict[int, str] = {}
        self.preloaded = set(sys.modules)
        self.warning: str | None = None  # the sandbox's, when the process is not boxed
        self.cpu = 0.0  # CPU seconds the process reported when it was closed
        # Tensors sent with requires_grad, by id, so that an output of a later call (a KV cache
        # holding earlier chunks) differentiates back to the tensors of earlier calls too.
        self.leaves: list[tuple[torch.Tensor, int]] = []
        self.next_tid = 0
        self.seq = 0  # the last request's number, which its reply must carry
        workdir.mkdir(parents=True, exist_ok=True)
        cells_file = workdir / "verify_cells.json"
        spec = {"cells": cells, "budget": budget}  # each cell carries its own limits
        cells_file.write_text(json.dumps(spec))
        self._popen(workdir, memory, cells_file, box)
        try:
            ready = self._receive()
            self.cell_errors = self._errors(ready)
        except ChildGone as err:
            self.dead = f"running the notebook's cells failed: {err}"

    def _errors(self, reply: dict) -> dict[int, str]:
        errors = reply.get("cell_errors", {})
        if not isinstance(errors, dict):
            raise self.gone("sent a malformed reply")
        return {int(k): str(v)[:MAX_TEXT] for k, v in errors.items()}

    def run(self, cells: list, deadline: float, budget: dict | None = None) -> dict[int, dict]:
        """Run the student's next `cells` ([index, source, full limit, short limit] each), with
        the notebook's timeout budget so far (`cell_limits.TimeoutBudget`), and return {index:
        {"stdout", "stderr", "error", "seconds"}}; waits until `deadline` at most (then the
        process is ended: ChildGone)."""
        if self.dead:
            raise ChildGone(self.dead)
        self.deadline = deadline
        self.timeout_reason = ""
        reply = self._exchange({"op": "run", "cells": cells, "budget": budget})
        self.cell_errors.update(self._errors(reply))
        outputs = reply.get("outputs")
        if not isinstance(outputs, dict):
            raise self.gone("sent a malformed reply")
        return {int(k): _cell_output(v) for k, v in outputs.items()}

    @property
    def test_timed_out(self) -> bool:
        """The child was given up because a test ran past its own time limit."""
        return bool(self.dead and "ran past the per-cell time limit" in self.dead)

    def _popen(self, workdir: Path, memory: int | None, cells_file: Path, box) -> None:
        from .sandbox import Box, Limits, popen

        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        cmd = [sys.executable, "-I", "-c", CHILD_MAIN, str(to_child_r), str(from_child_w)]
        cmd.append(str(cells_file))
        limits = Limits(memory_bytes=memory or resource.RLIM_INFINITY)
        try:
            self.proc, self.warning = popen(
                cmd,
                cwd=workdir,
                env=_child_env(workdir),
                limits=limits,
                box=box if box is not None else Box(isolate=False),
                keep=workdir,
                pass_fds=(to_child_r, from_child_w),
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        if box is None:
            self.warning = None  # trusted code, unboxed on purpose

    # -- transport ----------------------------------------------------------------------------
    def close(self) -> None:
        """End the student's process: asked what CPU time it used (`cpu`), then killed with its
        pipes closed. Nothing it would do on the way out matters to the grade, and letting it
        leave by itself cost a notebook's grading about 1 s of an interpreter's shutdown
        (torch's and the student's objects' finalisers; journal §35)."""
        if not self.dead and self.proc.poll() is None:
            self.deadline = time.monotonic() + GRACE
            with contextlib.suppress(ChildGone, VerifyError):
                used = self.request({"op": "usage"}).get("cpu")
                self.cpu = float(used) if isinstance(used, int | float) else 0.0
        for fd in (self._to_child, self._from_child):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def gone(self, why: str) -> ChildGone:
        self.dead = f"the student's process {why}"  # no grace: it is ended at once
        self.close()
        code = self.proc.returncode
        if why == "ended" and code is not None:
            why = (
                f"ended with exit code {code}"
                if code >= 0
                else f"was killed by signal {-code} ({signal.Signals(-code).name})"
            )
        self.dead = f"the student's process {why}"
        return ChildGone(self.dead)

    def _receive(self) -> dict:
        try:
            data = read_message(self._from_child, self.deadline)
        except TimeoutError:
            raise self.gone(f"timed out{self.timeout_reason}") from None
        except (EOFError, OSError):
            raise self.gone("ended") from None
        except ValueError as err:
            raise self.gone(f"sent too much data ({err})") from None
        try:
            reply = unpack_reply(data)
        except Exception as err:
            raise self.gone(f"sent data that is not plain tensors and numbers ({err})") from None
        if not isinstance(reply, dict):
            raise self.gone("sent a malformed reply")
        return reply

    def _exchange(self, message: dict, data: bytes | None = None) -> dict:
        """Send a request (`data`: `message` already packed) and read its reply: the reply must
        answer it (its `seq`) and hold only the fields its op has (`REPLY_FIELDS`); a frame
        the student's code wrote on the pipe itself is not taken (ChildGone)."""
        self.seq += 1
        message["seq"] = self.seq
        try:
            write_message(self._to_child, data or pack_request(message))
        except OSError:
            raise self.gone("ended") from None
        reply = self._receive()
        if reply.pop("seq", None) != self.seq:
            raise self.gone("sent a reply to a request the judge did not make")
        if not set(reply) <= REPLY_FIELDS[message["op"]] | ANY_REPLY:
            raise self.gone("sent a malformed reply")
        return reply

    def request(self, message: dict) -> dict:
        if self.dead:
            raise ChildGone(self.dead)
        message = dict(message, exercise=self.exercise, seq=self.seq + 1)
        try:
            data = pack_request(message)
        except Exception as err:  # e.g. a lambda among a check's arguments
            flag = f"could not re-check {self.exercise}: its arguments cannot be sent ({err})"
            if flag not in self.flags:
                self.flags.append(flag)
            raise VerifyError(f"the re-check cannot send this call's arguments: {err}") from None
        reply = self._exchange(message, data)
        refused = reply.get("refused")
        if refused:
            if not isinstance(refused, list) or not all(isinstance(r, str) for r in refused):
                raise self.gone("sent a malformed reply")
            from transformer_lab.check import EXERCISES, ImplementThisYourself

            known = known_refusals(EXERCISES.get(self.exercise))
            refused = [what if what in known else UNKNOWN_REFUSAL for what in refused[:50]]
            for what in refused:
                flag = f"{what} in {self.exercise}"
                if flag not in self.flags:
                    self.flags.append(flag)
            if refused[0].startswith(("called forbidden", "ran a copy", "subclassed")):
                raise ImplementThisYourself(
                    f"implement this yourself: your code {refused[0]} while `{self.exercise}` "
                    "was checked; the exercise asks you to build it from basic tensor operations"
                )
            raise ImplementThisYourself(  # the guard was tampered with, or a result unreadable
                f"the re-check refused this call: your code {refused[0]} while "
                f"`{self.exercise}` was checked"
            )
        error = reply.get("error")
        if error is not None:
            raise_student_error(reply)
        return reply

    # -- names the test cells look up ---------------------------------------------------------
    def lookup(self, name: str):
        reply = self.request({"op": "describe", "name": name})
        kind = reply.get("kind")
        if kind == "missing":
            raise KeyError(name)
        if kind == "function":
            return remote_function(self, name)
        if kind == "class":
            return remote_class(self, name)
        if kind == "module":
            module = reply.get("module")
            # Only a module this process imported before the child started (the child may have
            # written files anywhere it can).
            if isinstance(module, str) and module.split(".")[0] in SAFE_MODULES:
                if module in self.preloaded:
                    return sys.modules[module]
            return Opaque(f"module {module}")
        if kind == "value":
            tensors = reply.get("tensors", [])
            if not isinstance(tensors, list):
                raise self.gone("sent a malformed reply")
            return rebuild(reply.get("value"), tensors, self)
        return Opaque(str(reply.get("type", "object")))

    # -- calls --------------------------------------------------------------------------------
    def call(self, target: dict, args: tuple, kwargs: dict, state: dict | None = None):
        tensors: list[torch.Tensor] = []
        generators: list[torch.Generator] = []
        enc_args = encode(args, tensors, generators)
        enc_kwargs = encode(kwargs, tensors, generators)
        n_args = len(tensors)
        state = state or {}
        keys = list(state)
        tensors += [state[k] for k in keys]
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        flags = [bool(grad and t.requires_grad and t.is_floating_point()) for t in tensors]
        tids = []
        for w in flags:
            self.next_tid += 1
            tids.append(self.next_tid if w else None)
        extra = list(self.leaves) if grad else []
        message = {
            "op": "call",
            **target,
            "args": enc_args,
            "kwargs": enc_kwargs,
            "n_args": n_args,
            "state_keys": keys,
            "generators": [g.get_state() for g in generators],
            "grad": flags,
            "tids": tids,
            "extra_tids": [tid for _, tid in extra],
        }
        box: dict = {}
        if grad:
            everything = tensors + [t for t, _ in extra]
            outs = RemoteCall.apply(self, message, box, len(tensors), *everything)
            outs = outs if isinstance(outs, tuple) else (outs,)
        else:
            self.send_call(message, tensors, box)
            outs = tuple(box["tensors"])
        self.leaves += [(t, tid) for t, tid in zip(tensors, tids) if tid is not None]
        del self.leaves[:-MAX_LEAVES]
        for g, new in zip(generators, box["reply"].get("generators", [])):
            old = g.get_state()
            if isinstance(new, torch.Tensor) and new.dtype == old.dtype and new.shape == old.shape:
                g.set_state(new)
        if "construct" in box["reply"]:
            return construct_reply(self, box["reply"]["construct"])
        return rebuild(box["reply"].get("result"), list(outs), self)

    def send_call(self, message: dict, tensors, box: dict) -> None:
        message = dict(message, tensors=[t.detach() for t in tensors])
        reply = self.request(message)
        out = reply.get("tensors", [])
        if not isinstance(out, list) or not all(isinstance(t, torch.Tensor) for t in out):
            raise self.gone("sent a malformed reply")
        box["reply"], box["tensors"] = reply, out
        box["token"] = reply.get("token")

    def backward(self, token, grads, like: list[torch.Tensor]) -> list:
        reply = self.request({"op": "backward", "token": token, "grads": grads})
        out = reply.get("grads")
        if not isinstance(out, list) or len(out) != len(like):
            raise self.gone("sent malformed gradients")
        result = []
        for g, t in zip(out, like):
            if g is None:
                result.append(None)
                continue
            if not isinstance(g, torch.Tensor) or tuple(g.shape) != tuple(t.shape):
                raise self.gone("sent malformed gradients")
            result.append(g.to(device=t.device, dtype=t.dtype))
        return result


def _cell_output(data) -> dict:
    """One cell's outputs as the student's process reported them, checked: plain strings."""
    if not isinstance(data, dict):
        return {"stdout": "", "stderr": "", "error": None, "seconds": 0.0}
    error = data.get("error")
    if isinstance(error, dict):
        trace = error.get("traceback")
        error = {
            "ename": str(error.get("ename", "Error"))[:200],
            "evalue": str(error.get("evalue", ""))[:MAX_TEXT],
            "traceback": [str(line) for line in trace][:60] if isinstance(trace, list) else [],
        }
    else:
        error = None
    seconds = data.get("seconds")
    return {
        "stdout": str(data.get("stdout", ""))[:MAX_OUTPUT],
        "stderr": str(data.get("stderr", ""))[:MAX_OUTPUT],
        "error": error,
        "seconds": float(seconds) if isinstance(seconds, int | float) else 0.0,
    }


MAX_OUTPUT = 25_000  # characters of a cell's stdout or stderr the judge accepts
