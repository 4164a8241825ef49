"""The re-check's wire: length-prefixed messages over two pipes between the trusted parent
(`verify`) and the child that runs the student's code (`verify_child`), and what a message may hold.

Messages are ``torch.save`` payloads. The parent reads the child's with
``torch.load(weights_only=True)`` and then ``validate_reply``: plain data only.
"""

from __future__ import annotations

import io
import os
import select
import struct
import time

import torch
from torch import nn

MAX_MESSAGE = 512 * 2**20  # bytes a reply from the child may have
MAX_TEXT = 4000
MAX_LEAVES = 256  # tensors kept for gradients across calls (each side)
# Markers of values that travel beside a message (tensors, generators) or stay in the child.
TENSOR_MARK = "__tlab_tensor__"
OBJECT_MARK = "__tlab_object__"
GENERATOR_MARK = "__tlab_generator__"
# How the child answers a built-in protocol method forwarded to one of its objects.
BUILTIN_PROTOCOL = {
    "__len__": len,
    "__float__": float,
    "__int__": int,
    "__bool__": bool,
    "__index__": lambda o: o.__index__(),
    "__getitem__": lambda o, k: o[k],
    "__contains__": lambda o, k: k in o,
    "__str__": str,
}


class VerifyError(RuntimeError):
    """The re-check itself cannot run (missing released notebook, unreadable submission)."""


class ChildGone(RuntimeError):
    """The child process died, timed out or sent something this side does not accept."""


def write_message(fd: int, data: bytes) -> None:
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


def read_message(fd: int, deadline: float | None, limit: int = MAX_MESSAGE) -> bytes:
    (n,) = struct.unpack(">Q", _read_exact(fd, 8, deadline))
    if n > limit:
        raise ValueError(f"a message of {n} bytes (limit {limit})")
    return _read_exact(fd, n, deadline)


def dumps(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def validate_reply(obj, depth: int = 0):
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
        return type(obj)(validate_reply(x, depth + 1) for x in obj)
    if type(obj) is dict:
        if not all(type(k) is str for k in obj):
            raise ValueError("a dict with non-string keys")
        return {k: validate_reply(v, depth + 1) for k, v in obj.items()}
    raise ValueError(f"an unexpected {type(obj).__name__}")
