"""Lesson 01 (RNN limits): held-out wrong and right implementations, from the exercise text only."""

import math

import torch
from torch import nn


def _answer(base, value, name, doc):
    """A practice answer (a dict, str or float) that carries a name and a one-line docstring."""
    cls = type(name, (base,), {"__doc__": doc})
    obj = cls(value)
    obj.__name__ = name
    return obj


# ---------------------------------------------------------------- RNN


class _RNNBase(nn.Module):
    """The given __init__ of the exercise."""

    def __init__(self, d_in, d_hidden):
        super().__init__()
        self.d_in, self.d_hidden = d_in, d_hidden
        self.w_xh = nn.Linear(d_in, d_hidden)
        self.w_hh = nn.Linear(d_hidden, d_hidden)


class RNNLoopStack(_RNNBase):
    """Right: a for loop over x[:, t], the states collected in a list and stacked on dim 1."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = h0 if h0 is not None else x.new_zeros(B, self.d_hidden)
        outputs = []
        for t in range(L):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNUnbindPrecompute(_RNNBase):
    """Right: the input projection of all steps at once, then a loop over unbind(1)."""

    def forward(self, x, h0=None):
        xw = self.w_xh(x)  # (B, L, d_hidden): no time dependence, so all at once
        if h0 is None:
            h0 = torch.zeros(x.shape[0], self.d_hidden, dtype=x.dtype, device=x.device)
        h = h0
        states = []
        for x_t in xw.unbind(1):
            h = torch.tanh(x_t + self.w_hh(h))
            states.append(h.unsqueeze(1))
        return torch.cat(states, dim=1), states[-1].squeeze(1)


class RNNRecordsPrevious(_RNNBase):
    """Appends h to the outputs before updating it, so outputs holds h_0 .. h_{L-1}."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = h0 if h0 is not None else x.new_zeros(B, self.d_hidden)
        outputs = []
        for t in range(L):
            outputs.append(h)
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
        return torch.stack(outputs, dim=1), h


