"""Notebooks call a student's function only as the exercise defines it.

``f = student.use("f")`` gives the student's passing `f` (else the reference). The reference may
take more options than the exercise asks for (``dtype=``, ``device=``); a notebook that passes one
of them works until the student's own `f` is in use, and then stops with a TypeError. The browser
walk found this in lecture 04 (issue 29): ``sinusoidal_positional_encoding(L, d, dtype=...)``.
This test reads every lecture and solution notebook (no execution) and checks each call of such an
`f` against the signature of the `def f` the solution notebooks release as the exercise.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(ROOT.glob("lectures/*.ipynb")) + sorted(ROOT.glob("solutions/*/*.ipynb"))


def _code(path: Path) -> str:
    """A notebook's code cells as one module, without IPython's % and ! lines."""
    cells = nbformat.read(path, as_version=4).cells
    lines = "\n".join(c.source for c in cells if c.cell_type == "code").splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))


def _exercise_signatures() -> dict[str, ast.arguments]:
    """The arguments of every function the solution notebooks define (what a student writes)."""
    found = {}
    for path in ROOT.glob("solutions/*/*.ipynb"):
        for node in ast.parse(_code(path)).body:
            if isinstance(node, ast.FunctionDef):
                found[node.name] = node.args
    return found


def bad_calls(source: str, signatures: dict[str, ast.arguments]) -> list[str]:
    """Calls, in `source`, of a name bound to ``student.use("f")`` that `f`'s exercise
    signature does not accept: an unknown keyword, or too many positional arguments."""
    tree = ast.parse(source)
    used = {}
    for node in ast.walk(tree):
        call = getattr(node, "value", None)
        if (
            isinstance(node, ast.Assign)
            and isinstance(call, ast.Call)
            and getattr(call.func, "attr", None) == "use"
            and call.args
            and isinstance(call.args[0], ast.Constant)
            and call.args[0].value in signatures
        ):
            used.update({t.id: call.args[0].value for t in node.targets if isinstance(t, ast.Name)})
    bad = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) in used):
            continue
        name = used[node.func.id]
        args = signatures[name]
        if args.kwarg is not None:
            continue
        names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
        unknown = [k.arg for k in node.keywords if k.arg is not None and k.arg not in names]
        too_many = args.vararg is None and len(node.args) > len(args.posonlyargs + args.args)
        if unknown or too_many:
            what = f"keyword {unknown}" if unknown else f"{len(node.args)} positional arguments"
            bad.append(f"line {node.lineno}: {name}(...) with {what}")
    return bad


@pytest.fixture(scope="module")
def signatures():
    found = _exercise_signatures()
    assert "sinusoidal_positional_encoding" in found and "scaled_dot_product_attention" in found
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_students_function_is_called_as_the_exercise_defines_it(path, signatures):
    assert not bad_calls(_code(path), signatures), path.name


def test_the_call_the_walk_found_is_caught(signatures):
    """The mutant: lecture 04's call before the fix, and a call with one argument too many."""
    source = (
        "sinusoidal_positional_encoding = student.use('sinusoidal_positional_encoding')\n"
        "pe = sinusoidal_positional_encoding(6, 16, dtype=torch.float64)\n"
        "ok = sinusoidal_positional_encoding(6, 16).double()\n"
        "pe2 = sinusoidal_positional_encoding(6, 16, 10000.0)\n"
    )
    assert [line.split(":")[0] for line in bad_calls(source, signatures)] == ["line 2", "line 4"]
