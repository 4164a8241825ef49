"""What a student meets in JupyterLab (issue 29): short, true messages.

- A refusal ("implement this yourself") never suggests an operation the exercise forbids.
- A scalar that differs reads "got 0.5, expected 0.25", without an index or a count.
- Message lines are wrapped at spaces (JupyterLab breaks long lines mid-word), never inside a
  word or a `code` span.
- An untouched exercise (nbgrader's stub, ``raise NotImplementedError()``) gives one line,
  "`online_softmax` is not written yet: fill in the cell above.", not a traceback through the
  engine; the error is still a NotImplementedError (nbgrader scores the cell 0, grading reads
  "not attempted"). A NotImplementedError the student's code raises for a reason of its own is
  the usual short failure. Tested on every exercise as the released notebooks have it.

Each assertion is a function, and each has a mutant (the old behaviour, or a plausible wrong
implementation) that must fail it.
"""

from __future__ import annotations

import ast
import importlib
import io
import json
import re
from contextlib import redirect_stdout
from pathlib import Path

import nbformat
import pytest
import torch
from torch import nn

from transformer_lab import check
from transformer_lab.check import exercise, feedback
from transformer_lab.check.compare import compare_tensor
from transformer_lab.check.drivers import Driver
from transformer_lab.check.exercise import CheckFailed, NotWrittenYet

forbid = importlib.import_module("transformer_lab.check.forbid")  # check.forbid is the function


@pytest.fixture(autouse=True)
def _grading(monkeypatch):
    monkeypatch.setenv("TRANSFORMER_LAB_GRADING", "1")  # nothing is saved


def _cell(source: str, tmp_path: Path, namespace: dict | None = None) -> dict:
    """Run `source` as a notebook cell would (its own file, outside the course), in `namespace`."""
    path = tmp_path / f"cell{len(list(tmp_path.iterdir()))}.py"
    path.write_text(source)
    if namespace is None:
        namespace = {"torch": torch, "nn": nn}
    namespace.setdefault("__name__", "__main__")  # what a notebook's classes have as __module__
    exec(compile(source, str(path), "exec"), namespace)  # noqa: S102 - test code
    return namespace


def _raised(call) -> BaseException:
    with pytest.raises(BaseException) as info:
        call()
    return info.value


# ----------------------------------------------------------------------------------------------
# A refusal never suggests what the exercise forbids.


def _suggested(message: str) -> list[str]:
    match = re.search(r"basic tensor operations(?: \(([^()]*)\))?\.", message)
    assert match, message
    return [op for op in (match.group(1) or "").split(", ") if op and op != "..."]


def assert_suggests_nothing_forbidden(message: str, forbidden) -> None:
    banned = {dotted.rsplit(".", 1)[-1] for dotted in forbidden}
    aliases = {"@": {"matmul", "__matmul__", "mm", "bmm"}}
    for op in _suggested(message):
        assert banned.isdisjoint(aliases.get(op, {op})), (op, message)


def _refusal(tmp_path, source: str, name: str) -> str:
    ns = _cell(source, tmp_path)
    err = _raised(lambda: getattr(check, name)(ns[name]))
    assert isinstance(err, check.ImplementThisYourself), repr(err)
    return str(err)


SOFTMAX_USER = "def online_softmax(scores, block_size):\n    return torch.softmax(scores, -1)\n"
FUSED_USER = (
    "def scaled_dot_product_attention(q, k, v, mask=None):\n"
    "    return torch.nn.functional.scaled_dot_product_attention(q, k, v), None\n"
)


def test_online_softmax_refusal_does_not_suggest_softmax(tmp_path):
    message = _refusal(tmp_path, SOFTMAX_USER, "online_softmax")
    assert_suggests_nothing_forbidden(message, check.online_softmax.forbidden)
    assert "softmax" not in _suggested(message) and "exp" in _suggested(message)
    # where softmax is allowed, it is suggested: the list is derived, not emptied
    message = _refusal(tmp_path, FUSED_USER, "scaled_dot_product_attention")
    assert "softmax" in _suggested(message)


