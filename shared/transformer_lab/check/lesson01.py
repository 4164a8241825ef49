"""Checks for lesson 01 — RNN limits: `RNN` and `sequential_steps`, and two practice questions
(`practice_john`, `practice_drop_in`)."""

from __future__ import annotations

import math

import torch

from .. import rnn as _rnn
from .answer_drivers import Call, ExactDriver, RaisesDriver, Reject, exactly_equal
from .answers import letters, plain_number, unanswered
from .drivers import CustomDriver, ModuleDriver
from .exercise import Case, CheckFailed, Exercise, Mistake, fail, practice

__all__ = ["RNN", "practice_drop_in", "practice_john", "sequential_steps"]

# ==============================================================================================
# Lesson 01 — RNN limits


class _RNNNoTanh(_rnn.RNN):
    def forward(self, x, h0=None):
        h = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0
        outs = []
        for t in range(x.shape[1]):
            h = self.w_xh(x[:, t]) + self.w_hh(h)
            outs.append(h)
        return torch.stack(outs, 1), h


class _RNNRelu(_rnn.RNN):
    def forward(self, x, h0=None):
        h = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0
        outs = []
        for t in range(x.shape[1]):
            h = torch.relu(self.w_xh(x[:, t]) + self.w_hh(h))
            outs.append(h)
        return torch.stack(outs, 1), h


class _RNNIgnoresH0(_rnn.RNN):
    def forward(self, x, h0=None):
        return super().forward(x, None)


class _RNNRecordsPrevious(_rnn.RNN):
    """Records h_{t-1}, the state before the update, as step t's output."""

    def forward(self, x, h0=None):
        h = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0
        outs = []
        for t in range(x.shape[1]):
            outs.append(h)
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
        return torch.stack(outs, 1), h


class _RNNTimeFirst(_rnn.RNN):
    """torch.stack's default axis 0: outputs (L, B, d_hidden) instead of (B, L, d_hidden)."""

    def forward(self, x, h0=None):
        out, h = super().forward(x, h0)
        return out.transpose(0, 1), h


class _RNNBackwards(_rnn.RNN):
    def forward(self, x, h0=None):
        out, h = super().forward(x.flip(1), h0)
        return out.flip(1), h


class _RNNNoCarry(_rnn.RNN):
    def forward(self, x, h0=None):
        h_prev = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0
        outs = [torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h_prev)) for t in range(x.shape[1])]
        return torch.stack(outs, 1), outs[-1]


class _RNNTanhInputOnly(_rnn.RNN):
    """A parenthesis misplaced: tanh wraps the input term only."""

    def forward(self, x, h0=None):
        h = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0
        outs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t])) + self.w_hh(h)
            outs.append(h)
        return torch.stack(outs, 1), h


class _RNNNoHiddenBias(_rnn.RNN):
    """The formula typed out with the weight matrices, w_hh's bias forgotten."""

    def forward(self, x, h0=None):
        h = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0
        outs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t]) + h @ self.w_hh.weight.T)
            outs.append(h)
        return torch.stack(outs, 1), h


class _RNNSkipsFirstStep(_rnn.RNN):
    """The loop runs over range(1, L): x[:, 0] is never read."""

    def forward(self, x, h0=None):
        out, h = super().forward(x[:, 1:], h0)
        return out, h


class _RNNLastRow(_rnn.RNN):
    """h_L taken as outputs[-1], the last sequence of the batch, not the last step."""

    def forward(self, x, h0=None):
        out, _ = super().forward(x, h0)
        return out, out[-1]


class _RNNTanhRecurrenceOnly(_rnn.RNN):
    """A parenthesis misplaced the other way: tanh wraps the recurrent term only."""

    def forward(self, x, h0=None):
        h = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0
        outs = []
        for t in range(x.shape[1]):
            h = self.w_xh(x[:, t]) + torch.tanh(self.w_hh(h))
            outs.append(h)
        return torch.stack(outs, 1), h


