"""Progress bars in Jupyter leave plain text behind (issue 29): a finished bar's widget output,
saved in the notebook, shows "Error displaying widget: model not found" after a reload.

Runs a real kernel (seconds), so the test is marked slow.
"""

from __future__ import annotations

import nbformat
import pytest

WIDGET = "application/vnd.jupyter.widget-view+json"


def _run(tmp_path, code: str):
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(code)]
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    return nb.cells[0].outputs


BAR = """
from transformer_lab.train import progress
for _ in progress(range(5), desc="training"):
    pass
"""


@pytest.mark.slow
def test_a_finished_bar_is_text_not_a_widget(tmp_path, monkeypatch):
    monkeypatch.delenv("TRANSFORMER_LAB_NO_PROGRESS", raising=False)
    outputs = _run(tmp_path, BAR)
    assert not [o for o in outputs if WIDGET in o.get("data", {})], outputs
    text = "".join(o.get("data", {}).get("text/plain", "") for o in outputs)
    assert "training: 100%" in text and "5/5" in text


@pytest.mark.slow
def test_mutant_tqdms_own_bar_leaves_a_widget(tmp_path, monkeypatch):
    monkeypatch.delenv("TRANSFORMER_LAB_NO_PROGRESS", raising=False)
    outputs = _run(
        tmp_path,
        BAR.replace("transformer_lab.train import progress", "tqdm.auto import tqdm as progress"),
    )
    assert [o for o in outputs if WIDGET in o.get("data", {})]
