"""Comparing the student's results with the reference's: tolerances, outputs and gradients.

Floating-point results agree within a tolerance per dtype (accelerators get a little more room
for float32: different kernels); exact results (masks, token ids, counts) must be identical. A
disagreement is one sentence saying what differs: shape, dtype, device, where and by how much.
Gradients are compared by pulling the same random cotangents back through the reference's and the
student's outputs.

The drivers look these functions up on this module when they run (``compare.compare_tensor``), so
every driver sees the same functions (tests/grading/test_tamper.py patches them).
"""

from __future__ import annotations

import torch

# (atol, rtol) per dtype; accelerators get a little more room for float32 (different kernels).
TOLERANCES = {
    torch.float64: (1e-9, 1e-7),
    torch.float32: (3e-5, 3e-4),
    # A case pinned to a low precision (Case.dtype) checks a dtype rule, not the arithmetic:
    # a few units in the last place (bfloat16's is 2^-8 of the value, float16's 2^-11).
    torch.bfloat16: (2e-2, 3e-2),
    torch.float16: (2e-3, 4e-3),
}
ACCELERATOR_FLOAT32 = (2e-4, 2e-3)


def tolerance_for(dtype: torch.dtype, device: torch.device) -> tuple[float, float]:
    """(atol, rtol) for results in `dtype` computed on `device`."""
    if dtype == torch.float32 and device.type != "cpu":
        return ACCELERATOR_FLOAT32
    return TOLERANCES[dtype]


def as_tuple(out) -> tuple:
    """A result as a tuple of its values (a single tensor becomes a 1-tuple)."""
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def identical(a, b) -> bool:
    """Exactly equal tensors: same dtype, shape, device type and every entry (for exact results
    such as masks and token ids)."""
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.dtype == b.dtype
        and a.shape == b.shape
        and a.device.type == b.device.type
        and torch.equal(a.cpu(), b.cpu())
    )


def format_index(flat_index: int, shape: torch.Size) -> str:
    """The index in `shape` of entry `flat_index` of the flattened tensor, e.g. '(0, 2, 1)'."""
    index = []
    for size in reversed(shape):
        index.append(flat_index % size)
        flat_index //= size
    return str(tuple(reversed(index)))


def compare_tensor(expected, got, what: str, dtype, device) -> str | None:
    """None when equal within tolerance, else one sentence saying what differs."""
    if not isinstance(got, torch.Tensor):
        return f"{what} should be a tensor but is a {type(got).__name__}"
    if tuple(got.shape) != tuple(expected.shape):
        return f"{what} has shape {tuple(got.shape)} but should have shape {tuple(expected.shape)}"
    if got.dtype != expected.dtype:
        return f"{what} has dtype {got.dtype} but should have dtype {expected.dtype} (same as the inputs)"
    if got.device.type != expected.device.type:
        return f"{what} is on device {got.device} but the inputs are on {expected.device}"
    if expected.dtype == torch.bool or not expected.is_floating_point():
        if torch.equal(got, expected):
            return None
        if got.numel() == 1:  # a scalar: no index to give
            return f"{what} differs: got {got.item()}, expected {expected.item()}"
        where = (got != expected).flatten().nonzero()[0].item()
        return (
            f"{what} differs at index {format_index(where, got.shape)}: "
            f"got {got.flatten()[where].item()}, expected {expected.flatten()[where].item()}"
        )
    atol, rtol = tolerance_for(dtype, device)
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()
    scalar = g.numel() == 1  # one value: no index and no count to give
    tolerance = f"tolerance atol={atol:g}, rtol={rtol:g} for {str(dtype).replace('torch.', '')}"
    bad_nan = g.isnan() & ~e.isnan()
    if bad_nan.any():
        where = bad_nan.flatten().nonzero()[0].item()
        reference = f"where the reference gives {e.flatten()[where].item():.6g}"
        if scalar:
            return f"{what} contains NaN {reference}"
        return (
            f"{what} contains NaN ({int(bad_nan.sum())} of {g.numel()} entries, first at index "
            f"{format_index(where, g.shape)}) {reference}"
        )
    bad_inf = g.isinf() & ~e.isinf()
    if bad_inf.any():
        where = bad_inf.flatten().nonzero()[0].item()
        if scalar:
            return f"{what} contains inf where the reference gives {e.item():.6g}"
        return f"{what} contains inf (first at index {format_index(where, g.shape)})"
    if torch.allclose(g, e, atol=atol, rtol=rtol, equal_nan=True):
        return None
    if scalar:
        got_text, expected_text = _distinct(g.item(), e.item())
        return f"{what} differs: got {got_text}, expected {expected_text} ({tolerance})"
    diff = (g - e).abs().nan_to_num(0.0)
    # the first index of the largest difference, counting as tied the differences within a
    # millionth of it: one wrong value added to many entries differs by the same amount in each,
    # up to rounding, and the rounding (so the argmax) is not the same on a GPU as on the CPU
    peak = diff.max()
    where = (diff >= peak * (1 - 1e-6)).flatten().nonzero()[0].item()
    n_bad = int((diff > atol + rtol * e.abs()).sum())
    got_text, expected_text = _distinct(g.flatten()[where].item(), e.flatten()[where].item())
    return (
        f"{what} differs in {n_bad} of {g.numel()} entries; the largest difference is "
        f"{diff.flatten()[where].item():.3g} at index {format_index(where, g.shape)} "
        f"(got {got_text}, expected {expected_text}; {tolerance})"
    )


