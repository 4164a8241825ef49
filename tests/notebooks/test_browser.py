"""The course in a real browser: JupyterLab (the students' configuration) driven by Playwright.

Chromium is Debian's (`apt-get install -y chromium`, which `.ci/run` does); Playwright's own
browser download is not used. Without chromium (or without the `playwright` package) these tests
skip and say why. JupyterLab serves a copy of the course in a temporary folder, in quick mode,
with the student's package in a temporary folder too, so nothing in the repository changes.
Screenshots go to tests/artifacts/screenshots/ (git-ignored). The browser is tests/conftest.py's.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "tests" / "artifacts" / "screenshots"
CHROMIUM = os.environ.get("TRANSFORMER_LAB_CHROMIUM", "/usr/bin/chromium")
TIMEOUT_MS = 90_000

pytestmark = pytest.mark.slow

if not Path(CHROMIUM).is_file():
    pytest.skip(
        f"browser tests need Debian's chromium at {CHROMIUM} (`apt-get install -y chromium`; "
        ".ci/run installs it)",
        allow_module_level=True,
    )
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="browser tests need playwright (pip install -e '.[dev]')"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _course_copy(dest: Path) -> Path:
    for part in ("lectures", "exercises"):
        shutil.copytree(ROOT / part, dest / part)
    shutil.copytree(ROOT / "shared" / "jupyter", dest / "shared" / "jupyter")
    return dest


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A student's JupyterLab on a free localhost port, with a token: (base url, token)."""
    tmp = tmp_path_factory.mktemp("browser")
    course = _course_copy(tmp / "course")
    settings = tmp / "lab-settings"
    # every cell stays in the page (no virtual scrolling), and no news pop-up
    (settings / "@jupyterlab" / "notebook-extension").mkdir(parents=True)
    (settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings").write_text(
        '{"windowingMode": "none", "autoStartDefaultKernel": true}'
    )
    (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True)
    (
        settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    ).write_text('{"fetchNews": "false", "checkForUpdates": false}')
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "MPLBACKEND",
            "TRANSFORMER_LAB_NO_PROGRESS",
            "TQDM_DISABLE",
            "TRANSFORMER_LAB_GRADING",
        )
    }
    env.update(
        JUPYTER_PATH=str(course / "shared" / "jupyter" / "data"),  # make lab's kernel (lab_kernel)
        TRANSFORMER_LAB_QUICK="1",
        TRANSFORMER_LAB_DEVICE="cpu",
        TRANSFORMER_LAB_STUDENT_DIR=str(tmp / "student_package"),
        HF_HUB_OFFLINE="1",
        JUPYTER_CONFIG_PATH=str(course / "shared" / "jupyter" / "student"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
    )
    port, token = _free_port(), secrets.token_hex(16)
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--ServerApp.root_dir={course}",
        f"--IdentityProvider.token={token}",
    ]
    if os.getuid() == 0:
        cmd.append("--allow-root")
    log = (tmp / "lab.log").open("w")
    proc = subprocess.Popen(
        cmd, cwd=course, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=10):
                    break
            except (urllib.error.URLError, ConnectionError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        "JupyterLab did not start:\n" + (tmp / "lab.log").read_text()[-3000:]
                    ) from None
                time.sleep(0.5)
        yield base, token, tmp
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    pg = context.new_page()
    yield pg
    context.close()


def _shot(page, name: str, locator=None) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    (locator or page).screenshot(path=str(path))
    return path


def _open(page, lab, path: str):
    """Open a notebook in a fresh workspace; wait for its kernel to be idle. Returns the panel."""
    base, token, _ = lab
    page.goto(f"{base}/lab/tree/{path}?token={token}&reset")
    panel = page.locator(".jp-NotebookPanel:visible")
    panel.locator(".jp-Notebook .jp-Cell").first.wait_for()
    # a slow start can still ask which kernel to use: take the notebook's own (python3)
    dialog = page.locator(".jp-Dialog", has_text="Select Kernel")
    try:
        dialog.wait_for(timeout=3000)
        dialog.get_by_role("button", name="Select").click()
    except sync_api.TimeoutError:
        pass
    page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"Python 3.*\| Idle")).wait_for()
    return panel


def _run_all(page, panel) -> None:
    # remember every progress bar shown while the cells run, with the last text of its row
    # (tqdm's widget: description, bar, count; it is removed when the loop ends)
    page.evaluate(
        """() => {
            const BAR = '.widget-hprogress, .widget-vprogress';
            const seen = window.__progressBars = new Map();
            new MutationObserver(() => document.querySelectorAll(BAR).forEach(bar => {
                const text = (bar.closest('.widget-hbox') || bar).textContent;
                if (text || !seen.has(bar)) seen.set(bar, text);
            })).observe(document.body, {childList: true, subtree: true, characterData: true});
        }"""
    )
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    # finished: the kernel is idle again and no cell is queued or running ([*])
    page.wait_for_timeout(1000)
    page.wait_for_function(
        r"""() => {
            const panel = [...document.querySelectorAll('.jp-NotebookPanel')]
                .find(p => p.offsetParent !== null);
            const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
            const idle = panel.querySelector(".jp-Notebook-ExecutionIndicator[data-status='idle']");
            const error = panel.querySelector('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]');
            return idle && prompts.length && prompts.every(p => !p.textContent.includes('*'))
                && (error || prompts.every(p => /\[\d+\]/.test(p.textContent)));
        }""",
        timeout=TIMEOUT_MS,
    )


