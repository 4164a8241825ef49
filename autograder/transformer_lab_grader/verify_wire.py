"""The re-check's wire: length-prefixed messages over two pipes between the trusted parent
(`verify`) and the child that runs the student's code (`verify_child`), and what a message may hold.

A message is a frame: its tensors' descriptions (JSON: dtype, shape, device), its body, then the
tensors' bytes. The parent's requests have a pickled body (`pack_request`: the child trusts its
parent, and a check's arguments may be any object); the child's replies a JSON body
(`pack_reply`), which the parent reads with `unpack_reply`: plain data only (tensors, numbers,
strings, None, lists, tuples, dicts with string keys), nothing that runs code on this side.
Much faster than ``torch.save``/``torch.load(weights_only=True)``, which cost ~1 ms a call on
both sides (`benchmarks/history/journal.md` §22).
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import re
import select
import struct
import time

import torch

from .plain_text import deep

MAX_MESSAGE = 512 * 2**20  # bytes a reply from the child may have
MAX_TEXT = 4000
MAY_HOLD_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")  # escaped, raw (UTF-8)
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


# ----------------------------------------------------------------------------------------------
# Frames: [u32 n][tensor descriptions, JSON][u32 m][body][each tensor's bytes, 16-byte aligned]

DTYPES = {
    name: getattr(torch, name)
    for name in (
        "float64",
        "float32",
        "float16",
        "bfloat16",
        "complex128",
        "complex64",
        "int64",
        "int32",
        "int16",
        "int8",
        "uint64",
        "uint32",
        "uint16",
        "uint8",
        "bool",
        "float8_e4m3fn",
        "float8_e5m2",
    )
    if isinstance(getattr(torch, name, None), torch.dtype)
}
_ITEMSIZE = {name: torch.empty((), dtype=d).element_size() for name, d in DTYPES.items()}
_DEVICE = re.compile(r"(cpu|cuda|mps)(:\d{1,3})?")
_ALIGN = 16


def _raw(t: torch.Tensor):
    """A tensor -> (its description, its bytes as a flat uint8 tensor on the CPU); TypeError if it
    cannot travel (a sparse, quantized or nested tensor, an unusual dtype)."""
    name = str(t.dtype).removeprefix("torch.")
    if name not in DTYPES or t.layout != torch.strided or t.is_quantized or t.is_nested:
        raise TypeError(f"a {t.dtype} tensor with layout {t.layout} cannot be sent")
    meta = [name, list(t.shape), str(t.device)]
    t = t.detach()
    if type(t) is not torch.Tensor:
        t = t.as_subclass(torch.Tensor)
    flat = t.resolve_conj().resolve_neg().cpu().contiguous().reshape(-1)
    return meta, flat.view(torch.uint8)


def _frame(body: bytes, tensors: list) -> bytes:
    described, blobs = [], []
    for t in tensors:
        meta, data = _raw(t)
        described.append(meta)
        blobs.append(data)
    head = json.dumps(described).encode()
    parts = [struct.pack(">I", len(head)), head, struct.pack(">I", len(body)), body]
    offset = sum(len(p) for p in parts)
    for data in blobs:
        pad = -offset % _ALIGN
        parts += [b"\0" * pad, data.numpy().tobytes()]
        offset += pad + data.numel()
    return b"".join(parts)


def _unframe(data) -> tuple[bytes, list]:
    """A frame -> (its body, its tensors). ValueError/TypeError for anything malformed."""
    buf = data if isinstance(data, bytearray) else bytearray(data)
    (n,) = struct.unpack_from(">I", buf, 0)
    described = json.loads(bytes(buf[4 : 4 + n]))
    (m,) = struct.unpack_from(">I", buf, 4 + n)
    body_start = 8 + n
    body = bytes(buf[body_start : body_start + m])
    if len(body) != m or type(described) is not list:
        raise ValueError("a truncated frame")
    offset, tensors = body_start + m, []
    for meta in described:
        if type(meta) is not list or len(meta) != 3:
            raise ValueError("a malformed tensor description")
        name, shape, device = meta
        if type(name) is not str or name not in DTYPES:
            raise ValueError(f"an unexpected tensor dtype {str(name)[:40]!r}")
        if type(shape) is not list or len(shape) > 32:
            raise ValueError("a malformed tensor shape")
        if not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError("a malformed tensor shape")
        if type(device) is not str or not _DEVICE.fullmatch(device):
            raise ValueError(f"a tensor on device {str(device)[:40]!r}")
        dtype = DTYPES[name]
        nbytes = math.prod(shape) * _ITEMSIZE[name]
        offset += -offset % _ALIGN
        if offset + nbytes > len(buf):
            raise ValueError("a tensor larger than the message")
        if nbytes:
            flat = torch.frombuffer(buf, dtype=torch.uint8, count=nbytes, offset=offset).clone()
            t = flat.view(dtype).reshape(shape)
        else:
            t = torch.empty(shape, dtype=dtype)
        if device != "cpu":
            t = t.to(device)
        tensors.append(t)
        offset += nbytes
    return body, tensors


# ----------------------------------------------------------------------------------------------
# Requests (the trusted parent -> the child): a pickle whose tensors travel as bytes.


class _Pickler(pickle.Pickler):
    """Each tensor travels once, however often the request refers to it, so that the child's copy
    keeps the sharing (a GPT's output layer *is* its token embedding: weights tied)."""

    def __init__(self, file, tensors: list):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.tensors = tensors
        self.index: dict[
            int, int
        ] = {}  # id(tensor) -> its place in `tensors` (which keeps it alive)

    def persistent_id(self, obj):
        if isinstance(obj, torch.Tensor):
            if id(obj) not in self.index:
                self.index[id(obj)] = len(self.tensors)
                self.tensors.append(obj)
            return self.index[id(obj)]
        return None


def pack_request(obj) -> bytes:
    """The parent's request -> a frame (raises for an argument that cannot be pickled)."""
    buf, tensors = io.BytesIO(), []
    _Pickler(buf, tensors).dump(obj)
    return _frame(buf.getvalue(), tensors)


def unpack_request(data):
    """In the child: a request frame -> the request (from the trusted parent only)."""
    body, tensors = _unframe(data)
    unpickler = pickle.Unpickler(io.BytesIO(body))
    unpickler.persistent_load = tensors.__getitem__
    return unpickler.load()


# ----------------------------------------------------------------------------------------------
# Replies (the child -> the parent): JSON whose objects are all tags, so nothing is ambiguous:
# {"t": i} the i-th tensor, {"u": [...]} a tuple, {"d": [[key, value], ...]} a dict.


def _tagged(obj, tensors: list, depth: int = 0):
    if depth > 64:
        raise ValueError("data nested too deeply")
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return {"t": len(tensors) - 1}
    if type(obj) is list:
        return [_tagged(x, tensors, depth + 1) for x in obj]
    if type(obj) is tuple:
        return {"u": [_tagged(x, tensors, depth + 1) for x in obj]}
    if type(obj) is dict:
        if not all(type(k) is str for k in obj):
            raise TypeError("a dict with non-string keys")
        return {"d": [[k, _tagged(v, tensors, depth + 1)] for k, v in obj.items()]}
    raise TypeError(f"an unexpected {type(obj).__name__}")


def pack_reply(obj) -> bytes:
    """In the child: plain data -> a frame (TypeError/ValueError for anything else)."""
    tensors: list = []
    body = json.dumps(_tagged(obj, tensors), ensure_ascii=False).encode("utf-8", "surrogatepass")
    return _frame(body, tensors)


def unpack_reply(data):
    """In the parent: a frame from the child -> plain data only: tensors (strided, on the CPU or
    an accelerator), numbers, strings (a lone surrogate replaced by U+FFFD), None, and
    lists/tuples/dicts (str keys) of those. Anything else raises ValueError (or TypeError)."""
    body, tensors = _unframe(data)

    def tag(obj: dict):
        if len(obj) != 1:
            raise ValueError("a malformed reply")
        ((key, value),) = obj.items()
        if key == "t" and type(value) is int and 0 <= value < len(tensors):
            return tensors[value]
        if key == "u" and type(value) is list:
            return tuple(value)
        if key == "d" and type(value) is list:
            if not all(type(p) is list and len(p) == 2 and type(p[0]) is str for p in value):
                raise ValueError("a malformed dict")
            return dict(value)
        raise ValueError("a malformed reply")

    reply = json.loads(body.decode("utf-8", "surrogatepass"), object_hook=tag)
    # A lone surrogate (raw, or a JSON escape) would make every later write of the text fail.
    return deep(reply) if MAY_HOLD_SURROGATE.search(body) else reply
