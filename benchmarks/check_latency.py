"""Latency of every visible check (the test cell a student runs), on the solutions' own code.

    python benchmarks/check_latency.py [--repeat 5]

For each solution notebook it runs the imports cell (the first code cell after the Colab setup
cell) and every solution cell, then times each visible check (`check.<name>(<name>)`, without
the hidden tests): first call and the median of the following ones. Budget: every visible check
returns in <= 1 s.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    os.environ["TRANSFORMER_LAB_STUDENT_DIR"] = tempfile.mkdtemp(prefix="tl-latency-")
    os.environ["TRANSFORMER_LAB_QUICK"] = "1"
    os.environ["TRANSFORMER_LAB_GRADING"] = "1"  # nothing is saved into a student package
    os.environ.setdefault("MPLBACKEND", "Agg")
    print(
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M')}"
    )
    print("| lesson | check | first call (s) | median of next (s) | budget 1 s |")
    print("|---|---|---|---|---|")
    worst = 0.0
    for path in sorted(ROOT.glob("solutions/*/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        # the Colab setup cell (a no-op here) comes first; the imports follow it
        code = [c for c in nb.cells if c.cell_type == "code" and c.get("id") != "colab-setup"]
        namespace: dict = {"__name__": "__main__"}
        exec(compile(code[0].source, f"{path.name}[imports]", "exec"), namespace)
        for cell in code[1:]:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("solution"):
                exec(
                    compile(cell.source, f"{path.name}[{meta.get('grade_id')}]", "exec"), namespace
                )
            elif meta.get("grade"):
                visible = cell.source.split("### BEGIN HIDDEN TESTS")[0]
                for call in re.findall(r"^check\.\w+\(\w+\)$", visible, flags=re.M):
                    times = []
                    for _ in range(args.repeat + 1):
                        start = time.perf_counter()
                        eval(call, namespace)  # noqa: S307 (our own notebooks)
                        times.append(time.perf_counter() - start)
                    median = statistics.median(times[1:])
                    worst = max(worst, times[0], median)
                    name = call.split("(")[0]
                    ok = "ok" if max(times[0], median) <= 1.0 else "OVER"
                    print(
                        f"| {path.parent.name} | {name} | {times[0]:.3f} | {median:.3f} | {ok} |",
                        flush=True,
                    )
    return 0 if worst <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
