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
    ndim = max((len(s) for s in shapes), default=0)
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
