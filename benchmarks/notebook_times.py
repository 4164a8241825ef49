"""Run every lecture and solution notebook top to bottom and print a table of wall and CPU times.

    python benchmarks/notebook_times.py            # full mode
    python benchmarks/notebook_times.py --quick    # quick mode (TRANSFORMER_LAB_QUICK=1), as CI runs
    python benchmarks/notebook_times.py lectures/06_masking_lecture.ipynb   # just some notebooks
    python benchmarks/notebook_times.py --save OUT   # also keep each executed notebook in OUT/

Budgets (2 CPU cores, no GPU): each notebook <= 180 s in full mode, <= 30 s in quick mode.
The kernel's CPU time (user + system, read from the kernel process) is printed beside the wall
time: on a shared machine it is the steadier number.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import psutil
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
BUDGET = {"full": 180.0, "quick": 30.0}


def run(path: Path, quick: bool, save: Path | None = None) -> tuple[float, float]:
    nb = nbformat.read(path, as_version=4)
    env_before = dict(os.environ)
    os.environ.update(
        MPLBACKEND="Agg", TRANSFORMER_LAB_NO_PROGRESS="1", TRANSFORMER_LAB_DEVICE="cpu"
    )
    os.environ["TRANSFORMER_LAB_STUDENT_DIR"] = tempfile.mkdtemp(prefix="tl-student-")
    if quick:
        os.environ["TRANSFORMER_LAB_QUICK"] = "1"
    else:
        os.environ.pop("TRANSFORMER_LAB_QUICK", None)
    try:
        client = NotebookClient(
            nb,
            timeout=900,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        )
        start = time.perf_counter()
        with client.setup_kernel():
            pid = client.km.provisioner.process.pid
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)
            cpu = psutil.Process(pid).cpu_times()
        wall = time.perf_counter() - start
        if save is not None:  # the executed notebook: the numbers its text talks about
            save.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, save / path.name)
        return wall, cpu.user + cpu.system
    finally:
        os.environ.clear()
        os.environ.update(env_before)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--save", type=Path, help="keep each executed notebook in this folder")
    args = parser.parse_args()
    mode = "quick" if args.quick else "full"
    paths = args.notebooks or sorted(ROOT.glob("lectures/[0-9]*.ipynb")) + sorted(
        ROOT.glob("solutions/*/*.ipynb")
    )
    print(
        f"{mode} mode, {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M')}"
    )
    print(f"| notebook | wall (s) | kernel CPU (s) | budget {BUDGET[mode]:.0f} s |")
    print("|---|---|---|---|")
    over = 0
    for path in paths:
        path = path.resolve()
        wall, cpu = run(path, args.quick, args.save)
        ok = wall <= BUDGET[mode]
        over += not ok
        print(
            f"| {path.relative_to(ROOT)} | {wall:.1f} | {cpu:.1f} | {'ok' if ok else 'OVER'} |",
            flush=True,
        )
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
