"""The two commands of the README: `make lab` serves the course map; `make test` is what CI runs."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_readme_gives_the_two_commands_and_ci_calls_make_test():
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme
    assert re.search(r"^make test\b", (ROOT / ".ci" / "run").read_text(), re.M)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, proc: subprocess.Popen, seen: list[str], wait_s: float = 60) -> bytes:
    """GET url, retrying while the server is still starting (it logs its URL before it listens)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                assert r.status == 200
                return r.read()
        except urllib.error.URLError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("make lab is not serving:\n" + "".join(seen[-20:])) from None
            time.sleep(0.5)


NBGRADER_LAB = "@jupyter/nbgrader"  # create-assignment, formgrader, assignment-list, ...


@contextlib.contextmanager
def _lab(target: str):
    """`make <target>` on a free port: yields (url printed, token, base url, log lines so far)."""
    port = _free_port()
    proc = subprocess.Popen(
        ["make", "--no-print-directory", target, f"PORT={port}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        url, deadline, seen = None, time.monotonic() + 90, []
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            m = re.search(rf"(http://127\.0\.0\.1:{port}/\S*token=(\w+))", line)
            if m:
                url, token = m.group(1), m.group(2)
        assert url, f"make {target} printed no URL:\n" + "".join(seen[-20:])
        yield proc, url, token, f"http://127.0.0.1:{port}", seen
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        seen += proc.stdout.readlines() if proc.stdout else []


def _page_config(base: str, token: str, proc, seen) -> dict:
    """JupyterLab's page config (what its front end loads), from the served /lab page."""
    page = _get(f"{base}/lab?token={token}", proc, seen).decode()
    m = re.search(
        r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S
    )
    assert m, "no page config in /lab"
    return json.loads(m.group(1))


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.slow
def test_make_lab_serves_the_course_map_without_instructor_tools():
    with _lab("lab") as (proc, url, token, base, seen):
        assert "/lab/tree/lectures/00_start_here.ipynb" in url
        page = _get(url, proc, seen)
        assert b"JupyterLab" in page
        api = f"{base}/api/contents/lectures/00_start_here.ipynb?token={token}"
        model = json.loads(_get(api, proc, seen))
        assert model["type"] == "notebook" and model["content"]["cells"]
        # nbgrader's front end is installed but disabled; its server extensions are off
        config = _page_config(base, token, proc, seen)
        assert NBGRADER_LAB in [e["name"] for e in config["federated_extensions"]]
        assert NBGRADER_LAB in config["disabledExtensions"]
        for route in ("formgrader", "assignments", "courses"):
            assert _status(f"{base}/{route}?token={token}") == 404, route
        assert not any("nbgrader" in line for line in seen), "".join(seen)
    assert not any("No nbgrader_config.py" in line for line in seen), "".join(seen)


@pytest.mark.slow
def test_make_instructor_lab_has_nbgrader():
    with _lab("instructor-lab") as (proc, _url, token, base, seen):
        config = _page_config(base, token, proc, seen)
        assert NBGRADER_LAB in [e["name"] for e in config["federated_extensions"]]
        assert NBGRADER_LAB not in config["disabledExtensions"]
        assert b"formgrader" in _get(f"{base}/formgrader?token={token}", proc, seen).lower()
        assert any("formgrader | extension was successfully loaded" in line for line in seen)
    assert not any("No nbgrader_config.py" in line for line in seen), "".join(seen)
