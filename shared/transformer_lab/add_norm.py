"""Lesson 05 — Add & Norm, the feed-forward network, and the encoder block.

Residual connection: y = x + Sublayer(x). Its Jacobian is I + ∂Sublayer/∂x, so gradients always
have the identity path (the "+1") through a deep stack.

Layer normalisation normalises each position's feature vector (the last axis) on its own:

    LayerNorm(x) = γ ⊙ (x - μ) / sqrt(σ² + ε) + β,   μ, σ² over the d_model features (biased σ²)

Unlike BatchNorm it needs no statistics across the batch, so it works the same for one sequence
or many, and for any length.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import require_last_dim, require_min_ndim
from .multihead import MultiHeadAttention

ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,  # exact (erf) GELU: BERT, BART, ViT
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2's "gelu_new"
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),  # OpenAI CLIP's
}


class LayerNorm(nn.Module):
    """Same parameters (`weight` γ, `bias` β) and `state_dict` as nn.LayerNorm(d_model, eps).

    The forward pass below is the formula. Like MultiHeadAttention, it has one switch, `explicit`:
    False (the default) lets PyTorch's fused kernel compute the same thing faster; True on an
    instance (or see `set_explicit`) runs the formula as written (the tests prove both equal).
    """

    explicit = False  # True: the written-out formula below instead of the fused kernel

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        require_min_ndim("x", x, 1, "(..., d_model)")
        require_last_dim("x", x, self.d_model, "d_model of this LayerNorm")
        if not self.explicit and self.d_model > 1:  # the same numbers from one fused kernel
            # (at d_model = 1 every x equals its mean: the formula's gradient is exactly 0, the
            # kernel's is rounding noise times 1/sqrt(eps), so the formula runs there)
            return F.layer_norm(x, (self.d_model,), self.weight, self.bias, self.eps)
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)  # biased, as nn.LayerNorm
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"


class FeedForward(nn.Module):
    """Position-wise FFN(x) = w_2(act(w_1(x))), applied to every position independently."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(self.dropout(ACTIVATIONS[self.activation](self.w_1(x))))


class EncoderBlock(nn.Module):
    """Self-attention and FFN, each wrapped in a residual connection and a LayerNorm.

    post-norm (the 2017 paper, BERT):  x = norm1(x + attn(x));  x = norm2(x + ffn(x))
    pre-norm  (ViT):                   x = x + attn(norm1(x));  x = x + ffn(norm2(x))

    forward(x (B, L, d_model), mask=None) -> (B, L, d_model)

    The block's parts are passed in: `attention`, `norm` and `ffn` are the classes it builds its
    sublayers from (the reference ones by default; a model passes the ones of its `Parts`).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        eps: float = 1e-5,
        *,
        attention: type[nn.Module] = MultiHeadAttention,
        norm: type[nn.Module] = LayerNorm,
        ffn: type[nn.Module] = FeedForward,
    ):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = attention(d_model, n_heads, dropout=dropout)
        self.ffn = ffn(d_model, d_ff, activation, dropout)
        self.norm1 = norm(d_model, eps)
        self.norm2 = norm(d_model, eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, cache=None
    ) -> torch.Tensor:
        if self.norm_first:
            x = x + self.dropout1(self.self_attn(self.norm1(x), mask=mask, cache=cache))
            x = x + self.dropout2(self.ffn(self.norm2(x)))
        else:
            x = self.norm1(x + self.dropout1(self.self_attn(x, mask=mask, cache=cache)))
            x = self.norm2(x + self.dropout2(self.ffn(x)))
        return x


def set_explicit(model: nn.Module, explicit: bool = True) -> nn.Module:
    """Set the one fast/explicit switch on every part of `model` that has it (MultiHeadAttention,
    LayerNorm): True runs the written-out formulas, False (the default) the fused kernels."""
    for module in model.modules():
        if hasattr(module, "explicit"):
            module.explicit = explicit
    return model
