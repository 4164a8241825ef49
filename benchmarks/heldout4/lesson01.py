"""Lesson 01 (RNN limits): held-out wrong and right implementations, from the exercise text only."""

import math

import numpy as np
import torch
from torch import nn


def _answer(value, name, doc):
    """A practice answer (a str or a dict) that carries a __name__ and a one-line __doc__."""
    base = str if isinstance(value, str) else dict
    cls = type(name, (base,), {"__doc__": doc})
    obj = cls(value)
    obj.__name__ = name
    return obj


# ---------------------------------------------------------------- RNN


class _RNNBase(nn.Module):
    def __init__(self, d_in, d_hidden):
        super().__init__()
        self.d_in, self.d_hidden = d_in, d_hidden
        self.w_xh = nn.Linear(d_in, d_hidden)
        self.w_hh = nn.Linear(d_hidden, d_hidden)

    def _h0(self, x, h0):
        if h0 is not None:
            return h0
        return x.new_zeros(x.shape[0], self.d_hidden)


class RNNLoop(_RNNBase):
    """Right: a for loop over x[:, t], the state reassigned, torch.stack(dim=1)."""

    def forward(self, x, h0=None):
        h = self._h0(x, h0)
        outputs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNUnbindPrealloc(_RNNBase):
    """Right: the input projection of every step at once, x.unbind(1), outputs gathered with cat."""

    def forward(self, x, h0=None):
        B = x.shape[0]
        h = h0 if h0 is not None else torch.zeros(B, self.d_hidden, dtype=x.dtype, device=x.device)
        xw = self.w_xh(x)  # (B, L, d_hidden): every x_t W_xh^T + b_xh, no time dependence
        outs = []
        for x_t in xw.unbind(1):
            h = torch.tanh(x_t + h @ self.w_hh.weight.T + self.w_hh.bias)
            outs.append(h.unsqueeze(1))
        return torch.cat(outs, dim=1), outs[-1].squeeze(1)


class RNNNoTanh(_RNNBase):
    """Wrong: no tanh, the recurrence is linear."""

    def forward(self, x, h0=None):
        h = self._h0(x, h0)
        outputs = []
        for t in range(x.shape[1]):
            h = self.w_xh(x[:, t]) + self.w_hh(h)
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNTanhOnlyHidden(_RNNBase):
    """Wrong: the tanh wraps only the hidden-to-hidden term, the input term is added after it."""

    def forward(self, x, h0=None):
        h = self._h0(x, h0)
        outputs = []
        for t in range(x.shape[1]):
            h = self.w_xh(x[:, t]) + torch.tanh(self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNDetachState(_RNNBase):
    """Wrong: the state is detached between steps (truncated backprop), so gradients stop at one step."""

    def forward(self, x, h0=None):
        h = self._h0(x, h0)
        outputs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h.detach()))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNNoBiases(_RNNBase):
    """Wrong: uses the weight matrices by hand and forgets both biases b_xh and b_hh."""

    def forward(self, x, h0=None):
        h = self._h0(x, h0)
        outputs = []
        for t in range(x.shape[1]):
            h = torch.tanh(x[:, t] @ self.w_xh.weight.T + h @ self.w_hh.weight.T)
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNUntransposedHidden(_RNNBase):
    """Wrong: h @ W_hh instead of h @ W_hh^T (only the square matrix, so no shape error)."""

    def forward(self, x, h0=None):
        h = self._h0(x, h0)
        outputs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t]) + h @ self.w_hh.weight + self.w_hh.bias)
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNShiftedOutputs(_RNNBase):
    """Wrong: outputs holds the state *before* each step (h_0 .. h_{L-1}), not h_1 .. h_L."""

    def forward(self, x, h0=None):
        h = self._h0(x, h0)
        outputs = []
        for t in range(x.shape[1]):
            outputs.append(h)
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
        return torch.stack(outputs, dim=1), h


class RNNFirstStateReturned(_RNNBase):
    """Wrong: returns outputs[:, 0] (the first state) as h_L."""

    def forward(self, x, h0=None):
        h = self._h0(x, h0)
        outputs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        out = torch.stack(outputs, dim=1)
        return out, out[:, 0]


class RNNZerosSizedByInput(_RNNBase):
    """Wrong: the default h0 is sized (B, d_in) instead of (B, d_hidden)."""

    def forward(self, x, h0=None):
        h = h0 if h0 is not None else x.new_zeros(x.shape[0], self.d_in)
        outputs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNReversedTime(_RNNBase):
    """Wrong: loops over time backwards (reversed(range(L))), reading the sequence from the end."""

    def forward(self, x, h0=None):
        h = self._h0(x, h0)
        outputs = []
        for t in reversed(range(x.shape[1])):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


# ---------------------------------------------------------------- sequential_steps


