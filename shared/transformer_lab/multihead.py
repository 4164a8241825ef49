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
import torch.nn.functional as F
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
    need_weights=False, PyTorch's fused kernel computes the same thing faster (and self-attention
    computes x W^Q, x W^K, x W^V as one matrix product, `fused_qkv`); `explicit = True` on an
    instance (or `set_explicit`) runs softmax(QKᵀ/√d_k)V as written and keeps `last_weights`.
    is_causal=True (as in PyTorch's nn.MultiheadAttention) promises that `mask` is the plain
    causal mask (L, L): the fused kernel then masks by itself; the written-out path uses `mask`.
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
        is_causal: bool = False,
    ):
        context = check_inputs(self, x, context)
        if not (self.explicit or need_weights) and context is x and _plain(self):
            q, k, v = (split_heads(t, self.n_heads) for t in fused_qkv(self, x))  # one product
        else:
            q = split_heads(self.w_q(x), self.n_heads)  # (B, h, L_q, d_k)
            k = split_heads(self.w_k(context), self.n_heads)  # (B, h, L_k, d_k)
            v = split_heads(self.w_v(context), self.n_heads)
        if cache is not None:
            k, v = cache.append(k, v)
        return attend(self, q, k, v, mask, need_weights, is_causal)


def _plain(layer: nn.Module) -> bool:
    """w_q, w_k and w_v are plain nn.Linear layers (not replaced by something else)."""
    return type(layer.w_q) is type(layer.w_k) is type(layer.w_v) is nn.Linear


def fused_qkv(layer: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """x W^Q, x W^K, x W^V as one matrix product (the fast path of self-attention): the three
    weights stacked into (3 d_model, d_model), the same numbers as the three separate products."""
    weight = torch.cat([layer.w_q.weight, layer.w_k.weight, layer.w_v.weight])
    bias = layer.w_q.bias
    if bias is not None:
        bias = torch.cat([bias, layer.w_k.bias, layer.w_v.bias])
    return F.linear(x, weight, bias).split(layer.d_model, dim=-1)


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


def attend(layer: nn.Module, q, k, v, mask, need_weights: bool, is_causal: bool = False):
    """The heads q (B, h, L_q, d_k), k, v (B, h, L_k, d_k) through attention, then Concat(heads) W^O.

    The one fast/explicit switch: the fused kernel, or (explicit, or weights asked for) the
    written-out attention, whose weights are kept in `layer.last_weights`. Dropout on the weights
    while training. `is_causal` (as in PyTorch's nn.MultiheadAttention) says that `mask` is the
    plain causal mask (L, L): the kernel then masks by itself instead of reading the mask.
    """
    L_q, L_k = q.shape[2], k.shape[2]
    if mask is not None:
        require_bool_mask(mask, (q.shape[0], layer.n_heads, L_q, L_k), "(B, h, L_q, L_k) =")
    if is_causal and (mask is None or L_q != L_k or tuple(mask.shape) != (L_q, L_k)):
        got = "no mask" if mask is None else f"a mask of shape {tuple(mask.shape)}"
        raise ValueError(
            f"is_causal=True says the mask is the causal mask (L, L) = ({L_q}, {L_q}) for "
            f"{L_q} queries and {L_k} keys, got {got}: pass is_causal=True only with "
            "causal_mask(L) itself (no padding, no cache)"
        )
    p = layer.dropout.p if layer.training else 0.0
    if need_weights or layer.explicit:
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        layer.last_weights = weights.detach()
        if p:
            out = layer.dropout(weights) @ v
    else:
        out, weights = fused_attention(q, k, v, mask, dropout_p=p, is_causal=is_causal), None
    out = layer.w_o(merge_heads(out))  # Concat(heads) W^O
    return (out, weights) if need_weights else out
