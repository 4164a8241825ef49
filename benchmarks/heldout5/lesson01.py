"""Lesson 01 (RNN limits): held-out wrong and right implementations, from the exercise text only."""

import math

import torch
from torch import nn


def _answer(value, name, doc):
    """A practice answer (a dict or a str) that carries a name and a one-line docstring."""
    base = dict if isinstance(value, dict) else str
    cls = type(f"Answer_{name}", (base,), {"__doc__": doc})
    answer = cls(value)
    answer.__name__ = name
    return answer


# ---------------------------------------------------------------- RNN


class _RNNBase(nn.Module):
    def __init__(self, d_in, d_hidden):
        super().__init__()
        self.d_in, self.d_hidden = d_in, d_hidden
        self.w_xh = nn.Linear(d_in, d_hidden)
        self.w_hh = nn.Linear(d_hidden, d_hidden)


class RNNLoop(_RNNBase):
    """Right: zeros like x for h0, a loop over x[:, t], stacked along dim=1."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        if h0 is None:
            h = x.new_zeros(B, self.d_hidden)
        else:
            h = h0
        outputs = []
        for t in range(L):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNPrecomputed(_RNNBase):
    """Right: the input projection of all steps at once, unbind over time, F.linear for W_hh."""

    def forward(self, x, h0=None):
        xw = self.w_xh(x)  # (B, L, d_hidden): x_t W_xh^T + b_xh for every t
        h = (
            h0
            if h0 is not None
            else torch.zeros(x.shape[0], self.d_hidden, dtype=x.dtype, device=x.device)
        )
        states = []
        for x_t in xw.unbind(1):
            h = torch.tanh(x_t + nn.functional.linear(h, self.w_hh.weight, self.w_hh.bias))
            states.append(h)
        return torch.stack(states, 1), states[-1]


class RNNZerosDefaultDtype(_RNNBase):
    """Wrong: h0 = torch.zeros(B, d_hidden) in the default dtype, so a float64 x fails."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = h0 if h0 is not None else torch.zeros(B, self.d_hidden)
        outputs = []
        for t in range(L):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNTruthyH0(_RNNBase):
    """Wrong: `h0 if h0 else zeros` tests a tensor's truth value (crashes when h0 is given)."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = h0 if h0 else x.new_zeros(B, self.d_hidden)
        outputs = []
        for t in range(L):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNReturnsFirstState(_RNNBase):
    """Wrong: returns outputs[0] (the state after step 0) as h_L instead of the last one."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = h0 if h0 is not None else x.new_zeros(B, self.d_hidden)
        outputs = []
        for t in range(L):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), outputs[0]


