"""Source-level red flags of a submission (cheap, static): they never cost points; they tell the
instructor where to look (patching torch, the checks or built-ins, reading the course's files,
starting processes, ...)."""

from __future__ import annotations

import ast
from pathlib import Path

from .notebook_format import python_source

_PROTECTED = ("torch", "transformer_lab", "builtins", "sys", "numpy", "math", "nbgrader", "IPython")
_DEFAULT_ALIASES = {
    "torch": "torch",
    "F": "torch.nn.functional",
    "nn": "torch.nn",
    "check": "transformer_lab.check",
    "transformer_lab": "transformer_lab",
    "builtins": "builtins",
    "sys": "sys",
    "np": "numpy",
    "math": "math",
}
_DANGEROUS_CALLS = {
    "sys.setprofile": "replaces the profiler (sys.setprofile)",
    "sys.settrace": "installs a tracer (sys.settrace)",
    "gc.get_referrers": "walks the garbage collector's references",
    "gc.get_objects": "walks the garbage collector's objects",
    "inspect.getsource": "reads source code with inspect.getsource",
    "inspect.getsourcefile": "looks up source files with inspect",
    "inspect.getfile": "looks up source files with inspect",
    "importlib.reload": "reloads a module",
    "importlib.util.spec_from_file_location": "imports a module from a file path",
    "__import__": "calls __import__",
    "os.read": "reads a raw file descriptor (os.read)",
    "os.write": "writes a raw file descriptor (os.write)",
    "os.fdopen": "opens a raw file descriptor (os.fdopen)",
    "os.dup2": "rewires file descriptors (os.dup2)",
    "os.system": "runs a shell command (os.system)",
    "os.kill": "signals a process (os.kill)",
    "subprocess.run": "starts a process (subprocess)",
    "subprocess.Popen": "starts a process (subprocess)",
    "subprocess.call": "starts a process (subprocess)",
    "subprocess.check_output": "starts a process (subprocess)",
    "threading.Thread": "starts a thread",
    "signal.signal": "installs a signal handler",
}
_COURSE_WORDS = ("solutions", "autograder", "gradebook", "source/", "nbgrader_config")


def _dotted(node, aliases) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    root = aliases.get(node.id)
    if root is None:
        return None
    return ".".join([root, *reversed(parts)])


def _root(node, aliases) -> str | None:
    """The module an attribute/subscript/call chain starts from (``vars(torch)[..]`` -> torch)."""
    while True:
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, ast.Call):
            if (
                isinstance(node.func, ast.Name)
                and node.func.id in ("vars", "getattr")
                and node.args
            ):
                node = node.args[0]
            else:
                node = node.func
        elif isinstance(node, ast.Name):
            return aliases.get(node.id)
        else:
            return None


def _protected(dotted: str | None) -> bool:
    return bool(dotted) and dotted.split(".")[0] in _PROTECTED


def source_flags(cells: list[tuple[int, str]]) -> list[str]:
    """Red flags in the submission's code cells, one sentence each ("cell N" counts from 1)."""
    aliases = dict(_DEFAULT_ALIASES)
    flags: list[str] = []

    def add(i, what):
        text = f"suspicious code in cell {i + 1}: {what}"
        if text not in flags:
            flags.append(text)

    for i, src in cells:
        try:
            tree = ast.parse(python_source(src))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):  # imports first: they define the aliases
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        aliases[a.asname] = a.name
                    else:
                        aliases[a.name.split(".")[0]] = a.name.split(".")[0]
                    if a.name.split(".")[0] in ("builtins", "ctypes"):
                        add(i, f"imports {a.name}")
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                if node.module.split(".")[0] in ("builtins", "ctypes"):
                    add(i, f"imports from {node.module}")
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif isinstance(node, ast.Delete):
                targets = node.targets
            for t in targets:
                for sub in [t, *(t.elts if isinstance(t, (ast.Tuple, ast.List)) else [])]:
                    if isinstance(sub, (ast.Attribute, ast.Subscript)) and _protected(
                        _root(sub, aliases)
                    ):
                        spelled, d = ast.unparse(sub), _dotted(sub, aliases)
                        add(i, f"assigns {spelled}" + (f" ({d})" if d and d != spelled else ""))
            if isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__"):
                add(i, f"uses {node.id}")
            if isinstance(node, ast.Call):
                func = node.func
                name = _dotted(func, aliases) or (func.id if isinstance(func, ast.Name) else "")
                if name in ("setattr", "delattr", "builtins.setattr", "builtins.delattr"):
                    if node.args:
                        d = _dotted(node.args[0], aliases)
                        text = ast.unparse(node.args[0])
                        if _protected(d) or "modules" in text or "__class__" in text:
                            add(i, f"{name.split('.')[-1]} on {d or text}")
                for key, what in _DANGEROUS_CALLS.items():
                    if name == key or (name or "").endswith("." + key):
                        add(i, what)
                if name in ("vars", "builtins.vars") and node.args:
                    d = _dotted(node.args[0], aliases)
                    if _protected(d):
                        add(i, f"reaches into vars({d})")
                if name in ("exec", "eval", "compile", "builtins.exec", "builtins.eval"):
                    add(i, f"calls {name.split('.')[-1]}")
                if name in ("open", "io.open", "builtins.open") or (
                    isinstance(func, ast.Attribute)
                    and func.attr in ("read_text", "read_bytes", "open")
                ):
                    args = ast.unparse(node)
                    if "__file__" in args or "getsource" in args:
                        add(i, f"reads a module's source file: {args[:120]}")
                    for a in node.args[:1]:
                        if isinstance(a, ast.Constant) and isinstance(a.value, str):
                            p = a.value
                            if p.startswith(("/", "~")) or ".." in Path(p).parts:
                                add(i, f"opens a path outside its working folder: {p!r}")
            if isinstance(node, ast.Attribute) and node.attr in (
                "__file__",
                "__spec__",
                "__path__",
            ):
                d = _dotted(node.value, aliases)
                if d and d.split(".")[0] == "transformer_lab":
                    add(i, f"looks up the course package's files ({d}.{node.attr})")
            if isinstance(node, ast.Attribute) and node.attr in (
                "__globals__",
                "__code__",
                "__closure__",
            ):
                add(i, f"touches function internals ({ast.unparse(node)[:80]})")
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                low = node.value.lower()
                for word in _COURSE_WORDS:
                    if word in low and ("/" in low or "\\" in low or low.endswith(".ipynb")):
                        add(i, f"names the course's private files: {node.value[:120]!r}")
    return flags
