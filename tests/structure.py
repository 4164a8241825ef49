"""The package's structure, read from its imports: import cycles, private names reached across
packages, and imports against the one way they go. Run by tests/test_structure.py; by hand:

    python tests/structure.py [SRC] [--package transformer_lab]      # SRC defaults to shared/
    python tests/structure.py autograder --package transformer_lab_grader

Every `.py` file under SRC/PACKAGE is a module, read with `ast` (nothing is imported or run).

- **Cycles.** Module A depends on B when A imports B, or imports a name from B (`from B import x`;
  `from P import B` with B a submodule of P depends on B), at any depth of the file: a function's
  lazy import is still a dependency. Imports under `if TYPE_CHECKING:` are not (they never run).
  Two modules that depend on each other, directly or round a longer loop, form a cycle, except a
  package and one of its own submodules alone (its `__init__` re-exporting the submodule, which
  reads a sibling through the package).
- **Private reaches.** A private name (`_x`, not `__x__`) of one module may be used by the modules
  of its own subpackage (e.g. `check/`), never from outside it; each module directly in
  the top-level package is a unit of its own, except in a package of `ONE_UNIT` (the grader,
  which was the subpackage `instructor/`). Reported: `from B import _x`, and `B._x` where B
  is a name bound to a module by an import.
- **One way.** Imports go one way: the grader (`transformer_lab_grader`) imports the course's
  package, never the reverse (`ONE_WAY`). Any import of a forbidden package is reported, lazy,
  under `if TYPE_CHECKING:` or through `importlib.import_module("...")` with a literal name.
- **Layers.** A package of `LAYERS` (the grader) names its layers, top first: CLI -> commands ->
  pipeline steps -> sandbox and judge -> formats. A module may import (at any depth, as for
  cycles) its own layer's modules and those below, never one above; a module in no layer is
  reported too, so that a new module is placed on purpose.

Prints one line per problem and a summary, "structure: C cycles, P private reaches, F imports
against the one way, L imports against the layers"; exits 1 when there is a problem.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
# package -> the packages it must never import (they import it)
ONE_WAY = {"transformer_lab": ("transformer_lab_grader",)}
# packages whose top-level modules share private names, as a subpackage's do
ONE_UNIT = ("transformer_lab_grader",)
# package -> its layers, top first: (name, its modules, named without the package)
LAYERS = {
    "transformer_lab_grader": [
        ("cli", {"cli"}),
        ("commands", {"commands"}),
        (
            "pipeline steps",
            {
                "release",
                "collect",
                "safe_zip",
                "exchange",
                "identities",
                "submission",
                "grade",
                "grading",
                "regrade",
                "run_setup",
                "cluster",
                "cluster_worker",
                "worker",
                "worker_process",
                "job",
                "nbgrader_app",
                "gradebook",
                "gradebook_merge",
                "manual",
                "term",
                "export",
                "feedback",
                "lms_feedback",
                "report",
                "report_summary",
            },
        ),
        (
            "sandbox and judge",
            {
                "judged_execute",
                "judge",
                "judge_cells",
                "judge_limits",
                "cell_limits",
                "verify",
                "verify_flags",
                "verify_session",
                "verify_remote",
                "verify_wire",
                "verify_child",
                "verify_cells",
                "verify_guard",
                "verify_read",
                "verify_earlier",
                "sandbox",
                "bubblewrap",
            },
        ),
        (
            "formats",
            {
                "records",
                "failures",
                "notebook_format",
                "course",
                "timing",
                "maths_html",
                "untrusted",
                "plain_text",
                "safe_html",
            },
        ),
    ]
}


@dataclass
class Module:
    name: str  # dotted: transformer_lab.check.exercise
    path: Path

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"

    @property
    def package(self) -> str:
        """The package whose private names this module may share."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


@dataclass
class Report:
    cycles: list[list[str]] = field(default_factory=list)
    private: list[str] = field(default_factory=list)
    backward: list[str] = field(default_factory=list)
    layers: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.cycles or self.private or self.backward or self.layers)

    def lines(self) -> list[str]:
        out = [f"cycle: {' -> '.join(cycle)}" for cycle in self.cycles]
        out += [f"private: {reach}" for reach in self.private]
        out += [f"one way: {reach}" for reach in self.backward]
        out += [f"layer: {problem}" for problem in self.layers]
        out.append(
            f"structure: {len(self.cycles)} cycles, {len(self.private)} private reaches, "
            f"{len(self.backward)} imports against the one way, "
            f"{len(self.layers)} imports against the layers"
        )
        return out


