"""A clean re-check of a graded notebook that the student's code cannot influence.

nbgrader runs the hidden tests in the same kernel as the student's code, so a submission can
monkeypatch ``torch.allclose``, redefine ``check.<name>``, patch the engine, the reference or
built-ins, and fool an in-kernel check. ``verify`` re-checks every graded cell so that the JUDGE
never runs in a process where student code ran:

- this process (the parent, trusted) reads the released test cells (from the nbgrader source
  notebook, hidden tests included, or the released notebook) and runs them itself, with the real
  ``transformer_lab.check``: every check, its cases, the reference, the tolerances and the mistake
  catalogue run here, in a process that never executes student code;
- a CHILD process (quick and grading mode, one thread, a time limit, a memory limit) executes the
  student's code cells in order, like nbgrader (a cell's error is recorded and the next runs);
- each name a test cell passes to a check (``scaled_dot_product_attention``, ``SelfAttention``,
  ``alpha_22``, ...) becomes a stand-in here: calling it sends the call's inputs to the child,
  which calls the student's object on them (a module class is constructed there; its weights are
  the ones the check loads into the stand-in) and sends back outputs, later the gradients (an
  autograd function ties both ends together), as tensors and plain numbers only; this side loads
  them with ``torch.load(weights_only=True)`` and validates their types. A value (``alpha_22``)
  comes back as data;
- while the student's code runs in the child, the exercise's forbidden built-ins and reference
  raise, as in the notebook, and a profiler watches for calls of them through aliases the
  student kept, and for a copy of the reference's code: such a call refuses the cell with a
  message naming it (and a flag);
- the submission's source is scanned for red flags (patching torch/check/transformer_lab or
  builtins, reading the course's files, ...), which are flagged for the instructor.

Every exercise kind is covered by this one mechanism, whatever its check's driver (function,
module, custom, statistical): the checks themselves run unchanged here. Functions, nn.Module
classes (weights mirrored here, ``torch.func.functional_call`` there), other classes and the
objects they return (a KVCache: methods, ``len``, ``[]`` are forwarded), values (``alpha_22``),
``torch.Generator`` arguments (state sent and brought back) and gradients across calls (a cache
holding earlier chunks) all travel. A call whose arguments cannot be pickled (a lambda) fails its
cell with a flag "could not re-check ...".

What it cannot promise: the child is the student's process, so a determined student can defeat
the *refusal* of forbidden calls there (e.g. by code compiled under a library file name, or by
answering the parent's requests from a thread of their own); the judge, the reference and the
comparison are out of reach whatever the child does. The source red flags point the instructor
at such code. Run it inside the grader's sandbox (no network, read-only course and package).

    verify(lesson, notebook, workdir, course=..., timeout=300.0)
      -> {"cells": {grade_id: {"passed": bool, "message": str}}, "flags": [str]}
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import io
import json
import os
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

MAX_MESSAGE = 512 * 2**20  # bytes a reply from the child may have
MAX_TEXT = 4000
DEFAULT_MEMORY = 6 * 2**30  # address-space limit of the child (bytes)
HIDDEN_MARKERS = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
_TENSOR = "__tlab_tensor__"
_OBJECT = "__tlab_object__"
_BUILTIN_PROTOCOL = {
    "__len__": len,
    "__float__": float,
    "__int__": int,
    "__bool__": bool,
    "__index__": lambda o: o.__index__(),
    "__getitem__": lambda o, k: o[k],
    "__contains__": lambda o, k: k in o,
    "__str__": str,
}
_GENERATOR = "__tlab_generator__"


class VerifyError(RuntimeError):
    """The re-check itself cannot run (missing released notebook, unreadable submission)."""


class _ChildGone(RuntimeError):
    """The child process died, timed out or sent something this side does not accept."""


# ==============================================================================================
# Notebooks: the released test cells and the student's code cells.


def lesson_folder(course: Path, lesson: str) -> str:
    """'02' or '02_qkv_attention' -> '02_qkv_attention' (the folder under exercises/)."""
    exercises = Path(course) / "exercises"
    if (exercises / lesson).is_dir():
        return lesson
    found = sorted(p.name for p in exercises.glob(f"{lesson}_*") if p.is_dir())
    if len(found) != 1:
        raise VerifyError(f"no released lesson {lesson!r} under {exercises}")
    return found[0]


def _read_json_notebook(path: Path) -> dict:
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise VerifyError(f"cannot read notebook {path}: {err}") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise VerifyError(f"{path} is not a notebook (no list of cells)")
    return nb


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    if isinstance(src, list):
        src = "".join(s for s in src if isinstance(s, str))
    return src if isinstance(src, str) else ""


def _nbgrader(cell: dict) -> dict:
    meta = cell.get("metadata")
    meta = meta.get("nbgrader") if isinstance(meta, dict) else None
    return meta if isinstance(meta, dict) else {}


def _is_test_cell(cell: dict) -> bool:
    m = _nbgrader(cell)
    return (
        cell.get("cell_type") == "code"
        and bool(m.get("grade"))
        and not m.get("solution")
        and bool(m.get("grade_id"))
    )


def released_test_cells(course: Path, lesson: str) -> dict[str, str]:
    """{grade_id: source} of the graded test cells, in notebook order, hidden tests included.

    The list of cells is the released notebook's; each cell's text is the nbgrader source
    notebook's (solutions/, which holds the hidden tests) when the course has it, never the
    submission's.
    """
    folder = lesson_folder(course, lesson)
    released = _read_json_notebook(Path(course) / "exercises" / folder / f"{folder}.ipynb")
    cells = {_nbgrader(c)["grade_id"]: _source(c) for c in released["cells"] if _is_test_cell(c)}
    source_path = Path(course) / "solutions" / folder / f"{folder}.ipynb"
    if source_path.is_file():
        source = _read_json_notebook(source_path)
        for c in source["cells"]:
            if _is_test_cell(c) and _nbgrader(c)["grade_id"] in cells:
                cells[_nbgrader(c)["grade_id"]] = _source(c)
    return {
        gid: "\n".join(line for line in src.splitlines() if line.strip() not in HIDDEN_MARKERS)
        for gid, src in cells.items()
    }


def student_code_cells(nb: dict, test_ids) -> list[tuple[int, str]]:
    """(index, source) of the submission's code cells that are not graded test cells."""
    out = []
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        if _nbgrader(cell).get("grade_id") in test_ids or _is_test_cell(cell):
            continue
        out.append((i, _source(cell)))
    return out


