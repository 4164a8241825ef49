"""How a failed check looks in a notebook: a short message, not a traceback through the engine.

IPython (and so ipykernel, JupyterLab, Colab and nbgrader's kernels) asks an exception for
``_render_traceback_()`` before formatting a traceback itself; ``CheckFailed`` and
``ImplementThisYourself`` answer with :func:`render`. The kernel still sends an ``error`` output
(``ename`` ``CheckFailed``, ``evalue`` the unchanged ``str(err)``), so nbgrader records the cell as
failed; only the lines shown change:

    ✗ scaled_dot_product_attention: check failed
    Likely mistake: <the catalogued mistake, when one matches>
    What differs: <shape, dtype, device or values, and by how much>
    Case: <the inputs that showed it>

When the student's own code raised, the message shows their frames (notebook cell and line, or
their file), never the frames of the check machinery or of torch, then the case that triggered
it. Outside IPython nothing here is used, except :func:`render_failure`, which grading calls
with the fields a record kept (`transformer_lab_grader.failures`); ``str(err)`` is the
same everywhere.

Lines are wrapped at spaces to `WIDTH` characters (JupyterLab's outputs would break them
mid-word), never inside a word or a `code` span.

An exercise not written yet (nbgrader's stub, ``raise NotImplementedError()``, reached by the
check) is one line, ``✗ `online_softmax` is not written yet: fill in the cell above.`` (see
:func:`unwritten`; ``check.exercise`` raises ``NotWrittenYet``).
"""

from __future__ import annotations

import inspect
import re
import sysconfig
import textwrap
import traceback
from pathlib import Path

from .. import registry

ANSI_RED = "\x1b[1;31m"
ANSI_BLUE = "\x1b[1;34m"
ANSI_GREEN = "\x1b[32m"
ANSI_BOLD = "\x1b[1m"
ANSI_RESET = "\x1b[0m"
MISTAKE = "Likely mistake: "
HEADLINE_MARK = "✗ "
MAX_FRAMES = 4
WIDTH = 88  # longer message lines are wrapped at a space: JupyterLab's outputs break mid-word
INDENT = "  "  # a wrapped line's continuation

_PACKAGE = Path(__file__).resolve().parents[1]  # transformer_lab/


def _package_dirs() -> list[str]:
    """This package's folder, and the grader's where it registered (`registry.add_machinery`)."""
    return [str(_PACKAGE), *registry.MACHINERY_DIRS]


def _hidden_dirs() -> tuple[str, ...]:
    """Folders whose frames a student never needs to see: this package, torch, the stdlib."""
    dirs = _package_dirs()
    try:
        import torch

        dirs.append(str(Path(torch.__file__).resolve().parent))
    except ImportError:  # pragma: no cover - the course always has torch
        pass
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.append(str(Path(path).resolve()))
    return tuple(d + "/" for d in dirs)


def _is_hidden(filename: str) -> bool:
    try:
        resolved = str(Path(filename).resolve())
    except (OSError, ValueError):
        return False
    return resolved.startswith(_hidden_dirs())


def _in_package(filename: str) -> bool:
    try:
        return str(Path(filename).resolve()).startswith(tuple(d + "/" for d in _package_dirs()))
    except (OSError, ValueError):
        return False


def student_frames(tb) -> list[traceback.FrameSummary]:
    """The frames of a traceback that are the student's code.

    Frames before the first frame of this package are the cell that called the check (a test
    cell, whose hidden part must not be shown) and are skipped; after it, frames in this package,
    torch and the standard library are dropped. What is left is the student's own code: their
    notebook cells and files.
    """
    frames = traceback.extract_tb(tb)
    inside = False
    kept = []
    for frame in frames:
        if _in_package(frame.filename):
            inside = True
            continue
        if inside and not _is_hidden(frame.filename):
            kept.append(frame)
    return kept[-MAX_FRAMES:]


def innermost_student_frame(tb):
    """The innermost of the student's frames (as ``student_frames`` picks them) as a live frame
    object, with its locals and code, or None."""
    found, inside = None, False
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if _in_package(filename):
            inside = True
        elif inside and not _is_hidden(filename):
            found = tb.tb_frame
        tb = tb.tb_next
    return found


