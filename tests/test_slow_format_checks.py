"""Reading a notebook does not pay for jsonschema's "iri" grammar (`skip_slow_format_checks`).

nbformat imports jsonschema, which imports `rfc3987_syntax` for its optional "iri" format check
where it is installed (JupyterLab's `jsonschema[format-nongpl]` installs it); that import builds a
grammar, about 2 CPU s. The grader, the presubmit tool and notebook generation skip it:
- in a fresh interpreter, importing each of them and then nbformat, nbclient and nbgrader leaves
  `rfc3987_syntax` unimported (the mutant: `skip_slow_format_checks` as a no-op imports it);
- nbformat still validates: a notebook with an invalid cell is still refused;
- a process that had already imported the module keeps it.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATHS = [str(ROOT / "shared"), str(ROOT / "autograder")]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("rfc3987_syntax") is None,
    reason="rfc3987_syntax is not installed here: nothing to skip",
)

PROBE = """
import json, sys
sys.path[:0] = {paths}
{mutant}
import {module}
import nbformat, nbclient
{extra}
bad = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
bad.cells[0]["execution_count"] = "not a number"
try:
    nbformat.validate(bad)
    refused = False
except nbformat.ValidationError:
    refused = True
print(json.dumps({{"imported": sys.modules.get("rfc3987_syntax") is not None, "refused": refused}}))
"""

NO_OP = (
    "import transformer_lab.notebook_cells as cells\ncells.skip_slow_format_checks = lambda: None"
)


def probe(module: str, mutant: str = "", extra: str = "") -> dict:
    code = PROBE.format(paths=PATHS, module=module, mutant=mutant, extra=extra)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "module",
    ["transformer_lab_grader", "transformer_lab.presubmit", "transformer_lab.notebook_setup"],
)
def test_reading_notebooks_skips_the_iri_grammar(module):
    got = probe(module, extra="import nbgrader.preprocessors" if "grader" in module else "")
    assert got == {"imported": False, "refused": True}


def test_the_mutant_imports_it():
    """`skip_slow_format_checks` as a no-op: the grammar is imported (so the test above can fail)."""
    assert probe("transformer_lab.presubmit", mutant=NO_OP)["imported"] is True


def test_a_module_already_imported_is_kept():
    got = probe("transformer_lab.notebook_setup", mutant="import rfc3987_syntax")
    assert got == {"imported": True, "refused": True}