def _errors(panel) -> list[str]:
    return (
        panel.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        .filter(has_text=re.compile(r"Error|Traceback|✗"))
        .all_inner_texts()
    )


def _type_into(page, cell, code: str) -> None:
    """Replace a cell's source with `code` (inserted as text, so the editor adds no indentation)."""
    cell.locator(".cm-content").click()
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(code)
    typed = cell.locator(".cm-content").inner_text()  # an empty line may read as two
    assert [ln for ln in typed.splitlines() if ln.strip()] == [
        ln for ln in code.splitlines() if ln.strip()
    ]


def _run_cell(page, cell) -> None:
    cell.locator(".cm-content").click()
    page.keyboard.press("Shift+Enter")


# ----------------------------------------------------------------------------------------------


def test_the_course_map_opens_without_instructor_tools(page, lab):
    panel = _open(page, lab, "lectures/00_start_here.ipynb")
    panel.locator(".jp-MarkdownOutput h1", has_text="Transformer Lab").first.wait_for()
    assert panel.locator("a[href*='02_qkv_attention']").count() >= 1  # the map links lessons
    menus = page.locator(".lm-MenuBar-itemLabel").all_inner_texts()
    assert "Run" in menus and not any("nbgrader" in m.lower() for m in menus), menus
    _shot(page, "course_map")


def test_lecture_02_figures_are_images_and_sliders_change_the_output(page, lab):
    panel = _open(page, lab, "lectures/02_qkv_attention_lecture.ipynb")
    _run_all(page, panel)
    assert not _errors(panel)
    images = panel.locator(".jp-OutputArea-output img")
    assert images.count() >= 3
    assert images.first.get_attribute("src").startswith("data:image/png")
    sliders = panel.locator(".widget-slider")
    assert sliders.count() >= 2
    interact = panel.locator(".widget-interact").first
    figure = interact.locator(".widget-output img")
    before = figure.get_attribute("src")
    handle = interact.locator(".noUi-handle").first
    readout = interact.locator(".widget-readout").first.inner_text()
    handle.focus()
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while figure.get_attribute("src") == before:  # the kernel redraws the figure
        assert time.monotonic() < deadline, "moving the slider did not change the figure"
        page.wait_for_timeout(250)
    assert interact.locator(".widget-readout").first.inner_text() != readout
    _shot(page, "lecture02_slider", interact)


def test_a_quick_training_loop_shows_a_progress_widget(page, lab):
    panel = _open(page, lab, "lectures/03_multihead_attention_lecture.ipynb")
    _run_all(page, panel)
    assert not _errors(panel)
    # tqdm's widget: an HBox holding the description, a progress bar and the count
    shown = page.evaluate("() => [...window.__progressBars.values()]")
    assert len(shown) >= 2, shown  # one bar per training run (1 and 2 heads)
    # e.g. "training: 94% 47/50 [00:00<00:00, 72.96it/s, loss=1.0652]" while it ran
    assert all(re.search(r"training:.*\d+%.*\d+/50\b.*it/s", text, re.S) for text in shown), shown


WRONG = """def split_heads(x, n_heads):
    B, L, d_model = x.shape
    return x.reshape(B, n_heads, L, d_model // n_heads)"""
CRASHING = """def split_heads(x, n_heads):
    B, L, d_model = x.shape
    heads = x.view(B, L, n_heads, d_model)  # my line
    return heads.transpose(1, 2)"""
RIGHT = """def split_heads(x, n_heads):
    B, L, d_model = x.shape
    return x.view(B, L, n_heads, d_model // n_heads).transpose(1, 2)"""


