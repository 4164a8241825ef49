"""`import transformer_lab` is light: the models (and torch) load when first asked for (PEP 562).

What that buys and what it must not break:
- the grader's command line and `import transformer_lab.colab` start without torch (a mutant
  package whose `__init__` or `student` module imports a model eagerly, as before 2026-11-28,
  imports it);
- every name the package offers is its module's own object, `dir` and `import *` list them, and
  a name that does not exist is an AttributeError;
- a passing check still saves the student's code after `import transformer_lab.check` alone;
- `check.forbid` switches a reference off under both its names and restores both, the package's
  name still lazy (the mutants: a `__getattr__` that caches what it gave; a restore that binds
  the package's name, which keeps the stub put on the module's, or which a later check misses).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import transformer_lab
from transformer_lab import masking
from transformer_lab.check.forbid import ImplementThisYourself, forbid

# the module (`transformer_lab.check.forbid` as an attribute is the function it exports)
forbid_module = sys.modules["transformer_lab.check.forbid"]

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "shared" / "transformer_lab"

IMPORTS = """
import json, sys
import {module}
print(json.dumps(sorted(m for m in ("torch", "numpy", "matplotlib") if m in sys.modules)))
"""


def _fresh(source: str, shared: Path):
    """The JSON that `source` prints last in a fresh interpreter whose packages are `shared`'s
    (and the grader's)."""
    done = subprocess.run(
        [sys.executable, "-c", source],
        env={"PYTHONPATH": f"{shared}:{ROOT / 'autograder'}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def _package_copy(tmp_path: Path, file: str, edit) -> Path:
    """A copy of the package with `edit` applied to the text of its `file` (a mutant); returns
    the folder to put on the path."""
    copy = tmp_path / "shared" / "transformer_lab"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / file).write_text(edit((copy / file).read_text()))
    return copy.parent


def _heavy_modules(module: str, shared: Path) -> list:
    """The heavy libraries a fresh interpreter has loaded after `import module`."""
    return _fresh(IMPORTS.format(module=module), shared)


@pytest.mark.parametrize(
    "module", ["transformer_lab", "transformer_lab_grader.cli", "transformer_lab.colab"]
)
def test_the_package_and_the_command_line_start_without_torch(module):
    assert _heavy_modules(module, ROOT / "shared") == []


@pytest.mark.parametrize(
    "file, eager",
    [
        ("__init__.py", "\nfrom .gpt import GPT  # the mutant: one eager model import\n"),
        ("student.py", "\nfrom torch import nn  # the mutant: torch at the student module's top\n"),
    ],
)
def test_mutant_an_eager_import_brings_torch_back(tmp_path, file, eager):
    shared = _package_copy(tmp_path, file, lambda text: text + eager)
    assert "torch" in _heavy_modules("transformer_lab", shared)


def test_every_offered_name_is_its_modules_own_object():
    import importlib

    for module, names in transformer_lab._EXPORTS.items():
        source = importlib.import_module(f"transformer_lab.{module}")
        for name in names:
            assert getattr(transformer_lab, name) is getattr(source, name), name
    assert set(transformer_lab.__all__) <= set(dir(transformer_lab))
    namespace: dict = {}
    exec("from transformer_lab import *", namespace)  # noqa: S102
    assert namespace["GPT"] is transformer_lab.gpt.GPT
    assert namespace["viz"] is transformer_lab.viz
    with pytest.raises(AttributeError, match="no attribute 'GPT2'"):
        transformer_lab.GPT2  # noqa: B018


def _for_editors(source: str) -> dict[str, str]:
    """What `__init__`'s `if TYPE_CHECKING:` block imports, name -> module ("" for a submodule):
    the names an editor's static analysis (Pylance, Jedi) sees, since the lazy ones exist only
    through `__getattr__`."""
    import ast

    block = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
    )
    names = {}
    for node in block.body:
        for alias in node.names:
            names[alias.asname or alias.name] = node.module or ""
    return names


def _offered() -> dict[str, str]:
    return {name: "" for name in transformer_lab._SUBMODULES} | transformer_lab._MODULE_OF


def test_editors_are_told_every_name_the_package_offers_and_where_it_lives():
    assert _for_editors((PACKAGE / "__init__.py").read_text()) == _offered()


@pytest.mark.parametrize(
    "edit",
    [
        lambda text: text.replace("        GPTConfig,\n", "", 1),  # a name left out
        lambda text: text.replace(
            "from .vit import ViT,", "from .gpt import ViT,", 1
        ),  # wrong home
    ],
)
def test_mutant_an_editors_list_that_differs_is_caught(edit):
    source = (PACKAGE / "__init__.py").read_text()
    assert edit(source) != source
    assert _for_editors(edit(source)) != _offered()


COMPLETES = """
import json, sys
import jedi
completed = jedi.Script("import transformer_lab as tl\\ntl.GP").complete()
found = jedi.Script("import transformer_lab as tl\\ntl.GPT").goto(2, 4, follow_imports=True)
print(json.dumps([sorted(c.name for c in completed), [d.module_name for d in found]]))
"""


def _jedi_sees(shared: Path) -> tuple[list, list]:
    pytest.importorskip("jedi")
    return _fresh(COMPLETES, shared)


def test_an_editor_completes_and_finds_the_lazy_names():
    completed, found = _jedi_sees(ROOT / "shared")
    assert {"GPT", "GPTBlock", "GPTConfig", "gpt"} <= set(completed)
    assert found == ["transformer_lab.gpt"]  # go to definition: the class, in its module


def test_mutant_without_the_editors_list_an_editor_sees_only_the_module(tmp_path):
    shared = _package_copy(
        tmp_path, "__init__.py", lambda text: text.replace("if TYPE_CHECKING:", "if False:")
    )
    completed, found = _jedi_sees(shared)
    assert "GPT" not in completed and found != ["transformer_lab.gpt"]


NOTEBOOK_COMPLETES = """
import json
from IPython.core.completer import provisionalcompleter
from IPython.testing.globalipapp import get_ipython
ip = get_ipython()
ip.run_cell("import transformer_lab as tl")
with provisionalcompleter():
    print(json.dumps(sorted({c.text for c in ip.Completer.completions("tl.vi", 5)})))
"""


def test_a_notebook_completes_a_module_not_imported_yet():
    """IPython's completer (JupyterLab's and Colab's) offers `tl.vit` after `tl.vi`, as it did
    when `import transformer_lab` imported every module."""
    assert {"vit", "viz"} <= set(_fresh(NOTEBOOK_COMPLETES, ROOT / "shared"))


def test_mutant_a_dir_without_the_modules_offers_only_the_submodules(tmp_path):
    shared = _package_copy(
        tmp_path, "__init__.py", lambda text: text.replace(", *_EXPORTS})", "})", 1)
    )
    offered = _fresh(NOTEBOOK_COMPLETES, shared)
    assert "viz" in offered and "vit" not in offered


SAVES = """
import json
import transformer_lab.check
from transformer_lab import registry
print(json.dumps(len(registry._LISTENERS)))
"""


def test_a_check_imported_alone_still_saves_the_students_code(tmp_path):
    assert _fresh(SAVES, ROOT / "shared") == 1  # the student package's `_save_passing`
    shared = _package_copy(  # the mutant: `student` loaded lazily too
        tmp_path,
        "__init__.py",
        lambda text: text.replace("import registry, student", "import registry"),
    )
    assert _fresh(SAVES, shared) == 0


@pytest.fixture
def lazy_padding_mask():
    """`transformer_lab.padding_mask` not looked up yet, as in a fresh kernel."""
    vars(transformer_lab).pop("padding_mask", None)
    yield
    vars(transformer_lab).pop("padding_mask", None)


TOKENS = torch.tensor([[5, 0], [7, 8]])


def _calls_through_the_package(tokens):
    return transformer_lab.padding_mask(tokens, 0)


BOTH = ("transformer_lab.masking.padding_mask", "transformer_lab.padding_mask")


def _forbid_and_check(names):
    real = masking.padding_mask
    with forbid(names, _calls_through_the_package, "demo"):
        with pytest.raises(ImplementThisYourself):
            _calls_through_the_package(TOKENS)
        with pytest.raises(ImplementThisYourself):
            masking.padding_mask(TOKENS, 0)
    assert masking.padding_mask is real
    assert transformer_lab.padding_mask is real  # nothing switched off outlives the check
    assert "padding_mask" not in vars(transformer_lab)  # still given lazily, by its module
    assert _calls_through_the_package(TOKENS).tolist() == [[[[True, False]]], [[[True, True]]]]


@pytest.mark.parametrize("names", [BOTH, BOTH[::-1], BOTH[:1]])
def test_forbid_switches_off_both_names_and_restores_both(lazy_padding_mask, names):
    _forbid_and_check(names)


def test_mutant_a_caching_getattr_keeps_the_stub(lazy_padding_mask, monkeypatch):
    lazy = transformer_lab.__getattr__

    def caching(name):
        value = lazy(name)
        vars(transformer_lab)[name] = value
        return value

    monkeypatch.setattr(transformer_lab, "__getattr__", caching)
    with pytest.raises(AssertionError):
        _forbid_and_check(BOTH[:1])


def test_a_later_check_switches_the_package_name_off_again(lazy_padding_mask):
    _forbid_and_check(BOTH)
    _forbid_and_check(BOTH[:1])  # the module's name alone: the package's name follows it


def test_mutant_a_restore_that_binds_the_package_name(lazy_padding_mask, monkeypatch):
    monkeypatch.setattr(forbid_module, "_restore", lambda o, a, v, own: setattr(o, a, v))
    with pytest.raises(AssertionError):  # the module's name first: the stub it gave is kept
        _forbid_and_check(BOTH)
    vars(transformer_lab).pop("padding_mask")
    with pytest.raises(AssertionError):  # the package's name first: the real one, bound
        _forbid_and_check(BOTH[::-1])
    with forbid(BOTH[:1], _calls_through_the_package, "demo"):  # so a later check misses it
        assert _calls_through_the_package(TOKENS).shape == (2, 1, 1, 2)
