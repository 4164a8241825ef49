"""Lesson 01 (RNN limits): held-out wrong and right implementations, written from the exercise text."""

import math

import torch
from torch import nn


def _answer(base, value, name, doc):
    """A practice answer (a dict, str or float) that carries a name and a one-line docstring."""
    cls = type(name, (base,), {"__doc__": doc})
    obj = cls(value)
    obj.__name__ = name
    return obj


class _RNNBase(nn.Module):
    def __init__(self, d_in, d_hidden):
        super().__init__()
        self.d_in, self.d_hidden = d_in, d_hidden
        self.w_xh = nn.Linear(d_in, d_hidden)
        self.w_hh = nn.Linear(d_hidden, d_hidden)


# ---------------------------------------------------------------- RNN: right


class RNNLoopStack(_RNNBase):
    """Right: a for loop over x[:, t], a list of states stacked along dim=1."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = x.new_zeros(B, self.d_hidden) if h0 is None else h0
        outputs = []
        for t in range(L):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNPreallocated(_RNNBase):
    """Right: the formula written with the weight matrices, states written into a preallocated tensor."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = torch.zeros(B, self.d_hidden, dtype=x.dtype, device=x.device) if h0 is None else h0
        outputs = x.new_empty(B, L, self.d_hidden)
        w_xh, b_xh = self.w_xh.weight, self.w_xh.bias
        w_hh, b_hh = self.w_hh.weight, self.w_hh.bias
        for t in range(L):
            h = torch.tanh(x[:, t] @ w_xh.T + b_xh + h @ w_hh.T + b_hh)
            outputs[:, t] = h
        return outputs, h


# ---------------------------------------------------------------- RNN: wrong


class RNNZerosDefaultDtype(_RNNBase):
    """Wrong: h0 defaults to torch.zeros(B, d_hidden), float32 whatever the dtype of x."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = torch.zeros(B, self.d_hidden) if h0 is None else h0
        outputs = []
        for t in range(L):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNTanhMisplaced(_RNNBase):
    """Wrong: a misplaced parenthesis, tanh wraps only the input term: tanh(W_xh x_t + b) + W_hh h."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = x.new_zeros(B, self.d_hidden) if h0 is None else h0
        outputs = []
        for t in range(L):
            h = torch.tanh(self.w_xh(x[:, t])) + self.w_hh(h)
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNSkipsFirstStep(_RNNBase):
    """Wrong: the loop runs over range(1, L), so step 0 is never read (and outputs has L - 1 rows)."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = x.new_zeros(B, self.d_hidden) if h0 is None else h0
        outputs = []
        for t in range(1, L):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNNoHiddenBias(_RNNBase):
    """Wrong: the formula typed out with the weights, b_hh forgotten."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = x.new_zeros(B, self.d_hidden) if h0 is None else h0
        outputs = []
        for t in range(L):
            h = torch.tanh(x[:, t] @ self.w_xh.weight.T + self.w_xh.bias + h @ self.w_hh.weight.T)
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNLastStateWrongIndex(_RNNBase):
    """Wrong: h_L taken as outputs[-1], the last batch row of the (B, L, d) stack, not the last step."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = x.new_zeros(B, self.d_hidden) if h0 is None else h0
        outputs = []
        for t in range(L):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        outputs = torch.stack(outputs, dim=1)
        return outputs, outputs[-1]


class RNNInPlaceH0(_RNNBase):
    """Wrong: the state is updated in place with h.copy_(...), which overwrites the caller's h0."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = x.new_zeros(B, self.d_hidden) if h0 is None else h0
        outputs = []
        for t in range(L):
            h.copy_(torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h)))
            outputs.append(h.clone())
        return torch.stack(outputs, dim=1), h


# ---------------------------------------------------------------- sequential_steps


