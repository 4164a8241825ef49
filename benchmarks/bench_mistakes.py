"""How many plausible wrong implementations the visible checks name, on a held-out set.

    python benchmarks/bench_mistakes.py [--lessons 01 02 ...] [--timeout 600]

The wrong (and one right) implementations per exercise live in ``benchmarks/heldout/lessonNN.py`` (``--set heldout2``: a second set, written later)
(``WRONG = {exercise: [impl, ...]}``, ``RIGHT = {exercise: impl}``), written from the released
exercise texts only, without reading the mistake catalogues. Each lesson runs in its own
subprocess: every implementation goes through the visible check (``check.<exercise>(impl)``,
what a student sees) and through the hidden one (``thorough=True``). A wrong one is

- **named**: the visible check fails with a "Likely mistake" sentence;
- **caught**: the visible check fails without naming the mistake;
- **hidden only**: the visible check passes, the hidden one fails;
- **passed**: both pass.

Grading mode is off (as in a student's notebook) and passing checks save into a temporary
student package, never the checkout's.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = Path(__file__).resolve().parent
KINDS = ("named", "caught", "hidden only", "passed")
PER_IMPL_S = 120


def outcome(check_fn, impl, **kwargs) -> tuple[str, str]:
    """Run one check on one implementation: ("passed" | "named" | "caught", the message)."""
    try:
        check_fn(impl, **kwargs)
    except Exception as error:  # a check failure, or the implementation crashing inside it
        message = f"{type(error).__name__}: {error}"
        return ("named" if "Likely mistake" in message else "caught"), message
    return "passed", ""


def kind(visible: str, hidden: str) -> str:
    """The held-out category of a wrong implementation from its visible and hidden outcomes."""
    if visible != "passed":
        return visible
    return "passed" if hidden == "passed" else "hidden only"


def _timed(check_fn, impl, **kwargs):
    def _alarm(signum, frame):
        raise TimeoutError(f"no verdict within {PER_IMPL_S} s")

    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(PER_IMPL_S)
    try:
        return outcome(check_fn, impl, **kwargs)
    finally:
        signal.alarm(0)


def _describe(impl) -> tuple[str, str]:
    """(name, first docstring line) of an implementation; a practice question's plain answer
    (a dict, a number: it has no name or docstring of its own) is shown as its repr."""
    name = getattr(impl, "__name__", None)
    if name is None:
        text = repr(impl)
        return text[:60], text[:200]
    doc = (impl.__doc__ or "").strip()
    return name, doc.splitlines()[0] if doc else name


def worker(lesson: str, held_out: str = "heldout") -> None:
    """In the subprocess: run lesson NN's implementations of the set, one JSON line each."""
    sys.path.insert(0, str(BENCHMARKS))
    from transformer_lab import check

    module = importlib.import_module(f"{held_out}.lesson{lesson}")
    jobs = [(name, impl, False) for name, impls in module.WRONG.items() for impl in impls]
    jobs += [(name, impl, True) for name, impl in module.RIGHT.items()]
    for name, impl, right in jobs:
        check_fn = getattr(check, name)
        visible, message = _timed(check_fn, impl)
        hidden, hidden_message = _timed(check_fn, impl, thorough=True)
        label, doc = _describe(impl)
        row = dict(
            lesson=lesson,
            exercise=name,
            impl=label,
            right=right,
            doc=doc,
            visible=visible,
            hidden=hidden,
            message=message[:400],
            hidden_message=hidden_message[:400],
        )
        print(json.dumps(row), flush=True)


def run_lesson(
    lesson: str, timeout: float, student_dir: str, held_out: str = "heldout"
) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMER_LAB_GRADING"}
    env.update(
        TRANSFORMER_LAB_STUDENT_DIR=student_dir,
        PYTHONPATH=os.pathsep.join([str(ROOT / "shared"), env.get("PYTHONPATH", "")]),
        OMP_NUM_THREADS="1",
        MPLBACKEND="Agg",
        HF_HUB_OFFLINE="1",
    )
    cmd = [sys.executable, __file__, "--worker", lesson, "--set", held_out]
    try:
        done = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT
        )
        out, err = done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        out, err = expired.stdout or "", f"lesson {lesson}: timed out after {timeout} s"
        out = out.decode() if isinstance(out, bytes) else out
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if err.strip() and not rows:
        print(err[-2000:], file=sys.stderr)
    return rows


