"""Input checks shared by the modules: wrong input gets a sentence naming the shapes involved."""

from __future__ import annotations

import torch


def require_tensor(name: str, x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def require_ndim(name: str, x: torch.Tensor, ndim: int, layout: str) -> None:
    require_tensor(name, x)
    if x.dim() != ndim:
        raise ValueError(f"{name} must have shape {layout} ({ndim} dims), got {tuple(x.shape)}")


def require_min_ndim(name: str, x: torch.Tensor, ndim: int, layout: str) -> None:
    require_tensor(name, x)
    if x.dim() < ndim:
        raise ValueError(
            f"{name} must have shape {layout} (at least {ndim} dims), got {tuple(x.shape)}"
        )


def require_last_dim(name: str, x: torch.Tensor, size: int, what: str) -> None:
    if x.shape[-1] != size:
        raise ValueError(
            f"{name} has last dimension {x.shape[-1]} but {what} is {size} (shape {tuple(x.shape)})"
        )


def broadcast_shapes(*shapes) -> tuple[int, ...]:
    """numpy-style broadcasting of shapes; ValueError if they do not broadcast.

    Plain Python on purpose: torch.broadcast_shapes pulls in sympy on first use (seconds).
    """
    ndim = max([0, *(len(s) for s in shapes)])  # (not max(..., default=0): torch.compile can't)
    result = []
    for i in range(1, ndim + 1):
        sizes = {s[-i] for s in shapes if len(s) >= i} - {1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
        result.append(sizes.pop() if sizes else 1)
    return tuple(reversed(result))


def require_bool_mask(mask: torch.Tensor, target: tuple[int, ...], target_name: str) -> None:
    """`mask` must be boolean (True = may attend) and broadcastable to `target`."""
    require_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}; "
            "convert a 0/1 mask with mask.bool()"
        )
    try:
        broadcast_shapes(tuple(mask.shape), target)
    except ValueError:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to {target_name} {target}"
        ) from None


def require_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Attention inputs q (..., L_q, d_k), k (..., L_k, d_k), v (..., L_k, d_v): ranks, matching
    d_k and L_k, broadcastable batch dimensions, one dtype."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        require_min_ndim(name, t, 2, "(..., L, d)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q has d_k={q.shape[-1]} but k has d_k={k.shape[-1]}: queries and keys must have the "
            f"same last dimension (q {tuple(q.shape)}, k {tuple(k.shape)})"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k has {k.shape[-2]} positions but v has {v.shape[-2]}: every key needs a value "
            f"(k {tuple(k.shape)}, v {tuple(v.shape)})"
        )
    try:
        broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(
            f"batch dimensions of q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} "
            "do not broadcast"
        ) from None
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