def test_exercise_03_wrong_then_right_split_heads(page, lab):
    panel = _open(page, lab, "exercises/03_multihead_attention/03_multihead_attention.ipynb")
    code = panel.locator(".jp-Notebook .jp-CodeCell")  # found by content, not by position
    setup = code.filter(has_text="from transformer_lab import").first
    solution = code.filter(has_text="def split_heads(x, n_heads):").first
    test = code.filter(has_text="check.split_heads(split_heads)").first
    assert "check.split_heads(split_heads)" in test.inner_text()
    _run_cell(page, setup)
    setup.locator(".jp-InputPrompt", has_text=re.compile(r"\[\d+\]")).wait_for()

    _type_into(page, solution, WRONG)
    _run_cell(page, solution)
    _run_cell(page, test)
    error = test.locator(".jp-OutputArea-output", has_text="Likely mistake")
    error.wait_for()
    text = error.inner_text()
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines[0].startswith("✗ split_heads: check failed"), text
    assert lines[1].startswith("Likely mistake: you reshaped (B, L, d_model) straight"), text
    assert "Case: x (2, 3, 8), n_heads=2" in text
    assert "exercise.py" not in text and "Traceback" not in text and "---->" not in text
    logical = [line for line in lines if not line.startswith("  ")]  # wrapped lines continue
    assert len(logical) <= 6 and len(lines) <= 9, text
    _shot(page, "exercise03_failed_check", test)

    _type_into(page, solution, CRASHING)
    _run_cell(page, solution)
    _run_cell(page, test)
    error = test.locator(".jp-OutputArea-output", has_text="Your code raised")
    error.wait_for()
    text = error.inner_text()
    assert "Your code raised RuntimeError: shape '[2, 3, 2, 8]' is invalid" in text, text
    assert re.search(
        r"Cell In\[\d+\], line 3, in split_heads\s+heads = x.view\(B, L, n_heads, d_model\)  # my line",
        text,
    ), text
    assert "Case: x (2, 3, 8), n_heads=2" in text and "exercise.py" not in text
    _shot(page, "exercise03_crashing_code", test)

    _type_into(page, solution, RIGHT)
    _run_cell(page, solution)
    _run_cell(page, test)
    ok = test.locator(".jp-OutputArea-output", has_text="✓ split_heads")
    ok.wait_for()
    assert "Likely mistake" not in test.inner_text()
    assert test.locator(".jp-OutputArea-executeResult").count() == 0  # no stray `True`
    _shot(page, "exercise03_passed_check", test)


# ----------------------------------------------------------------------------------------------
# The walk of issue 29 (started with lessons 12 and 13): an untouched exercise run as it comes,
# saved and reloaded; a lecture's finished progress bars after a reload; closing without edits.

NOT_WRITTEN = "not written yet"  # the engine's one line for a stub (issue 29 item 4)


def _engine_says_not_written() -> bool:
    engine = ROOT / "shared" / "transformer_lab" / "check"
    return any(NOT_WRITTEN in p.read_text(encoding="utf-8") for p in engine.rglob("*.py"))


def _save_and_reload(page, lab, path: str):
    page.keyboard.press("ControlOrMeta+s")
    page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty").wait_for(state="detached")
    base, token, _ = lab
    page.goto(f"{base}/lab/tree/{path}?token={token}")  # the same workspace: the saved outputs
    panel = page.locator(".jp-NotebookPanel:visible")
    panel.locator(".jp-Notebook .jp-Cell").first.wait_for()
    page.wait_for_timeout(2000)  # widget views render (or fail to) after the cells appear
    return panel


@pytest.mark.parametrize("lesson", ["12_attention_at_scale", "13_clip"])
def test_walk_an_untouched_exercise_run_saved_and_reloaded(page, lab, lesson):
    path = f"exercises/{lesson}/{lesson}.ipynb"
    panel = _open(page, lab, path)
    _run_all(page, panel)
    failed = panel.locator(
        ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
    ).first
    text = failed.inner_text()
    _shot(page, f"walk_{lesson}_untouched", failed)
    if not _engine_says_not_written():
        pytest.xfail(
            f"the engine has no one-line {NOT_WRITTEN!r} message yet (item 4): {text[:200]}"
        )
    lines = [line for line in text.splitlines() if line.strip()]
    assert NOT_WRITTEN in lines[0] and len(lines) == 1, text
    panel = _save_and_reload(page, lab, path)
    assert "Error displaying widget" not in panel.inner_text()


def test_walk_finished_progress_bars_survive_a_reload_as_text(page, lab):
    path = "lectures/03_multihead_attention_lecture.ipynb"
    panel = _open(page, lab, path)
    _run_all(page, panel)
    assert not _errors(panel)
    panel = _save_and_reload(page, lab, path)
    text = panel.inner_text()
    assert "Error displaying widget" not in text and "model not found" not in text
    assert re.search(r"training: 100%.*50/50", text), text[-2000:]
    _shot(page, "walk_lecture03_bars_after_reload")


def _modified_after_opening(page, lab, path: str) -> bool:
    """Whether `path`, opened and left alone until its kernel is idle, counts as modified."""
    _open(page, lab, path)
    page.wait_for_timeout(3000)  # the kernel's info reply (language_info) has arrived by now
    return page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty").count() > 0


def test_walk_an_untouched_notebook_closes_without_save_changes(page, lab):
    # issue 29 item 8b: the course's kernel and the notebooks' metadata agree (lab_kernel)
    path = "exercises/11_vit/11_vit.ipynb"  # one no other test saves (a saved one proves nothing)
    assert not _modified_after_opening(page, lab, path)
    page.keyboard.press("Alt+w")  # close the tab: no dialog may ask to save
    page.wait_for_timeout(1500)
    assert page.locator(".jp-Dialog").count() == 0, page.locator(".jp-Dialog").all_inner_texts()
    page.locator(".lm-TabBar-tab", has_text="11_vit.ipynb").wait_for(state="detached")
