"""Lesson 01 — the limits of recurrent networks.

An RNN reads a sequence one step at a time:

    h_t = tanh(x_t W_xhᵀ + b_xh + h_{t-1} W_hhᵀ + b_hh)

Two problems follow. (1) Linear interaction distance: information from token s reaches token t
only after t - s applications of the recurrence, and gradients shrink or explode along the way.
(2) No parallelism across time: step t cannot start before step t - 1 has finished, so a
sequence of length n needs n sequential steps whatever the hardware.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._validate import require_ndim


class RNN(nn.Module):
    """A single-layer tanh RNN, written as the step loop (parameters map onto nn.RNN's).

    forward(x (B, L, d_in), h0 (B, d_hidden) or None) -> (outputs (B, L, d_hidden), h_L (B, d_hidden))
    """

    def __init__(self, d_in: int, d_hidden: int):
        super().__init__()
        self.d_in, self.d_hidden = d_in, d_hidden
        self.w_xh = nn.Linear(d_in, d_hidden)  # weight_ih_l0, bias_ih_l0
        self.w_hh = nn.Linear(d_hidden, d_hidden)  # weight_hh_l0, bias_hh_l0

    def forward(
        self, x: torch.Tensor, h0: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        require_ndim("x", x, 3, "(B, L, d_in)")
        B, L, d_in = x.shape
        if d_in != self.d_in:
            raise ValueError(f"x has d_in={d_in} but this RNN expects {self.d_in}")
        h = x.new_zeros(B, self.d_hidden) if h0 is None else h0
        outputs = []
        for t in range(L):  # the loop that cannot be parallelised over time
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        if not outputs:
            return x.new_zeros(B, 0, self.d_hidden), h
        return torch.stack(outputs, dim=1), h


def sequential_steps(kind: str, n: int, kernel_size: int = 3) -> int:
    """Minimum number of sequential operations for a layer to process n tokens (Vaswani et al., Table 1).

    rnn: n (one per token); attention: 1 (all pairs at once); conv: 1 per layer, but a stack needs
    ceil((n - 1) / (kernel_size - 1)) layers before the first and last token interact.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if kind == "rnn":
        return n
    if kind == "attention":
        return 1
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    raise ValueError(f"kind must be 'rnn', 'conv' or 'attention', got {kind!r}")


def max_path_length(kind: str, n: int, kernel_size: int = 3) -> int:
    """Longest path a signal travels between two of n positions: O(n), O(n/k) stacked, O(1)."""
    if kind == "rnn":
        return max(1, n - 1)
    return sequential_steps(kind, n, kernel_size)