class _RNNLoopsOverBatch(_rnn.RNN):
    """range(len(x)): the loop runs over the batch size, not the sequence length."""

    def forward(self, x, h0=None):
        out, h = super().forward(x[:, : len(x)], h0)
        return out, h


class _RNNFirstState(_rnn.RNN):
    """h_L taken as outputs[:, 0], the state after the first step."""

    def forward(self, x, h0=None):
        out, _ = super().forward(x, h0)
        return out, out[:, 0]


class _RNNReversedLoop(_rnn.RNN):
    """for t in reversed(range(L)): the steps are read from the end and recorded in that order."""

    def forward(self, x, h0=None):
        out, h = super().forward(x.flip(1), h0)
        return out, h


class _RNNHiddenUntransposed(_rnn.RNN):
    """h @ W_hh where h @ W_hhᵀ belongs (a square matrix: no shape error)."""

    def forward(self, x, h0=None):
        h = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0
        outs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t]) + h @ self.w_hh.weight + self.w_hh.bias)
            outs.append(h)
        return torch.stack(outs, 1), h


class _RNNStateSizedByInput(_rnn.RNN):
    """The default h0 made as zeros (B, d_in): w_hh cannot take it when d_in != d_hidden."""

    def forward(self, x, h0=None):
        h = x.new_zeros(x.shape[0], x.shape[-1]) if h0 is None else h0
        outs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outs.append(h)
        return torch.stack(outs, 1), h


class _RNNStateAliased(_rnn.RNN):
    """The state rewritten in place (h.copy_(...), h[:] = ...) after it was appended: every entry
    of outputs is the same tensor, so each holds the final state."""

    def forward(self, x, h0=None):
        h = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0.clone()
        outs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outs.append(h)
        return torch.stack([outs[-1]] * len(outs), 1), h


def _rnn_cases(thorough: bool) -> list[Case]:
    def case(B, L, d_in, d_h, h0=False):
        def make(g):
            inputs = {"x": torch.randn(B, L, d_in, generator=g, dtype=torch.float64)}
            if h0:
                inputs["h0"] = torch.randn(B, d_h, generator=g, dtype=torch.float64) * 0.5
            return inputs

        label = f"RNN({d_in}, {d_h}) on x {(B, L, d_in)}" + (", with h0" if h0 else "")
        return Case(label, make, {"d_in": d_in, "d_hidden": d_h})

    cases = [case(2, 5, 3, 4), case(3, 4, 4, 4, h0=True)]
    if thorough:
        cases += [
            case(1, 1, 2, 3),
            case(4, 9, 5, 2, h0=True),
            case(2, 16, 3, 6),
            case(5, 1, 3, 3, h0=True),
        ]
    return cases


