"""Which of the student's cells the re-check's child runs first: every cell but the slow ones
(over a second in nbgrader's run) that no test needs.

A test cell needs the names it uses (``check.sample_next(sample_next)`` needs ``sample_next``);
a name needs every cell that binds it at the top level (``x = ...``, ``def``, ``class``,
``import``, ``for``, ``with ... as``, ``del``) or changes it (``x.attr = ...``, ``x[i] = ...``,
also inside a function); a needed cell needs every name it uses, inside its functions too. So
lesson 08's training demo, which comes before its last practice question, is left out, and a
student's slow experiments.

Names are only half the story (``model.load_state_dict(...)`` changes ``model``; a cell that
draws random numbers moves the generator; a file written in one cell is read in another), so
this is a first try, never the verdict: a test that fails against these cells is run again
against every cell (`verify._run_tests`), so leaving a cell out never costs a student a point.
A notebook that reaches its names another way (``globals()``, ``exec``, ``setattr``, ``global``,
``from x import *``, ``sys.modules``, ...) or does not parse runs every cell at once.
"""

from __future__ import annotations

import ast

from .notebook_format import python_source

# Names that reach a notebook's names (or the interpreter) without naming them: any of them in
# a student cell and every cell runs.
DYNAMIC = frozenset(
    {
        "globals",
        "locals",
        "vars",
        "exec",
        "eval",
        "compile",
        "setattr",
        "delattr",
        "__import__",
        "__builtins__",
        "__main__",
        "__dict__",
        "builtins",
        "sys",
        "importlib",
        "inspect",
        "gc",
        "ctypes",
    }
)
DYNAMIC_ATTRIBUTES = frozenset(
    {
        "__dict__",
        "__globals__",
        "__builtins__",
        "__setattr__",
        "__delattr__",
        "f_globals",
        "f_locals",
    }
)


class _Dynamic(Exception):
    """The notebook reaches names in a way this cannot follow."""


SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _base(target: ast.AST) -> str:
    """The name whose object ``a.x = ...`` / ``a[0] = ...`` changes."""
    while isinstance(target, (ast.Attribute, ast.Subscript)):
        target = target.value
    if isinstance(target, ast.Name):
        return target.id
    raise _Dynamic  # f().x = ...: what it changes cannot be named


def _locals(node: ast.AST) -> set[str]:
    """The names local to a function, a lambda, a class body or a comprehension."""
    found: set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = node.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is not None:
                found.add(arg.arg)
    if isinstance(node, COMPREHENSIONS):
        for generator in node.generators:
            found |= {n.id for n in ast.walk(generator.target) if isinstance(n, ast.Name)}
        return found
    body = node.body if isinstance(node.body, list) else [node.body]
    todo = list(body)
    while todo:
        child = todo.pop()
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(child.name)
            continue
        if isinstance(child, (ast.Lambda, *COMPREHENSIONS)):
            continue
        if isinstance(child, ast.Name) and isinstance(child.ctx, (ast.Store, ast.Del)):
            found.add(child.id)
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            found |= {a.asname or a.name.split(".")[0] for a in child.names}
        elif isinstance(child, ast.ExceptHandler) and child.name:
            found.add(child.name)
        todo.extend(ast.iter_child_nodes(child))
    return found


