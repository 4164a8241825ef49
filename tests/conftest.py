"""Shared fixtures: devices (cpu, and cuda when present), dtypes and their tolerances, and a
throw-away student package.

The suite mirrors the package: ``models/`` (the reference modules and the models built from
parts), ``checks/`` (the check engine and one file per lesson's checks), ``grading/`` (the
instructor's pipeline and the hostile submissions), ``notebooks/`` (lectures, JupyterLab in a
browser, the simulated Colab, ``make lab``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available"),
    ),
]
DTYPES = [torch.float32, torch.float64]

# Absolute and relative tolerances per dtype for comparisons with PyTorch's own modules.
TOLERANCES = {
    torch.float32: {"atol": 2e-5, "rtol": 2e-4},
    torch.float64: {"atol": 1e-10, "rtol": 1e-8},
}


@pytest.fixture(params=DEVICES)
def device(request):
    """torch.device("cpu"), or the current CUDA device with its index (so that it compares equal
    to a tensor's .device). On CUDA the test runs without TF32, as the checks do
    (`check.exact_float32`): the float32 tolerances below are float32's, not TF32's."""
    if request.param == "cuda":
        from transformer_lab.check import exact_float32

        with exact_float32():
            yield torch.device("cuda", torch.cuda.current_device())
        return
    yield torch.device(request.param)


@pytest.fixture(params=DTYPES, ids=["float32", "float64"])
def dtype(request) -> torch.dtype:
    return request.param


@pytest.fixture
def tol(dtype) -> dict:
    """Keyword arguments for torch.testing.assert_close / torch.allclose at this dtype."""
    return TOLERANCES[dtype]


@pytest.fixture(autouse=True)
def _never_the_learners_package(monkeypatch, tmp_path_factory):
    """A check that passes saves into the student package: never the checkout's or the home's, in
    any test that does not choose one itself (``student_dir``, ``quick_env``)."""
    if not os.environ.get("TRANSFORMER_LAB_STUDENT_DIR"):
        folder = tmp_path_factory.getbasetemp() / "student-package-of-the-tests"
        monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(folder))


@pytest.fixture
def student_dir(tmp_path, monkeypatch):
    """A private student package for one test (never the learner's own), outside grading mode."""
    path = tmp_path / "pkg"
    monkeypatch.setenv("TRANSFORMER_LAB_STUDENT_DIR", str(path))
    monkeypatch.delenv("TRANSFORMER_LAB_GRADING", raising=False)
    return path


# Browser tests (notebooks/test_browser.py, book/test_book_browser.py): Debian's chromium driven by
# Playwright, whose own browser download fails here.
CHROMIUM = os.environ.get("TRANSFORMER_LAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser():
    """Chromium, launched once per module; skips, saying why, without chromium or playwright."""
    if not Path(CHROMIUM).is_file():
        pytest.skip(
            f"browser tests need Debian's chromium at {CHROMIUM} (`apt-get install -y chromium`)"
        )
    sync_api = pytest.importorskip("playwright.sync_api", reason="browser tests need playwright")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()
