"""Generic diagnosers of a crash: a "Likely mistake" read from the error the student's code raised.

A check whose case makes the student's code raise shows the error and the student's line. Some
errors have one cause a student can act on, whatever the exercise; ``name(err)`` names it:

- two dtypes mixed in one operation (a tensor made without ``dtype=x.dtype``);
- two devices mixed in one operation (a tensor made without ``device=x.device``: the thorough
  check runs on a GPU too when there is one, where ``torch.arange(L)`` is still on the CPU);
- ``.view`` of a tensor that a transpose or permute left non-contiguous;
- a size computed with ``/`` (a float) where an integer belongs (``//``);
- an in-place operation on a tensor autograd still needs (``x += …``, ``h.copy_(…)``);
- an axis counted from the front that a 2-D or 4-D input does not have (``transpose(1, 2)``);
- the shape unpacked into a fixed number of names (``L, d = x.shape``) for an input with more
  or fewer axes;
- an optional argument's default None used as a number; min()/max() of nothing left;
  ``torch.topk`` with k larger than its axis.

Like ``check.generic``, a diagnoser names a mistake only on unambiguous evidence: PyTorch's own
wording of the error, and for unpacking, the student's own line (read from the traceback). An
error with several plausible causes (two shapes that do not broadcast) is left unnamed.
"""

from __future__ import annotations

import re

from .feedback import student_frames

Named = tuple[str, str]  # (a stable key, the one-sentence "Likely mistake")

_DTYPE = re.compile(
    r"must have the same dtype|expected (?:m1 and m2|both vectors) to have the same dtype"
    r"|expected scalar type \w+ but found \w+|found dtype \w+ but expected \w+"
    r"|to have the same dtype",
    re.IGNORECASE,
)
# PyTorch's wordings: CUDA ("... but found at least two devices, cuda:0 and cpu!", "... but got
# index is on cpu, different from other tensors on cuda:0 (when checking argument ..."), older
# releases, indexing with indices on another device, and the meta and MPS backends
_DEVICE = re.compile(
    r"Expected all tensors to be on the same device|is on CPU, but expected \w+ to be on GPU"
    r"|Expected object of device type|indices should be either on cpu or on the same device"
    r"|is not on the expected device|Placeholder storage has not been allocated on MPS device",
)
_VIEW = re.compile(r"view size is not compatible with input tensor's size and stride")
_FLOAT_SIZE = re.compile(
    r"but got float|'float' object cannot be interpreted as an integer"
    r"|argument 'size'.*float|argument 'shape'.*float|must be tuple of ints,\s*but got float"
)
_IN_PLACE = re.compile(
    r"leaf Variable that requires grad is being used in an in-place operation"
    r"|has been modified by an inplace operation"
    r"|view of a leaf Variable that requires grad is being used in an in-place operation"
    r"|a view .* is being modified inplace"
)
_DIM_RANGE = re.compile(r"Dimension out of range \(expected to be in range of \[-(\d+), \d+\]")
_UNPACK = re.compile(r"(too many|not enough) values to unpack \(expected (\d+)")
_SHAPE_ON_LINE = re.compile(r"\.(shape|size\(\))")
_NONE_OPERAND = re.compile(r"unsupported operand type\(s\) for .*'NoneType'|'NoneType' object")
_EMPTY_MIN = re.compile(r"(min|max)\(\) (arg|iterable argument) is (an )?empty")
_TOPK = re.compile(r"selected index k out of range|k \(\d+\) is too big|k not in range")


def name(err: BaseException) -> Named | None:
    """The mistake behind the student's error `err`, or None when its cause is not clear."""
    text = str(err)
    if isinstance(err, RuntimeError) and _DTYPE.search(text):
        return (
            "crash-mixed-dtypes",
            "a tensor you created has another dtype than the inputs (torch.zeros, torch.ones, "
            "torch.arange and torch.tensor give float32 or int64 unless told): create it with "
            "dtype=x.dtype and device=x.device, or with torch.zeros_like / x.new_zeros",
        )
    if isinstance(err, RuntimeError) and _DEVICE.search(text):
        return (
            "crash-mixed-devices",
            "a tensor you created is on another device than the inputs (torch.zeros, "
            "torch.arange, torch.full and torch.tensor make it on the CPU unless told, and the "
            "inputs here are on a GPU): create it with device=x.device, or with "
            "torch.zeros_like / x.new_full; in a module, keep a fixed table with "
            "self.register_buffer so that .to(device) moves it",
        )
    if isinstance(err, RuntimeError) and _VIEW.search(text):
        return (
            "crash-view-not-contiguous",
            "`.view` of a tensor that a transpose or permute left non-contiguous in memory: use "
            "`.reshape(...)`, or `.contiguous().view(...)`",
        )
    if isinstance(err, (TypeError, RuntimeError)) and _FLOAT_SIZE.search(text):
        return (
            "crash-float-size",
            "a size computed with `/` is a float, and shapes take integers: divide with `//` "
            "(for example d_model // n_heads)",
        )
    if isinstance(err, RuntimeError) and _IN_PLACE.search(text):
        return (
            "crash-in-place",
            "an in-place operation (`+=`, `x[...] = ...`, `.copy_`, `.add_`) changed a tensor "
            "that autograd still needs, or the caller's input: compute a new tensor instead "
            "(`x = x + ...`, `torch.cat`, `torch.stack`)",
        )
    found = _DIM_RANGE.search(text)
    if isinstance(err, IndexError) and found:
        return (
            "crash-axis-from-front",
            f"an axis counted from the front does not exist for an input with {found.group(1)} "
            "axes: the exercise's inputs may have more or fewer leading axes (a batch, heads), so "
            "count the axes from the end (`transpose(-2, -1)`, `dim=-1`, `x.shape[-2]`)",
        )
    if isinstance(err, TypeError) and _NONE_OPERAND.search(text):
        return (
            "crash-none-used",
            "a value that can be None (an optional argument left at its default, such as "
            "n_kv_heads or top_k) is used as a number: handle None first "
            "(`if top_k is not None: ...`, `n_kv = n_heads if n_kv is None else n_kv`)",
        )
    if isinstance(err, ValueError) and _EMPTY_MIN.search(text):
        return (
            "crash-empty-min",
            "min() or max() reached an empty sequence: stop, or skip, when nothing is left to "
            "choose from (no pair left to merge, an empty input)",
        )
    if isinstance(err, RuntimeError) and _TOPK.search(text):
        return (
            "crash-topk-too-big",
            "torch.topk(x, k) with k larger than the axis it picks from: cap it, "
            "k = min(k, x.shape[-1]) (a k at least the vocabulary size keeps everything)",
        )
    found = _UNPACK.search(text)
    if isinstance(err, ValueError) and found and _on_a_shape(err):
        return (
            "crash-shape-unpacked",
            f"the shape is unpacked into {found.group(2)} names, but this input has "
            f"{'more' if found.group(1) == 'too many' else 'fewer'} axes: read the sizes you "
            "need from the end (`L, d = x.shape[-2:]`, `x.shape[-1]`), whatever leading axes "
            "come before",
        )
    return None


def _on_a_shape(err: BaseException) -> bool:
    """Whether the student's line that raised `err` reads a shape (``x.shape``, ``x.size()``)."""
    frames = student_frames(err.__traceback__)
    return bool(frames) and bool(_SHAPE_ON_LINE.search(frames[-1].line or ""))