def steps_if(kind, n, kernel_size=3):
    """Right: an if chain with math.ceil and max(1, ...)."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    if kind == "attention":
        return 1
    raise ValueError(f"unknown kind {kind!r}")


def steps_loop(kind, n, kernel_size=3):
    """Right: a dict of rules; conv counts layers until the window covers the sequence."""
    if kind not in ("rnn", "conv", "attention"):
        raise ValueError(f"kind must be rnn, conv or attention, not {kind!r}")
    if kind == "conv":
        layers, span = 1, kernel_size
        while span < n:
            layers += 1
            span += kernel_size - 1
        return layers
    return {"rnn": n, "attention": 1}[kind]


def steps_conv_n_over(kind, n, kernel_size=3):
    """Wrong: conv uses ceil(n / (k - 1)) instead of ceil((n - 1) / (k - 1))."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, math.ceil(n / (kernel_size - 1)))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_floor(kind, n, kernel_size=3):
    """Wrong: integer division (floor) where the ceiling belongs."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, (n - 1) // (kernel_size - 1))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_numpy_float(kind, n, kernel_size=3):
    """Wrong: np.ceil returns a float (2.0), not an int."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1.0, np.ceil((n - 1) / (kernel_size - 1)))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_no_error(kind, n, kernel_size=3):
    """Wrong: an unknown kind returns None instead of raising ValueError."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    if kind == "attention":
        return 1
    return None


def steps_rnn_minus_one(kind, n, kernel_size=3):
    """Wrong: the RNN needs n - 1 steps (counts transitions, not steps)."""
    if kind == "rnn":
        return n - 1
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_kernel_ignored(kind, n, kernel_size=3):
    """Wrong: kernel_size is ignored, the window always grows by 2."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, math.ceil((n - 1) / 2))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_log_conv(kind, n, kernel_size=3):
    """Wrong: conv as a tree (dilated convolutions): ceil(log_k n) layers."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, math.ceil(math.log(n, kernel_size)))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_single_token_zero(kind, n, kernel_size=3):
    """Wrong: a single token needs no conv layer (returns 0 for n = 1)."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return math.ceil((n - 1) / (kernel_size - 1))
    if kind == "attention":
        return 1
    raise ValueError(kind)


# ---------------------------------------------------------------- practice answers

JOHN_RIGHT = _answer(
    {"answer": "B", "rnn_steps": 11, "attention_layers": 1},
    "john_right",
    "Right: New York; visiting is word 11 after John, so 11 steps; one attention layer.",
)
JOHN_RIGHT2 = _answer(
    {"attention_layers": 1, "rnn_steps": 11, "answer": "B"},
    "john_right2",
    "Right: the same answer, keys in another order.",
)

WRONG_JOHN = [
    _answer(
        {"answer": "A", "rnn_steps": 11, "attention_layers": 1},
        "john_vienna",
        "Wrong: Vienna, the nearer place name.",
    ),
    _answer(
        {"answer": "B", "rnn_steps": 12, "attention_layers": 1},
        "john_both_ends",
        "Wrong: 12 steps, the words from John to visiting counted with both ends.",
    ),
    _answer(
        {"answer": "B", "rnn_steps": 10, "attention_layers": 1},
        "john_between",
        "Wrong: 10 steps, only the words between John and visiting.",
    ),
    _answer(
        {"answer": "B", "rnn_steps": 13, "attention_layers": 1},
        "john_commas_split",
        "Wrong: 13 steps, the commas counted as tokens of their own (not sentence.split()).",
    ),
    _answer(
        {"answer": "B", "rnn_steps": 11, "attention_layers": 11},
        "john_attention_like_rnn",
        "Wrong: attention counted like recurrence, one layer per step.",
    ),
    _answer(
        {"answer": "B", "rnn_steps": 16, "attention_layers": 1},
        "john_whole_sentence",
        "Wrong: 16, the whole sentence's words.",
    ),
    _answer(
        {"answer": "B", "rnn_steps": 11, "attention_layers": 0},
        "john_attention_zero",
        "Wrong: zero attention layers (attention 'needs no steps').",
    ),
]

WRONG_DROP_IN = [
    _answer("AE", "drop_in_no_c", "Wrong: C (no elementwise nonlinearity) left out."),
    _answer("ACDE", "drop_in_d", "Wrong: D chosen, but attention is computed in parallel."),
    _answer("ABCE", "drop_in_b", "Wrong: B chosen, but one layer connects any two words."),
    _answer("AC", "drop_in_no_e", "Wrong: E (seeing the future) left out."),
    _answer("CE", "drop_in_no_a", "Wrong: A (no notion of order) left out."),
    _answer("BD", "drop_in_rnn_claims", "Wrong: the two claims the measurements refute."),
]

WRONG_LSTM = [
    _answer("A", "lstm_fewer_ops", "Wrong: fewer operations (attention is O(n^2 d))."),
    _answer("C", "lstm_fewer_params", "Wrong: fewer parameters."),
    _answer("D", "lstm_word_order", "Wrong: better word order (attention has none by itself)."),
    _answer("AB", "lstm_two_letters", "Wrong: two letters where one is asked for."),
]

WRONG = {
    "RNN": [
        RNNNoTanh,
        RNNTanhOnlyHidden,
        RNNDetachState,
        RNNNoBiases,
        RNNUntransposedHidden,
        RNNShiftedOutputs,
        RNNFirstStateReturned,
        RNNZerosSizedByInput,
        RNNReversedTime,
    ],
    "sequential_steps": [
        steps_conv_n_over,
        steps_floor,
        steps_numpy_float,
        steps_no_error,
        steps_rnn_minus_one,
        steps_kernel_ignored,
        steps_log_conv,
        steps_single_token_zero,
    ],
    "practice_john": WRONG_JOHN,
    "practice_drop_in": WRONG_DROP_IN,
    "practice_lstm": WRONG_LSTM,
}

RIGHT = {
    "RNN": RNNLoop,
    "sequential_steps": steps_if,
    "practice_john": JOHN_RIGHT,
    "practice_drop_in": _answer("ACE", "drop_in_right", "Right: A, C and E."),
    "practice_lstm": _answer("B", "lstm_right", "Right: easier to parallelise."),
}

RIGHT2 = {
    "RNN": RNNUnbindPrealloc,
    "sequential_steps": steps_loop,
    "practice_john": JOHN_RIGHT2,
    "practice_drop_in": _answer(
        "ECA", "drop_in_right2", "Right: the same letters in another order."
    ),
    "practice_lstm": _answer("B", "lstm_right2", "Right: B."),
}
