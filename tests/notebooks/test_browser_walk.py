"""The walk of issue 29: every lesson as a student meets it in `make lab`'s JupyterLab (Chromium).

    make walk        # TRANSFORMER_LAB_WALK=1, quick mode; not part of `make test` (its budget)

For each exercise notebook 01-13: opened, it is not modified by opening (no "Save changes?");
run untouched (Run All, then on past each failing cell), every check says "not written yet" in
one line, with no traceback; one catalogued wrong answer per check, typed into the solution cell
above it (test_browser_wrong_answers.py derives them), makes the check name the mistake ("Likely
mistake: ..."), in one message with no traceback; with the solution typed into every solution
cell (from solutions/), every check passes (✓); saved and reloaded, no widget error shows; closed,
nothing asks to save. Each kernel is shut down after its notebook.
Each lecture runs with no error and no widget error, and every slider of an interactive widget
changes the widget's output when moved. Screenshots: tests/artifacts/screenshots/walk_*.png.
The lab server, the browser page and the helpers are test_browser.py's (one server per module,
per xdist worker).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import nbformat
import pytest

if os.environ.get("TRANSFORMER_LAB_WALK") != "1":
    pytest.skip(
        "the browser walk of every lesson runs in `make walk` (TRANSFORMER_LAB_WALK=1)",
        allow_module_level=True,
    )

import test_browser  # noqa: E402  (skips this module too, saying why, without chromium)
from test_browser import (  # noqa: E402
    NOT_WRITTEN,
    ROOT,
    TIMEOUT_MS,
    _modified_after_opening,
    _run_cell,
    _save_and_reload,
    _shot,
    _type_into,
)
from test_browser_wrong_answers import check_names, wrong_answer  # noqa: E402

# How long one Run All may take: a quick-mode notebook takes 20-150 s on a quiet 2-core machine
# in the browser, several times that on a loaded one (TRANSFORMER_LAB_WALK_RUN_S to change it).
RUN_ALL_MS = int(float(os.environ.get("TRANSFORMER_LAB_WALK_RUN_S", "600")) * 1000)

lab = test_browser.lab  # the fixtures: one JupyterLab for this module, a fresh page per test
page = test_browser.page

pytestmark = pytest.mark.slow

# walk findings not fixed yet (none: those of lessons 06 and 08, a practice question's bare stub,
# are fixed: the released answer is `name = ...` before the stub, check/stub_cells.py shows the
# untouched cell in one line and the check says "not written yet"; those of lesson 09, a demo
# cell's NameError for what a cell failing at a stub never set, are shown in one line too)
UNFIXED: dict[str, str] = {}
EXERCISES = [
    pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=UNFIXED[name]))
    if name in UNFIXED
    else name
    for name in sorted(p.name for p in (ROOT / "exercises").iterdir() if p.name[:2].isdigit())
]
# lectures the walk still fails (none: lecture 08's sampler "changed nothing" because the walk
# left its temperature at 0, greedy, before moving top-k, top-p and the seed; each slider is now
# put back after its move)
LECTURES_UNFIXED: dict[str, str] = {}
LECTURES = [
    pytest.param(name, marks=pytest.mark.xfail(strict=False, reason=LECTURES_UNFIXED[name]))
    if name in LECTURES_UNFIXED
    else name
    for name in sorted(p.name for p in (ROOT / "lectures").glob("[01][0-9]_*_lecture.ipynb"))
]
STDERR = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
MISTAKE = "Likely mistake: "
# what only a traceback shows: its header, or a frame of the check engine (not the student's code)
ENGINE_FRAMES = re.compile(r"Traceback|File .*transformer_lab|exercise\.py|drivers\.py|---->")

# every code cell of the visible notebook: its index among all cells, prompt, and error text
_CELLS_JS = f"""() => {{
    const panel = [...document.querySelectorAll('.jp-NotebookPanel')]
        .find(p => p.offsetParent !== null);
    return [...panel.querySelectorAll('.jp-Notebook .jp-Cell')].map((cell, index) => ({{
        index,
        code: cell.classList.contains('jp-CodeCell'),
        prompt: (cell.querySelector('.jp-InputPrompt') || {{}}).textContent || '',
        error: [...cell.querySelectorAll({STDERR!r})].map(e => e.innerText).join('\\n'),
        output: [...cell.querySelectorAll('.jp-OutputArea-output')].map(e => e.innerText).join('\\n'),
    }})).filter(c => c.code);
}}"""


@pytest.fixture(autouse=True)
def _one_kernel_at_a_time(lab):
    """After each notebook, its kernel is shut down (JupyterLab keeps a closed notebook's kernel
    running): one kernel at a time on a loaded 2-core machine, not one per notebook walked."""
    yield
    base, token, _ = lab
    with urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=30) as reply:
        kernels = json.load(reply)
    for kernel in kernels:
        url = f"{base}/api/kernels/{kernel['id']}?token={token}"
        urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=60).close()


def _cells(page) -> list[dict]:
    return page.evaluate(_CELLS_JS)


def _wait_idle(page) -> None:
    """Until the kernel is idle and no cell is queued or running ([*]); on a timeout, the error
    names the cells still running or queued."""
    page.wait_for_timeout(1000)
    try:
        _until_idle(page)
    except test_browser.sync_api.TimeoutError:
        busy = [(c["index"], c["prompt"], c["output"][-300:]) for c in _cells(page)]
        busy = [c for c in busy if "*" in c[1]]
        raise AssertionError(
            f"still running or queued after {RUN_ALL_MS} ms: {busy}\n{_kernel_stacks()}"
        ) from None


def _kernel_stacks() -> str:
    """The Python stack of every course kernel now running (py-spy, from the dev extra): where a
    cell that never finishes is stuck (how issue 29's hang of exercises 08-10 was found)."""
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))
    if spy is None:
        return "(py-spy is not installed: no kernel stacks)"
    found = subprocess.run(
        ["pgrep", "-f", "transformer_lab.lab_kernel"], capture_output=True, text=True
    ).stdout.split()
    stacks = []
    for pid in found:
        dump = subprocess.run([spy, "dump", "--pid", pid], capture_output=True, text=True)
        frames = [line for line in dump.stdout.splitlines() if "frozen importlib" not in line]
        stacks.append(f"kernel {pid}:\n" + "\n".join(frames[:40]) + dump.stderr[-300:])
    return "\n".join(stacks) or "(no course kernel running)"


