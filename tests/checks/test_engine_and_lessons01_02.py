"""transformer_lab.check (the test cells' engine) and transformer_lab.student (the student's package).

Every catalogued mistake is a mutant: the hidden (thorough) check must reject it and name it.
Further mutants show that each part of the comparison (gradients, shapes, dtype, global seed,
forbidden built-ins) catches what it is there to catch.
"""

from __future__ import annotations

import ast
import linecache
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer_lab
from transformer_lab import attention, check, student
from transformer_lab.check import compare

# ---------------------------------------------------------------------------------------------
# Correct student implementations, written the way a student would.


def good_sdpa(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights


class GoodSelfAttention(nn.Module):
    def __init__(self, d_model, d_k=None, d_v=None):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k or d_model, bias=False)
        self.w_k = nn.Linear(d_model, d_k or d_model, bias=False)
        self.w_v = nn.Linear(d_model, d_v or d_model, bias=False)
        self.last_weights = None

    def forward(self, x, mask=None):
        out, self.last_weights = good_sdpa(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        return out


class GoodRNN(nn.Module):
    def __init__(self, d_in, d_hidden):
        super().__init__()
        self.d_hidden = d_hidden
        self.w_xh = nn.Linear(d_in, d_hidden)
        self.w_hh = nn.Linear(d_hidden, d_hidden)

    def forward(self, x, h0=None):
        h = x.new_zeros(x.shape[0], self.d_hidden) if h0 is None else h0
        outputs = []
        for t in range(x.shape[1]):
            h = torch.tanh(self.w_xh(x[:, t]) + self.w_hh(h))
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


def good_steps(kind, n, kernel_size=3):
    if kind == "rnn":
        return n
    if kind == "attention":
        return 1
    if kind == "conv":
        return max(1, math.ceil((n - 1) / (kernel_size - 1)))
    raise ValueError(f"unknown kind {kind!r}")


GOOD = {
    "scaled_dot_product_attention": good_sdpa,
    "SelfAttention": GoodSelfAttention,
    "RNN": GoodRNN,
    "sequential_steps": good_steps,
}


@pytest.mark.parametrize("name", sorted(GOOD))
@pytest.mark.parametrize("thorough", [False, True], ids=["visible", "thorough"])
def test_correct_implementations_pass(name, thorough, capsys):
    assert getattr(check, name)(GOOD[name], thorough=thorough) is None
    assert f"✓ {name}" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# The catalogue: each mistake is caught by the hidden checks and produces its sentence.

CATALOGUE = [(name, m.key) for name, ex in check.EXERCISES.items() for m in ex.mistakes]


@pytest.mark.parametrize("name,key", CATALOGUE, ids=[f"{n}-{k}" for n, k in CATALOGUE])
def test_catalogued_mistake_is_caught_and_named(name, key):
    mistake = check.EXERCISES[name].mistake(key)
    with pytest.raises(check.CheckFailed) as info:
        getattr(check, name)(mistake.impl, thorough=True)
    assert f"Likely mistake: {mistake.sentence}" in str(info.value)


def test_catalogues_have_at_least_three_mistakes_each():
    for name, ex in check.EXERCISES.items():
        assert len(ex.mistakes) >= 3, name
        assert len({m.sentence for m in ex.mistakes}) == len(ex.mistakes)
        assert len({m.key for m in ex.mistakes}) == len(ex.mistakes)


@pytest.mark.parametrize(
    "name,key",
    [
        ("scaled_dot_product_attention", "no-scale"),
        ("scaled_dot_product_attention", "softmax-query-axis"),
        ("scaled_dot_product_attention", "mask-after-softmax"),
        ("scaled_dot_product_attention", "scale-by-sqrt-d_v"),  # a visible case has d_v != d_k
        ("scaled_dot_product_attention", "mask-inverted-nan"),
        ("RNN", "no-tanh"),
        ("RNN", "records-previous-state"),
        ("RNN", "stacked-time-first"),
        ("SelfAttention", "q-k-swapped"),
    ],
)
def test_common_mistakes_are_named_by_the_visible_check(name, key):
    mistake = check.EXERCISES[name].mistake(key)
    with pytest.raises(check.CheckFailed, match="Likely mistake"):
        getattr(check, name)(mistake.impl)


# ---------------------------------------------------------------------------------------------
# SelfAttention.last_weights, a stated rule: mutants whose output is right (so the output cases
# passed them before the last_weights case existed) but whose last_weights is wrong.


class NoLastWeights(nn.Module):  # the attribute never exists
    def __init__(self, d_model, d_k=None, d_v=None):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k or d_model, bias=False)
        self.w_k = nn.Linear(d_model, d_k or d_model, bias=False)
        self.w_v = nn.Linear(d_model, d_v or d_model, bias=False)

    def forward(self, x, mask=None):
        return good_sdpa(self.w_q(x), self.w_k(x), self.w_v(x), mask)[0]