class _Cell(ast.NodeVisitor):
    """What one cell binds or changes at the top level (`binds`), the names its top-level code
    reads before binding them there (`reads_now`: from earlier cells) and the names its
    functions and classes read when they run (`reads_later`: from any cell)."""

    def __init__(self):
        self.binds: set[str] = set()
        self.reads_now: set[str] = set()
        self.reads_later: set[str] = set()
        self.bound_here: set[str] = set()  # bound by this cell's top level so far
        self.scopes: list[set[str]] = []  # the locals of each enclosing scope

    def _local(self, name: str) -> bool:
        return any(name in scope for scope in self.scopes)

    def _read(self, name: str) -> None:
        if name in DYNAMIC:
            raise _Dynamic
        if self._local(name):
            return
        if self.scopes:
            self.reads_later.add(name)
        elif name not in self.bound_here:
            self.reads_now.add(name)

    def _bind(self, name: str) -> None:
        if not self.scopes:
            self.binds.add(name)
            self.bound_here.add(name)

    def _change(self, target: ast.AST) -> None:
        name = _base(target)
        if not self._local(name):
            self.binds.add(name)  # here, or whenever the function runs

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self._read(node.id)
        else:
            if node.id in DYNAMIC:
                raise _Dynamic
            self._bind(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in DYNAMIC_ATTRIBUTES:
            raise _Dynamic
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._change(node)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._change(node)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)  # the value is read before the targets are bound
        for target in node.targets:
            self.visit(target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            self._read(node.target.id)
        self.visit(node.value)
        self.visit(node.target)

    def visit_Global(self, node: ast.Global) -> None:
        raise _Dynamic

    visit_Nonlocal = visit_Global

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if any(alias.name == "*" for alias in node.names):
            raise _Dynamic
        self._imported(node)

    def visit_Import(self, node: ast.Import) -> None:
        self._imported(node)

    def _imported(self, node) -> None:
        for alias in node.names:
            self._bind(alias.asname or alias.name.split(".")[0])

    def _scope(self, node: ast.AST) -> None:
        """A function, lambda or class: what its definition reads now, its body later."""
        for decorator in getattr(node, "decorator_list", []):
            self.visit(decorator)
        if isinstance(node, ast.ClassDef):
            for outside in [*node.bases, *(k.value for k in node.keywords)]:
                self.visit(outside)
        else:
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                if default is not None:
                    self.visit(default)
        self.scopes.append(_locals(node))
        for statement in [node.body] if isinstance(node, ast.Lambda) else node.body:
            self.visit(statement)
        self.scopes.pop()

    def _comprehension(self, node) -> None:
        first = node.generators[0]
        self.visit(first.iter)  # the only part read in the enclosing scope
        self.scopes.append(_locals(node))
        for generator in node.generators:
            self.visit(generator.target)
            if generator is not first:
                self.visit(generator.iter)
            for condition in generator.ifs:
                self.visit(condition)
        for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
            self.visit(part)
        self.scopes.pop()

    def visit_FunctionDef(self, node) -> None:
        self._scope(node)
        self._bind(node.name)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node) -> None:
        self._scope(node)
        self._bind(node.name)

    def visit_Lambda(self, node) -> None:
        self._scope(node)

    def visit_ListComp(self, node) -> None:
        self._comprehension(node)

    visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_ListComp

    def visit_ExceptHandler(self, node) -> None:
        """``except E as name``, and a pattern's ``case x``, ``case [*rest]``, ``{**rest}``."""
        name = getattr(node, "name", None) or getattr(node, "rest", None)
        if name:
            self._bind(name)
        self.generic_visit(node)

    visit_MatchAs = visit_MatchStar = visit_MatchMapping = visit_ExceptHandler


def _names(source: str) -> _Cell:
    cell = _Cell()
    cell.visit(ast.parse(python_source(source)))
    return cell


def cells_the_tests_need(code: list, tests: list[str], slow=()) -> list:
    """The (index, source) pairs of `code` (the student's cells, in order) less the cells whose
    index is in `slow` and that no test (`tests`: the test cells' sources) needs; all of `code`
    when the names cannot be followed."""
    if not set(slow) & {index for index, _ in code}:
        return list(code)
    try:
        cells = [_names(src) for _, src in code]
        tested = [_names(src) for src in tests]
    except (_Dynamic, SyntaxError, ValueError, RecursionError, MemoryError):
        return list(code)
    # (name, position): a read at this position of `code` (len(code): when the tests run)
    todo = [(name, len(code)) for t in tested for name in t.reads_now | t.reads_later]
    needed: set[int] = set()
    seen: set[tuple[str, int]] = set()
    while todo:
        name, before = todo.pop()
        if (name, before) in seen or name == "check":
            continue
        seen.add((name, before))
        for position, cell in enumerate(cells[:before]):
            if name in cell.binds and position not in needed:
                needed.add(position)
                todo += [(n, position) for n in cell.reads_now]
                todo += [(n, len(code)) for n in cell.reads_later]
    return [
        (index, src)
        for position, (index, src) in enumerate(code)
        if position in needed or index not in slow
    ]