class RNNTanhOnInputOnly(_RNNBase):
    """Wrong: a parenthesis slip, tanh(x_t W_xh^T + b_xh) + h W_hh^T + b_hh."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = h0 if h0 is not None else x.new_zeros(B, self.d_hidden)
        outputs = []
        for t in range(L):
            h = torch.tanh(self.w_xh(x[:, t])) + self.w_hh(h)
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNOneStepShort(_RNNBase):
    """Wrong: h0 listed as the first output and range(L - 1), so the last input is never read."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = h0 if h0 is not None else x.new_zeros(B, self.d_hidden)
        outputs = [h]
        for t in range(L - 1):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNDetachEachStep(_RNNBase):
    """Wrong: detaches h every step (truncated BPTT habit): right outputs, wrong gradients."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = h0 if h0 is not None else x.new_zeros(B, self.d_hidden)
        outputs = []
        for t in range(L):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h.detach()))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class RNNCatNotStack(_RNNBase):
    """Wrong: torch.cat(outputs, dim=1) gives (B, L * d_hidden) instead of (B, L, d_hidden)."""

    def forward(self, x, h0=None):
        B, L, _ = x.shape
        h = h0 if h0 is not None else x.new_zeros(B, self.d_hidden)
        outputs = []
        for t in range(L):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        return torch.cat(outputs, dim=1), h


# ---------------------------------------------------------------- sequential_steps


def steps_branches(kind, n, kernel_size=3):
    """Right: if/elif with math.ceil and at least one layer."""
    if kind == "rnn":
        return n
    if kind == "attention":
        return 1
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    raise ValueError(f"unknown kind {kind!r}")


def steps_integer_ceil(kind, n, kernel_size=3):
    """Right: integer ceiling division -(-a // b), a dict for the two fixed kinds."""
    if kind == "conv":
        layers = -(-(n - 1) // (kernel_size - 1))
        return int(max(layers, 1))
    fixed = {"rnn": n, "attention": 1}
    if kind not in fixed:
        raise ValueError(f"kind must be rnn, conv or attention, not {kind!r}")
    return int(fixed[kind])


def steps_ceil_n_over_k1(kind, n, kernel_size=3):
    """Wrong: conv uses ceil(n / (k - 1)), forgetting that the first token is already covered."""
    if kind == "rnn":
        return n
    if kind == "attention":
        return 1
    if kind == "conv":
        return max(1, math.ceil(n / (kernel_size - 1)))
    raise ValueError(kind)


def steps_floor_division(kind, n, kernel_size=3):
    """Wrong: conv uses floor division (n - 1) // (k - 1) instead of the ceiling."""
    if kind == "rnn":
        return n
    if kind == "attention":
        return 1
    if kind == "conv":
        return max(1, (n - 1) // (kernel_size - 1))
    raise ValueError(kind)


def steps_no_minimum(kind, n, kernel_size=3):
    """Wrong: conv without the at-least-one-layer rule (0 steps for a single token)."""
    if kind == "rnn":
        return n
    if kind == "attention":
        return 1
    if kind == "conv":
        return math.ceil((n - 1) / (kernel_size - 1))
    raise ValueError(kind)


def steps_rnn_n_minus_1(kind, n, kernel_size=3):
    """Wrong: rnn returns n - 1 (the path length of the table) instead of n steps."""
    if kind == "rnn":
        return max(n - 1, 1)
    if kind == "attention":
        return 1
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    raise ValueError(kind)


def steps_dict_lookup(kind, n, kernel_size=3):
    """Wrong: a dict lookup, so an unknown kind raises KeyError, not ValueError."""
    return {
        "rnn": n,
        "attention": 1,
        "conv": max(1, math.ceil((n - 1) / (kernel_size - 1))),
    }[kind]


def steps_int_plus_one(kind, n, kernel_size=3):
    """Wrong: ceil written as int(a / b) + 1, one too many when (n - 1) divides by k - 1."""
    if kind == "rnn":
        return n
    if kind == "attention":
        return 1
    if kind == "conv":
        return int((n - 1) / (kernel_size - 1)) + 1
    raise ValueError(kind)


def steps_window_grows_by_k(kind, n, kernel_size=3):
    """Wrong: conv divides by k, as if each layer widened the window by k tokens."""
    if kind == "rnn":
        return n
    if kind == "attention":
        return 1
    if kind == "conv":
        return max(1, math.ceil((n - 1) / kernel_size))
    raise ValueError(kind)


# ---------------------------------------------------------------- practice questions

JOHN_RIGHT = _answer(
    {"answer": "B", "rnn_steps": 11, "attention_layers": 1},
    "john_right",
    "Right: New York; visiting is word 11 after John, (index 11 - 0); one attention layer.",
)
JOHN_RIGHT2 = _answer(
    {
        "answer": "B",
        "rnn_steps": "John, the artist who has painted many murals in Vienna, is visiting".count(
            " "
        ),
        "attention_layers": 1,
    },
    "john_right_counted",
    "Right: the steps counted as the spaces between John, and visiting.",
)
JOHN_WRONG = [
    _answer(
        {"answer": "A", "rnn_steps": 11, "attention_layers": 1},
        "john_vienna",
        "Wrong: answers Vienna, the place name nearest to visiting.",
    ),
    _answer(
        {"answer": "B", "rnn_steps": 12, "attention_layers": 1},
        "john_inclusive_count",
        "Wrong: counts the words from John, to visiting inclusive (12), not the steps.",
    ),
    _answer(
        {"answer": "B", "rnn_steps": 10, "attention_layers": 1},
        "john_words_between",
        "Wrong: counts only the 10 words strictly between the two.",
    ),
    _answer(
        {"answer": "B", "rnn_steps": 16, "attention_layers": 1},
        "john_whole_sentence",
        "Wrong: uses the length of the whole sentence (16 words).",
    ),
    _answer(
        {"answer": "B", "rnn_steps": 11, "attention_layers": 11},
        "john_attention_like_rnn",
        "Wrong: counts attention layers like recurrence steps.",
    ),
    _answer(
        {"answer": "B", "rnn_steps": 59, "attention_layers": 1},
        "john_character_offset",
        "Wrong: sentence.index('visiting') - sentence.index('John'), characters not words.",
    ),
    _answer(
        {"answer": "New York", "rnn_steps": 11, "attention_layers": 1},
        "john_place_not_letter",
        "Wrong: gives the place name instead of the letter the text asks for.",
    ),
]

DROP_IN_RIGHT = _answer("ACE", "drop_in_right", "Right: order, nonlinearity and causality.")
DROP_IN_RIGHT2 = _answer(
    "EAC", "drop_in_right_unordered", "Right: the same letters, another order."
)
DROP_IN_WRONG = [
    _answer("AE", "drop_in_no_c", "Wrong: leaves out C (no elementwise nonlinearity)."),
    _answer("AC", "drop_in_no_e", "Wrong: leaves out E (the model must not see the next word)."),
    _answer(
        "ACDE", "drop_in_with_d", "Wrong: adds D, though attention is parallel over positions."
    ),
    _answer("ABCE", "drop_in_with_b", "Wrong: adds B, though one layer connects any two words."),
    _answer("A", "drop_in_order_only", "Wrong: only the missing notion of order."),
    _answer("CE", "drop_in_no_a", "Wrong: leaves out A, forgetting that attention sees a set."),
]

LSTM_RIGHT = _answer("B", "lstm_right", "Right: Transformers are easier to parallelise.")
LSTM_RIGHT2 = _answer("B", "lstm_right_again", "Right: B (the only correct statement).")
LSTM_WRONG = [
    _answer("A", "lstm_fewer_operations", "Wrong: fewer operations (n^2 d grows past n d^2)."),
    _answer("C", "lstm_fewer_parameters", "Wrong: fewer parameters."),
    _answer("D", "lstm_word_order", "Wrong: captures word order better."),
    _answer("AB", "lstm_two_letters", "Wrong: two letters where one is asked for."),
    _answer("BC", "lstm_b_and_c", "Wrong: B together with fewer parameters."),
]


WRONG = {
    "RNN": [
        RNNZerosDefaultDtype,
        RNNTruthyH0,
        RNNReturnsFirstState,
        RNNTanhOnInputOnly,
        RNNOneStepShort,
        RNNDetachEachStep,
        RNNCatNotStack,
    ],
    "sequential_steps": [
        steps_ceil_n_over_k1,
        steps_floor_division,
        steps_no_minimum,
        steps_rnn_n_minus_1,
        steps_dict_lookup,
        steps_int_plus_one,
        steps_window_grows_by_k,
    ],
    "practice_john": JOHN_WRONG,
    "practice_drop_in": DROP_IN_WRONG,
    "practice_lstm": LSTM_WRONG,
}

RIGHT = {
    "RNN": RNNLoop,
    "sequential_steps": steps_branches,
    "practice_john": JOHN_RIGHT,
    "practice_drop_in": DROP_IN_RIGHT,
    "practice_lstm": LSTM_RIGHT,
}

RIGHT2 = {
    "RNN": RNNPrecomputed,
    "sequential_steps": steps_integer_ceil,
    "practice_john": JOHN_RIGHT2,
    "practice_drop_in": DROP_IN_RIGHT2,
    "practice_lstm": LSTM_RIGHT2,
}