def _until_idle(page) -> None:
    page.wait_for_function(
        """() => {
            const panel = [...document.querySelectorAll('.jp-NotebookPanel')]
                .find(p => p.offsetParent !== null);
            const idle = panel.querySelector(".jp-Notebook-ExecutionIndicator[data-status='idle']");
            const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
            return idle && prompts.every(p => !p.textContent.includes('*'));
        }""",
        timeout=RUN_ALL_MS,
    )


def _menu(page, menu: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(rf"^{menu}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(rf"^{re.escape(item)}$")).click()


def _run_through(page, panel) -> list[dict]:
    """Run every cell, the ones after a failing cell one by one (as a student clicking on would)."""
    _menu(page, "Run", "Run All Cells")
    _wait_idle(page)
    for cell in _cells(page):
        if not re.search(r"\[\d+\]", cell["prompt"]):  # not run: after a failed cell
            _run_cell(page, panel.locator(".jp-Notebook .jp-Cell").nth(cell["index"]))
            _wait_idle(page)
    return _cells(page)


def _solution_sources(lesson: str) -> dict[int, str]:
    """The solution notebook's source of every cell that the exercise released as a stub."""
    exercise = nbformat.read(ROOT / "exercises" / lesson / f"{lesson}.ipynb", as_version=4)
    solution = nbformat.read(ROOT / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    by_id = {c.get("id"): c for c in solution.cells}
    sources = {}
    for i, cell in enumerate(exercise.cells):
        if cell.metadata.get("nbgrader", {}).get("solution") and cell.cell_type == "code":
            sources[i] = by_id[cell.get("id")].source
    assert sources, f"{lesson}: no solution cells"
    return sources


@pytest.mark.parametrize("lesson", EXERCISES)
def test_walk_exercise(page, lab, lesson):
    path = f"exercises/{lesson}/{lesson}.ipynb"
    checks = set(check_names(ROOT / path))
    assert checks, f"{lesson}: no check cells"
    assert not _modified_after_opening(page, lab, path), "opening the notebook modified it"
    panel = page.locator(".jp-NotebookPanel:visible")

    # untouched: every check says "not written yet" in one line; no other cell shows a traceback
    cells = _run_through(page, panel)
    _shot(page, f"walk_{lesson}_untouched")
    by_index = {c["index"]: c for c in cells}
    for i in sorted(checks):
        text = by_index[i]["error"]
        lines = [line for line in text.splitlines() if line.strip()]
        summary = [(c["index"], c["prompt"], c["error"][:80]) for c in cells]
        assert len(lines) == 1 and NOT_WRITTEN in lines[0], f"{lesson} cell {i}: {text}\n{summary}"
    tracebacks = {c["index"]: c["error"] for c in cells if "Traceback" in c["error"]}
    assert not tracebacks, f"{lesson}: a traceback in an untouched run: {tracebacks}"

    # one catalogued wrong answer per exercise, typed into its solution cell (the cell above its
    # check) and run with the check: the check names the mistake in one tidy message; then the
    # solution, run, so that the later exercises build on right parts
    cell_locators = panel.locator(".jp-Notebook .jp-Cell")
    solutions = _solution_sources(lesson)
    for i, name in check_names(ROOT / path).items():
        assert i - 1 in solutions, f"{lesson}: the cell above check.{name} is no solution cell"
        wrong, sentence = wrong_answer(lesson, name, solutions[i - 1])
        _type_into(page, cell_locators.nth(i - 1), wrong)
        for cell in (i - 1, i):
            _run_cell(page, cell_locators.nth(cell))
            _wait_idle(page)
        text = {c["index"]: c for c in _cells(page)}[i]["error"]
        assert MISTAKE + " ".join(sentence.split()) in " ".join(text.split()), (
            f"{lesson}: check.{name} with a wrong answer:\n{text}"
        )
        assert not ENGINE_FRAMES.search(text), f"{lesson}: check.{name}: a traceback:\n{text}"
        _shot(page, f"walk_{lesson}_wrong_{name}", cell_locators.nth(i))
        _type_into(page, cell_locators.nth(i - 1), solutions[i - 1])
        _run_cell(page, cell_locators.nth(i - 1))
        _wait_idle(page)

    # the solution in every solution cell: every check passes
    for i, source in solutions.items():
        _type_into(page, cell_locators.nth(i), source)
    _menu(page, "Run", "Run All Cells")
    _wait_idle(page)
    cells = _cells(page)
    errors = {c["index"]: c["error"] for c in cells if c["error"]}
    assert not errors, f"{lesson} with its solution: {errors}"
    outputs = {c["index"]: c["output"] for c in cells}
    for i in sorted(checks):
        assert "✓" in outputs[i], f"{lesson} cell {i} with its solution:\n{outputs[i]}"
    _shot(page, f"walk_{lesson}_solved")

    # saved and reloaded: no widget error; closed: no "Save changes?"
    panel = _save_and_reload(page, lab, path)
    text = panel.inner_text()
    assert "Error displaying widget" not in text and "model not found" not in text
    page.keyboard.press("Alt+w")
    page.wait_for_timeout(1500)
    assert page.locator(".jp-Dialog").count() == 0, page.locator(".jp-Dialog").all_inner_texts()


@pytest.mark.parametrize("lecture", LECTURES)
def test_walk_lecture(page, lab, lecture):
    path = f"lectures/{lecture}"
    assert not _modified_after_opening(page, lab, path), "opening the lecture modified it"
    panel = page.locator(".jp-NotebookPanel:visible")
    _menu(page, "Run", "Run All Cells")
    _wait_idle(page)
    errors = {c["index"]: c["error"] for c in _cells(page) if c["error"]}
    assert not errors, f"{lecture}: {errors}"
    assert "Error displaying widget" not in panel.inner_text()
    _shot(page, f"walk_{lecture.removesuffix('.ipynb')}")
    # every slider of an interactive widget changes that widget's output when moved
    interacts = panel.locator(".widget-interact")
    for n in range(interacts.count()):
        interact = interacts.nth(n)
        output = interact.locator(".widget-output")
        for slider in interact.locator(".widget-slider").all():
            before, readout = output.inner_html(), slider.locator(".widget-readout")
            value = readout.inner_text()
            slider.locator(".noUi-handle").first.focus()
            # to one end, or the other where it already is (one step, e.g. top_p 1.0 -> 0.95,
            # may leave a sampled text as it was)
            for key in ("Home", "End", "ArrowLeft", "ArrowRight"):
                page.keyboard.press(key)
                page.wait_for_timeout(300)
                if readout.inner_text() != value:
                    break
            assert readout.inner_text() != value, f"{lecture}: widget {n}: the slider did not move"
            deadline = time.monotonic() + TIMEOUT_MS / 1000
            while output.inner_html() == before:
                assert time.monotonic() < deadline, (
                    f"{lecture}: widget {n}: a slider changed nothing"
                )
                page.wait_for_timeout(250)
            _wait_idle(page)
            # back to where it was, typed into its readout, so that the next slider is moved from
            # the widget's start (lecture 08's sampler: at temperature 0, greedy, top-k, top-p
            # and the seed rightly change nothing)
            readout.fill(value)
            readout.press("Enter")
            page.wait_for_timeout(300)
            _wait_idle(page)
        _shot(page, f"walk_{lecture.removesuffix('.ipynb')}_widget{n}", interact)


def test_walk_a_notebook_with_the_old_metadata_is_modified_on_opening(page, lab):
    """The mutant of item 8b: ipykernel's language_info as notebooks had it before lab_kernel."""
    _, _, tmp = lab
    nb = nbformat.read(ROOT / "exercises" / "11_vit" / "11_vit.ipynb", as_version=4)
    nb.metadata["language_info"] = {"name": "python"}
    nbformat.write(nb, tmp / "course" / "exercises" / "11_vit" / "old_metadata.ipynb")
    assert _modified_after_opening(page, lab, "exercises/11_vit/old_metadata.ipynb")