RNN = Exercise(
    name="RNN",
    lesson="01",
    module="rnn",
    reference=_rnn.RNN,
    forbidden=(
        "torch.nn.RNN",
        "torch.nn.RNNCell",
        "torch.nn.LSTM",
        "torch.nn.GRU",
        "torch.rnn_tanh",
        "torch.rnn_tanh_cell",
        "transformer_lab.rnn.RNN",
        "transformer_lab.RNN",
    ),
    mistakes=[
        Mistake(
            "no-tanh", "the tanh is missing: h_t = tanh(x_t W_xhᵀ + h_{t-1} W_hhᵀ + b).", _RNNNoTanh
        ),
        Mistake("relu", "the recurrence uses ReLU; this RNN uses tanh.", _RNNRelu),
        Mistake(
            "h0-ignored",
            "h0 is ignored: when an initial state is given, start the loop from it.",
            _RNNIgnoresH0,
        ),
        Mistake(
            "backwards",
            "the loop reads the sequence backwards: step t must read x[:, t], t = 0 … L-1.",
            _RNNBackwards,
        ),
        Mistake(
            "no-carry",
            "the hidden state is not carried from step to step: every step must feed the previous "
            "step's h into w_hh (assign h = tanh(...) inside the loop).",
            _RNNNoCarry,
        ),
        Mistake(
            "records-previous-state",
            "each step records the state before its update, h_{t-1}: outputs[:, t] must be h_t, "
            "the new state, so append h after computing it.",
            _RNNRecordsPrevious,
        ),
        Mistake(
            "tanh-input-only",
            "the tanh wraps the input term only: tanh(x_t W_xhᵀ) + h_{t-1} W_hhᵀ; both terms and "
            "the bias go inside, h_t = tanh(x_t W_xhᵀ + h_{t-1} W_hhᵀ + b).",
            _RNNTanhInputOnly,
        ),
        Mistake(
            "no-hidden-bias",
            "w_hh's bias is left out (h @ w_hh.weight.T): call the layer, self.w_hh(h), so that "
            "both biases are added.",
            _RNNNoHiddenBias,
        ),
        Mistake(
            "skips-first-step",
            "the loop skips step 0 (range(1, L)): every step t = 0 … L-1 reads x[:, t], so "
            "outputs has L rows.",
            _RNNSkipsFirstStep,
        ),
        Mistake(
            "h_L-last-sequence",
            "h_L is outputs[-1], the last sequence of the batch: the last step is outputs[:, -1] "
            "(or the h the loop ends with).",
            _RNNLastRow,
        ),
        Mistake(
            "stacked-time-first",
            "the outputs are stacked along axis 0, giving (L, B, d_hidden): stack the steps "
            "along axis 1, torch.stack(outputs, dim=1), for (B, L, d_hidden).",
            _RNNTimeFirst,
        ),
        Mistake(
            "tanh-recurrence-only",
            "the tanh wraps the recurrent term only: x_t W_xhᵀ + tanh(h_{t-1} W_hhᵀ); both terms "
            "and the bias go inside, h_t = tanh(x_t W_xhᵀ + h_{t-1} W_hhᵀ + b).",
            _RNNTanhRecurrenceOnly,
        ),
        Mistake(
            "loops-over-batch",
            "the loop runs over range(len(x)), the batch size: x is (B, L, d_in), so loop over "
            "range(x.shape[1]), the L steps.",
            _RNNLoopsOverBatch,
        ),
        Mistake(
            "h_L-first-step",
            "h_L is outputs[:, 0], the state after the first step: the final state is the last "
            "step's, outputs[:, -1] (or the h the loop ends with).",
            _RNNFirstState,
        ),
        Mistake(
            "reversed-loop",
            "the loop runs over the steps from the end (reversed(range(L))): step t must read "
            "x[:, t] in order, t = 0 … L-1, and outputs[:, t] is the state after it.",
            _RNNReversedLoop,
        ),
        Mistake(
            "w_hh-untransposed",
            "h @ w_hh.weight uses W_hh untransposed: nn.Linear stores W as (out, in) and "
            "computes h W_hhᵀ + b, so write h @ self.w_hh.weight.T, or call the layer, "
            "self.w_hh(h).",
            _RNNHiddenUntransposed,
        ),
        Mistake(
            "state-sized-d_in",
            "a tensor of width d_in goes into w_hh, which takes d_hidden features: the default "
            "initial state is zeros of shape (B, d_hidden), x.new_zeros(x.shape[0], "
            "self.d_hidden), and only x_t goes through w_xh.",
            _RNNStateSizedByInput,
        ),
        Mistake(
            "state-aliased",
            "every step's output holds the final state: h is changed in place (h.copy_(...), "
            "h[:] = ..., h += ...) after it was appended, so all the entries of outputs are one "
            "tensor; make a new state each step, h = torch.tanh(...), and append that.",
            _RNNStateAliased,
        ),
    ],
    driver=ModuleDriver(_rnn_cases, outputs=("outputs", "h_L")),
    doc="an RNN class: RNN(d_in, d_hidden), forward(x (B, L, d_in), h0=None) -> (outputs, h_L)",
)