def tally(rows: list[dict]) -> Counter:
    return Counter(kind(r["visible"], r["hidden"]) for r in rows if not r["right"])


def report(rows: list[dict]) -> str:
    lines = [
        "| lesson | wrong | named | caught, not named | visible passes (hidden catches) | both pass |",
        "|---|---|---|---|---|---|",
    ]
    for lesson in sorted({r["lesson"] for r in rows}) + ["all"]:
        mine = [r for r in rows if lesson in ("all", r["lesson"])]
        c = tally(mine)
        n = sum(c.values())
        label = "**all**" if lesson == "all" else lesson
        lines.append(
            f"| {label} | {n} | {c['named']} ({100 * c['named'] / max(n, 1):.0f} %) | "
            f"{c['caught']} | {c['hidden only']} | {c['passed']} |"
        )
    rights = [r for r in rows if r["right"]]
    rejected = [r for r in rights if r["visible"] != "passed" or r["hidden"] != "passed"]
    lines.append("")
    lines.append(
        f"RIGHT implementations: {len(rights) - len(rejected)} of {len(rights)} pass both checks."
    )
    for r in rejected:
        lines.append(
            f"- REJECTED {r['exercise']} ({r['impl']}): visible {r['visible']}, hidden {r['hidden']}: "
            f"{(r['message'] or r['hidden_message'])[:300]}"
        )
    return "\n".join(lines)


def unnamed(rows: list[dict]) -> str:
    """The wrong implementations that the visible check does not name, for a catalogue author."""
    lines = []
    for label, kinds in (
        ("Passed by the visible check", ("hidden only", "passed")),
        ("Caught by the visible check but not named", ("caught",)),
    ):
        lines += [f"## {label}", ""]
        for r in rows:
            if not r["right"] and kind(r["visible"], r["hidden"]) in kinds:
                verdict = (
                    "hidden check fails" if r["hidden"] != "passed" else "hidden check passes too"
                )
                first = r["message"].splitlines()[0][:160] if r["message"] else verdict
                lines.append(
                    f"- lesson {r['lesson']} `{r['exercise']}` ({r['impl']}): {r['doc']} — {first}"
                )
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker")
    parser.add_argument("--lessons", nargs="*")
    parser.add_argument(
        "--set",
        default="heldout",
        help="the held-out package under benchmarks/ (heldout: the first set, seen while the "
        "catalogues grew; heldout2: written later; heldout3: the third, unseen while the "
        "diagnosers grew; heldout4: the fourth, unseen while the third's fixes grew; "
        "heldout5: the fifth, unseen while the fourth's fixes grew; heldout6: the sixth, "
        "unseen while the fifth's fixes grew)",
    )
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", type=Path, help="also write every row here (JSON lines)")
    parser.add_argument(
        "--unnamed", type=Path, help="write the unnamed and uncaught ones here (markdown)"
    )
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.set)
        return 0
    folder = BENCHMARKS / args.set
    if not (folder / "__init__.py").is_file():
        raise SystemExit(f"no held-out set {args.set!r}: {folder} is not a package")
    lessons = args.lessons or sorted(p.stem[len("lesson") :] for p in folder.glob("lesson*.py"))
    rows = []
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="tl-heldout-") as student_dir:
        for lesson in lessons:
            got = run_lesson(lesson, args.timeout, student_dir, args.set)
            print(f"lesson {lesson}: {len(got)} implementations", file=sys.stderr, flush=True)
            rows += got
    if args.json:
        args.json.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if args.unnamed:
        args.unnamed.write_text(unnamed(rows))
    print(report(rows))
    print(
        f"\n{time.time() - start:.0f} s, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
