"""The course's kernel in JupyterLab (transformer_lab.lab_kernel, issue 29 item 8b): it reports the
language_info that notebook_setup writes into every notebook, so opening one leaves it unmodified.
The browser side: test_browser.py (an untouched notebook closes with no dialog) and
test_browser_walk.py (the mutant with the old metadata is modified on opening)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ipykernel.ipkernel import IPythonKernel

from transformer_lab.lab_kernel import KERNELSPEC, LANGUAGE_INFO

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "shared" / "jupyter" / "data"


def test_language_info_is_ipykernels_without_the_python_version():
    theirs = dict(IPythonKernel.language_info)
    assert "version" in theirs  # what made every opened notebook modified
    del theirs["version"]
    assert LANGUAGE_INFO == theirs


def test_the_kernelspec_starts_the_course_kernel_under_the_notebooks_name():
    spec = json.loads((DATA / "kernels" / KERNELSPEC["name"] / "kernel.json").read_text())
    assert spec["argv"][:3] == ["python", "-m", "transformer_lab.lab_kernel"]
    assert spec["display_name"] == KERNELSPEC["display_name"]
    assert spec["language"] == KERNELSPEC["language"]


def _language_info(monkeypatch, jupyter_path: Path) -> dict:
    from jupyter_client.manager import start_new_kernel

    monkeypatch.setenv("JUPYTER_PATH", str(jupyter_path))
    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=120)
    try:
        return kc.kernel_info(reply=True, timeout=120)["content"]["language_info"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.slow
def test_the_running_kernel_reports_the_notebooks_language_info(monkeypatch):
    # (without make lab's JUPYTER_PATH it would be ipykernel's, with the version: see above)
    assert _language_info(monkeypatch, DATA) == LANGUAGE_INFO