def _steps_plain(kind, n, kernel_size=3):
    """A private copy of the right answer for the mutants (the reference itself is forbidden)."""
    if kind == "rnn":
        return n
    if kind == "attention":
        return 1
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    raise ValueError(f"kind must be 'rnn', 'conv' or 'attention', got {kind!r}")


def _steps_conv_ceil_n_over_k(kind, n, kernel_size=3):
    if kind == "conv":
        return max(1, math.ceil(n / kernel_size))
    return _steps_plain(kind, n, kernel_size)


def _steps_conv_n_over_k_minus_1(kind, n, kernel_size=3):
    if kind == "conv":
        return max(1, math.ceil(n / (kernel_size - 1)))
    return _steps_plain(kind, n, kernel_size)


def _steps_conv_log(kind, n, kernel_size=3):
    if kind == "conv":
        return max(1, math.ceil(math.log(n, kernel_size))) if n > 1 else 1
    return _steps_plain(kind, n, kernel_size)


def _steps_attention_n(kind, n, kernel_size=3):
    return n if kind == "attention" else _steps_plain(kind, n, kernel_size)


def _steps_rnn_n_minus_1(kind, n, kernel_size=3):
    return n - 1 if kind == "rnn" else _steps_plain(kind, n, kernel_size)


def _steps_conv_zero(kind, n, kernel_size=3):
    if kind == "conv":
        return math.ceil((n - 1) / (kernel_size - 1))
    return _steps_plain(kind, n, kernel_size)


def _steps_unknown_kind(kind, n, kernel_size=3):
    """Answers an unknown kind as if it were a convolution instead of raising."""
    if kind in ("rnn", "attention"):
        return _steps_plain(kind, n, kernel_size)
    return max(1, math.ceil((n - 1) / (kernel_size - 1)))


def _steps_float(kind, n, kernel_size=3):
    """The conv count computed on floats, e.g. -(-(n - 1) // (k - 1)) with (n - 1) / ...: 4.0."""
    return float(_steps_plain(kind, n, kernel_size))


def _steps_kernel_ignored(kind, n, kernel_size=3):
    """The conv count with the default width 3 whatever kernel_size is given."""
    return _steps_plain(kind, n, 3 if kind == "conv" else kernel_size)


def _steps_attention_log(kind, n, kernel_size=3):
    """Attention counted as the depth of a binary tree over the n tokens, ceil(log2 n)."""
    if kind == "attention":
        return max(1, math.ceil(math.log2(n)))
    return _steps_plain(kind, n, kernel_size)


def _whole_number_equal(got, expected) -> bool:
    """Equal, and a whole number where one is expected: the text asks for an `int` (4.0 is not;
    np.int64(4) and a 0-d integer tensor are, as operator.index says)."""
    got, expected = plain_number(got), plain_number(expected)
    kinds = (isinstance(got, int) and not isinstance(got, bool), isinstance(expected, int))
    return kinds[0] == kinds[1] and exactly_equal(got, expected)


def _steps_cases(thorough: bool) -> list[Call]:
    grid = [("rnn", 1, 3), ("rnn", 10, 3), ("attention", 10, 3), ("conv", 9, 3), ("conv", 10, 5)]
    grid += [("conv", 1, 3)]  # a single token still needs one step (a stated rule: visible)
    if thorough:
        grid += [
            (kind, n, k)
            for kind in ("rnn", "conv", "attention")
            for n in (1, 2, 3, 7, 64, 100, 513)
            for k in (2, 3, 4, 7)
        ]
    return [Call((kind, n), {"kernel_size": k}) for kind, n, k in grid]


def _unknown_kinds(thorough: bool) -> list[Reject]:
    kinds = [("transformer", 8)]  # the stated ValueError, visible
    if thorough:
        kinds += [("RNN", 4), ("cnn", 10), ("", 1)]
    return [
        Reject(
            f"sequential_steps({kind!r}, {n}) (an unknown kind)",
            lambda impl, kind=kind, n=n: impl(kind, n),
        )
        for kind, n in kinds
    ]


