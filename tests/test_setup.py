"""The two commands of the README: `make lab` serves the course map; `make test` is what CI runs."""

from __future__ import annotations

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

ROOT = Path(__file__).resolve().parents[1]


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


@pytest.mark.slow
def test_make_lab_serves_the_course_map():
    port = _free_port()
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "lab", f"PORT={port}"],
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
        assert url, "make lab printed no URL:\n" + "".join(seen[-20:])
        assert "/lab/tree/lectures/00_start_here.ipynb" in url
        page = _get(url, proc, seen)
        assert b"JupyterLab" in page
        api = f"http://127.0.0.1:{port}/api/contents/lectures/00_start_here.ipynb?token={token}"
        model = json.loads(_get(api, proc, seen))
        assert model["type"] == "notebook" and model["content"]["cells"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