def _distinct(got: float, expected: float) -> tuple[str, str]:
    """The two numbers with 6 significant digits, or as many more as it takes to tell them apart
    (a float32 rounding shows as "got 2.09555, expected 2.09555" at 6)."""
    for digits in (6, 9, 12, 17):
        a, b = f"{got:.{digits}g}", f"{expected:.{digits}g}"
        if a != b:
            break
    return a, b


def compare_outputs(expected, got, names: tuple[str, ...], dtype, device) -> str | None:
    """None when every output agrees, else one sentence about the first that does not (or about
    the number of values returned); `names` names the outputs."""
    expected, got_t = as_tuple(expected), as_tuple(got)
    if len(got_t) != len(expected) or (len(expected) > 1 and not isinstance(got, (tuple, list))):
        return (
            f"the result should be {len(expected)} value(s) ({', '.join(names)}) "
            f"but is {type(got).__name__}"
            + (f" of length {len(got_t)}" if isinstance(got, (tuple, list)) else "")
        )
    for e, g, name in zip(expected, got_t, names):
        problem = compare_tensor(e, g, name, dtype, device)
        if problem:
            return problem
    return None


def same_within_tolerance(a, b, dtype, device) -> bool:
    """Whether two results (tensors or tuples of them) agree within the tolerance."""
    a, b = as_tuple(a), as_tuple(b)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            if x != y:
                return False
            continue
        if x.shape != y.shape:
            return False
        atol, rtol = tolerance_for(dtype, device)
        if not torch.allclose(
            x.detach().double().cpu(),
            y.detach().double().cpu(),
            atol=atol,
            rtol=rtol,
            equal_nan=True,
        ):
            return False
    return True


# ----------------------------------------------------------------------------------------------
# Gradients: the same inputs as leaves, the same cotangents pulled back through both results.


def move(inputs: dict, dtype, device, requires_grad: bool) -> dict:
    """A case's inputs (float64 / bool CPU tensors) on `device`, floating ones in `dtype` as fresh
    leaves (requiring gradients when asked); other values unchanged."""
    moved = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor):
            value = value.to(device)
            if value.is_floating_point():
                value = value.to(dtype).detach().requires_grad_(requires_grad)
        moved[key] = value
    return moved


def grad_leaves(inputs: dict) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) for every input that requires a gradient."""
    return [(k, v) for k, v in inputs.items() if isinstance(v, torch.Tensor) and v.requires_grad]


def cotangents(outputs: tuple, seed: int) -> list[torch.Tensor]:
    """One random cotangent per output, from a generator seeded with `seed`."""
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.device, o.dtype)
        for o in outputs
    ]


def backward(outputs: tuple, cotangents, leaves: list[torch.Tensor]) -> list:
    """The gradients of sum(output · cotangent) with respect to `leaves` (None where none flows)."""
    pairs = [(o, c) for o, c in zip(outputs, cotangents) if o.is_floating_point()]
    if not pairs or not leaves:
        return []
    loss = sum((o * c).nan_to_num(0.0).sum() for o, c in pairs)
    if not loss.requires_grad:
        return [None] * len(leaves)
    return list(torch.autograd.grad(loss, leaves, allow_unused=True))