def _attention_grows_as_log(ex: Exercise, student_fn) -> bool:
    """Whether the student's count for attention is log2 n, rounded either way, for n = 10, 100
    and 1000 (a tree of pairwise steps, however it is written)."""
    for n in (10, 100, 1000):
        try:
            got = ex.run_student(student_fn, lambda n=n: student_fn("attention", n))
        except Exception:
            return False
        if got not in (math.floor(math.log2(n)), math.ceil(math.log2(n))):
            return False
    return True


def _check_steps(ex: Exercise, student_fn, thorough: bool):
    """Every (kind, n, kernel_size) exactly, then a ValueError for an unknown kind. An unnamed
    wrong count for attention that is log2 n, rounded either way, is named as the tree it is."""
    unnamed = None
    try:
        n = ExactDriver(_steps_cases, equal=_whole_number_equal).run(ex, student_fn, thorough)
    except CheckFailed as failed:
        if failed.mistake is not None:
            raise
        unnamed = failed
    if unnamed is not None:
        if _attention_grows_as_log(ex, student_fn):
            fail(ex, unnamed.problem, unnamed.case, ex.mistake("attention-log"))
        raise unnamed
    n += RaisesDriver(_unknown_kinds, shown=repr).run(ex, student_fn, thorough)
    return n, "every kind, length and kernel size; ValueError for an unknown kind"


sequential_steps = Exercise(
    name="sequential_steps",
    lesson="01",
    module="rnn",
    reference=_rnn.sequential_steps,
    forbidden=(
        "transformer_lab.rnn.sequential_steps",
        "transformer_lab.sequential_steps",
        "transformer_lab.rnn.max_path_length",
        "transformer_lab.max_path_length",
    ),
    mistakes=[
        Mistake(
            "conv-n-over-k",
            "each extra width-k convolution layer widens the window by k-1 tokens, not k: a stack "
            "needs ceil((n-1)/(k-1)) layers.",
            _steps_conv_ceil_n_over_k,
        ),
        Mistake(
            "conv-n-over-k-minus-1",
            "ceil(n / (k-1)) counts one token too many: the first layer's window already covers "
            "k tokens, so the stack needs ceil((n-1)/(k-1)) layers to span n.",
            _steps_conv_n_over_k_minus_1,
        ),
        Mistake(
            "conv-log",
            "log_k(n) layers is for dilated convolutions; plain stacked ones need ceil((n-1)/(k-1)).",
            _steps_conv_log,
        ),
        Mistake(
            "attention-n",
            "self-attention connects every pair of positions in a single step: 1, whatever n.",
            _steps_attention_n,
        ),
        Mistake(
            "rnn-n-minus-1",
            "an RNN needs one step per token, n (n-1 is its path length between the ends).",
            _steps_rnn_n_minus_1,
        ),
        Mistake(
            "conv-zero",
            "a single token still needs one layer: the answer is at least 1.",
            _steps_conv_zero,
        ),
        Mistake(
            "float-steps",
            "a number of steps is a whole number: return an int (math.ceil, or integer division "
            "on ints), not a float such as 4.0.",
            _steps_float,
        ),
        Mistake(
            "unknown-kind",
            "an unknown kind (anything but 'rnn', 'conv' and 'attention') must raise a "
            "ValueError that names it, not be answered like one of the three.",
            _steps_unknown_kind,
        ),
        Mistake(
            "kernel-size-ignored",
            "kernel_size is ignored (the count is the one for width 3): each extra width-k layer "
            "widens the window by k-1 tokens, so use the kernel_size given, "
            "ceil((n-1)/(kernel_size-1)).",
            _steps_kernel_ignored,
        ),
        Mistake(
            "attention-log",
            "self-attention is not a tree of pairwise steps (log2 n): one layer compares every "
            "query with every key at once, so its count is 1, whatever n.",
            _steps_attention_log,
        ),
    ],
    driver=CustomDriver(_check_steps),
    doc="sequential_steps(kind, n, kernel_size=3) -> int for 'rnn', 'conv' and 'attention'",
)