class RNNFloat32State(_RNNBase):
    """h_0 made with torch.zeros(B, d_hidden): float32 whatever the input's dtype."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = h0 if h0 is not None else torch.zeros(B, self.d_hidden)
        outputs = []
        for t in range(L):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNSkipsLastStep(_RNNBase):
    """Loops over range(L - 1), so the last input is never read."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = h0 if h0 is not None else x.new_zeros(B, self.d_hidden)
        outputs = []
        for t in range(L - 1):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNLoopsOverBatch(_RNNBase):
    """Loops over range(len(x)), the batch size, instead of the sequence length."""

    def forward(self, x, h0=None):
        h = h0 if h0 is not None else x.new_zeros(x.shape[0], self.d_hidden)
        outputs = []
        for t in range(len(x)):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNDetachesState(_RNNBase):
    """Detaches h after every step (truncated backprop habit): forward right, gradients wrong."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = h0 if h0 is not None else x.new_zeros(B, self.d_hidden)
        outputs = []
        for t in range(L):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
            h = h.detach()
        return torch.stack(outputs, dim=1), h


class RNNTanhOnRecurrenceOnly(_RNNBase):
    """Puts the tanh around the recurrent term only: h = w_xh(x_t) + tanh(w_hh(h))."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = h0 if h0 is not None else x.new_zeros(B, self.d_hidden)
        outputs = []
        for t in range(L):
            h = self.w_xh(x[:, t]) + torch.tanh(self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


# ---------------------------------------------------------------- sequential_steps


def steps_if_chain(kind, n, kernel_size=3):
    """Right: an if/elif chain with math.ceil and max(1, ...)."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    if kind == "attention":
        return 1
    raise ValueError(f"unknown kind {kind!r}: expected 'rnn', 'conv' or 'attention'")


def steps_dict_dispatch(kind, n, kernel_size=3):
    """Right: a dict of lambdas and integer ceiling division -(-a // b)."""
    rules = {
        "rnn": lambda: n,
        "conv": lambda: max(1, -(-(n - 1) // (kernel_size - 1))),
        "attention": lambda: 1,
    }
    if kind not in rules:
        raise ValueError(f"kind must be one of {sorted(rules)}, got {kind!r}")
    return int(rules[kind]())


def steps_floor_division(kind, n, kernel_size=3):
    """Conv layers with floor division (n - 1) // (k - 1): a partial window is dropped."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, (n - 1) // (kernel_size - 1))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_no_minimum(kind, n, kernel_size=3):
    """Forgets 'at least one layer': a single token gives 0 conv layers."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return math.ceil((n - 1) / (kernel_size - 1))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_rnn_path_length(kind, n, kernel_size=3):
    """RNN counted as n - 1 steps (the table's path length), not n."""
    if kind == "rnn":
        return n - 1
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_no_value_error(kind, n, kernel_size=3):
    """An unknown kind falls through and returns None instead of raising ValueError."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    if kind == "attention":
        return 1


def steps_float_no_ceil(kind, n, kernel_size=3):
    """Forgets math.ceil: conv returns the float (n - 1) / (k - 1)."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, (n - 1) / (kernel_size - 1))
    if kind == "attention":
        return 1
    raise ValueError(kind)


def steps_window_counts_itself(kind, n, kernel_size=3):
    """Conv layers as ceil(n / k): the window of k tokens must cover all n tokens."""
    if kind == "rnn":
        return n
    if kind == "conv":
        return max(1, math.ceil(n / kernel_size))
    if kind == "attention":
        return 1
    raise ValueError(kind)


# ---------------------------------------------------------------- practice_john

_SENTENCE = (
    "John, the artist who has painted many murals in Vienna, is visiting New York this summer."
)
_WORDS = _SENTENCE.split()

john_right = _answer(
    dict,
    {"answer": "B", "rnn_steps": 11, "attention_layers": 1},
    "john_right",
    "Right: counted by hand, New York, 11 steps, 1 layer.",
)
john_right2 = _answer(
    dict,
    {
        "answer": "B",
        "rnn_steps": _WORDS.index("visiting") - _WORDS.index("John,"),
        "attention_layers": 1,
    },
    "john_right2",
    "Right: the steps computed from the word indices.",
)
john_vienna = _answer(
    dict,
    {"answer": "A", "rnn_steps": 11, "attention_layers": 1},
    "john_vienna",
    "Answers Vienna (the nearer place name), counts right.",
)
john_both_ends = _answer(
    dict,
    {"answer": "B", "rnn_steps": 12, "attention_layers": 1},
    "john_both_ends",
    "Counts the words from John to visiting inclusive (12), not the steps.",
)
john_between = _answer(
    dict,
    {"answer": "B", "rnn_steps": 10, "attention_layers": 1},
    "john_between",
    "Counts only the words strictly between John and visiting (10).",
)
john_attention_like_rnn = _answer(
    dict,
    {"answer": "B", "rnn_steps": 11, "attention_layers": 11},
    "john_attention_like_rnn",
    "Attention layers counted like recurrence steps (11).",
)
john_zero_layers = _answer(
    dict,
    {"answer": "B", "rnn_steps": 11, "attention_layers": 0},
    "john_zero_layers",
    "Attention 'connects them directly', so zero layers.",
)
john_whole_sentence = _answer(
    dict,
    {"answer": "B", "rnn_steps": len(_WORDS), "attention_layers": 1},
    "john_whole_sentence",
    "RNN steps taken as the length of the whole sentence (16 words).",
)

# ---------------------------------------------------------------- practice_drop_in

drop_in_right = _answer(str, "ACE", "drop_in_right", "Right: order, nonlinearity, the future.")
drop_in_right2 = _answer(
    str,
    "".join(sorted({"E", "C", "A"})),
    "drop_in_right2",
    "Right: the same letters collected as a set, sorted.",
)
drop_in_no_c = _answer(
    str, "AE", "drop_in_no_c", "Leaves out C: thinks the softmax is the nonlinearity."
)
drop_in_no_e = _answer(
    str, "AC", "drop_in_no_e", "Leaves out E: forgets that the future must be hidden."
)
drop_in_adds_b = _answer(
    str, "ABCE", "drop_in_adds_b", "Adds B: believes attention cannot reach far words."
)
drop_in_only_a = _answer(str, "A", "drop_in_only_a", "Only the order barrier.")
drop_in_adds_d = _answer(str, "ACDE", "drop_in_adds_d", "Adds D: thinks attention is sequential.")

# ---------------------------------------------------------------- practice_lstm

lstm_right = _answer(str, "B", "lstm_right", "Right: easier to parallelise.")
lstm_right2 = _answer(str, "b".upper(), "lstm_right2", "Right: the letter written in code.")
lstm_fewer_ops = _answer(str, "A", "lstm_fewer_ops", "Fewer operations (ignores the n^2 term).")
lstm_fewer_params = _answer(str, "C", "lstm_fewer_params", "Fewer parameters than an LSTM.")
lstm_word_order = _answer(str, "D", "lstm_word_order", "Capture word order better.")
lstm_two_letters = _answer(str, "AB", "lstm_two_letters", "Two letters where one is asked.")


WRONG = {
    "RNN": [
        RNNRecordsPrevious,
        RNNFloat32State,
        RNNSkipsLastStep,
        RNNLoopsOverBatch,
        RNNDetachesState,
        RNNTanhOnRecurrenceOnly,
    ],
    "sequential_steps": [
        steps_floor_division,
        steps_no_minimum,
        steps_rnn_path_length,
        steps_no_value_error,
        steps_float_no_ceil,
        steps_window_counts_itself,
    ],
    "practice_john": [
        john_vienna,
        john_both_ends,
        john_between,
        john_attention_like_rnn,
        john_zero_layers,
        john_whole_sentence,
    ],
    "practice_drop_in": [
        drop_in_no_c,
        drop_in_no_e,
        drop_in_adds_b,
        drop_in_only_a,
        drop_in_adds_d,
    ],
    "practice_lstm": [lstm_fewer_ops, lstm_fewer_params, lstm_word_order, lstm_two_letters],
}
RIGHT = {
    "RNN": RNNLoopStack,
    "sequential_steps": steps_if_chain,
    "practice_john": john_right,
    "practice_drop_in": drop_in_right,
    "practice_lstm": lstm_right,
}
RIGHT2 = {
    "RNN": RNNUnbindPrecompute,
    "sequential_steps": steps_dict_dispatch,
    "practice_john": john_right2,
    "practice_drop_in": drop_in_right2,
    "practice_lstm": lstm_right2,
}