class NoneLastWeights(GoodSelfAttention):  # set to None in __init__, never assigned
    def forward(self, x, mask=None):
        return good_sdpa(self.w_q(x), self.w_k(x), self.w_v(x), mask)[0]


class StaleLastWeights(GoodSelfAttention):  # kept from the first call only
    def forward(self, x, mask=None):
        out, weights = good_sdpa(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        if self.last_weights is None:
            self.last_weights = weights
        return out


class OutputAsLastWeights(GoodSelfAttention):
    def forward(self, x, mask=None):
        self.last_weights = super().forward(x, mask)
        return self.last_weights


class FirstSequenceLastWeights(GoodSelfAttention):
    def forward(self, x, mask=None):
        out = super().forward(x, mask)
        self.last_weights = self.last_weights[0]
        return out


class ScoresAsLastWeights(GoodSelfAttention):
    def forward(self, x, mask=None):
        q, k = self.w_q(x), self.w_k(x)
        self.last_weights = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return good_sdpa(q, k, self.w_v(x), mask)[0]


class UnnormalisedLastWeights(GoodSelfAttention):  # exp(scores), never divided by the row sums
    def forward(self, x, mask=None):
        q, k = self.w_q(x), self.w_k(x)
        out = super().forward(x, mask)
        self.last_weights = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
        return out


class TransposedLastWeights(GoodSelfAttention):  # (B, L_k, L_q): the right shape, wrong entries
    def forward(self, x, mask=None):
        out = super().forward(x, mask)
        self.last_weights = self.last_weights.transpose(-2, -1)
        return out


class ListOfLastWeights(GoodSelfAttention):  # one entry per call
    def forward(self, x, mask=None):
        out, weights = good_sdpa(self.w_q(x), self.w_k(x), self.w_v(x), mask)
        self.last_weights = [*(self.last_weights or []), weights]
        return out


LAST_WEIGHTS_MUTANTS = [
    # mutant, the catalogued mistake it is named as (None: told what is wrong, no mistake named),
    # and a phrase of the problem
    (NoLastWeights, "no-last-weights", "has no attribute `last_weights`"),
    (NoneLastWeights, "no-last-weights", "is still None after two calls"),
    (StaleLastWeights, "stale-last-weights", "still holds the weights of the first call"),
    (OutputAsLastWeights, "output-as-last-weights", "has shape (3, 4, 5)"),
    (FirstSequenceLastWeights, "first-sequence-weights", "has shape (4, 4)"),
    (ScoresAsLastWeights, "scores-as-last-weights", "the softmax weights' rows to 1"),
    (UnnormalisedLastWeights, None, "the softmax weights' rows to 1"),
    (TransposedLastWeights, None, "differs in"),
    (ListOfLastWeights, None, "should be a tensor but is a list"),
]


@pytest.mark.parametrize(
    "mutant,key,phrase", LAST_WEIGHTS_MUTANTS, ids=[m.__name__ for m, _, _ in LAST_WEIGHTS_MUTANTS]
)
def test_visible_self_attention_check_pins_last_weights(mutant, key, phrase):
    ex = check.EXERCISES["SelfAttention"]
    with pytest.raises(check.CheckFailed) as info:
        check.SelfAttention(mutant)
    err = info.value
    assert err.case.startswith("last_weights after two calls"), err
    assert phrase in err.problem, err
    assert err.mistake == (ex.mistake(key).sentence if key else None), err


@pytest.mark.parametrize(
    "mutant", [m for m, _, _ in LAST_WEIGHTS_MUTANTS], ids=lambda m: m.__name__
)
def test_last_weights_mutants_pass_a_check_without_the_last_weights_case(mutant, monkeypatch):
    # Mutant of the check: the old output-only comparison. Every mutant above passes it, so the
    # last_weights case is what catches them.
    from transformer_lab.check import lesson02

    monkeypatch.setattr(lesson02, "_check_last_weights", lambda ex, student_cls, thorough: 0)
    assert check.SelfAttention(mutant, thorough=True) is None


def test_last_weights_case_passes_detached_weights_kept_by_a_right_layer(capsys):
    class Detached(GoodSelfAttention):  # for plotting: detached weights are fine
        def forward(self, x, mask=None):
            out = super().forward(x, mask)
            self.last_weights = self.last_weights.detach()
            return out

    assert check.SelfAttention(Detached) is None
    assert "last_weights of the last call" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# Mutants that are not in the catalogue: what the message says about them.


def test_gradient_only_bug_is_caught():
    # Same forward values, but no gradient flows through the softmax's weights.
    def detached_weights(q, k, v, mask=None):
        out, w = good_sdpa(q, k, v, mask)
        return w.detach() @ v, w

    with pytest.raises(check.CheckFailed, match="gradient with respect to `q`"):
        check.scaled_dot_product_attention(detached_weights)


def test_cut_graph_is_reported():
    def via_numpy(q, k, v, mask=None):
        out, w = good_sdpa(q, k, v, mask)
        return torch.tensor(out.detach().numpy()), w.detach()

    with pytest.raises(check.CheckFailed, match="no gradient flows back"):
        check.scaled_dot_product_attention(via_numpy)


def test_shape_mismatch_names_both_shapes():
    def transposed_weights(q, k, v, mask=None):
        out, w = good_sdpa(q, k, v, mask)
        return out, w.transpose(-2, -1)

    with pytest.raises(
        check.CheckFailed, match=r"weights has shape \(5, 3\) but should have shape \(3, 5\)"
    ):
        check.scaled_dot_product_attention(transposed_weights)


def test_dtype_mismatch_is_reported():
    def always_float32(q, k, v, mask=None):
        out, w = good_sdpa(q.float(), k.float(), v.float(), mask)
        return out, w

    with pytest.raises(
        check.CheckFailed, match="dtype torch.float32 but should have dtype torch.float64"
    ):
        check.scaled_dot_product_attention(always_float32)


def test_values_mismatch_says_where_and_how_much():
    def off_by_a_bit(q, k, v, mask=None):
        out, w = good_sdpa(q, k, v, mask)
        return out + 1e-3, w

    with pytest.raises(check.CheckFailed) as info:
        check.scaled_dot_product_attention(off_by_a_bit)
    message = str(info.value)
    assert "largest difference is 0.001" in message and "at index" in message
    assert "case: q (3, 4)" in message and "float64 on cpu" in message
    assert "Likely mistake" not in message  # not in the catalogue: no wrong name


def test_only_tuple_output_is_accepted():
    with pytest.raises(check.CheckFailed, match="should be 2 value"):
        check.scaled_dot_product_attention(lambda q, k, v, mask=None: good_sdpa(q, k, v, mask)[0])


def test_module_with_wrong_parameter_names_is_told_the_expected_names():
    class Renamed(GoodSelfAttention):  # w_q under another name (an alias beside it is fine)
        def __init__(self, d_model, d_k=None, d_v=None):
            super().__init__(d_model, d_k, d_v)
            self.query = self.w_q
            del self.w_q

    with pytest.raises(check.CheckFailed, match="unexpected: \\['query.weight'\\]") as info:
        check.SelfAttention(Renamed)
    assert "missing: ['w_q.weight']" in str(info.value)


def test_large_logits_fail_the_visible_check_too():
    naive = check.EXERCISES["scaled_dot_product_attention"].mistake("naive-exp")
    with pytest.raises(check.CheckFailed, match="overflows") as info:
        check.scaled_dot_product_attention(naive.impl)
    assert "large logits" in info.value.case
    with pytest.raises(check.CheckFailed, match="overflows"):
        check.scaled_dot_product_attention(naive.impl, thorough=True)


# Every rule an exercise's text states has a visible case: a mutant that breaks only that rule
# fails the visible check, so no hidden point is lost on a rule the visible check skipped.


def test_visible_sdpa_gives_a_fully_masked_row_zero_weights():
    nan_rows = check.EXERCISES["scaled_dot_product_attention"].mistake("nan-rows")
    with pytest.raises(check.CheckFailed) as info:
        check.scaled_dot_product_attention(nan_rows.impl)
    assert info.value.mistake == nan_rows.sentence
    assert "every key masked" in info.value.case


def test_visible_steps_single_token_and_unknown_kind():
    ex = check.EXERCISES["sequential_steps"]
    with pytest.raises(check.CheckFailed) as info:
        check.sequential_steps(ex.mistake("conv-zero").impl)
    assert info.value.mistake == ex.mistake("conv-zero").sentence

    def no_raise(kind, n, kernel_size=3):  # right for the three kinds, None for any other
        if kind in ("rnn", "attention", "conv"):
            return good_steps(kind, n, kernel_size)
        return None

    for wrong in (no_raise, ex.mistake("unknown-kind").impl):
        with pytest.raises(check.CheckFailed, match="instead of raising ValueError") as info:
            check.sequential_steps(wrong)
        assert info.value.mistake == ex.mistake("unknown-kind").sentence
        assert "'transformer'" in info.value.case

    def type_error(kind, n, kernel_size=3):
        if kind in ("rnn", "attention", "conv"):
            return good_steps(kind, n, kernel_size)
        raise TypeError("bad kind")

    with pytest.raises(check.CheckFailed, match="raised TypeError: bad kind"):
        check.sequential_steps(type_error)


def test_check_does_not_depend_on_or_change_the_global_seed():
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    check.RNN(GoodRNN)
    check.SelfAttention(GoodSelfAttention)
    assert torch.equal(torch.random.get_rng_state(), state)
    torch.manual_seed(999)
    check.RNN(GoodRNN)


def test_module_with_dropout_in_train_mode_is_compared_in_eval_mode():
    class WithDropout(GoodSelfAttention):
        def __init__(self, d_model, d_k=None, d_v=None):
            super().__init__(d_model, d_k, d_v)
            self.dropout = nn.Dropout(0.5)

        def forward(self, x, mask=None):
            return self.dropout(super().forward(x, mask))

    assert check.SelfAttention(WithDropout) is None


# ---------------------------------------------------------------------------------------------
# Forbidden built-ins and the reference twin.


def test_calling_torch_fused_attention_is_refused():
    def cheat(q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), None

    with pytest.raises(check.ImplementThisYourself, match="implement this yourself"):
        check.scaled_dot_product_attention(cheat)
    assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention


def test_directly_imported_builtin_is_refused_and_restored():
    namespace = {}
    exec(
        "from torch.nn.functional import scaled_dot_product_attention as sdpa\n"
        "def cheat(q, k, v, mask=None):\n"
        "    return sdpa(q, k, v, attn_mask=mask), None\n",
        namespace,
    )
    original = namespace["sdpa"]
    with pytest.raises(check.ImplementThisYourself):
        check.scaled_dot_product_attention(namespace["cheat"])
    assert namespace["sdpa"] is original


def test_reference_twin_is_refused_through_module_closure_and_package():
    reference = attention.scaled_dot_product_attention

    def through_module(q, k, v, mask=None):
        return attention.scaled_dot_product_attention(q, k, v, mask)

    def through_package(q, k, v, mask=None):
        return transformer_lab.scaled_dot_product_attention(q, k, v, mask)

    def make_closure():
        twin = reference

        def through_closure(q, k, v, mask=None):
            return twin(q, k, v, mask)

        return through_closure

    for cheat in (through_module, through_package, make_closure(), reference):
        with pytest.raises(check.ImplementThisYourself):
            check.scaled_dot_product_attention(cheat)
    assert attention.scaled_dot_product_attention is reference
    assert transformer_lab.scaled_dot_product_attention is reference


def test_rnn_built_on_nn_rnn_is_refused():
    class Wrapped(nn.Module):
        def __init__(self, d_in, d_hidden):
            super().__init__()
            self.inner = nn.RNN(d_in, d_hidden, batch_first=True)

    with pytest.raises(check.ImplementThisYourself, match="nn.RNN"):
        check.RNN(Wrapped)
    assert nn.RNN.__name__ == "RNN"


def test_everything_is_restored_after_a_failing_check():
    originals = (
        F.scaled_dot_product_attention,
        attention.scaled_dot_product_attention,
        nn.MultiheadAttention,
    )

    def broken(q, k, v, mask=None):
        raise ZeroDivisionError("oops")

    with pytest.raises(check.CheckFailed, match="ZeroDivisionError: oops"):
        check.scaled_dot_product_attention(broken)
    assert (
        F.scaled_dot_product_attention,
        attention.scaled_dot_product_attention,
        nn.MultiheadAttention,
    ) == originals


def test_mutant_check_without_forbid_would_let_the_cheat_pass(monkeypatch):
    # Mutant of the engine: an empty forbidden list. The cheat then passes, so the real list matters.
    def cheat(q, k, v, mask=None):
        return attention.scaled_dot_product_attention(q, k, v, mask)

    monkeypatch.setattr(check.EXERCISES["scaled_dot_product_attention"], "forbidden", ())
    assert check.scaled_dot_product_attention(cheat) is None


def test_mutant_check_without_gradients_would_miss_a_gradient_bug(monkeypatch):
    def detached_weights(q, k, v, mask=None):
        out, w = good_sdpa(q, k, v, mask)
        return w.detach() @ v, w

    monkeypatch.setattr(compare, "backward", lambda outputs, cot, leaves: [None] * len(leaves))
    assert check.scaled_dot_product_attention(detached_weights) is None


# ---------------------------------------------------------------------------------------------
# Devices. (Visible-check latency is measured by benchmarks/check_latency.py.)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
def test_thorough_check_runs_on_cuda_too(capsys):
    assert torch.device("cuda") in [torch.device(d.type) for d in check.available_devices()]
    check.scaled_dot_product_attention(good_sdpa, thorough=True)
    assert "on cpu, cuda" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# The student's own package.


def test_passing_code_is_saved_and_used(tmp_path, capsys):
    check.scaled_dot_product_attention(good_sdpa)
    check.SelfAttention(GoodSelfAttention)
    saved = tmp_path / "pkg" / "transformer_lab_student" / "attention.py"
    text = saved.read_text()
    assert "def good_sdpa" in text and "class GoodSelfAttention" in text
    mine = student.use("scaled_dot_product_attention")
    assert "YOUR implementation" in capsys.readouterr().out
    assert mine.__module__ == "transformer_lab_student.attention"
    q = torch.randn(2, 3, 4)
    torch.testing.assert_close(mine(q, q, q)[0], attention.scaled_dot_product_attention(q, q, q)[0])
    layer = student.use("SelfAttention")(4)
    assert layer(q).shape == (2, 3, 4)
    status = student.progress()
    assert status["scaled_dot_product_attention"] == "yours" and status["RNN"] == "reference"


def test_failing_code_is_not_saved(tmp_path, capsys):
    with pytest.raises(check.CheckFailed):
        check.RNN(check.EXERCISES["RNN"].mistake("no-tanh").impl)
    assert not (tmp_path / "pkg" / "transformer_lab_student" / "rnn.py").exists()
    assert student.use("RNN") is transformer_lab.rnn.RNN
    assert "using the reference" in capsys.readouterr().out


def test_grading_mode_never_saves_and_always_uses_the_reference(tmp_path, monkeypatch, capsys):
    check.RNN(GoodRNN)
    assert student.progress()["RNN"] == "yours"
    monkeypatch.setenv("TRANSFORMER_LAB_GRADING", "1")
    check.sequential_steps(good_steps)
    assert (
        "sequential_steps"
        not in (tmp_path / "pkg" / "transformer_lab_student" / "progress.json").read_text()
    )
    assert student.use("RNN") is transformer_lab.rnn.RNN
    assert "grading mode" in capsys.readouterr().out
    assert set(student.progress().values()) == {"reference"}


def test_source_of_a_class_defined_in_a_notebook_cell():
    # IPython compiles each cell under a fake file name kept in linecache; emulate that.
    cell = "class Cell(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
    filename = "<ipython-input-7-abcdef>"
    linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
    namespace = {"__name__": "__main__", "torch": torch}
    exec(compile(cell, filename, "exec"), namespace)
    assert student.source_of(namespace["Cell"]) == cell


def test_subclass_of_the_reference_is_refused():
    from transformer_lab.attention import SelfAttention as Reference

    Cheat = type("SelfAttention", (Reference,), {"__module__": "__main__"})
    with pytest.raises(check.ImplementThisYourself, match="subclasses the reference"):
        check.SelfAttention(Cheat)


# ---------------------------------------------------------------------------------------------
# The failure's structure: what a notebook renders, and what the message is composed from.


def test_check_failed_is_composed_from_its_parts():
    err = check.CheckFailed(
        exercise="split_heads", problem="output differs", case="two heads (float64 on cpu)"
    )
    assert str(err) == "split_heads: output differs\n  case: two heads (float64 on cpu)"
    err = check.CheckFailed(exercise="RNN", problem="p", mistake="the tanh is missing.")
    assert str(err) == "RNN: p\nLikely mistake: the tanh is missing."
    assert isinstance(err, AssertionError) and err.case is None and err.cause is None
    assert str(check.CheckFailed("as written")) == "as written"


def test_failure_carries_exercise_case_mistake_and_the_students_exception():
    mistake = check.EXERCISES["scaled_dot_product_attention"].mistake("no-scale")
    with pytest.raises(check.CheckFailed) as info:
        check.scaled_dot_product_attention(mistake.impl)
    err = info.value
    assert err.exercise == "scaled_dot_product_attention" and err.mistake == mistake.sentence
    assert err.case == "q (3, 4), k (5, 4), v (5, 6) (float64 on cpu)"
    assert (
        str(err)
        == f"{err.exercise}: {err.problem}\n  case: {err.case}\nLikely mistake: {err.mistake}"
    )

    def crashes(q, k, v, mask=None):
        raise ValueError("boom")

    with pytest.raises(check.CheckFailed, match="your function raised ValueError: boom") as info:
        check.scaled_dot_product_attention(crashes)
    assert isinstance(info.value.cause, ValueError) and info.value.__suppress_context__


def test_unknown_mistake_key_lists_the_keys():
    with pytest.raises(KeyError, match="no-scale"):
        check.EXERCISES["scaled_dot_product_attention"].mistake("no-such-mistake")


def _imported(path: Path, package: str) -> set[str]:
    """The dotted names a module's imports name, at any depth (lazy imports too); `package` is
    the module's own package, against which relative imports are resolved."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[: len(base) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            found |= {source} | {f"{source}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Attribute) and node.attr == "import_module":
            found.add("<by name>")  # importlib.import_module: an import the structure tool misses
    return found


def assert_student_check_one_way(src: Path) -> None:
    """student imports check; no module of check imports student; the registry imports nothing of
    the package, not even by name."""
    package = src / "transformer_lab"
    assert "transformer_lab.check" in _imported(package / "student.py", "transformer_lab")
    for path in sorted((package / "check").glob("*.py")):
        imported = _imported(path, "transformer_lab.check")
        assert "transformer_lab.student" not in imported, f"{path.name} imports student"
    registry_imports = _imported(package / "registry.py", "transformer_lab")
    assert not {name for name in registry_imports if name.startswith(("transformer_lab", "<"))}


def test_student_and_check_depend_one_way():
    assert_student_check_one_way(Path(transformer_lab.__file__).parents[1])
    from transformer_lab import registry

    assert registry.EXERCISES is check.EXERCISES
    assert list(registry.EXERCISES)[:2] == ["RNN", "sequential_steps"]
    assert registry.EXERCISES["RNN"].lesson == "01" and registry.EXERCISES["RNN"].module == "rnn"


@pytest.mark.parametrize(
    "mutant",
    [
        ("check/exercise.py", "def _save():\n    from .. import student\n"),  # the old engine
        ("registry.py", "import importlib\nimportlib.import_module('transformer_lab.check')\n"),
    ],
    ids=["check-imports-student", "registry-loads-by-name"],
)
def test_mutant_dependency_in_both_directions_fails(tmp_path, mutant):
    import shutil

    src = Path(transformer_lab.__file__).parents[1]
    copy = tmp_path / "transformer_lab"
    for rel in ("student.py", "registry.py", "check"):
        target = copy / rel
        if (src / "transformer_lab" / rel).is_dir():
            shutil.copytree(src / "transformer_lab" / rel, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src / "transformer_lab" / rel, target)
    rel, extra = mutant
    with (copy / rel).open("a", encoding="utf-8") as f:
        f.write(extra)
    with pytest.raises(AssertionError):
        assert_student_check_one_way(tmp_path)


def test_trial_driver_names_the_mistake_whose_finding_matches():
    """TrialDriver (traces, statistics): a trial per case; a mistake is named by its finding."""
    from transformer_lab.check import Finding, TrialDriver

    ex = check.EXERCISES["sequential_steps"]

    def trial(impl, n, setting, call):
        got = call(lambda: impl("rnn", n), "your function", f"n={n}")
        if got != n:
            return Finding(f"rnn steps for n={n}: got {got}", f"n={n}", "count", got)
        return None

    driver = TrialDriver(lambda thorough: [1, 5], trial, covered="two lengths")
    assert driver.run(ex, good_steps, thorough=False) == 2
    with pytest.raises(check.CheckFailed) as info:
        driver.run(ex, ex.mistake("rnn-n-minus-1").impl, thorough=False)
    err = info.value
    assert (err.problem, err.case) == ("rnn steps for n=1: got 0", "n=1")
    assert err.mistake == ex.mistake("rnn-n-minus-1").sentence

    def crashes(kind, n, kernel_size=3):
        raise ValueError("no")

    with pytest.raises(check.CheckFailed, match="your function raised ValueError: no") as info:
        driver.run(ex, crashes, thorough=False)
    assert isinstance(info.value.cause, ValueError)


def _unknown_kind(thorough: bool) -> list:
    return [check.Reject("an unknown kind", lambda impl: impl("transformer", 8))]


def assert_raises_driver_words_each_outcome(driver_class) -> None:
    """A ValueError passes; a result and another exception fail, each worded, with the mistake
    that does the same named and the student's exception kept as the cause."""
    ex = check.EXERCISES["sequential_steps"]
    driver = driver_class(_unknown_kind, shown=repr, covered="an unknown kind")
    assert driver.run(ex, good_steps, thorough=False) == 1
    assert driver.covered(False) == "an unknown kind"

    with pytest.raises(check.CheckFailed) as info:
        driver.run(ex, lambda kind, n, kernel_size=3: 7, thorough=False)
    err = info.value
    assert (err.problem, err.case) == (
        "your function returned 7 instead of raising ValueError",
        "an unknown kind",
    )
    assert err.mistake == ex.mistake("unknown-kind").sentence  # it returns too

    def looks_up(kind, n, kernel_size=3):
        return {"rnn": n}[kind]

    with pytest.raises(check.CheckFailed) as info:
        driver.run(ex, looks_up, thorough=False)
    err = info.value
    assert err.problem == "your function raised KeyError: 'transformer'"
    assert err.mistake_key == "lookup-error-not-checked"  # no mistake raises it: the lookup's own
    assert isinstance(err.cause, KeyError)


def test_raises_driver_words_each_outcome():
    assert_raises_driver_words_each_outcome(check.RaisesDriver)


class _AnyErrorRejects(check.RaisesDriver):
    """Mutant: any exception counts as the rejection."""

    def __init__(self, cases, **kwargs):
        super().__init__(cases, error=Exception, **kwargs)


class _NoDiagnosis(check.RaisesDriver):
    """Mutant: never names a mistake."""

    def run_case(self, ex, student_obj, case, index, setting):
        kind, what = ex.run_student(student_obj, lambda: self.outcome(student_obj, case))
        if kind != "ValueError":
            check.fail(
                ex, f"your function returned {what!r} instead of raising ValueError", case.label
            )


@pytest.mark.parametrize(
    "mutant", [_AnyErrorRejects, _NoDiagnosis], ids=["any-error", "no-mistake"]
)
def test_mutant_raises_driver_fails(mutant):
    with pytest.raises(AssertionError):
        assert_raises_driver_words_each_outcome(mutant)


def test_exactly_equal_is_false_not_a_crash_for_arrays_against_tensors():
    """A student's NumPy result against a reference tensor (either way round) is 'not equal', so
    the check names it instead of crashing with "Boolean value of Tensor ... is ambiguous"."""
    import numpy as np

    from transformer_lab.check.answer_drivers import exactly_equal

    mask = torch.ones(3, dtype=torch.bool)
    assert exactly_equal(np.ones(3, bool), mask) is False
    assert exactly_equal(mask, np.ones(3, bool)) is False
    assert exactly_equal(mask.clone(), mask) is True
    assert exactly_equal([1, 2], [1, 2]) is True
