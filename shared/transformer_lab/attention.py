"""Lesson 02 — QKV attention.

Attention is a soft lookup table. Each query is compared with every key; the similarities,
scaled by 1/sqrt(d_k) and normalised by a softmax, weight an average of the values:

    Attention(Q, K, V) = softmax(Q Kᵀ / sqrt(d_k)) V

Why sqrt(d_k)? If the entries of q and k are independent with mean 0 and variance 1, the dot
product q·k is a sum of d_k such products, so its variance is d_k. Dividing by sqrt(d_k) brings
the variance back to 1 and keeps the softmax out of its saturated, near-one-hot regime where
gradients vanish.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import require_bool_mask, require_min_ndim, require_qkv


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q kᵀ / sqrt(d_k)) v, written out.

    Args:
        q: queries, (..., L_q, d_k)
        k: keys, (..., L_k, d_k)
        v: values, (..., L_k, d_v)
        mask: optional bool tensor broadcastable to (..., L_q, L_k); True means "may attend".
            A query row with no allowed key gets all-zero weights (and a zero output).

    Returns:
        output (..., L_q, d_v) and the attention weights (..., L_q, L_k); each row of weights sums to 1.
    """
    require_qkv(q, k, v)
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., L_q, L_k)
    if mask is not None:
        require_bool_mask(mask, tuple(scores.shape), "the scores q @ kᵀ of shape")
        scores = scores.masked_fill(~mask, float("-inf"))  # -inf before the softmax: weight 0
    weights = torch.softmax(scores, dim=-1)  # normalise over the keys
    if mask is not None:
        weights = weights.nan_to_num(0.0)  # rows where every key was masked
    return weights @ v, weights


def fused_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
) -> torch.Tensor:
    """The same computation through PyTorch's fused kernel (no weights returned).

    Used by the model classes when nobody asks for the attention weights; the tests prove it
    equal to `scaled_dot_product_attention`. With is_causal the caller promises that `mask` is
    the causal mask (L, L): the kernel masks by itself (faster) and does not read it.

    A query whose keys are all masked gets a zero output, as in the written-out version, on
    every device: PyTorch's kernels disagree on such rows (the CPU kernel gives zeros, a CUDA
    kernel may give NaN, and NaN in its backward reaches every key's gradient), so those rows
    attend to every key inside the kernel and their output is then set to zero.
    """
    if is_causal:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    dead = ~mask.any(dim=-1, keepdim=True)  # (..., L_q, 1): queries with no key to attend to
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | dead, dropout_p=dropout_p)
    return out.masked_fill(dead, 0.0)


class SelfAttention(nn.Module):
    """Single-head self-attention: Q = X W^Q, K = X W^K, V = X W^V, then attention.

    x: (B, L, d_model) -> (B, L, d_v). `last_weights` holds the (B, L, L) weights of the last call.
    """

    def __init__(
        self, d_model: int, d_k: int | None = None, d_v: int | None = None, bias: bool = False
    ):
        super().__init__()
        d_k = d_k or d_model
        d_v = d_v or d_model
        self.d_model, self.d_k, self.d_v = d_model, d_k, d_v
        self.w_q = nn.Linear(d_model, d_k, bias=bias)
        self.w_k = nn.Linear(d_model, d_k, bias=bias)
        self.w_v = nn.Linear(d_model, d_v, bias=bias)
        self.last_weights: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        require_min_ndim("x", x, 2, "(B, L, d_model)")
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x has d_model={x.shape[-1]} but this layer expects {self.d_model}")
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        out, self.last_weights = scaled_dot_product_attention(q, k, v, mask)
        return out
