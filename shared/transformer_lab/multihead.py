"""Lesson 03 — multi-head attention.

h heads attend in h different learned subspaces of size d_k = d_model / h. The trick that makes
this cheap: project once with a d_model × d_model matrix, then *reshape* so that the heads become
a batch axis. The h small attentions then run as one batched matrix product.

    head_i = Attention(X W_i^Q, C W_i^K, C W_i^V)
    MultiHead(X, C) = Concat(head_1, ..., head_h) W^O

X gives the queries; C (the context) gives keys and values: C = X for self-attention, the
encoder's output for cross-attention.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validate import require_bool_mask, require_ndim
from .attention import fused_attention, scaled_dot_product_attention


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, L, d_model) -> (B, h, L, d_model / h): head i takes features [i*d_k, (i+1)*d_k)."""
    require_ndim("x", x, 3, "(B, L, d_model)")
    B, L, d_model = x.shape
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    return x.view(B, L, n_heads, d_model // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, h, L, d_k) -> (B, L, h * d_k): the inverse of `split_heads` (the Concat)."""
    require_ndim("x", x, 4, "(B, h, L, d_k)")
    B, h, L, d_k = x.shape
    return x.transpose(1, 2).reshape(B, L, h * d_k)


class KVCache:
    """Keys and values of the positions seen so far, for incremental decoding.

    Holds (B, h, L_seen, d_k) tensors; `append` adds the new positions and returns everything.
    """

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=-2)
            self.v = torch.cat([self.v, v], dim=-2)
        return self.k, self.v


class MultiHeadAttention(nn.Module):
    """Multi-head attention with projections w_q, w_k, w_v, w_o (each nn.Linear(d_model, d_model)).

    forward(x, context=None, mask=None):
        x:       (B, L_q, d_model), gives the queries
        context: (B, L_k, d_model), gives keys and values; defaults to x (self-attention)
        mask:    bool, broadcastable to (B, h, L_q, L_k), True = may attend
        returns  (B, L_q, d_model); with need_weights=True, also the (B, h, L_q, L_k) weights.

    The one fast/explicit switch, as in LayerNorm: with `explicit` False (the default) and
    need_weights=False, PyTorch's fused kernel computes the same thing faster; `explicit = True` on
    an instance (or `set_explicit`) runs softmax(QKᵀ/√d_k)V as written and keeps `last_weights`.
    """

    explicit = False  # True: the written-out attention (and `last_weights`) instead of the kernel
    supports_cache = True  # forward takes a KVCache (GPT.generate asks before using one)

    def __init__(self, d_model: int, n_heads: int, bias: bool = True, dropout: float = 0.0):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.last_weights: torch.Tensor | None = None

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
        cache: KVCache | None = None,
    ):
        context = check_inputs(self, x, context)
        q = split_heads(self.w_q(x), self.n_heads)  # (B, h, L_q, d_k)
        k = split_heads(self.w_k(context), self.n_heads)  # (B, h, L_k, d_k)
        v = split_heads(self.w_v(context), self.n_heads)
        if cache is not None:
            k, v = cache.append(k, v)
        return attend(self, q, k, v, mask, need_weights)


def check_inputs(layer: nn.Module, x: torch.Tensor, context: torch.Tensor | None) -> torch.Tensor:
    """Validate a multi-head layer's x (B, L_q, d_model) and context; return the context (x if None)."""
    context = x if context is None else context
    require_ndim("x", x, 3, "(B, L_q, d_model)")
    require_ndim("context", context, 3, "(B, L_k, d_model)")
    for name, t in (("x", x), ("context", context)):
        if t.shape[-1] != layer.d_model:
            raise ValueError(
                f"{name} has d_model={t.shape[-1]} but this layer expects {layer.d_model}"
            )
    if x.shape[0] != context.shape[0]:
        raise ValueError(f"x has batch {x.shape[0]} but context has batch {context.shape[0]}")
    return context


def attend(layer: nn.Module, q, k, v, mask, need_weights: bool):
    """The heads q (B, h, L_q, d_k), k, v (B, h, L_k, d_k) through attention, then Concat(heads) W^O.

    The one fast/explicit switch: the fused kernel, or (explicit, or weights asked for) the
    written-out attention, whose weights are kept in `layer.last_weights`. Dropout on the weights
    while training.
    """
    if mask is not None:
        require_bool_mask(
            mask, (q.shape[0], layer.n_heads, q.shape[2], k.shape[2]), "(B, h, L_q, L_k) ="
        )
    p = layer.dropout.p if layer.training else 0.0
    if need_weights or layer.explicit:
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        layer.last_weights = weights.detach()
        if p:
            out = layer.dropout(weights) @ v
    else:
        out, weights = fused_attention(q, k, v, mask, dropout_p=p), None
    out = layer.w_o(merge_heads(out))  # Concat(heads) W^O
    return (out, weights) if need_weights else out