def steps_if_chain(kind, n, kernel_size=3):
    """Right: an if chain with math.ceil and max(1, ...)."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    if kind == "attention":
        return 1
    raise ValueError(f"unknown kind {kind!r}")


def steps_integer_ceil(kind, n, kernel_size=3):
    """Right: a dict of rules and an integer ceiling division, -(-a // b)."""
    rules = {
        "rnn": lambda: n,
        "conv": lambda: max(1, -(-(n - 1) // (kernel_size - 1))),
        "attention": lambda: 1,
    }
    if kind not in rules:
        raise ValueError(f"kind must be one of {sorted(rules)}, not {kind!r}")
    return int(rules[kind]())


def steps_conv_n_over(kind, n, kernel_size=3):
    """Wrong: the conv count is ceil(n / (k - 1)), n where n - 1 belongs."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, math.ceil(n / (kernel_size - 1)))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_conv_floor(kind, n, kernel_size=3):
    """Wrong: integer division (n - 1) // (k - 1) rounds down instead of up."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, (n - 1) // (kernel_size - 1))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_conv_no_minimum(kind, n, kernel_size=3):
    """Wrong: no 'at least one layer', so a single token needs 0 conv steps."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return math.ceil((n - 1) / (kernel_size - 1))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_rnn_path_length(kind, n, kernel_size=3):
    """Wrong: the RNN's count read off the table's path-length column, n - 1 steps."""
    if kind == "rnn":
        return n - 1
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_no_value_error(kind, n, kernel_size=3):
    """Wrong: an unknown kind falls through and returns None instead of raising ValueError."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    if kind == "attention":
        return 1


def steps_window_k(kind, n, kernel_size=3):
    """Wrong: the window is taken to grow by k per layer, ceil((n - 1) / k)."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, math.ceil((n - 1) / kernel_size))
    if kind == "attention":
        return 1
    raise ValueError(kind)


# ---------------------------------------------------------------- practice questions

_SENTENCE = (
    "John, the artist who has painted many murals in Vienna, is visiting New York this summer."
)
_WORDS = _SENTENCE.split()

john_right = _answer(
    dict,
    {"answer": "B", "rnn_steps": 11, "attention_layers": 1},
    "john_right",
    "Right: the counts written as numbers.",
)
john_right2 = _answer(
    dict,
    {
        "answer": "B",
        "rnn_steps": _WORDS.index("visiting") - _WORDS.index("John,"),
        "attention_layers": 1,
    },
    "john_right2",
    "Right: the step count computed from the word indices.",
)
john_wrong = [
    _answer(
        dict,
        {"answer": "A", "rnn_steps": 11, "attention_layers": 1},
        "john_vienna",
        "Wrong: answer A, the place name nearest to 'visiting'.",
    ),
    _answer(
        dict,
        {"answer": "B", "rnn_steps": 9, "attention_layers": 1},
        "john_clause_only",
        "Wrong: rnn_steps counts only the relative clause 'the ... Vienna,' (9 words).",
    ),
    _answer(
        dict,
        {"answer": "B", "rnn_steps": 12, "attention_layers": 1},
        "john_both_ends",
        "Wrong: rnn_steps counts the words from 'John,' to 'visiting' inclusive (12).",
    ),
    _answer(
        dict,
        {"answer": "New York", "rnn_steps": 11, "attention_layers": 1},
        "john_place_not_letter",
        "Wrong: the answer given as the place name 'New York', not the letter.",
    ),
    _answer(
        dict,
        {"answer": "B", "rnn_steps": 11, "attention_layers": 11},
        "john_attention_like_rnn",
        "Wrong: attention layers counted like recurrence steps (11).",
    ),
    _answer(
        dict,
        {"answer": "B", "rnn_steps": len(_WORDS), "attention_layers": 1},
        "john_sentence_length",
        "Wrong: rnn_steps is the length of the whole sentence (16 words).",
    ),
]

drop_in_right = _answer(str, "ACE", "drop_in_right", "Right: the three barriers, in order.")
drop_in_right2 = _answer(str, "ECA", "drop_in_right2", "Right: the same letters in another order.")
drop_in_wrong = [
    _answer(str, "AE", "drop_in_forgot_c", "Wrong: C left out (the missing nonlinearity)."),
    _answer(
        str, "ABCE", "drop_in_plus_b", "Wrong: B added (distance is no barrier for attention)."
    ),
    _answer(str, "A", "drop_in_only_order", "Wrong: only A, the order problem."),
    _answer(
        str, "ACDE", "drop_in_plus_d", "Wrong: D added (attention is parallel over positions)."
    ),
    _answer(str, "CE", "drop_in_forgot_a", "Wrong: A left out (no notion of order)."),
]

lstm_right = _answer(str, "B", "lstm_right", "Right: B, as a literal.")
lstm_right2 = _answer(str, "ABCD"[1], "lstm_right2", "Right: B, picked from the list of letters.")
lstm_wrong = [
    _answer(str, "A", "lstm_fewer_ops", "Wrong: A, fewer operations."),
    _answer(str, "C", "lstm_fewer_params", "Wrong: C, fewer parameters."),
    _answer(str, "D", "lstm_word_order", "Wrong: D, better word order."),
    _answer(str, "AB", "lstm_two_letters", "Wrong: two letters where one is asked for."),
]


WRONG = {
    "RNN": [
        RNNZerosDefaultDtype,
        RNNTanhMisplaced,
        RNNSkipsFirstStep,
        RNNNoHiddenBias,
        RNNLastStateWrongIndex,
        RNNInPlaceH0,
    ],
    "sequential_steps": [
        steps_conv_n_over,
        steps_conv_floor,
        steps_conv_no_minimum,
        steps_rnn_path_length,
        steps_no_value_error,
        steps_window_k,
    ],
    "practice_john": john_wrong,
    "practice_drop_in": drop_in_wrong,
    "practice_lstm": lstm_wrong,
}
RIGHT = {
    "RNN": RNNLoopStack,
    "sequential_steps": steps_if_chain,
    "practice_john": john_right,
    "practice_drop_in": drop_in_right,
    "practice_lstm": lstm_right,
}
RIGHT2 = {
    "RNN": RNNPreallocated,
    "sequential_steps": steps_integer_ceil,
    "practice_john": john_right2,
    "practice_drop_in": drop_in_right2,
    "practice_lstm": lstm_right2,
}