def exercises_in(source: str) -> list[str]:
    """The check names a test cell calls: ``check.<name>(...)``."""
    names = []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return names
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "check"
            and node.func.attr not in names
        ):
            names.append(node.func.attr)
    return names


def _python_source(src: str) -> str:
    """IPython magics and shell lines become calls of get_ipython() (a no-op in the child)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(src)
    except Exception:
        return "\n".join(
            "" if line.lstrip().startswith(("%", "!")) else line for line in src.splitlines()
        )


# ==============================================================================================
# Source-level red flags (cheap, static): they never cost points; they tell the instructor.

_PROTECTED = ("torch", "transformer_lab", "builtins", "sys", "numpy", "math", "nbgrader", "IPython")
_DEFAULT_ALIASES = {
    "torch": "torch",
    "F": "torch.nn.functional",
    "nn": "torch.nn",
    "check": "transformer_lab.check",
    "transformer_lab": "transformer_lab",
    "builtins": "builtins",
    "sys": "sys",
    "np": "numpy",
    "math": "math",
}
_DANGEROUS_CALLS = {
    "sys.setprofile": "replaces the profiler (sys.setprofile)",
    "sys.settrace": "installs a tracer (sys.settrace)",
    "gc.get_referrers": "walks the garbage collector's references",
    "gc.get_objects": "walks the garbage collector's objects",
    "inspect.getsource": "reads source code with inspect.getsource",
    "inspect.getsourcefile": "looks up source files with inspect",
    "inspect.getfile": "looks up source files with inspect",
    "importlib.reload": "reloads a module",
    "importlib.util.spec_from_file_location": "imports a module from a file path",
    "__import__": "calls __import__",
    "os.read": "reads a raw file descriptor (os.read)",
    "os.write": "writes a raw file descriptor (os.write)",
    "os.fdopen": "opens a raw file descriptor (os.fdopen)",
    "os.dup2": "rewires file descriptors (os.dup2)",
    "os.system": "runs a shell command (os.system)",
    "os.kill": "signals a process (os.kill)",
    "subprocess.run": "starts a process (subprocess)",
    "subprocess.Popen": "starts a process (subprocess)",
    "subprocess.call": "starts a process (subprocess)",
    "subprocess.check_output": "starts a process (subprocess)",
    "threading.Thread": "starts a thread",
    "signal.signal": "installs a signal handler",
}
_COURSE_WORDS = ("solutions", "autograder", "gradebook", "source/", "nbgrader_config")


def _dotted(node, aliases) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    root = aliases.get(node.id)
    if root is None:
        return None
    return ".".join([root, *reversed(parts)])


def _root(node, aliases) -> str | None:
    """The module an attribute/subscript/call chain starts from (``vars(torch)[..]`` -> torch)."""
    while True:
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, ast.Call):
            if (
                isinstance(node.func, ast.Name)
                and node.func.id in ("vars", "getattr")
                and node.args
            ):
                node = node.args[0]
            else:
                node = node.func
        elif isinstance(node, ast.Name):
            return aliases.get(node.id)
        else:
            return None


def _protected(dotted: str | None) -> bool:
    return bool(dotted) and dotted.split(".")[0] in _PROTECTED


def source_flags(cells: list[tuple[int, str]]) -> list[str]:
    """Red flags in the submission's code cells, one sentence each ("cell N" counts from 1)."""
    aliases = dict(_DEFAULT_ALIASES)
    flags: list[str] = []

    def add(i, what):
        text = f"suspicious code in cell {i + 1}: {what}"
        if text not in flags:
            flags.append(text)

    for i, src in cells:
        try:
            tree = ast.parse(_python_source(src))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):  # imports first: they define the aliases
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        aliases[a.asname] = a.name
                    else:
                        aliases[a.name.split(".")[0]] = a.name.split(".")[0]
                    if a.name.split(".")[0] in ("builtins", "ctypes"):
                        add(i, f"imports {a.name}")
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                if node.module.split(".")[0] in ("builtins", "ctypes"):
                    add(i, f"imports from {node.module}")
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif isinstance(node, ast.Delete):
                targets = node.targets
            for t in targets:
                for sub in [t, *(t.elts if isinstance(t, (ast.Tuple, ast.List)) else [])]:
                    if isinstance(sub, (ast.Attribute, ast.Subscript)) and _protected(
                        _root(sub, aliases)
                    ):
                        spelled, d = ast.unparse(sub), _dotted(sub, aliases)
                        add(i, f"assigns {spelled}" + (f" ({d})" if d and d != spelled else ""))
            if isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__"):
                add(i, f"uses {node.id}")
            if isinstance(node, ast.Call):
                func = node.func
                name = _dotted(func, aliases) or (func.id if isinstance(func, ast.Name) else "")
                if name in ("setattr", "delattr", "builtins.setattr", "builtins.delattr"):
                    if node.args:
                        d = _dotted(node.args[0], aliases)
                        text = ast.unparse(node.args[0])
                        if _protected(d) or "modules" in text or "__class__" in text:
                            add(i, f"{name.split('.')[-1]} on {d or text}")
                for key, what in _DANGEROUS_CALLS.items():
                    if name == key or (name or "").endswith("." + key):
                        add(i, what)
                if name in ("vars", "builtins.vars") and node.args:
                    d = _dotted(node.args[0], aliases)
                    if _protected(d):
                        add(i, f"reaches into vars({d})")
                if name in ("exec", "eval", "compile", "builtins.exec", "builtins.eval"):
                    add(i, f"calls {name.split('.')[-1]}")
                if name in ("open", "io.open", "builtins.open") or (
                    isinstance(func, ast.Attribute)
                    and func.attr in ("read_text", "read_bytes", "open")
                ):
                    args = ast.unparse(node)
                    if "__file__" in args or "getsource" in args:
                        add(i, f"reads a module's source file: {args[:120]}")
                    for a in node.args[:1]:
                        if isinstance(a, ast.Constant) and isinstance(a.value, str):
                            p = a.value
                            if p.startswith(("/", "~")) or ".." in Path(p).parts:
                                add(i, f"opens a path outside its working folder: {p!r}")
            if isinstance(node, ast.Attribute) and node.attr in (
                "__file__",
                "__spec__",
                "__path__",
            ):
                d = _dotted(node.value, aliases)
                if d and d.split(".")[0] == "transformer_lab":
                    add(i, f"looks up the course package's files ({d}.{node.attr})")
            if isinstance(node, ast.Attribute) and node.attr in (
                "__globals__",
                "__code__",
                "__closure__",
            ):
                add(i, f"touches function internals ({ast.unparse(node)[:80]})")
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                low = node.value.lower()
                for word in _COURSE_WORDS:
                    if word in low and ("/" in low or "\\" in low or low.endswith(".ipynb")):
                        add(i, f"names the course's private files: {node.value[:120]!r}")
    return flags


