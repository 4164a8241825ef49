"""Any notebook cell that reaches an untouched stub says so in one line, not only a check's cell.

A check that reaches nbgrader's stub (``raise NotImplementedError()``) raises `NotWrittenYet`,
shown as one line. A lesson's other cells (a demo, a plot) call the student's code directly; there
the stub's bare NotImplementedError used to show a traceback through torch and the cells (the
browser walk of issue 29: exercise 02's similarity plot, 24 lines). Imported into IPython,
`transformer_lab.check` installs `show_stub` as the shell's handler for NotImplementedError:
an untouched stub gives ``✗ `SelfAttention.forward` is not written yet: fill in its cell (this
cell uses it).``; any other NotImplementedError (one with a message, one raised inside torch, a
check's own NotWrittenYet) is shown as IPython always shows it. The cell still fails, with the
error named NotImplementedError (what nbgrader records).

The same handler takes NameError: a name that an earlier cell of this session sets, but that is
not defined, comes from a cell that stopped with an error (often at a stub) before setting it.
That is said in one line, ``✗ `merges` is not defined: the cell above that sets it stopped with
an error. Fix that cell and run it first.``, in place of a traceback that points at the wrong
cell (issue 29's walk of exercise 09). A name no earlier cell sets (a typo) keeps IPython's
traceback.
"""

from __future__ import annotations

import ast

from .exercise import NotWrittenYet
from .feedback import render, stub_frame, unwritten


def not_written_line(name: str) -> str:
    return f"`{name}` is not written yet: fill in its cell (this cell uses it)."


CELL_NOT_WRITTEN = (
    "this cell is not written yet: replace its `raise NotImplementedError()` with your answer."
)


def earlier_cells_set(shell, name: str) -> bool:
    """Whether a cell run before the current one in `shell` binds `name` at its top level (an
    assignment, a loop or `with` target, an import, a `def` or `class`), run or not to the end."""
    history = shell.user_ns.get("In", [])[1 : shell.execution_count]  # In[0] is empty
    return any(name in _top_level_names(source) for source in history)


def _top_level_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)  # its body binds names of its own, not the notebook's
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        if not isinstance(node, ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))
    return names


def failed_before_line(name: str) -> str:
    return (
        f"`{name}` is not defined: the cell above that sets it stopped with an error. Fix that "
        "cell and run it first."
    )


def _raised_by_the_cell(err: BaseException) -> bool:
    """A bare ``NotImplementedError()`` raised by the cell's own top level: the stub of an answer
    cell (a practice question's ``x = ...``), not of a function."""
    tb = stub_frame(err)
    return tb is not None and tb.tb_frame.f_code.co_name == "<module>"


def show_stub(shell, etype, value, tb, tb_offset=None) -> None:
    """IPython's custom exception handler for NotImplementedError and NameError: shows the error
    itself (IPython ignores what a handler returns), as one line when it comes from an untouched
    stub, a function's or an answer cell's own, or names what an earlier failed cell never set."""
    found = None if isinstance(value, NameError) else unwritten(value)
    lines = None
    if isinstance(value, NameError):  # not a function's local used too early (UnboundLocalError)
        name = None if isinstance(value, UnboundLocalError) else getattr(value, "name", None)
        if name and earlier_cells_set(shell, name):
            lines = render(NotWrittenYet(failed_before_line(name)))
    elif found is not None:
        name, _ = found
        lines = render(NotWrittenYet(not_written_line(name), function=name))
    elif _raised_by_the_cell(value):
        lines = render(NotWrittenYet(CELL_NOT_WRITTEN))
    if lines is not None:
        value._render_traceback_ = lambda: lines  # what IPython shows instead of a traceback
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset)


def install(shell=None) -> None:
    """Make `show_stub` the handler of the running IPython shell (nothing outside IPython)."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return
        shell = get_ipython()
    if shell is not None and not shell.custom_exceptions:  # another handler is left alone
        shell.set_custom_exc((NotImplementedError, NameError), show_stub)