# ==============================================================================================
# Practice 1 — a long relative clause (the lecture deck's John / New York question), computed.

SENTENCE = (
    "John, the artist who has painted many murals in Vienna, is visiting New York this summer."
)


def john_distances(sentence: str = SENTENCE) -> dict[str, int]:
    """Applications of the recurrence that carry "John" to "visiting" (words of `sentence.split()`,
    punctuation attached), and the self-attention layers that do the same."""
    words = sentence.split()
    return {"rnn_steps": words.index("visiting") - words.index("John,"), "attention_layers": 1}


def _john_mistakes() -> dict[str, Mistake]:
    steps = john_distances()["rnn_steps"]
    return {
        "nearest-place": Mistake(
            "nearest-place",
            "Vienna is the place name nearest to 'visiting', but it belongs to the relative clause "
            "about the murals; the subject of 'is visiting' is John, and he visits New York (B).",
        ),
        "counted-both-ends": Mistake(
            "counted-both-ends",
            f"'John' to 'visiting' spans {steps + 1} words but {steps} steps: the state after "
            "'John' needs one application of the recurrence per later word, 'visiting' included.",
        ),
        "words-between": Mistake(
            "words-between",
            f"the {steps - 1} words between them are not enough: the recurrence is also applied "
            f"at 'visiting' itself, {steps} steps in all.",
        ),
        "whole-sentence": Mistake(
            "whole-sentence",
            f"the question asks for the steps from 'John' to 'visiting', not the sentence's "
            f"{len(SENTENCE.split())} words.",
        ),
        "clause-only": Mistake(
            "clause-only",
            f"the relative clause alone ('the' … 'Vienna,') is {steps - 2} words, but the state "
            f"must also pass through 'is' and 'visiting': {steps} steps from 'John'.",
        ),
        "commas-as-tokens": Mistake(
            "commas-as-tokens",
            f"the commas are not steps of their own: the words are those of sentence.split(), "
            f"punctuation attached ('John,', 'Vienna,'), so {steps} steps, not {steps + 2}.",
        ),
        "counted-characters": Mistake(
            "counted-characters",
            f"that is more steps than the sentence has words ({len(SENTENCE.split())}): the "
            "recurrence takes one step per word, so count words (sentence.split()), not "
            f"characters: {steps} steps from 'John' to 'visiting'.",
        ),
        "attention-zero-layers": Mistake(
            "attention-zero-layers",
            "'directly' still takes one layer: a single self-attention layer connects every pair "
            "of words, so 1, whatever the distance (not 0).",
        ),
        "attention-is-sequential": Mistake(
            "attention-is-sequential",
            "one self-attention layer connects every pair of words directly: 1 layer, whatever "
            "the distance (your sequential_steps('attention', n)).",
        ),
    }


