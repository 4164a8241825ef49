"""Lesson 01 (RNN limits): held-out set six, wrong and right implementations from the exercise text only."""

import math

import torch
from torch import nn

# ---------------------------------------------------------------- RNN


class _Base(nn.Module):
    def __init__(self, d_in, d_hidden):
        super().__init__()
        self.d_in, self.d_hidden = d_in, d_hidden
        self.w_xh = nn.Linear(d_in, d_hidden)
        self.w_hh = nn.Linear(d_hidden, d_hidden)


class RNNRight(_Base):
    """Right: zero state of x's dtype/device, loop over x[:, t], stack on dim=1."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = x.new_zeros(B, self.d_hidden) if h0 is None else h0
        outs = []
        for t in range(L):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outs.append(h)
        return torch.stack(outs, dim=1), h


class RNNRight2(_Base):
    """Right: input projections of all steps at once, functional linear for the state, preallocated output via index_copy-free cat."""

    def forward(self, x, h0=None):
        xs = self.w_xh(x)  # (B, L, H): the input part of every step, in parallel
        h = (
            h0
            if h0 is not None
            else torch.zeros(x.shape[0], self.d_hidden, dtype=x.dtype, device=x.device)
        )
        outs = []
        for x_t in xs.unbind(1):
            h = torch.tanh(x_t + torch.nn.functional.linear(h, self.w_hh.weight, self.w_hh.bias))
            outs.append(h.unsqueeze(1))
        return torch.cat(outs, dim=1), outs[-1][:, 0]


class RNNIgnoresH0(_Base):
    """Wrong: always starts from a zero state, ignoring a given h0."""

    def forward(self, x, h0=None):
        h = torch.zeros(x.shape[0], self.d_hidden, dtype=x.dtype)
        outs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outs.append(h)
        return torch.stack(outs, 1), h


class RNNReluNotTanh(_Base):
    """Wrong: uses relu as the nonlinearity instead of tanh."""

    def forward(self, x, h0=None):
        h = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0
        outs = []
        for t in range(x.shape[1]):
            h = torch.relu(self.w_xh(x[:, t]) + self.w_hh(h))
            outs.append(h)
        return torch.stack(outs, 1), h


class RNNReturnsFirstState(_Base):
    """Wrong: returns outputs[:, 0] (the first state) as h_L."""

    def forward(self, x, h0=None):
        h = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0
        outs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outs.append(h)
        out = torch.stack(outs, 1)
        return out, out[:, 0]


class RNNIncludesH0InOutputs(_Base):
    """Wrong: stacks h_0 with the states and drops the last one (outputs shifted by one step)."""

    def forward(self, x, h0=None):
        h = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0
        outs = []
        for t in range(x.shape[1]):
            outs.append(h)
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
        return torch.stack(outs, 1), h


class RNNTanhOnlyOnInput(_Base):
    """Wrong: tanh applied to the input term only, the recurrent term added outside it."""

    def forward(self, x, h0=None):
        h = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0
        outs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t])) + self.w_hh(h)
            outs.append(h)
        return torch.stack(outs, 1), h


class RNNReversedTime(_Base):
    """Wrong: loops over time from the last step to the first (range(L - 1, -1, -1))."""

    def forward(self, x, h0=None):
        h = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0
        outs = []
        for t in range(x.shape[1] - 1, -1, -1):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outs.append(h)
        return torch.stack(outs, 1), h


class RNNInPlaceH0(_Base):
    """Wrong: writes every new state into the caller's h0 in place (h.copy_), so outputs alias one tensor."""

    def forward(self, x, h0=None):
        h = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0
        outs = []
        with torch.no_grad():
            for t in range(x.shape[1]):
                h.copy_(torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h)))
                outs.append(h)
        return torch.stack(outs, 1), h


# ---------------------------------------------------------------- sequential_steps


def steps_right(kind, n, kernel_size=3):
    """Right: n, max(1, ceil((n-1)/(k-1))), 1; ValueError otherwise."""
    if kind == "rnn":
        return int(n)
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    if kind == "attention":
        return 1
    raise ValueError(f"unknown kind {kind!r}")


