"""Lesson 01: the RNN step loop and sequential_steps."""

import math

import torch
from torch import nn


class _RNNBase(nn.Module):
    def __init__(self, d_in, d_hidden):
        super().__init__()
        self.d_in, self.d_hidden = d_in, d_hidden
        self.w_xh = nn.Linear(d_in, d_hidden)
        self.w_hh = nn.Linear(d_hidden, d_hidden)

    def _h0(self, x, h0):
        return x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0


class RNNRight(_RNNBase):
    """Correct."""

    def forward(self, x, h0=None):
        h = self._h0(x, h0)
        outs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outs.append(h)
        return torch.stack(outs, dim=1), h


class RNNRecordsPrevious(_RNNBase):
    """Records h_{t-1} (the state before the step) instead of h_t."""

    def forward(self, x, h0=None):
        h = self._h0(x, h0)
        outs = []
        for t in range(x.shape[1]):
            outs.append(h)
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
        return torch.stack(outs, dim=1), h


class RNNNoTanh(_RNNBase):
    """Forgets the tanh: a linear recurrence."""

    def forward(self, x, h0=None):
        h = self._h0(x, h0)
        outs = []
        for t in range(x.shape[1]):
            h = self.w_xh(x[:, t]) + self.w_hh(h)
            outs.append(h)
        return torch.stack(outs, dim=1), h


class RNNTanhOnInputOnly(_RNNBase):
    """Applies tanh to the input term only, then adds the hidden term."""

    def forward(self, x, h0=None):
        h = self._h0(x, h0)
        outs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t])) + self.w_hh(h)
            outs.append(h)
        return torch.stack(outs, dim=1), h


class RNNReturnsFirstState(_RNNBase):
    """Returns outputs[:, 0] as the final state instead of the last one."""

    def forward(self, x, h0=None):
        h = self._h0(x, h0)
        outs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outs.append(h)
        out = torch.stack(outs, dim=1)
        return out, out[:, 0]


class RNNReversedTime(_RNNBase):
    """Loops over time backwards (last step first)."""

    def forward(self, x, h0=None):
        h = self._h0(x, h0)
        outs = []
        for t in reversed(range(x.shape[1])):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outs.append(h)
        return torch.stack(outs[::-1], dim=1), h


def sequential_steps_right(kind, n, kernel_size=3):
    """Correct."""
    if kind == "rnn":
        return n
    if kind == "attention":
        return 1
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    raise ValueError(f"unknown kind {kind!r}")


def steps_conv_divides_by_k(kind, n, kernel_size=3):
    """Window grows by k rather than k - 1."""
    if kind == "conv":
        return max(1, math.ceil((n - 1) / kernel_size))
    return sequential_steps_right(kind, n, kernel_size)


def steps_conv_floor(kind, n, kernel_size=3):
    """Integer division (floor) instead of ceil for conv."""
    if kind == "conv":
        return max(1, (n - 1) // (kernel_size - 1))
    return sequential_steps_right(kind, n, kernel_size)


def steps_single_token_zero(kind, n, kernel_size=3):
    """Forgets the 'at least one layer': conv with n = 1 gives 0."""
    if kind == "conv":
        return math.ceil((n - 1) / (kernel_size - 1))
    return sequential_steps_right(kind, n, kernel_size)


def steps_rnn_n_minus_1(kind, n, kernel_size=3):
    """RNN needs n - 1 steps (counts transitions, not steps)."""
    if kind == "rnn":
        return n - 1
    return sequential_steps_right(kind, n, kernel_size)


def steps_unknown_returns_none(kind, n, kernel_size=3):
    """Returns None for an unknown kind instead of raising ValueError."""
    if kind in ("rnn", "conv", "attention"):
        return sequential_steps_right(kind, n, kernel_size)
    return None


def steps_returns_float(kind, n, kernel_size=3):
    """Conv answer is a float ((n - 1) / (k - 1) rounded up with -(-a // b) on floats)."""
    if kind == "conv":
        return max(1.0, -(-(n - 1) // (kernel_size - 1.0)))
    return sequential_steps_right(kind, n, kernel_size)


WRONG = {
    "RNN": [
        RNNRecordsPrevious,
        RNNNoTanh,
        RNNTanhOnInputOnly,
        RNNReturnsFirstState,
        RNNReversedTime,
    ],
    "sequential_steps": [
        steps_conv_divides_by_k,
        steps_conv_floor,
        steps_single_token_zero,
        steps_rnn_n_minus_1,
        steps_unknown_returns_none,
        steps_returns_float,
    ],
}
RIGHT = {"RNN": RNNRight, "sequential_steps": sequential_steps_right}