def _whole_number(value) -> int | None:
    """A count computed with code as a plain int: 11, np.int64(11), torch.tensor(11) or 11.0;
    None for a bool, a fractional value (11.5) or anything that is not a number."""
    value = plain_number(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@practice
def practice_john(value, thorough: bool = False) -> None:
    """Check the answer to the relative-clause question: a dict with "answer" (A or B),
    "rnn_steps" and "attention_layers"."""
    name = "practice_john"
    if value is ...:
        raise unanswered(name)
    if value is None:
        fail(
            name,
            'replace the ... with a dict: {"answer": ..., "rnn_steps": ..., "attention_layers": ...}',
        )
    if not isinstance(value, dict) or set(value) != {"answer", "rnn_steps", "attention_layers"}:
        got = sorted(value) if isinstance(value, dict) else type(value).__name__
        fail(
            name,
            f'the answer should be a dict with the keys "answer", "rnn_steps" and "attention_layers", got {got}',
        )
    answer = letters(name, value["answer"], "AB")
    counts = {key: _whole_number(value[key]) for key in ("rnn_steps", "attention_layers")}
    for key, count in counts.items():
        if count is None:
            fail(name, f"{key} should be a whole number, got {value[key]!r}")
    right = john_distances()
    mistakes = _john_mistakes()
    if answer != "B":
        fail(name, f"({answer}) is not where John is going", mistake=mistakes["nearest-place"])
    steps, layers = counts["rnn_steps"], counts["attention_layers"]
    by_steps = {
        right["rnn_steps"] + 1: "counted-both-ends",
        right["rnn_steps"] - 1: "words-between",
        len(SENTENCE.split()): "whole-sentence",
        right["rnn_steps"] - 2: "clause-only",
        right["rnn_steps"] + 2: "commas-as-tokens",
    }
    if steps != right["rnn_steps"]:
        key = by_steps.get(steps)
        if key is None and steps > len(SENTENCE.split()):
            key = "counted-characters"
        fail(
            name,
            f"rnn_steps = {steps} is not the number of recurrence steps from 'John' to 'visiting'",
            mistake=mistakes[key] if key else None,
        )
    if layers != right["attention_layers"]:
        key = (
            "attention-is-sequential"
            if layers > 1
            else "attention-zero-layers"
            if layers == 0
            else None
        )
        fail(
            name,
            f"attention_layers = {layers} is not the number of self-attention layers that "
            "connect the two words",
            mistake=mistakes[key] if key else None,
        )
    print(f"✓ practice_john: New York, {steps} recurrence steps against 1 attention layer")


# ==============================================================================================
# Practice 2 — is self-attention a drop-in replacement for recurrence? (several letters)

DROP_IN_RIGHT = "ACE"  # order (lesson 04), nonlinearity (lesson 05), the future (lesson 06)


def _drop_in_mistakes() -> dict[str, Mistake]:
    return {
        "A": Mistake(
            "misses-order",
            "(A) is a real barrier: without positions, shuffling the words only shuffles the "
            "outputs (permutation equivariance), so 'dog bites man' and 'man bites dog' look alike. "
            "Lesson 04 adds positional encodings.",
        ),
        "B": Mistake(
            "distance",
            "(B) is false: one self-attention layer connects any two positions, a path of length 1, "
            "where an RNN needs one step per word in between.",
        ),
        "C": Mistake(
            "misses-nonlinearity",
            "(C) is a real barrier: each output is a softmax-weighted average of linear maps of the "
            "inputs, so stacking layers adds no nonlinearity on the vectors themselves. Lesson 05's "
            "feed-forward network adds one.",
        ),
        "D": Mistake(
            "parallel",
            "(D) is false: self-attention computes every position at once, in O(1) sequential steps "
            "(your sequential_steps('attention', n)); it is recurrence that cannot be parallelised.",
        ),
        "E": Mistake(
            "misses-future",
            "(E) is a real barrier: a language model learns to predict the next word, but plain "
            "self-attention lets every position see the later ones, the answer included. Lesson 06 "
            "masks them.",
        ),
    }


@practice
def practice_drop_in(value, thorough: bool = False) -> None:
    """Check the drop-in question: every letter (of A to E) that names a real barrier."""
    name = "practice_drop_in"
    chosen = letters(name, value, "ABCDE", many=True)
    wrong = [x for x in "ABCDE" if (x in chosen) != (x in DROP_IN_RIGHT)]
    if wrong:
        first = wrong[0]
        what = "is not a barrier" if first in chosen else "is missing"
        more = (
            f" ({len(wrong) - 1} more letter{'s' * (len(wrong) > 2)} also wrong)"
            if len(wrong) > 1
            else ""
        )
        fail(name, f"({first}) {what}{more}", mistake=_drop_in_mistakes()[first])
    print("✓ practice_drop_in: order, nonlinearity and the future — lessons 04, 05 and 06")