def find_modules(src: Path, package: str) -> dict[str, Module]:
    top = src / package
    if not (top / "__init__.py").is_file():
        raise FileNotFoundError(f"no package {package!r} under {src} (no {top / '__init__.py'})")
    modules = {}
    for path in sorted(top.rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = Module(name, path)
    return modules


def _absolute(module: Module, level: int, target: str | None) -> str:
    """The absolute name of `from <level dots><target> import ...` written in `module`."""
    if level == 0:
        return target or ""
    base = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside `if TYPE_CHECKING:` blocks."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(inner) for stmt in node.body for inner in ast.walk(stmt)}
    return skipped


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _imported_names(module: Module, node: ast.AST) -> list[str]:
    """The absolute names of the modules `node` imports: an import statement, or a call
    `import_module("name")` / `importlib.import_module("name")` with a literal name."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        return [_absolute(module, node.level, node.module)]
    if (
        isinstance(node, ast.Call)
        and ast.unparse(node.func).split(".")[-1] == "import_module"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return [node.args[0].value]
    return []


def layer_problems(
    graph: nx.DiGraph, package: str, layers: list[tuple[str, set[str]]]
) -> list[str]:
    """The modules of `package` in no layer, and each import of a module of a higher layer."""
    where = {
        f"{package}.{name}": (rank, layer)
        for rank, (layer, names) in enumerate(layers)
        for name in names
    }
    problems = [f"{m} is in no layer" for m in sorted(graph) if m != package and m not in where]
    for user, used in sorted(graph.edges):
        if user in where and used in where and where[used][0] < where[user][0]:
            problems.append(f"{user} ({where[user][1]}) imports {used} ({where[used][1]})")
    return problems


def check(
    src: Path,
    package: str,
    forbid: tuple[str, ...] | None = None,
    layers: list[tuple[str, set[str]]] | None = None,
) -> Report:
    """`forbid`: packages `package` must not import (default: ONE_WAY's); `layers`: its layers,
    top first (default: LAYERS')."""
    forbid = ONE_WAY.get(package, ()) if forbid is None else forbid
    layers = LAYERS.get(package) if layers is None else layers
    modules = find_modules(src, package)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    report = Report()

    def reach(user: Module, owner: str, name: str, how: str) -> None:
        if (
            _private(name)
            and owner != user.name
            and (
                modules[owner].package != user.package
                or (user.package == package and package not in ONE_UNIT)
            )
        ):
            report.private.append(f"{user.name} {how} {owner}.{name}")

    for module in modules.values():
        tree = ast.parse(module.path.read_text(encoding="utf-8"), str(module.path))
        skipped = _type_checking_only(tree)
        bound = {}  # local name -> the module it is bound to
        for node in ast.walk(tree):
            for name in _imported_names(module, node):
                if name.split(".")[0] in forbid:
                    report.backward.append(f"{module.name} imports {name}")
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules:
                        graph.add_edge(module.name, alias.name)
                        if alias.asname:
                            bound[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(module, node.level, node.module)
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    if submodule in modules:
                        graph.add_edge(module.name, submodule)
                        bound[alias.asname or alias.name] = submodule
                    elif source in modules:
                        graph.add_edge(module.name, source)
                        reach(module, source, alias.name, "imports")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                owner = bound.get(node.value.id)
                if owner:
                    reach(module, owner, node.attr, "uses")
    graph.remove_edges_from(nx.selfloop_edges(graph))

    for component in nx.strongly_connected_components(graph):
        if len(component) < 2:
            continue
        members = sorted(component)
        first, second = members[0], members[-1]
        if len(members) == 2 and modules[first].is_package and second.startswith(first + "."):
            continue  # a package and one of its submodules
        report.cycles.append(members)
    report.cycles.sort()
    if layers:
        report.layers = layer_problems(graph, package, layers)
    report.private = sorted(set(report.private))
    report.backward = sorted(set(report.backward))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", nargs="?", type=Path, default=ROOT / "shared")
    parser.add_argument("--package", default="transformer_lab")
    parser.add_argument(
        "--forbid",
        action="append",
        help="a package PACKAGE must not import (repeatable; default: ONE_WAY's)",
    )
    args = parser.parse_args(argv)
    report = check(args.src, args.package, None if args.forbid is None else tuple(args.forbid))
    print("\n".join(report.lines()))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