@pytest.mark.parametrize("name", list(check.EXERCISES))
def test_no_exercise_suggests_what_it_forbids(name):
    forbidden = tuple(check.EXERCISES[name].forbidden)
    allowed = forbid.allowed_operations(forbidden)
    assert allowed  # something is always left to suggest
    message = f"Write it with basic tensor operations ({', '.join(allowed)}, ...)."
    assert_suggests_nothing_forbidden(message, forbidden)


def test_mutant_with_the_old_fixed_list_fails(monkeypatch, tmp_path):
    monkeypatch.setattr(forbid, "allowed_operations", lambda forbidden: ["@", "softmax", "tanh"])
    message = _refusal(tmp_path, SOFTMAX_USER, "online_softmax")
    with pytest.raises(AssertionError):
        assert_suggests_nothing_forbidden(message, check.online_softmax.forbidden)


# ----------------------------------------------------------------------------------------------
# A scalar reads naturally.

F64, CPU = torch.float64, torch.device("cpu")


def assert_natural_scalar(problem: str) -> None:
    """One value against one value: no index, no count of entries."""
    assert re.search(r"got \S+, expected \S+|where the reference gives \S+", problem), problem
    assert "index" not in problem and "entries" not in problem, problem


def test_a_scalar_that_differs_reads_got_and_expected():
    problem = compare_tensor(
        torch.tensor(0.25, dtype=F64), torch.tensor(0.5, dtype=F64), "loss", F64, CPU
    )
    assert problem.startswith("loss differs: got 0.5, expected 0.25 (tolerance atol=")
    assert_natural_scalar(problem)


@pytest.mark.parametrize(
    "got, expected, text",
    [
        (torch.tensor(3), torch.tensor(2), "count differs: got 3, expected 2"),
        (
            torch.tensor(float("nan"), dtype=F64),
            torch.tensor(0.25, dtype=F64),
            "count contains NaN where the reference gives 0.25",
        ),
        (
            torch.tensor(float("inf"), dtype=F64),
            torch.tensor(0.25, dtype=F64),
            "count contains inf where the reference gives 0.25",
        ),
        (
            torch.tensor([0.5], dtype=F64),
            torch.tensor([0.25], dtype=F64),
            "count differs: got 0.5, expected 0.25",
        ),
    ],
    ids=["integer", "nan", "inf", "one-entry"],
)
def test_every_kind_of_scalar_reads_naturally(got, expected, text):
    problem = compare_tensor(expected, got, "count", F64, CPU)
    assert problem.startswith(text), problem
    assert_natural_scalar(problem)


def test_a_tensor_still_says_where_it_differs():
    expected = torch.zeros(2, 3, dtype=F64)
    got = expected.clone()
    got[1, 2] = 1.0
    problem = compare_tensor(expected, got, "output", F64, CPU)
    assert "differs in 1 of 6 entries" in problem and "at index (1, 2)" in problem


def test_the_scalar_checks_say_it_too():
    err = _raised(lambda: check.lm_loss(lambda logits, targets: -(logits.log_softmax(-1).mean())))
    assert isinstance(err, CheckFailed)
    assert_natural_scalar(err.problem)
    assert re.match(r"loss differs: got -?[\d.]+, expected [\d.]+ \(tolerance", err.problem)


def test_mutant_with_the_old_scalar_wording_fails():
    old = (
        "loss differs in 1 of 1 entries; the largest difference is 0.25 at index () (got 0.5, "
        "expected 0.25; tolerance atol=1e-09, rtol=1e-07 for float64)"
    )
    with pytest.raises(AssertionError):
        assert_natural_scalar(old)


# ----------------------------------------------------------------------------------------------
# Lines are wrapped at spaces, never inside a word or a `code` span.

FIXTURE = Path(__file__).parent / "fixtures" / "check_messages.json"
MESSAGES = sorted(
    {
        m
        for per in json.loads(FIXTURE.read_text()).values()
        for v in per.values()
        for m in v.values()
    }
)


