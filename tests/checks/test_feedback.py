"""How a failed check reads in a notebook (transformer_lab.check.feedback).

IPython shows ``err._render_traceback_()`` instead of a traceback: a short message with the named
mistake, the case and, when the student's code raised, the student's own line; never the frames of
the check machinery. ``str(err)`` (what nbgrader records) is unchanged. Mutant renderers (one that
keeps the check machinery's frames, one that drops the student's exception) must fail these assertions.
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import nbformat
import pytest
import torch
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from transformer_lab import check
from transformer_lab.check import CheckFailed, ImplementThisYourself, feedback

MISTAKE = "view as (B, L, h, d_k) first, then transpose(1, 2)"


def wrong_split_heads(x, n_heads):
    B, L, d_model = x.shape
    return x.reshape(B, n_heads, L, d_model // n_heads)


def crashing_split_heads(x, n_heads):
    B, L, d_model = x.shape
    return x.view(B, L, n_heads, d_model // n_heads + 1)  # THE STUDENT'S LINE


def softmax_split_heads(x, n_heads):
    from transformer_lab.multihead import split_heads as theirs

    return theirs(x, n_heads)  # CALLS THE REFERENCE


def _failure(impl) -> BaseException:
    with pytest.raises((CheckFailed, ImplementThisYourself)) as info:
        check.split_heads(impl)
    return info.value


@pytest.fixture(autouse=True)
def _no_saving(monkeypatch, tmp_path):
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path / "pkg"))


# ----------------------------------------------------------------------------------------------
# The assertions, shared by the real renderer and its mutants.


def assert_short_mistake(text: str) -> None:
    assert "Likely mistake: " + "you reshaped (B, L, d_model) straight" in text
    assert MISTAKE in text
    assert "exercise.py" not in text and "lesson03.py" not in text
    assert "Traceback" not in text and "site-packages" not in text
    lines = text.splitlines()
    assert lines[0].startswith("✗ split_heads")
    assert lines[1].startswith("Likely mistake: ")  # first thing after the headline
    assert any(line.startswith("Case: x (2, 3, 8), n_heads=2") for line in lines)
    assert len(text) < 800, len(text)


def assert_shows_student_line(text: str) -> None:
    assert "THE STUDENT'S LINE" in text
    assert "in crashing_split_heads" in text
    assert "RuntimeError" in text and "Case: x (2, 3, 8), n_heads=2" in text
    assert "exercise.py" not in text and "torch/" not in text


# ----------------------------------------------------------------------------------------------
# The real renderer.


def test_message_is_unchanged_and_carries_its_parts():
    err = _failure(wrong_split_heads)
    sentence = check.EXERCISES["split_heads"].mistakes[0].sentence
    # byte-identical to the message the engine composed before the parts were kept
    assert str(err) == (
        f"split_heads: {err.problem}\n  case: x (2, 3, 8), n_heads=2 (float64 on cpu)"
        f"\nLikely mistake: {sentence}"
    )
    assert err.problem.startswith("output differs in ")
    assert err.exercise == "split_heads" and MISTAKE in err.mistake and err.cause is None
    assert str(err) == str(
        CheckFailed(exercise=err.exercise, problem=err.problem, case=err.case, mistake=err.mistake)
    )
    assert str(CheckFailed("plain message")) == "plain message"


def test_wrong_implementation_renders_short_with_the_mistake_first():
    err = _failure(wrong_split_heads)
    assert_short_mistake(feedback.render_text(err))
    assert feedback.is_rendered(err._render_traceback_())


def test_crashing_implementation_shows_the_students_line_and_exception():
    err = _failure(crashing_split_heads)
    assert isinstance(err.cause, RuntimeError)
    assert "your function raised RuntimeError" in str(err)
    text = feedback.render_text(err)
    assert_shows_student_line(text)
    assert text.count("RuntimeError") == 1  # said once, not twice


def test_implement_this_yourself_is_short_and_points_at_the_call():
    err = _failure(softmax_split_heads)
    assert isinstance(err, ImplementThisYourself)
    text = feedback.render_text(err)
    assert text.startswith("✗ Implement this yourself")
    assert "CALLS THE REFERENCE" in text and "exercise.py" not in text
    assert "check.split_heads(impl)" not in text  # the calling (test) cell is never shown


def test_a_message_only_check_failure_is_shown_whole_not_parsed():
    """Every check fails through `fail` (fields); a CheckFailed given only a message shows that
    message as what differs: no text is parsed back into fields."""
    err = CheckFailed("layer_norm: output differs\nLikely mistake: you forgot epsilon.")
    text = feedback.render_text(err)
    assert text.splitlines() == [
        "✗ check failed",
        "What differs: layer_norm: output differs",
        "Likely mistake: you forgot epsilon.",
    ]


# ----------------------------------------------------------------------------------------------
# Mutants: each must fail the assertions above.


def test_mutant_that_keeps_engine_frames_fails(monkeypatch):
    import traceback

    def all_frames(tb):
        return traceback.extract_tb(tb)

    def render_with_traceback(err):
        return feedback.render(err) + traceback.format_tb(err.__traceback__)

    monkeypatch.setattr(feedback, "student_frames", all_frames)
    with pytest.raises(AssertionError):
        assert_shows_student_line(feedback.render_text(_failure(crashing_split_heads)))
    monkeypatch.undo()
    err = _failure(wrong_split_heads)
    with pytest.raises(AssertionError):
        assert_short_mistake(feedback.strip_ansi("\n".join(render_with_traceback(err))))


def _frames_between(grader_folder: Path) -> list[str]:
    """The student's frames of an error raised under a check (a frame of this package) that
    reached the student's code through a grader's stand-in (a frame in `grader_folder`)."""

    def student():
        raise ValueError("the student's bug")

    space = {"student": student}
    in_package = str(feedback._PACKAGE / "a_check.py")
    exec(compile("def a_check(f):\n    return f()\n", in_package, "exec"), space)
    in_grader = str(grader_folder / "stand_in.py")
    exec(compile("def stand_in():\n    return student()\n", in_grader, "exec"), space)
    with pytest.raises(ValueError) as caught:
        space["a_check"](space["stand_in"])
    return [frame.name for frame in feedback.student_frames(caught.value.__traceback__)]


def test_the_graders_frames_are_hidden_once_it_registers_its_folder(tmp_path, monkeypatch):
    """The grader (its own package, which this one never imports) registers its folder with
    `registry.add_machinery`: its stand-ins never show in a student's traceback. The mutant, a
    grader that did not register, shows its frame."""
    from transformer_lab import registry

    monkeypatch.setattr(registry, "MACHINERY_DIRS", [])
    assert _frames_between(tmp_path) == ["stand_in", "student"]  # the mutant
    registry.add_machinery(tmp_path)
    registry.add_machinery(tmp_path)  # once is enough
    assert registry.MACHINERY_DIRS == [str(tmp_path.resolve())]
    assert _frames_between(tmp_path) == ["student"]


def test_mutant_that_drops_the_cause_fails(monkeypatch):
    monkeypatch.setattr(feedback, "cause_of", lambda err: None)
    with pytest.raises(AssertionError):
        assert_shows_student_line(feedback.render_text(_failure(crashing_split_heads)))


def test_mutant_that_puts_the_mistake_last_fails():
    err = _failure(wrong_split_heads)
    lines = feedback.render_text(err).splitlines()
    lines.append(lines.pop(1))
    with pytest.raises(AssertionError):
        assert_short_mistake("\n".join(lines))


# ----------------------------------------------------------------------------------------------
# Through IPython and a real kernel.


def test_ipython_shows_the_rendering_with_the_cell_and_line():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        shell.run_cell("from transformer_lab import check")
        shell.run_cell(
            "def split_heads(x, n_heads):\n"
            "    B, L, d = x.shape\n"
            "    return x.view(B, L, n_heads, d + 1)  # my bad line\n"
        )
        out = io.StringIO()
        with redirect_stdout(out):
            result = shell.run_cell("check.split_heads(split_heads)")
        assert isinstance(result.error_in_exec, CheckFailed)
        text = feedback.strip_ansi(out.getvalue())
        assert "✗ split_heads: check failed" in text
        assert "Cell In[" in text and "line 3, in split_heads" in text
        assert "# my bad line" in text
        assert "exercise.py" not in text and "check.split_heads(split_heads)" not in text
    finally:
        InteractiveShell.clear_instance()


@pytest.mark.slow
def test_a_kernel_records_the_failure_with_the_short_traceback(tmp_path, monkeypatch):
    """ipykernel sends an error output (ename CheckFailed): nbgrader still sees a failed cell."""
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(tmp_path / "pkg"))
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("from transformer_lab import check"),
        nbformat.v4.new_code_cell(
            "def split_heads(x, n_heads):\n"
            "    B, L, d_model = x.shape\n"
            "    return x.reshape(B, n_heads, L, d_model // n_heads)\n"
        ),
        nbformat.v4.new_code_cell("check.split_heads(split_heads)"),
    ]
    client = NotebookClient(nb, timeout=120, kernel_name="python3")
    with pytest.raises(CellExecutionError):
        client.execute()
    [error] = [o for o in nb.cells[2].outputs if o.output_type == "error"]
    assert error.ename == "CheckFailed"
    assert error.evalue.startswith("split_heads: output differs")
    text = feedback.strip_ansi("\n".join(error.traceback))
    assert_short_mistake(text)
    assert torch.__version__  # the kernel ran the same course install


def test_the_feedback_filter_keeps_the_rendering_and_cuts_other_tracebacks():
    """HideHiddenTests (autograder/feedback_filter.py) keeps a check's short rendering (it never
    quotes a test cell) and still cuts every other traceback to its last line."""
    pytest.importorskip(
        "nbgrader", reason="the grader's filter needs nbgrader (not on the GPU machine)"
    )
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "autograder" / "feedback_filter.py"
    spec = importlib.util.spec_from_file_location("_feedback_filter", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    err = _failure(wrong_split_heads)
    rendered = err._render_traceback_()
    frames = ["Traceback (most recent call last)", "----> 2 check.split_heads(x, thorough=True)"]
    cell = nbformat.v4.new_code_cell(
        "check.split_heads(split_heads)\n### BEGIN HIDDEN TESTS\n"
        "check.split_heads(split_heads, thorough=True)\n### END HIDDEN TESTS\n",
        metadata={"nbgrader": {"grade": True, "solution": False, "points": 1}},
        outputs=[
            nbformat.v4.new_output(
                "error", ename="CheckFailed", evalue=str(err), traceback=rendered
            ),
            nbformat.v4.new_output("error", ename="CheckFailed", evalue="x", traceback=frames),
            nbformat.v4.new_output("error", ename="ValueError", evalue="y", traceback=rendered),
        ],
    )
    module.HideHiddenTests().preprocess_cell(cell, {}, 0)
    kept, cut, other = (o.traceback for o in cell.outputs)
    assert kept == rendered
    assert cut == ["CheckFailed: x"] and other == ["ValueError: y"]
    assert "thorough=True" not in cell.source