# ==============================================================================================
# Talking to the child: length-prefixed messages over two pipes.


def _write(fd: int, data: bytes) -> None:
    view = memoryview(struct.pack(">Q", len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise TimeoutError
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _read(fd: int, deadline: float | None, limit: int = MAX_MESSAGE) -> bytes:
    (n,) = struct.unpack(">Q", _read_exact(fd, 8, deadline))
    if n > limit:
        raise ValueError(f"a message of {n} bytes (limit {limit})")
    return _read_exact(fd, n, deadline)


def _dumps(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _validate(obj, depth: int = 0):
    """Only plain data from the child: tensors (strided, CPU or accelerator), numbers, strings,
    None, and lists/tuples/dicts (str keys) of those. Anything else raises ValueError."""
    if depth > 20:
        raise ValueError("data nested too deeply")
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if isinstance(obj, torch.Tensor):
        if type(obj) not in (torch.Tensor, nn.Parameter) or obj.layout != torch.strided:
            raise ValueError(f"an unexpected tensor type {type(obj).__name__} / {obj.layout}")
        if obj.device.type not in ("cpu", "cuda", "mps"):
            raise ValueError(f"a tensor on device {obj.device}")
        return obj.detach()
    if type(obj) in (list, tuple):
        return type(obj)(_validate(x, depth + 1) for x in obj)
    if type(obj) is dict:
        if not all(type(k) is str for k in obj):
            raise ValueError("a dict with non-string keys")
        return {k: _validate(v, depth + 1) for k, v in obj.items()}
    raise ValueError(f"an unexpected {type(obj).__name__}")


class _RemoteObject:
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
        reply = self._tl_session.request({"op": "getattr", "handle": self._tl_handle, "attr": name})
        if reply.get("kind") == "function":
            return lambda *args, **kwargs: self._tl_call(name, *args, **kwargs)
        tensors = reply.get("tensors", [])
        if not isinstance(tensors, list):
            raise _ChildGone("sent a malformed reply")
        return _rebuild(reply.get("value"), tensors, self._tl_session)

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


class _Opaque:
    """A value of the student's that cannot travel as data (a module instance, an object, ...)."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self):
        return f"<{self.type_name} from the notebook>"


def _child_env() -> dict:
    from .sandbox import GRADING_ENV

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "JPY_"))}
    env.update(GRADING_ENV, TRANSFORMER_LAB_QUICK="1")
    return env


_PER_TEST = " (this test ran past the per-cell time limit: an endless loop?)"
MAX_RESTARTS = 3  # fresh children after a test timed out, per notebook


class _Session:
    """The child process and the stand-ins that forward calls to it."""

    def __init__(self, cells, workdir: Path, deadline: float, memory: int | None, cell_timeout):
        self.deadline = deadline
        self.timeout_reason = ""  # _PER_TEST while a test cell runs under its own time limit
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
        cells_file.write_text(json.dumps({"cells": cells, "cell_timeout": cell_timeout}))
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
            "transformer_lab.instructor.verify",
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
        try:
            ready = self._receive()
            errors = ready.get("cell_errors", {})
            if not isinstance(errors, dict):
                raise _ChildGone("sent a malformed reply")
            self.cell_errors = {int(k): str(v)[:MAX_TEXT] for k, v in errors.items()}
        except _ChildGone as err:
            self.dead = f"running the notebook's cells failed: {err}"

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

    def _gone(self, why: str) -> _ChildGone:
        self.close()
        code = self.proc.returncode
        if why == "ended" and code is not None:
            why = (
                f"ended with exit code {code}"
                if code >= 0
                else f"was killed by signal {-code} ({signal.Signals(-code).name})"
            )
        self.dead = f"the clean re-check process {why}"
        return _ChildGone(self.dead)

    def _receive(self) -> dict:
        try:
            data = _read(self._from_child, self.deadline)
        except TimeoutError:
            raise self._gone(f"timed out{self.timeout_reason}") from None
        except (EOFError, OSError):
            raise self._gone("ended") from None
        except ValueError as err:
            raise self._gone(f"sent too much data ({err})") from None
        try:
            reply = _validate(torch.load(io.BytesIO(data), weights_only=True))
        except Exception as err:
            raise self._gone(f"sent data that is not plain tensors and numbers ({err})") from None
        if not isinstance(reply, dict):
            raise self._gone("sent a malformed reply")
        return reply

    def request(self, message: dict) -> dict:
        if self.dead:
            raise _ChildGone(self.dead)
        message = dict(message, exercise=self.exercise)
        try:
            data = _dumps(message)
        except Exception as err:  # e.g. a lambda among a check's arguments
            flag = f"could not re-check {self.exercise}: its arguments cannot be sent ({err})"
            if flag not in self.flags:
                self.flags.append(flag)
            raise VerifyError(f"the re-check cannot send this call's arguments: {err}") from None
        try:
            _write(self._to_child, data)
        except OSError:
            raise self._gone("ended") from None
        reply = self._receive()
        refused = reply.get("refused")
        if refused:
            if not isinstance(refused, list) or not all(isinstance(r, str) for r in refused):
                raise self._gone("sent a malformed reply")
            from transformer_lab.check.engine import ImplementThisYourself

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
            _raise_student_error(reply)
        return reply

    # -- names the test cells look up ---------------------------------------------------------
    def lookup(self, name: str):
        reply = self.request({"op": "describe", "name": name})
        kind = reply.get("kind")
        if kind == "missing":
            raise KeyError(name)
        if kind == "function":
            return _remote_function(self, name)
        if kind == "class":
            return _remote_class(self, name)
        if kind == "module":
            module = reply.get("module")
            # Only a module this process imported before the child started (the child may have
            # written files anywhere it can).
            if isinstance(module, str) and module.split(".")[0] in _SAFE_MODULES:
                if module in self.preloaded:
                    return sys.modules[module]
            return _Opaque(f"module {module}")
        if kind == "value":
            tensors = reply.get("tensors", [])
            if not isinstance(tensors, list):
                raise self._gone("sent a malformed reply")
            return _rebuild(reply.get("value"), tensors, self)
        return _Opaque(str(reply.get("type", "object")))

    # -- calls --------------------------------------------------------------------------------
    def call(self, target: dict, args: tuple, kwargs: dict, state: dict | None = None):
        tensors: list[torch.Tensor] = []
        generators: list[torch.Generator] = []
        enc_args = _encode(args, tensors, generators)
        enc_kwargs = _encode(kwargs, tensors, generators)
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
            outs = _Remote.apply(self, message, box, len(tensors), *everything)
            outs = outs if isinstance(outs, tuple) else (outs,)
        else:
            self._send_call(message, tensors, box)
            outs = tuple(box["tensors"])
        self.leaves += [(t, tid) for t, tid in zip(tensors, tids) if tid is not None]
        del self.leaves[:-_MAX_LEAVES]
        for g, new in zip(generators, box["reply"].get("generators", [])):
            old = g.get_state()
            if isinstance(new, torch.Tensor) and new.dtype == old.dtype and new.shape == old.shape:
                g.set_state(new)
        if "construct" in box["reply"]:
            return _construct_reply(self, box["reply"]["construct"])
        return _rebuild(box["reply"].get("result"), list(outs), self)

    def _send_call(self, message: dict, tensors, box: dict) -> None:
        message = dict(message, tensors=[t.detach() for t in tensors])
        reply = self.request(message)
        out = reply.get("tensors", [])
        if not isinstance(out, list) or not all(isinstance(t, torch.Tensor) for t in out):
            raise self._gone("sent a malformed reply")
        box["reply"], box["tensors"] = reply, out
        box["token"] = reply.get("token")

    def backward(self, token, grads, like: list[torch.Tensor]) -> list:
        reply = self.request({"op": "backward", "token": token, "grads": grads})
        out = reply.get("grads")
        if not isinstance(out, list) or len(out) != len(like):
            raise self._gone("sent malformed gradients")
        result = []
        for g, t in zip(out, like):
            if g is None:
                result.append(None)
                continue
            if not isinstance(g, torch.Tensor) or tuple(g.shape) != tuple(t.shape):
                raise self._gone("sent malformed gradients")
            result.append(g.to(device=t.device, dtype=t.dtype))
        return result


_MAX_LEAVES = 256

_SAFE_MODULES = {
    "torch",
    "math",
    "numpy",
    "transformer_lab",
    *getattr(sys, "stdlib_module_names", ()),
}


def _encode(obj, tensors: list, generators: list, depth: int = 0):
    """Tensors and generators become markers (sent beside); the rest is pickled as it is."""
    if depth > 20:
        raise TypeError("arguments nested too deeply for the re-check")
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return (_TENSOR, len(tensors) - 1)
    handle = (
        getattr(obj, "_tl_handle", None) if isinstance(obj, (_RemoteObject, nn.Module)) else None
    )
    if type(handle) is int:
        return (_OBJECT, handle)
    if isinstance(obj, torch.Generator):
        generators.append(obj)
        return (_GENERATOR, len(generators) - 1)
    if type(obj) in (list, tuple):
        return type(obj)(_encode(x, tensors, generators, depth + 1) for x in obj)
    if type(obj) is dict:
        return {k: _encode(v, tensors, generators, depth + 1) for k, v in obj.items()}
    return obj


def _rebuild(spec, tensors: list, session=None):
    """The child's description of a result -> the value, with its tensors put back in."""
    if isinstance(spec, dict):
        if "t" in spec and len(spec) == 1:
            i = spec["t"]
            if type(i) is not int or not 0 <= i < len(tensors):
                raise _ChildGone("sent a malformed result")
            return tensors[i]
        if "v" in spec and len(spec) == 1:
            return spec["v"]
        if "seq" in spec and "items" in spec:
            items = [_rebuild(x, tensors, session) for x in spec["items"]]
            return tuple(items) if spec["seq"] == "tuple" else items
        if "dict" in spec:
            return {k: _rebuild(v, tensors, session) for k, v in spec["dict"].items()}
        if "other" in spec:
            return _Opaque(str(spec["other"]))
        if "object" in spec and type(spec["object"]) is int:
            return _RemoteObject(session, spec["object"], str(spec.get("type")))
        if "ellipsis" in spec:
            return ...
    raise _ChildGone("sent a malformed result")


def _construct_reply(session: _Session, reply) -> dict:
    """Validate what the child says about a module it constructed."""
    if isinstance(reply, dict) and reply.get("module") is False:
        if type(reply.get("handle")) is not int:
            raise session._gone("sent a malformed description of an object")
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
        raise session._gone("sent a malformed description of a module")
    return reply


class _Remote(torch.autograd.Function):
    """Forward: the child runs the student's code. Backward: the child differentiates it."""

    @staticmethod
    def forward(ctx, session, message, box, n_sent, *tensors):
        session._send_call(message, tensors[:n_sent], box)
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


def _fingerprint(code) -> tuple:
    """What a copy of a function's source compiles to, wherever it was compiled."""
    consts = tuple(repr(c) for c in code.co_consts if not hasattr(c, "co_code"))
    return (code.co_name, code.co_code, code.co_names, consts)


def _raise_student_error(reply: dict):
    from transformer_lab.check.engine import ImplementThisYourself

    name = reply.get("error_type")
    text = str(reply.get("error"))[:MAX_TEXT]
    if name == "NotImplementedError":
        raise NotImplementedError(text or "your code raised NotImplementedError (not done yet?)")
    if name == "ImplementThisYourself":
        raise ImplementThisYourself(text)
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
            raise error
    raise type(name, (Exception,), {})(text)


def _remote_function(session: _Session, name: str):
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


def _remote_class(session: _Session, name: str):
    """An nn.Module class whose instances live in the child (this side mirrors their weights)."""

    class StandIn(nn.Module):
        def __new__(cls, *args, **kwargs):
            reply = session.call({"name": name, "construct": True}, args, kwargs)
            if reply.get("module") is not True:
                return _RemoteObject(session, reply["handle"], name)
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

        def forward(self, *args, **kwargs):
            state = {
                key: (self.get_parameter(key) if is_param else self.get_buffer(key))
                for key, is_param in self._tl_canonical
            }
            target = {"handle": self._tl_handle, "training": self.training}
            return session.call(target, args, kwargs, state=state)

    StandIn.__name__ = StandIn.__qualname__ = name
    return StandIn


class _Names(dict):
    """The test cell's namespace: its own assignments, else the notebook's names via the child."""

    def __init__(self, session: _Session):
        super().__init__()
        self.session = session

    def __setitem__(self, name, value):
        from transformer_lab import check

        if value is check:  # a test cell's own `from transformer_lab import check`
            value = _CheckFront(self.session)
        super().__setitem__(name, value)

    def __missing__(self, name):
        if name in ("check",) or hasattr(builtins, name):
            raise KeyError(name)
        value = self.session.lookup(name)
        super().__setitem__(name, value)
        return value


class _CheckFront:
    """``check`` in the test cell: the real checks, told which exercise is being checked."""

    def __init__(self, session: _Session):
        self._session = session

    def __getattr__(self, name):
        from transformer_lab import check

        real = getattr(check, name)
        if not callable(real) or isinstance(real, type):
            return real

        def run(*args, **kwargs):
            self._session.exercise = name
            self._session.leaves = []
            try:
                return real(*args, **kwargs)
            finally:
                self._session.exercise = None

        return run


# ==============================================================================================
# verify


def tampering_flags(result: dict, kernel_passed: dict) -> list[str]:
    """Cells that passed in the notebook (nbgrader) but not on the clean re-check."""
    return [
        f"suspected tampering: {gid} passed in the notebook but not on a clean re-check"
        for gid, cell in result["cells"].items()
        if kernel_passed.get(gid) and not cell["passed"]
    ]


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def verify(
    lesson: str,
    notebook: Path,
    workdir: Path,
    *,
    course: Path,
    timeout: float = 300.0,
    kernel_passed: dict | None = None,
    memory: int | None = DEFAULT_MEMORY,
    cell_timeout: float | None = 120.0,
) -> dict:
    """Re-check every graded cell of `notebook` where its code cannot touch the judge.

    lesson: the assignment ('02_qkv_attention', or '02'); notebook: the (repaired) submission;
    workdir: a private folder for the child (its working directory); course: the course root
    (exercises/, and solutions/ for the hidden tests); timeout: for the whole re-check, seconds;
    kernel_passed: optionally nbgrader's {grade_id: passed}, to flag cells that passed there but
    not here; memory: the child's address-space limit in bytes (None: none).

    Returns {"cells": {grade_id: {"passed": bool, "message": str}}, "flags": [str]}.
    """
    course, workdir = Path(course), Path(workdir)
    tests = released_test_cells(course, lesson)
    try:
        nb = _read_json_notebook(Path(notebook))
    except VerifyError as err:
        cells = {gid: {"passed": False, "message": str(err)} for gid in tests}
        return {"cells": cells, "flags": []}
    code = student_code_cells(nb, set(tests))
    flags = source_flags(code)
    cells: dict[str, dict] = {}
    # Import every check (and what they use) before the child runs a line of student code, so
    # nothing the child writes on disk can change the judge.
    importlib.import_module("transformer_lab.check")
    from transformer_lab.check.engine import GRADING_ENV

    if memory and torch.cuda.is_available():
        memory = None  # CUDA reserves far more address space than it uses: RLIMIT_AS breaks it
    old_grading = os.environ.get(GRADING_ENV)
    os.environ[GRADING_ENV] = "1"  # never save into a student package from here
    overall = time.monotonic() + timeout

    def start() -> _Session:
        return _Session(
            [[i, _python_source(src)] for i, src in code], workdir, overall, memory, cell_timeout
        )

    session, sessions, restarts = start(), [], 0
    try:
        for gid, src in tests.items():
            if session.dead and session.dead.endswith(_PER_TEST) and restarts < MAX_RESTARTS:
                # one test ran past its time (an endless loop in one graded function): the
                # other tests get a fresh child, so one loop costs one exercise, not all
                sessions.append(session)
                session, restarts = start(), restarts + 1
            if session.dead:
                cells[gid] = {"passed": False, "message": session.dead}
                continue
            per_test = time.monotonic() + cell_timeout if cell_timeout else overall
            session.deadline = min(overall, per_test)
            session.timeout_reason = _PER_TEST if per_test < overall else ""
            names = _Names(session)
            scope = {
                "__builtins__": builtins,
                "__name__": "__verify__",
                "check": _CheckFront(session),
            }
            out = io.StringIO()
            try:
                compiled = compile(src, f"<test cell {gid}>", "exec")
                with contextlib.redirect_stdout(out):
                    exec(compiled, scope, names)  # noqa: S102 - the released test cell
                cells[gid] = {"passed": True, "message": out.getvalue()[-MAX_TEXT:].strip()}
            except BaseException as err:  # noqa: BLE001 - any failure fails the cell
                if isinstance(err, KeyboardInterrupt):
                    raise
                if isinstance(err, NameError) and session.cell_errors:
                    first = min(session.cell_errors)
                    err = NameError(
                        f"{err} (cell {first + 1} of the notebook raised "
                        f"{_first_line(session.cell_errors[first])})"
                    )
                message = f"{type(err).__name__}: {err}"
                cells[gid] = {"passed": False, "message": message[:MAX_TEXT]}
    finally:
        session.close()
        if old_grading is None:
            os.environ.pop(GRADING_ENV, None)
        else:
            os.environ[GRADING_ENV] = old_grading
    for each in [*sessions, session]:
        flags += [f for f in each.flags if f not in flags]
    result = {"cells": cells, "flags": flags}
    if kernel_passed:
        result["flags"] += [f for f in tampering_flags(result, kernel_passed) if f not in flags]
    return result


# ==============================================================================================
# The child: runs the student's cells, then answers describe/call/backward requests.


def _child_main(fd_in: int, fd_out: int, cells_file: str) -> None:  # noqa: C901
    # Everything trusted is imported and captured before the first student line runs.
    import resource  # noqa: F401
    import sys as _sys
    import threading
    import traceback  # noqa: F401

    import torch as _torch

    import transformer_lab
    from transformer_lab.check import engine as _engine

    _torch.set_num_threads(1)
    spec = json.loads(Path(cells_file).read_text())
    setprofile, getprofile, threading_setprofile = (
        _sys.setprofile,
        _sys.getprofile,
        threading.setprofile,
    )
    _save, _BytesIO, _write_ = _torch.save, io.BytesIO, _write
    functional_call = _torch.func.functional_call
    library = tuple(
        str(Path(p).resolve())
        for p in {_sys.prefix, _sys.base_prefix, os.path.dirname(transformer_lab.__file__)}
    )

    def short(dotted):
        return dotted.replace("torch.nn.functional.", "F.").replace("torch.nn.", "nn.")

    # Per exercise: the forbidden attributes, their C functions and their Python code objects.
    guards = {}
    for name, ex in _engine.EXERCISES.items():
        patches, c_funcs, codes, copies = [], {}, {}, {}
        for dotted in ex.forbidden:
            try:
                owner, attr = _engine._resolve(dotted)
                original = getattr(owner, attr)
            except (ImportError, AttributeError):
                continue
            patches.append((owner, attr, original, dotted))
            if isinstance(original, type):
                for value in vars(original).values():
                    value = getattr(value, "__func__", value)
                    if hasattr(value, "__code__"):
                        codes.setdefault(value.__code__, dotted)
            elif hasattr(original, "__code__"):
                codes.setdefault(original.__code__, dotted)
                copies.setdefault(_fingerprint(original.__code__), dotted)
            elif callable(original):
                c_funcs.setdefault(id(original), (original, dotted))
        reference = ex.reference if isinstance(ex.reference, type) else None
        guards[name] = (patches, c_funcs, codes, copies, reference)
    monitors = {id(setprofile): setprofile, id(_sys.settrace): _sys.settrace}
    monitor_codes = {threading_setprofile.__code__, threading.settrace.__code__}
    library_cache: dict = {}

    def is_student(frame) -> bool:
        if frame is None:
            return False
        filename = frame.f_code.co_filename
        known = library_cache.get(filename)
        if known is None:
            known = library_cache[filename] = not (
                filename.startswith("<frozen") or os.path.abspath(filename).startswith(library)
            )
        return known

    class Guard:
        """Forbidden names raise (as in the notebook); a profiler catches aliased calls."""

        def __init__(self, exercise):
            self.exercise = exercise
            self.refused: list[str] = []

        def note(self, what):
            if what not in self.refused:
                self.refused.append(what)

        def __enter__(self):
            patches, c_funcs, codes, copies, _ = guards.get(self.exercise, ([], {}, {}, {}, None))
            copy_names = {key[0] for key in copies}
            self.undo = []
            for owner, attr, _original, dotted in patches:
                current = getattr(owner, attr, None)

                def refuse(*a, _d=dotted, **k):
                    self.note(f"called forbidden {short(_d)}")
                    raise _engine.ImplementThisYourself(
                        f"implement this yourself: {short(_d)} is switched off while your code "
                        "is checked"
                    )

                setattr(owner, attr, refuse)
                self.undo.append((owner, attr, current))

            def hook(frame, event, arg):
                if event == "c_call":
                    hit = c_funcs.get(id(arg))
                    if hit is not None and hit[0] is arg and is_student(frame):
                        self.note(f"called forbidden {short(hit[1])}")
                    elif id(arg) in monitors and monitors[id(arg)] is arg and is_student(frame):
                        self.note("tampered with the re-check's call monitor")
                elif event == "call":
                    code = frame.f_code
                    dotted = codes.get(code)
                    if dotted is not None:  # equal code: the original, or a copy of it
                        if is_student(frame):
                            self.note(f"ran a copy of {dotted}")
                        elif is_student(frame.f_back):
                            self.note(f"called forbidden {short(dotted)}")
                    elif code in monitor_codes and is_student(frame.f_back):
                        self.note("tampered with the re-check's call monitor")
                    elif copies and code.co_name in copy_names and is_student(frame):
                        copied = copies.get(_fingerprint(code))
                        if copied:
                            self.note(f"ran a copy of {copied}")

            self.hook = hook
            threading_setprofile(hook)
            setprofile(hook)
            return self

        def __exit__(self, *exc):
            still = getprofile() is self.hook
            setprofile(None)
            threading_setprofile(None)
            for owner, attr, value in reversed(self.undo):
                setattr(owner, attr, value)
            if not still:
                self.note("tampered with the re-check's call monitor")
            return False

    def send(obj):
        buf = _BytesIO()
        _save(obj, buf)
        _write_(fd_out, buf.getvalue())

    # ---- run the student's cells, in order, like nbgrader ------------------------------------
    class _IPython:
        def __getattr__(self, name):
            return lambda *a, **k: None

    ns = {"__name__": "__main__", "__builtins__": builtins, "get_ipython": lambda: _IPython()}
    errors = {}

    def on_alarm(signum, frame):
        raise TimeoutError(f"the cell ran longer than {spec.get('cell_timeout')} s")

    signal.signal(signal.SIGALRM, on_alarm)
    for index, src in spec["cells"]:
        try:
            if spec.get("cell_timeout"):
                signal.setitimer(signal.ITIMER_REAL, float(spec["cell_timeout"]))
            exec(compile(src, f"<cell {index + 1}>", "exec"), ns)  # noqa: S102
        except BaseException as err:  # noqa: BLE001
            try:
                errors[str(index)] = f"{type(err).__name__}: {err}"[:MAX_TEXT]
            except BaseException:  # noqa: BLE001
                errors[str(index)] = "an error"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    with contextlib.suppress(Exception):
        import matplotlib.pyplot as plt

        plt.close("all")
    send({"op": "ready", "cell_errors": errors})

    # ---- answer requests ----------------------------------------------------------------------
    instances: dict[int, object] = {}
    registry: dict[int, object] = {}
    pending: dict[int, tuple] = {}
    counter = [0]

    def plain(value, tensors, depth=0):
        """A result -> a description of plain data; its tensors go to `tensors`."""
        if depth > 20:
            return {"other": "deeply nested value"}
        if isinstance(value, _torch.Tensor):
            if value.layout != _torch.strided:
                value = value.to_dense()
            tensors.append(value)
            return {"t": len(tensors) - 1}
        if value is None or type(value) in (bool, int, float, str):
            return {"v": value}
        if value is ...:
            return {"ellipsis": True}
        if isinstance(value, bool):
            return {"v": bool.__bool__(value)}
        if isinstance(value, int):
            return {"v": int.__index__(value)}
        if isinstance(value, float):
            return {"v": float.__float__(value)}
        if isinstance(value, str):
            return {"v": str.__str__(value)}
        if isinstance(value, (tuple, list)):
            items = [plain(v, tensors, depth + 1) for v in value]
            return {"seq": "tuple" if isinstance(value, tuple) else "list", "items": items}
        if isinstance(value, dict) and all(type(k) is str for k in value):
            return {"dict": {k: plain(v, tensors, depth + 1) for k, v in value.items()}}
        item = getattr(type(value), "item", None)  # numpy scalars
        if item is not None and type(value).__module__ == "numpy":
            with contextlib.suppress(Exception):
                return plain(value.item(), tensors, depth + 1)
        counter[0] += 1  # any other object stays here; the parent gets a handle on it
        instances[counter[0]] = value
        return {"object": counter[0], "type": type(value).__name__[:100]}

    def decode(obj, tensors, generators):
        if type(obj) is tuple and len(obj) == 2 and obj[0] == _OBJECT:
            return instances[obj[1]]
        if type(obj) is tuple and len(obj) == 2 and obj[0] == _TENSOR:
            return tensors[obj[1]]
        if type(obj) is tuple and len(obj) == 2 and obj[0] == _GENERATOR:
            return generators[obj[1]]
        if type(obj) in (list, tuple):
            return type(obj)(decode(x, tensors, generators) for x in obj)
        if type(obj) is dict:
            return {k: decode(v, tensors, generators) for k, v in obj.items()}
        return obj

    def tensor_out(t):
        t = t.as_subclass(_torch.Tensor) if type(t) is not _torch.Tensor else t
        return t.detach().clone().contiguous()

    def run_guarded(guard, req, args, kwargs, tensors):
        with guard:
            if "method" in req:
                obj, method = instances[req["handle"]], req["method"]
                if method in _BUILTIN_PROTOCOL:
                    return _BUILTIN_PROTOCOL[method](obj, *args, **kwargs)
                return getattr(obj, method)(*args, **kwargs)
            if "handle" in req:
                module = instances[req["handle"]]
                module.train(bool(req["training"]))
                state = dict(zip(req["state_keys"], tensors[req["n_args"] :]))
                return functional_call(module, state, tuple(args), kwargs)
            if req.get("construct"):
                with _torch.random.fork_rng(devices=[]):
                    return ns[req["name"]](*args, **kwargs)
            return ns[req["name"]](*args, **kwargs)

    def handle(req):
        op = req.get("op")
        exercise = req.get("exercise")
        if op == "describe":
            name = req["name"]
            if name not in ns:
                if hasattr(builtins, name):
                    return {"kind": "missing"}
                return {"kind": "missing"}
            obj = ns[name]
            if isinstance(obj, type(os)):
                return {"kind": "module", "module": getattr(obj, "__name__", "?")}
            if isinstance(obj, type):
                return {"kind": "class"}
            if callable(obj):
                return {"kind": "function"}
            found: list = []
            value = plain(obj, found)
            return {"kind": "value", "value": value, "tensors": [tensor_out(t) for t in found]}
        if op == "getattr":
            obj = instances[req["handle"]]
            value = getattr(obj, req["attr"])
            if callable(value) and not isinstance(value, _torch.Tensor):
                return {"kind": "function"}
            found = []
            value = plain(value, found)
            return {"kind": "value", "value": value, "tensors": [tensor_out(t) for t in found]}
        if op == "backward":
            outs, leaves = pending.pop(req["token"], (None, None))
            if outs is None:
                return {"grads": []}
            pairs = [
                (o, g)
                for o, g in zip(outs, req["grads"])
                if g is not None and isinstance(o, _torch.Tensor) and o.requires_grad
            ]
            grads = [None] * len(leaves)
            alive = [i for i, leaf in enumerate(leaves) if leaf is not None]
            if pairs and alive:
                guard = Guard(exercise)
                try:
                    with guard:
                        got = _torch.autograd.grad(
                            [o for o, _ in pairs],
                            [leaves[i] for i in alive],
                            [g.to(o.dtype) for o, g in pairs],
                            allow_unused=True,
                        )
                except BaseException:
                    if guard.refused:
                        return {"refused": guard.refused}
                    raise
                if guard.refused:
                    return {"refused": guard.refused}
                for i, g in zip(alive, got):
                    grads[i] = None if g is None else tensor_out(g)
            return {"grads": grads}
        if op != "call":
            return {"error": f"unknown request {op!r}", "error_type": "RuntimeError"}
        tensors = [
            t.detach().requires_grad_(bool(w)) if t.is_floating_point() else t.detach()
            for t, w in zip(req["tensors"], req["grad"])
        ]
        generators = []
        for state in req["generators"]:
            g = _torch.Generator()
            g.set_state(state)
            generators.append(g)
        args = decode(req["args"], tensors, generators)
        kwargs = decode(req["kwargs"], tensors, generators)
        for t, tid in zip(tensors, req["tids"]):
            if tid is not None:
                registry[tid] = t
        while len(registry) > 2 * _MAX_LEAVES:
            registry.pop(min(registry))
        leaves = [t for t, w in zip(tensors, req["grad"]) if w]
        leaves += [registry.get(tid) for tid in req["extra_tids"]]
        if req.get("construct"):
            cls = ns[req["name"]]
            reference = guards.get(exercise, (None,) * 5)[4]
            if reference is not None and isinstance(cls, type) and issubclass(cls, reference):
                dotted = f"{reference.__module__}.{reference.__qualname__}"
                return {"refused": [f"subclassed the reference {dotted}"]}
        guard = Guard(exercise)
        try:
            result = run_guarded(guard, req, args, kwargs, tensors)
        except BaseException:
            if guard.refused:
                return {"refused": guard.refused}
            raise
        if guard.refused:
            return {"refused": guard.refused}
        gen_states = [g.get_state() for g in generators]
        if req.get("construct"):
            if not isinstance(result, _torch.nn.Module):
                counter[0] += 1
                instances[counter[0]] = result
                reply = {"handle": counter[0], "module": False}
                return {"construct": reply, "tensors": [], "generators": gen_states}
            counter[0] += 1
            instances[counter[0]] = result
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
                "handle": counter[0],
                "module": True,
                "state": state,
                "training": bool(result.training),
            }
            return {
                "result": {"v": None},
                "construct": reply,
                "tensors": [],
                "generators": gen_states,
            }
        out_tensors: list = []
        description = plain(result, out_tensors)
        differentiable = [bool(t.requires_grad) for t in out_tensors]
        token = None
        if leaves and any(differentiable):
            counter[0] += 1
            token = counter[0]
            pending[token] = (out_tensors, leaves)
            while len(pending) > 64:
                pending.pop(min(pending))
        return {
            "result": description,
            "tensors": [tensor_out(t) for t in out_tensors],
            "differentiable": differentiable,
            "token": token,
            "generators": gen_states,
        }

    while True:
        try:
            data = _read(fd_in, None, limit=1 << 34)
        except (EOFError, OSError):
            return
        req = _torch.load(io.BytesIO(data), weights_only=False)  # from the trusted parent
        try:
            reply = handle(req)
        except BaseException as err:  # noqa: BLE001 - the student's code raised
            try:
                reply = {"error": f"{err}"[:MAX_TEXT], "error_type": type(err).__name__}
            except BaseException:  # noqa: BLE001
                reply = {"error": "an error", "error_type": "Error"}
        try:
            send(reply)
        except Exception as err:  # noqa: BLE001 - e.g. a result that cannot be saved
            send(
                {
                    "error": f"the result cannot be sent back: {err}"[:MAX_TEXT],
                    "error_type": "TypeError",
                }
            )


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--child":
    _child_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