# What may not be broken: a `code` span, a short parenthesised group such as a shape.
UNBREAKABLE = re.compile(r"`[^`\n]+`|\([^()\n]{1,24}\)")


def assert_wrapped(text: str, lines: list[str], width: int = feedback.WIDTH) -> None:
    """Every line fits (or is one piece that cannot be broken), the words are the same words in
    the same order (none cut in two), and every `code` span sits on one line."""
    for line in lines:
        whole = UNBREAKABLE.sub(lambda m: m.group(0).replace(" ", "_"), line.strip())
        assert len(line) <= width or " " not in whole, line
    assert " ".join(lines).split() == text.split()
    for span in re.findall(r"`[^`\n]+`", text):
        assert any(span in line for line in lines), span


LONG = (
    "the positions to skip are those whose target is -100 (IGNORE_INDEX), not token 0: call "
    "`torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())` yourself, "
    "or mask with `targets != -100` before the mean, which counts only the positions that count."
)


@pytest.mark.parametrize("text", [LONG, *MESSAGES[:: max(1, len(MESSAGES) // 60)]])
def test_long_lines_wrap_at_spaces(text):
    assert_wrapped(text, feedback.wrap(text))


def test_a_rendered_failure_is_wrapped():
    err = CheckFailed(exercise="lm_loss", problem="loss differs", case="x (2, 3)", mistake=LONG)
    lines = feedback.render_text(err).splitlines()
    assert lines[0] == "✗ lm_loss: check failed" and lines[1].startswith("Likely mistake: ")
    assert all(len(line) <= feedback.WIDTH for line in lines), lines
    mistake = [line for line in lines[1:] if not line.startswith(("What differs", "Case"))]
    assert_wrapped("Likely mistake: " + LONG, mistake)


def test_the_passing_line_is_wrapped(tmp_path, capsys):
    ns = _cell(
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    w = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5)\n"
        "    if mask is not None:\n"
        "        w = w.masked_fill(~mask, float('-inf'))\n"
        "    w = w.softmax(-1).nan_to_num(0.0)\n"
        "    return w @ v, w\n",
        tmp_path,
    )
    assert check.scaled_dot_product_attention(ns["scaled_dot_product_attention"]) is None
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("✓ scaled_dot_product_attention: all ")
    assert all(len(line) <= feedback.WIDTH for line in lines), lines


@pytest.mark.parametrize(
    "mutant",
    [
        lambda text: [text],  # not wrapped
        lambda text: [text[i : i + feedback.WIDTH] for i in range(0, len(text), feedback.WIDTH)],
        lambda text: __import__("textwrap").wrap(text, 40),  # breaks code spans
    ],
    ids=["unwrapped", "mid-word", "inside-code"],
)
def test_mutant_wrappers_fail(mutant):
    with pytest.raises(AssertionError):
        assert_wrapped(LONG, mutant(LONG))


# ----------------------------------------------------------------------------------------------
# An exercise not written yet: the assertions, shared by the real engine and its mutants.


def assert_not_written(err: BaseException, name: str, direct: bool = True) -> None:
    """One line, naming `name`, no traceback; still a NotImplementedError, and named one."""
    assert isinstance(err, NotImplementedError), repr(err)
    assert type(err).__name__ == "NotImplementedError"  # the kernel's ename; grading reads it
    where = "the cell above" if direct else "its cell"
    assert f"`{name}` is not written yet: fill in {where}" in str(err), str(err)
    lines = err._render_traceback_()  # what IPython shows
    text = feedback.strip_ansi("\n".join(lines))
    assert len(lines) == 1 and text == f"✗ {err}", text
    assert "Traceback" not in text and "exercise.py" not in text


def assert_ordinary_failure(err: BaseException, line: str) -> None:
    """A NotImplementedError the student's own code raised on purpose: the usual short failure
    showing their line, never "not written yet"."""
    assert isinstance(err, CheckFailed), repr(err)
    text = feedback.render_text(err)
    assert "not written yet" not in text
    assert "Your code raised NotImplementedError" in text and line in text, text


# ----------------------------------------------------------------------------------------------
# Every exercise, as the released notebook gives it to a student.

REPO = Path(__file__).resolve().parents[2]
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"  # autograder/nbgrader_config.py's code stub


def _released_exercises() -> list[tuple[str, str, list[str], str]]:
    """(notebook, test cell id, the solution cells before it, the test cell's visible source)."""
    found = []
    for path in sorted((REPO / "exercises").glob("*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        solutions: list[str] = []
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code":
                continue
            if meta.get("solution"):
                solutions.append(cell.source)
            elif meta.get("grade"):
                found.append((path.name, cell.id, solutions, cell.source))
                solutions = []
    return found


def _imports(path_name: str) -> str:
    """The notebook's top-level import statements (what its setup cells import)."""
    nb = nbformat.read(next((REPO / "exercises").glob(f"*/{path_name}")), as_version=4)
    lines = []
    for cell in nb.cells:
        if cell.cell_type != "code" or cell.get("id") == "colab-setup":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # IPython magics
            continue
        lines += [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    return "\n".join(lines)


RELEASED = _released_exercises()


def _checked(test: str) -> str:
    return re.match(r"(?:#.*\n)*check\.(\w+)\(", test).group(1)


def test_the_released_exercises_are_all_here():
    assert {_checked(test) for *_, test in RELEASED} >= set(check.EXERCISES)
    for _, test_id, solutions, _ in RELEASED:  # every graded cell comes after a stub
        assert "raise NotImplementedError()" in "\n".join(solutions), test_id


@pytest.mark.parametrize(
    "notebook, test_id, solutions, test", RELEASED, ids=[r[1] for r in RELEASED]
)
def test_an_untouched_exercise_says_so_in_one_line(notebook, test_id, solutions, test, tmp_path):
    namespace = _cell(_imports(notebook), tmp_path, {})
    name = _checked(test)
    for source in solutions:
        try:
            _cell(source, tmp_path, namespace)
        except NotImplementedError:
            # An answer, not a function (a practice question): the released cell sets `name = ...`
            # and then reaches its stub, which IPython shows in one line (check/stub_cells.py).
            assert name in check.PRACTICE and namespace[name] is ..., test_id
    err = _raised(lambda: _cell(test.split("### BEGIN HIDDEN TESTS")[0], tmp_path, namespace))
    assert isinstance(err, NotWrittenYet), repr(err)
    assert err.exercise == name
    if name in check.PRACTICE:  # the answer is still the released `...`
        assert str(err).startswith(f"`{name}` is not written yet"), str(err)
    elif isinstance(namespace[name], type):  # a class: the method whose stub it reached
        assert err.function.startswith(f"{name}."), err.function
        assert_not_written(err, err.function)
    else:
        assert err.function == name
        assert_not_written(err, name)


# ----------------------------------------------------------------------------------------------
# The cases one at a time: a method's stub, a helper's stub, and what is not a stub.

LAYER_NORM = """
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        # YOUR CODE HERE
        raise NotImplementedError()
"""

MHA_WITH_UNWRITTEN_HELPER = """
def split_heads(x, n_heads):
    # YOUR CODE HERE
    raise NotImplementedError()

class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (
            nn.Linear(d_model, d_model, bias=bias) for _ in range(4)
        )

    def forward(self, x, context=None, mask=None):
        return split_heads(self.w_q(x), self.n_heads)
"""

ON_PURPOSE = """
def online_softmax(scores, block_size):
    if block_size > 0:
        raise NotImplementedError("blocks are for later")  # MY OWN RAISE
    return scores
"""

ON_PURPOSE_DEEP = """
def _blocks(scores, block_size):
    raise NotImplementedError(f"block_size={block_size}")  # MY OWN RAISE

def online_softmax(scores, block_size):
    return _blocks(scores, block_size)
"""

LIBRARY_STUB = """
def online_softmax(scores, block_size):
    return Driver().cases(False)  # a library's abstract method: a bare NotImplementedError
"""


def test_a_forward_stub_names_the_method(tmp_path):
    ns = _cell(LAYER_NORM, tmp_path)
    assert_not_written(_raised(lambda: check.LayerNorm(ns["LayerNorm"])), "LayerNorm.forward")


def test_an_init_stub_names_the_method(tmp_path):
    ns = _cell(LAYER_NORM.replace("super().__init__()", "raise NotImplementedError()"), tmp_path)
    assert_not_written(_raised(lambda: check.LayerNorm(ns["LayerNorm"])), "LayerNorm.__init__")


def test_a_helper_not_written_yet_is_named_with_who_calls_it(tmp_path):
    ns = _cell(MHA_WITH_UNWRITTEN_HELPER, tmp_path)
    err = _raised(lambda: check.MultiHeadAttention(ns["MultiHeadAttention"]))
    assert_not_written(err, "split_heads", direct=False)
    assert str(err) == (
        "`split_heads` is not written yet: fill in its cell (`MultiHeadAttention` calls it)."
    )


@pytest.mark.parametrize("source", [ON_PURPOSE, ON_PURPOSE_DEEP], ids=["direct", "deep"])
def test_a_not_implemented_error_with_a_message_is_an_ordinary_failure(source, tmp_path):
    ns = _cell(source, tmp_path)
    err = _raised(lambda: check.online_softmax(ns["online_softmax"]))
    assert_ordinary_failure(err, "# MY OWN RAISE")
    assert err.case  # the inputs that made it raise


def test_a_bare_not_implemented_error_from_a_library_is_not_the_students_stub(tmp_path):
    ns = _cell(LIBRARY_STUB, tmp_path, {"Driver": Driver})
    err = _raised(lambda: check.online_softmax(ns["online_softmax"]))
    assert isinstance(err, CheckFailed) and "not written yet" not in str(err)
    assert "return Driver().cases(False)" in feedback.render_text(err)


def test_without_a_frame_of_the_students_it_is_raised_unchanged(tmp_path):
    """The grading judge's stand-ins for a student's function are course code: a NotImplementedError
    reaching the check through them, with no frame of the student's, is raised as it came."""
    source = "def online_softmax(scores, block_size):\n    raise NotImplementedError()\n"
    namespace = {}
    stand_in = feedback._PACKAGE / "instructor" / "_stand_in.py"  # never written: a name only
    exec(compile(source, str(stand_in), "exec"), namespace)  # noqa: S102 - test code
    err = _raised(lambda: check.online_softmax(namespace["online_softmax"]))
    assert type(err) is NotImplementedError and str(err) == ""


# Mutants: each must fail the assertions above.


def test_mutant_that_lets_the_stub_through_fails(monkeypatch, tmp_path):
    """The old engine: the stub's NotImplementedError went through untouched (a 67-line traceback)."""

    def let_through(ex, student_obj, err, what="your code", case=None):
        raise err

    monkeypatch.setattr(exercise, "not_implemented", let_through)
    ns = _cell(LAYER_NORM, tmp_path)
    with pytest.raises(AssertionError):
        assert_not_written(_raised(lambda: check.LayerNorm(ns["LayerNorm"])), "LayerNorm.forward")


def test_mutant_that_calls_every_not_implemented_error_a_stub_fails(monkeypatch, tmp_path):
    real = feedback.unwritten

    def any_message(err, student_obj=None):  # the message is not looked at
        return real(NotImplementedError().with_traceback(err.__traceback__), student_obj)

    monkeypatch.setattr(exercise, "unwritten", any_message)
    for source in (ON_PURPOSE, ON_PURPOSE_DEEP):
        ns = _cell(source, tmp_path)
        with pytest.raises(AssertionError):
            assert_ordinary_failure(
                _raised(lambda ns=ns: check.online_softmax(ns["online_softmax"])), "# MY OWN RAISE"
            )


def test_mutant_that_names_the_exercise_for_a_helper_fails(monkeypatch, tmp_path):
    real = feedback.unwritten

    def exercise_name(err, student_obj=None):
        found = real(err, student_obj)
        return (student_obj.__name__, True) if found else None

    monkeypatch.setattr(exercise, "unwritten", exercise_name)
    ns = _cell(MHA_WITH_UNWRITTEN_HELPER, tmp_path)
    err = _raised(lambda: check.MultiHeadAttention(ns["MultiHeadAttention"]))
    with pytest.raises(AssertionError):
        assert_not_written(err, "split_heads", direct=False)


def test_mutant_that_renders_a_traceback_fails(monkeypatch, tmp_path):
    import traceback

    def with_traceback(self):
        return traceback.format_exception(type(self), self, self.__traceback__)

    monkeypatch.setattr(NotWrittenYet, "_render_traceback_", with_traceback)
    ns = _cell(LAYER_NORM, tmp_path)
    with pytest.raises(AssertionError):
        assert_not_written(_raised(lambda: check.LayerNorm(ns["LayerNorm"])), "LayerNorm.forward")


# ----------------------------------------------------------------------------------------------
# In IPython and in a real kernel: one line, and the cell still fails (nbgrader: 0 points).

ONLINE_SOFTMAX_STUB = (
    "def online_softmax(scores, block_size):\n"
    '    """softmax over the last axis of scores (..., L), reading blocks."""\n'
    "    # YOUR CODE HERE\n"
    "    raise NotImplementedError()\n"
)


def test_ipython_shows_one_line_and_the_cell_fails():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        shell.run_cell("from transformer_lab import check")
        shell.run_cell(ONLINE_SOFTMAX_STUB)
        out = io.StringIO()
        with redirect_stdout(out):
            result = shell.run_cell("check.online_softmax(online_softmax)")
        assert isinstance(result.error_in_exec, NotImplementedError)
        assert not result.success
        text = feedback.strip_ansi(out.getvalue()).strip()
        assert text == "✗ `online_softmax` is not written yet: fill in the cell above."
    finally:
        InteractiveShell.clear_instance()


@pytest.mark.slow
def test_a_kernel_records_a_failed_cell_named_not_implemented_error(tmp_path, monkeypatch):
    """What nbgrader sees: an error output, ename NotImplementedError (so the cell scores 0 and the
    class report says "not attempted"), whose traceback is the one line."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path / "pkg"))
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("from transformer_lab import check"),
        nbformat.v4.new_code_cell(ONLINE_SOFTMAX_STUB),
        nbformat.v4.new_code_cell("check.online_softmax(online_softmax)"),
    ]
    with pytest.raises(CellExecutionError):
        NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    [error] = [o for o in nb.cells[2].outputs if o.output_type == "error"]
    assert error.ename == "NotImplementedError"
    assert error.evalue == "`online_softmax` is not written yet: fill in the cell above."
    assert [feedback.strip_ansi(line) for line in error.traceback] == [f"✗ {error.evalue}"]


# A check's message is printed as plain text, in the notebook and in the feedback: Markdown
# emphasis would show its asterisks ("on *itself*", the browser walk found it in lesson 06).
_EMPHASIS = re.compile(r"(?<![\w*])\*[A-Za-z][^*\n]*\*(?![\w*])")


def _emphasised(sentence: str) -> list[str]:
    return _EMPHASIS.findall(sentence)


@pytest.mark.parametrize("name", sorted(check.EXERCISES))
def test_no_mistake_sentence_carries_markdown_emphasis(name):
    for mistake in check.EXERCISES[name].mistakes:
        assert not _emphasised(mistake.sentence), (name, mistake.sentence)


def test_the_emphasis_guard_sees_the_old_sentence():
    # the mutant: lesson 06's alpha_22 sentence as it was
    assert _emphasised("α_22 is the weight of position 2 on *itself*: the causal mask keeps")
    assert not _emphasised("x * y and 2*3 are products, **kwargs is not emphasis")