def steps_right2(kind, n, kernel_size=3):
    """Right: integer ceiling division -(-a // b), a dict dispatch."""
    table = {
        "rnn": lambda: n,
        "conv": lambda: max(1, -(-(n - 1) // (kernel_size - 1))),
        "attention": lambda: 1,
    }
    if kind not in table:
        raise ValueError(kind)
    return int(table[kind]())


def steps_floor_division(kind, n, kernel_size=3):
    """Wrong: integer division (n - 1) // (k - 1) rounds down, not up."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, (n - 1) // (kernel_size - 1))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_returns_float(kind, n, kernel_size=3):
    """Wrong: returns the float (n-1)/(k-1) rounded with round(), not math.ceil."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, round((n - 1) / (kernel_size - 1)))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_ignores_kernel(kind, n, kernel_size=3):
    """Wrong: hard-codes k = 3 (divides by 2), ignoring the kernel_size argument."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, math.ceil((n - 1) / 2))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_rnn_minus_one(kind, n, kernel_size=3):
    """Wrong: counts n - 1 steps for the RNN (the path length, not the step count)."""
    if kind == "rnn":
        return n - 1
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_conv_no_floor_of_one(kind, n, kernel_size=3):
    """Wrong: forgets 'at least one layer' - a single token gives 0 conv steps."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return math.ceil((n - 1) / (kernel_size - 1))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_unknown_returns_none(kind, n, kernel_size=3):
    """Wrong: an unknown kind returns None instead of raising ValueError."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    if kind == "attention":
        return 1
    return None


def steps_log_attention(kind, n, kernel_size=3):
    """Wrong: attention counted as ceil(log2 n) steps (a tree), not 1."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    if kind == "attention":
        return max(1, math.ceil(math.log2(n)))
    raise ValueError(kind)


# ---------------------------------------------------------------- practice answers
# "John,"=0 the=1 artist=2 who=3 has=4 painted=5 many=6 murals=7 in=8 "Vienna,"=9 is=10 visiting=11

JOHN_RIGHT = {"answer": "B", "rnn_steps": 11, "attention_layers": 1}
JOHN_RIGHT2 = {"attention_layers": 1, "rnn_steps": 11, "answer": "b"}

DROP_RIGHT = "ACE"
DROP_RIGHT2 = "ECA"

LSTM_RIGHT = "B"
LSTM_RIGHT2 = "b"

WRONG = {
    "RNN": [
        RNNIgnoresH0,
        RNNReluNotTanh,
        RNNReturnsFirstState,
        RNNIncludesH0InOutputs,
        RNNTanhOnlyOnInput,
        RNNReversedTime,
        RNNInPlaceH0,
    ],
    "sequential_steps": [
        steps_floor_division,
        steps_returns_float,
        steps_ignores_kernel,
        steps_rnn_minus_one,
        steps_conv_no_floor_of_one,
        steps_unknown_returns_none,
        steps_log_attention,
    ],
    "practice_john": [
        {"answer": "B", "rnn_steps": 10, "attention_layers": 1},  # counts only the words in between
        {"answer": "B", "rnn_steps": 12, "attention_layers": 1},  # counts both end words
        {
            "answer": "B",
            "rnn_steps": 11,
            "attention_layers": 11,
        },  # attention counted like recurrence
        {"answer": "A", "rnn_steps": 11, "attention_layers": 1},  # the nearer place name
        {"answer": "B", "rnn_steps": 16, "attention_layers": 1},  # the whole sentence, 16 words
        {"answer": "B", "rnn_steps": 9, "attention_layers": 1},  # counted to "Vienna," only
    ],
    "practice_drop_in": [
        "AE",  # forgets C: attention's weighted average of linear maps is still linear
        "ACDE",  # also D: attention is parallel over positions, sequential_steps says 1
        "ABCE",  # also B: one layer connects any two positions
        "AC",  # forgets E, the causal barrier
        "CE",  # forgets A, order
        "A",  # only the first barrier
    ],
    "practice_lstm": [
        "A",  # fewer operations: n^2 d can exceed n d^2
        "C",  # fewer parameters
        "D",  # word order: attention has none without positions
        "BD",  # two letters where one is asked
    ],
}
RIGHT = {
    "RNN": RNNRight,
    "sequential_steps": steps_right,
    "practice_john": JOHN_RIGHT,
    "practice_drop_in": DROP_RIGHT,
    "practice_lstm": LSTM_RIGHT,
}
RIGHT2 = {
    "RNN": RNNRight2,
    "sequential_steps": steps_right2,
    "practice_john": JOHN_RIGHT2,
    "practice_drop_in": DROP_RIGHT2,
    "practice_lstm": LSTM_RIGHT2,
}
