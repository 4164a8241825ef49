"""The class report: what the class got right, what it got wrong, and what to re-teach.

``build_report(course, assignment, out_dir)`` reads the result records that grading wrote
(``<course>/autograder/work/results/<assignment>/<student>.json``, one per student) and the
released notebook (``exercises/<assignment>/``, for the graded cells, their points and the checks
they call), then writes into ``out_dir``:

- ``report.html`` and ``report.md``: the same tables, for a browser and for a text editor;
- ``score_distribution.png``: a histogram of the graded students' scores, the maximum marked;
- ``summary.json``: every number of the report, for other tools.

The numbers and how they are counted: `report_summary`.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

from . import manual, term
from .plain_text import deep, printable
from .records import load_class_records, load_records, stale_records
from .report_summary import (
    enrolled_class,
    lesson_exercises,
    mistake_catalogue,
    released_cells,
    summarise,
)
from .submission import submission_sha256

REPORT_FILES = ("report.html", "report.md", "score_distribution.png", "summary.json")


def plot_scores(scores: list[float], max_score: float, path: Path, title: str = "") -> Path:
    """Histogram of the scores with the maximum marked (matplotlib's Agg canvas, no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    top = max([max_score, *scores, 1.0])
    if all(float(x).is_integer() for x in [*scores, max_score]):  # whole points: whole-point bins
        width = float(max(1, math.ceil(top / 25)))
    else:
        width = top / 20 if top > 10 else 0.5
    edges = [i * width - width / 2 for i in range(int(top / width) + 2)]
    if scores:
        ax.hist(scores, bins=edges, color="#4c72b0", edgecolor="white")
    ax.axvline(max_score, color="#c44e52", linestyle="--", label=f"max score {max_score:g}")
    if scores:
        mean = sum(scores) / len(scores)
        ax.axvline(mean, color="#555555", linestyle=":", label=f"mean {mean:.1f}")
    ax.set_xlabel("score")
    ax.set_ylabel("students")
    ax.set_xlim(edges[0], max(edges[-1], top + width / 2))
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(title or f"{len(scores)} graded students")
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def _pct(value) -> str:
    return "–" if value is None else f"{100 * value:.0f}%"


def _num(value) -> str:
    return "–" if value is None else f"{value:.2f}".rstrip("0").rstrip(".")


def _sections(summary: dict) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """The report as (title, intro, table header, table rows) sections, shared by MD and HTML."""
    s = summary
    sections = [
        (
            "Overview",
            "",
            ["measure", "value"],
            [
                ["students with a record", str(s["students"])],
                ["graded", str(s["graded"])],
                ["ungradable", str(s["ungradable"])],
                ["max score", _num(s["max_score"])],
                ["mean score (graded)", _num(s["mean"])],
                ["median score (graded)", _num(s["median"])],
                ["full marks", str(s["full_marks"])],
                ["flagged for review", str(len(s["flagged"]))],
            ],
        ),
        (
            "Pass rate per exercise",
            "Passed = every test cell calling the exercise's check passed; rate over graded students.",
            ["exercise", "cells", "passed", "pass rate"],
            [
                [e["exercise"], ", ".join(e["cells"]), f"{e['passed']} / {e['graded']}"]
                + [_pct(e["pass_rate"])]
                for e in s["exercises"]
            ],
        ),
        (
            "Pass rate per graded cell",
            "",
            ["grade id", "points", "checks", "passed", "pass rate"],
            [
                [c["grade_id"], _num(c["max_score"]), ", ".join(c["exercises"])]
                + [f"{c['passed']} / {c['graded']}", _pct(c["pass_rate"])]
                for c in s["cells"]
            ],
        ),
        (
            "Most frequent named mistakes (what to re-teach)",
            "Students whose failed output names the catalogued mistake (each student counted once).",
            ["students", "exercise", "mistake"],
            [[str(m["students"]), m["exercise"], m["sentence"]] for m in s["top_mistakes"]],
        ),
    ]
    for e in s["exercises"]:
        if e["top_mistakes"]:
            sections.append(
                (
                    f"Top mistakes: {e['exercise']}",
                    "",
                    ["students", "mistake"],
                    [[str(m["students"]), m["sentence"]] for m in e["top_mistakes"]],
                )
            )
    sections += [
        (
            "Unnamed failures",
            "Failed cells that name no catalogued mistake, by the kind of error (students).",
            ["students", "exercise", "kind"],
            [[str(u["students"]), u["exercise"], u["kind"]] for u in s["unnamed_failures"]],
        ),
        (
            "Ungradable submissions",
            "These students appear in the export with the reason; they have no score here. "
            + "; ".join(f"{reason}: {count}" for reason, count in s["ungradable_reasons"].items()),
            ["student", "reason"],
            [[student, reason or ""] for student, reason in s["ungradable_students"].items()],
        ),
        (
            "Flagged submissions (review by hand)",
            "",
            ["student", "flags"],
            [[student, "; ".join(flags)] for student, flags in s["flagged"].items()],
        ),
        (
            "Identical submissions (review by hand)",
            "Students whose submitted files are byte for byte the same (the untouched release left "
            "out). Their scores are not changed for it; two honest students rarely hand in the "
            "same bytes, so look at each group.",
            ["students"],
            [[", ".join(group)] for group in s.get("identical", [])],
        ),
        (
            "The enrolled class (roster)",
            "Pass rates over every enrolled student; a student with no submission has passed "
            "nothing. Missing: " + (", ".join(s["roster"]["missing"]) or "nobody") + "."
            if s.get("roster")
            else "No roster: add one to autograder/work/term.toml to count the enrolled class.",
            ["exercise", "passed / enrolled", "pass rate"],
            [
                [e["exercise"], f"{e['passed']} / {s['roster']['enrolled']}", _pct(e["pass_rate"])]
                for e in (s.get("roster") or {}).get("exercises", [])
            ],
        ),
        (
            "Regraded (what changed and why)",
            "Students graded more than once: the score before, the score now, why it was graded "
            "again (a new submission, a changed lesson, --force) and when the graded submission "
            "was handed in.",
            ["student", "before", "now", "why", "submitted at", "gradings"],
            [
                [
                    c["student"],
                    _num(c["before"]),
                    _num(c["after"]),
                    c["why"],
                    c["submitted_at"] or "–",
                    str(c["gradings"]),
                ]
                for c in s.get("changes", [])
            ],
        ),
        (
            "Stale records (regrade with --force)",
            "Graded against another version of the lesson than the one released now.",
            ["student", "why"],
            [[student, why] for student, why in s.get("stale", {}).items()],
        ),
        (
            "Problems",
            "Record files that could not be used.",
            ["problem"],
            [[p] for p in s["problems"]],
        ),
    ]
    return sections


def _md_cell(text: str) -> str:
    """One line of a markdown table cell: no control characters, no HTML, and no link or image
    (brackets escaped), whatever a student's text holds."""
    text = " ".join(printable(text).split()).replace("&", "&amp;").replace("<", "&lt;")
    text = text.replace(">", "&gt;").replace("\\", "\\\\").replace("|", "\\|")
    return text.replace("[", "\\[").replace("]", "\\]")


def write_markdown(summary: dict, path: Path, plot_name: str) -> Path:
    lines = [
        f"# Class report: {summary['assignment']}",
        "",
        f"![score distribution]({plot_name})",
        "",
    ]
    for title, intro, header, rows in _sections(summary):
        lines += [f"## {title}", ""]
        if intro:
            lines += [intro, ""]
        if not rows:
            lines += ["(none)", ""]
            continue
        lines.append("| " + " | ".join(_md_cell(h) for h in header) + " |")
        lines.append("|" + "---|" * len(header))
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
        lines.append("")
    path.write_text(printable("\n".join(lines)), encoding="utf-8")
    return path


def write_html(summary: dict, path: Path, plot_name: str) -> Path:
    e = html.escape
    title = f"Class report: {summary['assignment']}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin-bottom:1em}"
        "td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}"
        "th{background:#f3f3f3}</style></head><body>",
        f"<h1>{e(title)}</h1>",
        f'<p><img src="{e(plot_name)}" alt="score distribution"></p>',
    ]
    for section, intro, header, rows in _sections(summary):
        parts.append(f"<h2>{e(section)}</h2>")
        if intro:
            parts.append(f"<p>{e(intro)}</p>")
        if not rows:
            parts.append("<p>(none)</p>")
            continue
        parts.append("<table>")
        if any(header):
            parts.append("<tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows]
        parts.append("</table>")
    parts.append("</body></html>")
    path.write_text(printable("\n".join(parts)) + "\n", encoding="utf-8")
    return path


def build_report(course: Path, assignment: str, out_dir: Path) -> Path:
    """Write report.html, report.md, score_distribution.png and summary.json; return report.html."""
    course, out_dir = Path(course).resolve(), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    catalogue = mistake_catalogue()
    records, problems = load_class_records(course, assignment)
    manual.overlay(course, assignment, records.values())
    problems += manual.outdated(records)
    cells = released_cells(course, assignment, catalogue)
    if not cells:
        problems.append(f"no released notebook with graded cells in exercises/{assignment}/")
    released = course / "exercises" / assignment
    summary = summarise(
        assignment,
        records,
        cells,
        catalogue,
        problems,
        fallback=lesson_exercises(assignment),
        untouched=submission_sha256(released) if released.is_dir() else "",
    )
    stale = stale_records(course, assignment, load_records(course, assignment))  # raw: digests
    summary["stale"] = dict(sorted(stale.items()))
    settings = term.load(course)
    if settings.roster is not None:
        summary["roster"] = enrolled_class(summary, settings.roster, records)
    plot = plot_scores(
        list(summary["scores"].values()),
        summary["max_score"],
        out_dir / "score_distribution.png",
        title=f"{assignment}: {summary['graded']} graded, {summary['ungradable']} ungradable",
    )
    (out_dir / "summary.json").write_text(
        json.dumps(deep(summary, printable), indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    write_markdown(summary, out_dir / "report.md", plot.name)
    return write_html(summary, out_dir / "report.html", plot.name)
