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
- two shapes that do not broadcast because a tensor the student's line uses came from a mean,
  sum, var or norm over the last axis without ``keepdim=True`` (read from the student's frame:
  its locals' shapes and the line that made the tensor);
- two 1-D tensors of the mismatched sizes combined where every pair belongs (no [:, None]);
- ``.T`` of a tensor with more than two axes (it reverses them all) on the line that failed;
- -100 (ignore_index) used as an index; a size-1 token concatenated to a batch without
  expanding it; ``torch.arange(start, length)`` (read from the student's line and integers);
  ``torch.randint`` on an empty range;
- a mask passed positionally into MultiHeadAttention's `context` (its second parameter); a bool
  mask used as an index where its shape only broadcasts; `context or x` or `if h0:` on a
  tensor (an optional argument tested by its truth value, not `is None`); one value
  too many written into the odd columns [1::2] of an odd width; a ValueError of the student's own
  whose guard compares with >= where the limit itself is allowed; a head axis added to a mask that
  had no batch axis (its first axis meets the heads);
- an optional argument's default None used as a number, or made into a tensor; min()/max() of nothing left;
  ``torch.topk`` with k larger than its axis;
- a CUDA kernel stopped by a device-side assert (an index out of range on a GPU): the process
  cannot use the GPU again, so the sentence says to restart the kernel and rerun on the CPU.

Like ``check.generic``, a diagnoser names a mistake only on unambiguous evidence: PyTorch's own
wording of the error, and for unpacking, the student's own line (read from the traceback). An
error with several plausible causes (two shapes that do not broadcast) is left unnamed.
"""

from __future__ import annotations

import inspect
import re

import torch

from .feedback import innermost_student_frame, student_frames

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
_NONE_TENSOR = re.compile(
    r"Could not infer dtype of NoneType|received an invalid combination of arguments - got "
    r"\((?:[^()]*, )?NoneType"
)
_EMPTY_MIN = re.compile(r"(min|max)\(\) (arg|iterable argument) is (an )?empty")
_BROADCAST = re.compile(
    r"The size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton"
)
_REDUCTION = re.compile(
    r"\.(mean|sum|var|std|norm|amax|logsumexp)\(|torch\.(mean|sum|var|std|norm)\("
)
_CAT_SIZE_ONE = re.compile(
    r"Sizes of tensors must match except in dimension \d+\. Expected size (\d+) but got size (\d+)"
)
_IGNORE_INDEX = re.compile(r"index -100 is out of bounds")
_ARANGE = re.compile(r"upper bound and lower bound inconsistent with step sign")
_ARANGE_CALL = re.compile(r"arange\(\s*([A-Za-z_]\w*)\s*,\s*([A-Za-z_]\w*)\s*[,)]")
_EMPTY_DRAW = re.compile(
    r"random_ expects 'from' to be less than 'to', but got from=(-?\d+) >= to="
)
_DOT_T = re.compile(r"\b([A-Za-z_]\w*)\.T\b")
_CONTEXT_SHAPE = re.compile(r"context must have shape \(B, L_k, d_model\)")
_MASK_POSITIONAL = re.compile(r",\s*\w*mask\w*\s*\)")
_BOOL_INDEX = re.compile(r"The shape of the mask \[[\d, ]*\] at index \d+ does not match")
_TRUTH_VALUE = re.compile(
    r"Boolean value of Tensor with more than one (value|element) is ambiguous"
)
_TRUTH_TEST = re.compile(r"\bif\s+(not\s+)?[A-Za-z_][\w.]*\s*(:|else\b)")
_EXPANDED = re.compile(
    r"The expanded size of the tensor \((\d+)\) must match the existing size \((\d+)\)"
)
_TOPK = re.compile(r"selected index k out of range|k \(\d+\) is too big|k not in range")
_IS_CAUSAL = re.compile(r"is_causal=True says the mask is the causal mask .* got (no mask|a mask)")
_FLOAT_IDS = re.compile(r"tokens must be integer ids, got dtype torch\.(float|half|bfloat|double)")
_DEVICE_ASSERT = re.compile(r"device-side assert triggered", re.IGNORECASE)
_OUT_OF_BOUNDS = re.compile(r"index (\d+) is out of bounds for dimension (\d+) with size (\d+)")
_GATHER_DIM = re.compile(r"\.gather\(\s*(?:dim\s*=\s*)?(\d+)\s*,")


def is_device_assert(err: BaseException) -> bool:
    """Whether `err` is CUDA's device-side assert (torch.AcceleratorError, a RuntimeError)."""
    return isinstance(err, RuntimeError) and bool(_DEVICE_ASSERT.search(str(err)))


def name(err: BaseException) -> Named | None:
    """The mistake behind the student's error `err`, or None when its cause is not clear."""
    text = str(err)
    if is_device_assert(err):
        return (
            "crash-device-assert",
            "a CUDA kernel stopped at an assertion, which on a GPU almost always means an index "
            "out of range (a target of -100 or ignore_index used as an index in gather, one_hot "
            "or an embedding; an id of at least the vocabulary size). After it nothing in this "
            "process can use the GPU: restart the kernel, then run the same call on the CPU, "
            "where PyTorch names the index and the line",
        )
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
    if isinstance(err, (TypeError, RuntimeError)) and _NONE_TENSOR.search(text):
        return (
            "crash-none-as-tensor",
            "a value that can be None (an optional argument left at its default, such as "
            "special_ids or mask) was passed where a tensor belongs (torch.tensor(None), "
            "torch.isin(x, None)): handle None first (`if special_ids is not None: ...`)",
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
    if isinstance(err, (RuntimeError, IndexError)) and _IGNORE_INDEX.search(text):
        return (
            "crash-ignore-index-used",
            "the ignored targets (-100) are used as indices (gather, indexing, one_hot): replace "
            "them by a valid class first (targets.clamp(min=0), or masked_fill), then leave "
            "those positions out of the loss with the mask targets != ignore_index",
        )
    found = _CAT_SIZE_ONE.search(text)
    if isinstance(err, RuntimeError) and found and "1" in found.groups():
        return (
            "crash-cat-size-one",
            "torch.cat joins tensors whose other sizes must match, and one of them has size 1 "
            "on an axis where the others have more (a learned token of shape (1, 1, d) beside a "
            "batch): expand it first, token.expand(B, -1, -1), or join along the right axis",
        )
    if isinstance(err, RuntimeError) and _ARANGE.search(text):
        named = _arange_length(*_student_line(err))
        if named:
            return named
    found = _EMPTY_DRAW.search(text)
    if isinstance(err, RuntimeError) and found:
        return (
            "crash-empty-draw",
            "torch.randint(low, high) needs low < high: on an empty input (length 0) there is "
            "nothing to draw from, so handle that case first (return the input unchanged)",
        )
    found = _BROADCAST.search(text)
    if isinstance(err, RuntimeError) and found:
        sizes = {int(found.group(1)), int(found.group(2))}
        frame, line = _student_line(err)  # read once, for the three diagnosers below
        named = frame is not None and (
            _no_keepdim(frame, line, sizes)
            or _dot_t(frame, line)
            or _outer(frame, line, sizes)
            or _mask_on_heads(frame, line)
        )
        if named:
            return named
    found = _EXPANDED.search(text)
    if isinstance(err, RuntimeError) and found and "1::2" in _student_line(err)[1]:
        slots, values = (int(n) for n in found.groups())
        if values == slots + 1:
            return (
                "crash-odd-columns",
                f"the odd columns [1::2] are {slots}, one fewer than the {values} values written "
                "into them: for an odd width, keep only as many as fit, e.g. "
                "torch.cos(angles)[:, : d_model // 2]",
            )
    if isinstance(err, RuntimeError) and _TRUTH_VALUE.search(text):
        line = _student_line(err)[1]
        if re.search(r"\bor\b", line) and "is None" not in line:
            return (
                "crash-tensor-or",
                "`a or b` asks a tensor for one truth value, which a tensor of several entries "
                "does not have: test for None, `context = x if context is None else context`",
            )
        if _TRUTH_TEST.search(line) and not re.search(r"\bis\s+(not\s+)?None\b", line):
            return (
                "crash-tensor-truth",
                "`if mask:` (or `h0 if h0 else ...`) asks a tensor for one truth value, which a "
                "tensor of several entries does not have: test whether the optional argument was "
                "given, `if mask is not None:` (`h = h0 if h0 is not None else ...`)",
            )
    if isinstance(err, IndexError) and _BOOL_INDEX.search(text):
        return (
            "crash-bool-index-shape",
            "indexing with a bool mask (scores[~mask] = ...) needs the mask's full shape, but a "
            "mask may broadcast (a (L_q, L_k) mask against a batch of scores): use "
            "scores.masked_fill(~mask, float('-inf')), which broadcasts",
        )
    if isinstance(err, ValueError) and _CONTEXT_SHAPE.search(text):
        line = _student_line(err)[1]
        if _MASK_POSITIONAL.search(line) and "mask=" not in line:
            return (
                "crash-mask-as-context",
                "the mask is passed positionally, so it lands in MultiHeadAttention's second "
                "parameter, context: pass it by name, self_attn(h, mask=mask)",
            )
    if isinstance(err, ValueError):
        named = _bound_inclusive(*_student_line(err))
        if named:
            return named
    found = _UNPACK.search(text)
    if isinstance(err, ValueError) and found and _on_a_shape(err):
        return (
            "crash-shape-unpacked",
            f"the shape is unpacked into {found.group(2)} names, but this input has "
            f"{'more' if found.group(1) == 'too many' else 'fewer'} axes: read the sizes you "
            "need from the end (`L, d = x.shape[-2:]`, `x.shape[-1]`), whatever leading axes "
            "come before",
        )
    found = _IS_CAUSAL.search(text)
    if isinstance(err, ValueError) and found:
        return (
            "crash-is-causal",
            "is_causal=True was passed "
            + (
                "with no mask"
                if found.group(1) == "no mask"
                else "with a mask that is not causal_mask(L) itself"
            )
            + ": is_causal only says that the mask given is the plain causal mask; pass the "
            "mask you were given (mask=self_mask, which may hold padding too) and leave "
            "is_causal out",
        )
    if isinstance(err, TypeError) and _FLOAT_IDS.search(text):
        return (
            "crash-float-token-ids",
            "the token ids are a float tensor (torch.ones(...) * bos_id and torch.zeros(...) "
            "are float32): make them integers, torch.full((B, 1), bos_id, dtype=torch.long, "
            "device=src.device), and keep every token you append a long",
        )
    found = _OUT_OF_BOUNDS.search(text)
    if isinstance(err, (RuntimeError, IndexError)) and found:
        line = _student_line(err)[1]
        axis = _GATHER_DIM.search(line)
        if axis and axis.group(1) == found.group(2):
            return (
                "crash-gather-axis",
                f"gather picks along axis {axis.group(1)}, which has {found.group(3)} entries, "
                "but the indices count another axis: gather along the axis they index (class "
                "ids index the last one, log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1))",
            )
    return None


def _on_a_shape(err: BaseException) -> bool:
    """Whether the student's line that raised `err` reads a shape (``x.shape``, ``x.size()``)."""
    frames = student_frames(err.__traceback__)
    return bool(frames) and bool(_SHAPE_ON_LINE.search(frames[-1].line or ""))


def _no_keepdim(frame, line: str, sizes: set[int]) -> Named | None:
    """Two shapes that do not broadcast, where the student's failing line uses a tensor that
    their code made with a mean, sum, var, std or norm and no keepdim, whose shape is another
    tensor's without its last axis, and whose own last axis is among the mismatched sizes."""
    try:
        source = inspect.getsource(frame.f_code)
    except (OSError, TypeError):
        return None
    tensors = {k: v for k, v in frame.f_locals.items() if isinstance(v, torch.Tensor)}
    for key, reduced in tensors.items():
        word = rf"\b{re.escape(key)}\b"
        made = re.search(rf"^\s*{word}\s*=(?!=)(.*)$", source, re.MULTILINE)
        if (
            reduced.dim() == 0
            or reduced.shape[-1] not in sizes
            or not re.search(word, line)
            or made is None
            or not _REDUCTION.search(made.group(1))
            or "keepdim" in made.group(1)
        ):
            continue
        for other, full in tensors.items():
            if full.dim() == reduced.dim() + 1 and tuple(full.shape[:-1]) == tuple(reduced.shape):
                return (
                    "crash-no-keepdim",
                    f"`{key}` has shape {tuple(reduced.shape)}, `{other}`'s without its last "
                    "axis: the reduction over the last axis that made it (mean, sum, var, norm) "
                    f"dropped that axis, so `{key}` no longer lines up with `{other}` "
                    f"{tuple(full.shape)}; pass keepdim=True (or add the axis back with "
                    "[..., None])",
                )
    if _REDUCTION.search(line) and "keepdim" not in line:
        return (
            "crash-no-keepdim",
            "the line that failed combines the result of a reduction (mean, sum, var, norm) "
            "made without keepdim=True: it lost the reduced axis, so it no longer lines up with "
            "the other operand; pass keepdim=True (or add the axis back with [..., None])",
        )
    return None


def _student_line(err: BaseException) -> tuple:
    """(the student's innermost frame, the text of its failing line), or (None, "")."""
    frame = innermost_student_frame(err.__traceback__)
    frames = student_frames(err.__traceback__)
    if frame is None or not frames:
        return None, ""
    return frame, frames[-1].line or ""


def _dot_t(frame, line: str) -> Named | None:
    """Two shapes that do not broadcast, on a line of the student's that takes `.T` of a tensor
    with more than two axes (which reverses every axis, not the last two)."""
    for key in _DOT_T.findall(line):
        value = frame.f_locals.get(key)
        if isinstance(value, torch.Tensor) and value.dim() > 2:
            return (
                "crash-dot-t",
                f"`{key}.T` reverses every axis of `{key}`, which has {value.dim()} "
                f"({tuple(value.shape)} becomes {tuple(value.shape[::-1])}): to swap the last "
                f"two only, write {key}.transpose(-2, -1) (or {key}.mT)",
            )
    return None


def _outer(frame, line: str, sizes: set[int]) -> Named | None:
    """Two shapes that do not broadcast: two 1-D tensors on the student's failing line, of the
    two mismatched sizes, combined elementwise where every pair belongs (an outer product)."""
    if len(sizes) != 2:
        return None
    vectors = {
        key: value
        for key, value in frame.f_locals.items()
        if isinstance(value, torch.Tensor)
        and value.dim() == 1
        and re.search(rf"\b{re.escape(key)}\b", line)
    }
    by_size = {int(v.shape[0]): k for k, v in vectors.items()}
    if set(by_size) != sizes:
        return None
    a, b = sorted(by_size.values())
    return (
        "crash-outer-product",
        f"`{a}` and `{b}` are both 1-D, of sizes {tuple(vectors[a].shape)[0]} and "
        f"{tuple(vectors[b].shape)[0]}, and are combined elementwise where every pair belongs: "
        f"make one a column so that they broadcast to a table, {a}[:, None] with {b}[None, :]",
    )


def _arange_length(frame, line: str) -> Named | None:
    """torch.arange(start, end) raising on the student's line `arange(a, b)`, where a and b are
    their integers and b is below a: a length given where the end belongs."""
    found = _ARANGE_CALL.search(line)
    if frame is None or found is None:
        return None
    start, end = (frame.f_locals.get(name) for name in found.groups())
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
        return None
    if not 0 <= end < start:
        return None
    a, b = found.groups()
    return (
        "crash-arange-length",
        f"torch.arange({a}, {b}) stops at {b} = {end}, below its start {a} = {start}: its second "
        f"argument is where to stop, not how many, so arange({a}, {a} + {b}) counts {b} values "
        f"from {a}",
    )


def _bound_inclusive(frame, line: str) -> Named | None:
    """The student's own `raise ValueError` on an input that must pass, guarded by the `if` just
    above it that compares with >=: the limit itself is refused (an exact fit)."""
    if frame is None or not line.strip().startswith("raise"):
        return None
    try:
        lines, first = inspect.getsourcelines(frame.f_code)
    except (OSError, TypeError):
        return None
    above = [text.strip() for text in lines[: frame.f_lineno - first]]
    guard = next((text for text in reversed(above) if text.startswith("if ")), "")
    if ">=" not in guard:
        return None
    return (
        "crash-bound-inclusive",
        f"`{guard.rstrip(':')}` also refuses the value that exactly reaches the limit (a "
        "sequence that fills the table to its last row): compare with > so that the limit "
        "itself is allowed",
    )


def _mask_on_heads(frame, line: str) -> Named | None:
    """Two shapes that do not broadcast, on a line of the student's that uses a 3-D mask of
    shape (n, 1, m) beside 4-D scores (B, h, L_q, L_k) whose head axis is not n: a head axis
    added (unsqueeze(1)) to a mask that had no batch axis, so its first axis meets the heads."""
    tensors = {k: v for k, v in frame.f_locals.items() if isinstance(v, torch.Tensor)}
    heads = {int(v.shape[1]) for v in tensors.values() if v.dim() == 4}
    for key, mask in tensors.items():
        if (
            "mask" in key
            and re.search(rf"\b{re.escape(key)}\b", line)
            and mask.dim() == 3
            and mask.shape[1] == 1
            and heads
            and mask.shape[0] not in heads | {1}
        ):
            return (
                "crash-mask-head-axis",
                f"`{key}` has shape {tuple(mask.shape)}: against 4-D scores (B, h, L_q, L_k) its "
                "first axis lines up with the heads, so a head axis was added to a mask that had "
                "no batch axis; unsqueeze(1) only a (B, L_q, L_k) mask, as a 2-D (L_q, L_k) or "
                "4-D mask already broadcasts",
            )
    return None