def _where(frame: traceback.FrameSummary) -> str:
    """'Cell In[5], line 3, in split_heads' for a notebook cell, else a short path."""
    label = None
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            named = shell.compile.format_code_name(frame.filename)
            if named:
                label = f"{named[0]} {named[1]}"
    except Exception:  # no IPython, or an IPython without format_code_name
        label = None
    if label is None:
        path = Path(frame.filename)
        label = path.name if path.is_absolute() else frame.filename
    where = f"{label}, line {frame.lineno}"
    if frame.name and frame.name != "<module>":
        where += f", in {frame.name}"
    return where


def _frame_lines(frames: list[traceback.FrameSummary]) -> list[str]:
    lines = []
    for frame in frames:
        lines.append(f"  {ANSI_GREEN}{_where(frame)}{ANSI_RESET}")
        if frame.line:
            lines.append(f"      {frame.line.strip()}")
    return lines


def cause_of(err: BaseException) -> BaseException | None:
    """The student's own exception behind a failed check, if their code raised."""
    cause = getattr(err, "cause", None)
    if cause is None:
        cause = err.__cause__
    if cause is None and err.__context__ is not None:
        # checks that predate `cause=` raise `from None`; the context is still kept
        context = err.__context__
        if student_frames(context.__traceback__):
            cause = context
    return cause


def _code_name(code, frame=None) -> str:
    """'split_heads', 'LayerNorm.forward' (a method), without '<locals>' parts."""
    name = getattr(code, "co_qualname", None)  # Python 3.11+
    if name is None:
        name = code.co_name
        owner = frame.f_locals.get("self") if frame is not None else None
        if owner is not None and hasattr(type(owner), code.co_name):
            name = f"{type(owner).__name__}.{code.co_name}"
    return name.replace("<locals>.", "")


def _own_functions(obj) -> list[tuple[str, object]]:
    """(name, function) for the code the student wrote as `obj`: the function itself, or each
    method of a class ('LayerNorm.forward'), torch's classes and `object` left out."""
    if not isinstance(obj, type):
        fn = inspect.unwrap(obj) if callable(obj) else obj
        return [(getattr(obj, "__name__", "?"), fn)] if hasattr(fn, "__code__") else []
    found = []
    for klass in obj.__mro__:
        if klass is object or klass.__module__.split(".")[0] == "torch":
            continue
        for key, value in vars(klass).items():
            value = value.fget if isinstance(value, property) else value
            value = getattr(value, "__func__", value)
            if hasattr(value, "__code__"):
                found.append((f"{klass.__name__}.{key}", value))
    return found


def stub_frame(err: BaseException):
    """The innermost traceback entry of a bare ``NotImplementedError()`` (nbgrader's stub raises
    one without a message), or None for any other error."""
    if type(err) is not NotImplementedError or any(str(a) for a in err.args):
        return None
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def unwritten(err: BaseException, student_obj=None) -> tuple[str, bool] | None:
    """(name, direct) when `err` comes from an untouched stub: a ``NotImplementedError()`` without
    a message (nbgrader's ``raise NotImplementedError()``) raised by a line of the student's own
    code, not by torch or the course. `name` is the function that raised ('online_softmax',
    'LayerNorm.forward'); `direct` says whether it is `student_obj` itself (or one of its
    methods) rather than a helper it calls. Any other NotImplementedError (one with a message, or
    one raised inside torch) is an ordinary error of the student's code: None.
    """
    tb = stub_frame(err)
    if tb is None:
        return None
    code = tb.tb_frame.f_code
    if code.co_name == "<module>" or _is_hidden(code.co_filename):
        return None
    for name, fn in _own_functions(student_obj):
        if fn.__code__ is code:
            return name, True
    return _code_name(code, tb.tb_frame), False


def not_written_sentence(name: str, direct: bool, exercise: str) -> str:
    """The one line for an exercise that is not written yet."""
    if direct:
        return f"`{name}` is not written yet: fill in the cell above."
    return f"`{name}` is not written yet: fill in its cell (`{exercise}` calls it)."


_UNBREAKABLE = re.compile(r"`[^`\n]+`|\([^()\n]{1,24}\)")  # code spans, short groups: shapes
_KEEP = "\x00"  # a space that may not break, while wrapping


