"""The parent's side of one child process: starting it on the student's cells, sending requests
(describe a name, call, backward) and checking every reply."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

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


def _child_env() -> dict:
    from .sandbox import GRADING_ENV

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "JPY_"))}
    env.update(GRADING_ENV, TRANSFORMER_LAB_QUICK="1")
    return env


PER_TEST = " (this test ran past the per-cell time limit of {limit:g} s: an endless loop?)"
MAX_RESTARTS = 3  # fresh children after a test timed out, per notebook


class Forked:
    """A child made by `os.fork` with the part of `subprocess.Popen` that Session uses."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(f"child {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode


GO = b"\x01"  # the first byte a forked child waits for before it runs the student's cells


class Spawner:
    """Children forked from this process (which imported torch and the checks once) instead of
    a `python -I` each; all of them forked at once, before the judge runs any test, each then
    waiting for GO. A child: its own session, stdin/stdout/stderr on /dev/null, every other
    descriptor closed (the job's result pipe above all), the memory and core limits, the
    re-check environment, the work folder as its working directory."""

    def __init__(self, workdir: Path, memory: int | None, count: int):
        self.ready: list[tuple[Forked, int, int]] = []
        for _ in range(count):
            to_child_r, to_child_w = os.pipe()
            from_child_r, from_child_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                _forked_child(to_child_r, from_child_w, workdir, memory)  # never returns
            os.close(to_child_r)
            os.close(from_child_w)
            self.ready.append((Forked(pid), to_child_w, from_child_r))

    def take(self, cells_file: Path) -> tuple[Forked, int, int]:
        if not self.ready:
            raise ChildGone("no child left to start")
        proc, to_child, from_child = self.ready.pop(0)
        try:
            os.write(to_child, GO)
        except OSError:
            pass  # the child is gone: the first read says so
        return proc, to_child, from_child

    def close(self) -> None:
        """End the children never used."""
        for proc, to_child, from_child in self.ready:
            for fd in (to_child, from_child):
                with contextlib.suppress(OSError):
                    os.close(fd)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self.ready = []


def _forked_child(fd_in: int, fd_out: int, workdir: Path, memory: int | None) -> None:
    """The forked child: become a clean re-check child, wait for GO, then `child_main`."""
    code = 1
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        keep = {0, 1, 2, fd_in, fd_out}
        for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else []:
            if int(name) not in keep:
                with contextlib.suppress(OSError):
                    os.close(int(name))
        if not os.path.isdir("/proc/self/fd"):
            os.closerange(3, min(fd_in, fd_out))
            os.closerange(max(fd_in, fd_out) + 1, 1 << 16)
            os.closerange(min(fd_in, fd_out) + 1, max(fd_in, fd_out))
        import resource

        if memory:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.chdir(workdir)
        env = _child_env()
        os.environ.clear()
        os.environ.update(env)
        if os.read(fd_in, 1) != GO:  # the judge closed the pipe: not needed
            os._exit(0)
        from .verify_child import child_main

        child_main(fd_in, fd_out, str(Path(workdir) / "verify_cells.json"))
        code = 0
    except BaseException:  # noqa: BLE001 - the parent sees the exit code
        code = 1
    finally:
        os._exit(code)


class Session:
    """The child process and the stand-ins that forward calls to it."""

    def __init__(
        self,
        cells,
        workdir: Path,
        deadline: float,
        memory: int | None,
        cell_timeout,
        spawn: Spawner | None = None,
        budget: dict | None = None,
    ):
        self.deadline = deadline
        self.timeout_reason = ""  # PER_TEST while a test cell runs under its own time limit
        self.flags: list[str] = []
        self.exercise: str | None = None
        self.dead: str | None = None
        self.cell_errors: dict[int, str] = {}
        self.preloaded = set(sys.modules)
        # Tensors sent with requires_grad, by id, so that an output of a later call (a KV cache
        # holding earlier chunks) differentiates back to the tensors of earlier calls too.
        self.leaves: list[tuple[torch.Tensor, int]] = []
        self.next_tid = 0
        workdir.mkdir(parents=True, exist_ok=True)
        cells_file = workdir / "verify_cells.json"
        spec = {"cells": cells, "cell_timeout": cell_timeout, "budget": budget}
        cells_file.write_text(json.dumps(spec))
        if spawn is not None:
            self.proc, self._to_child, self._from_child = spawn.take(cells_file)
        else:
            self._popen(workdir, memory, cells_file)
        try:
            ready = self._receive()
            errors = ready.get("cell_errors", {})
            if not isinstance(errors, dict):
                raise ChildGone("sent a malformed reply")
            self.cell_errors = {int(k): str(v)[:MAX_TEXT] for k, v in errors.items()}
        except ChildGone as err:
            self.dead = f"running the notebook's cells failed: {err}"

    @property
    def test_timed_out(self) -> bool:
        """The child was given up because a test ran past its own time limit."""
        return bool(self.dead and "ran past the per-cell time limit" in self.dead)

    def _popen(self, workdir: Path, memory: int | None, cells_file: Path) -> None:
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def limits():  # runs in the child before exec
            import resource

            if memory:
                with contextlib.suppress(ValueError, OSError):
                    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        cmd = [
            sys.executable,
            "-I",
            "-m",
            "transformer_lab.instructor.verify_child",
            "--child",
            str(to_child_r),
            str(from_child_w),
            str(cells_file),
        ]
        self.proc = subprocess.Popen(
            cmd,
            cwd=workdir,
            env=_child_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(to_child_r, from_child_w),
            start_new_session=True,
            preexec_fn=limits,
        )
        os.close(to_child_r)
        os.close(from_child_w)

    # -- transport ----------------------------------------------------------------------------
    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        for fd in (self._to_child, self._from_child):
            with contextlib.suppress(OSError):
                os.close(fd)

    def gone(self, why: str) -> ChildGone:
        self.close()
        code = self.proc.returncode
        if why == "ended" and code is not None:
            why = (
                f"ended with exit code {code}"
                if code >= 0
                else f"was killed by signal {-code} ({signal.Signals(-code).name})"
            )
        self.dead = f"the clean re-check process {why}"
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

    def request(self, message: dict) -> dict:
        if self.dead:
            raise ChildGone(self.dead)
        message = dict(message, exercise=self.exercise)
        try:
            data = pack_request(message)
        except Exception as err:  # e.g. a lambda among a check's arguments
            flag = f"could not re-check {self.exercise}: its arguments cannot be sent ({err})"
            if flag not in self.flags:
                self.flags.append(flag)
            raise VerifyError(f"the re-check cannot send this call's arguments: {err}") from None
        try:
            write_message(self._to_child, data)
        except OSError:
            raise self.gone("ended") from None
        reply = self._receive()
        refused = reply.get("refused")
        if refused:
            if not isinstance(refused, list) or not all(isinstance(r, str) for r in refused):
                raise self.gone("sent a malformed reply")
            from transformer_lab.check import ImplementThisYourself

            for what in refused:
                flag = f"{what} in {self.exercise}"
                if flag not in self.flags:
                    self.flags.append(flag)
            raise ImplementThisYourself(
                f"implement this yourself: your code {refused[0]} while `{self.exercise}` was "
                "checked; the exercise asks you to build it from basic tensor operations"
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