def wrap(text: str, width: int = WIDTH) -> list[str]:
    """`text` as lines of at most `width` characters where it can: broken only at spaces, never
    inside a word, a `code` span or a short parenthesised group such as a shape; a word longer
    than a line stays whole. Each line of `text` is wrapped on its own, its continuation indented
    by INDENT more than it."""
    lines = []
    for line in text.split("\n"):
        body = line.lstrip(" ")
        lead = line[: len(line) - len(body)]
        body = _UNBREAKABLE.sub(lambda m: m.group(0).replace(" ", _KEEP), body)
        pieces = textwrap.wrap(
            body,
            width,
            initial_indent=lead,
            subsequent_indent=lead + INDENT,
            break_long_words=False,
            break_on_hyphens=False,
        )
        lines += [piece.replace(_KEEP, " ") for piece in pieces] or [line]
    return lines


def _labelled(label: str, text: str, style: str, whole: bool = False) -> list[str]:
    """`label` + `text` wrapped; the label in `style` (every line in it when `whole`)."""
    lines = wrap(label + text)
    if whole:
        return [f"{style}{line}{ANSI_RESET}" for line in lines]
    first = lines[0]
    if label and first.startswith(label.rstrip()):
        n = len(label.rstrip())
        first = f"{style}{first[:n]}{ANSI_RESET}{first[n:]}"
    return [first, *lines[1:]]


def render(err: BaseException) -> list[str]:
    """The lines IPython shows for a failed check (ANSI colours; one string per line)."""
    if getattr(err, "unwritten", False):  # NotWrittenYet (check/exercise.py): one line
        return [
            f"{ANSI_RED}{HEADLINE_MARK}{ANSI_RESET}{line}" if i == 0 else line
            for i, line in enumerate(wrap(str(err), WIDTH - len(HEADLINE_MARK)))
        ]
    if getattr(err, "refusal", False):  # ImplementThisYourself (check/forbid.py)
        text = str(err).removeprefix("implement this yourself: ")
        lines = [f"{ANSI_RED}{HEADLINE_MARK}Implement this yourself{ANSI_RESET}", *wrap(text)]
        frames = student_frames(err.__traceback__)
        if frames:
            lines.append(f"{ANSI_BOLD}Called from your code:{ANSI_RESET}")
            lines += _frame_lines(frames)
        return lines
    problem = getattr(err, "problem", None)
    cause = cause_of(err)
    return render_failure(
        getattr(err, "exercise", None),
        str(err) if problem is None else str(problem),
        getattr(err, "case", None),
        getattr(err, "mistake", None),
        crash=None if cause is None else f"{type(cause).__name__}: {cause}",
        crash_lines=_frame_lines(student_frames(cause.__traceback__)) if cause else (),
    )


def render_failure(
    exercise: str | None,
    problem: str,
    case: str | None = None,
    mistake: str | None = None,
    crash: str | None = None,
    crash_lines=(),
) -> list[str]:
    """A failed check's lines from its parts (ANSI colours): the headline, the named mistake,
    the student's crash ("RuntimeError: ...", with `crash_lines`: where in their code) or what
    differs, the case. :func:`render` gives a CheckFailed's; grading renders a kept failure
    (`transformer_lab_grader.failures`) the same way."""
    title = f"{exercise}: check failed" if exercise else "check failed"
    lines = _labelled(HEADLINE_MARK, title, ANSI_RED, whole=True)
    if mistake:
        lines += _labelled(MISTAKE, mistake, ANSI_BLUE, whole=True)
    if crash is not None:
        lines += _labelled("Your code raised ", crash, ANSI_BOLD)
        lines += list(crash_lines)
        if not problem.startswith("your "):  # "your function raised ..." repeats the above
            lines += _labelled("What happened: ", problem, ANSI_BOLD)
    else:
        lines += _labelled("What differs: ", problem, ANSI_BOLD)
    if case:
        lines += _labelled("Case: ", case, ANSI_BOLD)
    return lines


def render_text(err: BaseException) -> str:
    """:func:`render` as plain text (no colours), e.g. for tests and feedback pages."""
    return strip_ansi("\n".join(render(err)))


def strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)


def is_rendered(traceback_lines: list[str]) -> bool:
    """True when an error output's traceback was made by :func:`render` (and so holds no test
    cell source): its first line is the check's headline."""
    return bool(traceback_lines) and strip_ansi(traceback_lines[0]).startswith(HEADLINE_MARK)
