"""Maths in a feedback page without a network: ``$…$`` and ``$$…$$`` in a markdown cell become
MathML, which browsers draw themselves (Chromium 109+, Firefox, Safari), so a page a student
opens offline, or from an LMS that strips scripts, still shows the lesson's formulas. The
conversion is latex2mathml's; a formula it cannot read is left as it was (MathJax, which the
page also loads when online, then typesets it). Code (fenced blocks and `inline code`) is never
touched, so a `$` in code stays a dollar.
"""

from __future__ import annotations

import re

from latex2mathml.converter import convert

CODE = re.compile(r"(```.*?```|~~~.*?~~~|`[^`\n]*`)", re.S)
DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
INLINE = re.compile(r"(?<![\\$])\$(?!\$)([^$\n]+?)(?<!\\)\$(?!\$)")


def _mathml(latex: str, display: str) -> str | None:
    try:
        return convert(latex.strip(), display=display)
    except Exception:  # latex2mathml raises many kinds on TeX it does not know
        return None


def _replace(pattern: re.Pattern, text: str, display: str) -> str:
    def one(match: re.Match) -> str:
        converted = _mathml(match[1], display)
        if converted is None:
            return match[0]
        return f"\n\n{converted}\n\n" if display == "block" else converted

    return pattern.sub(one, text)


def markdown_with_mathml(source: str) -> str:
    """The markdown `source` with its formulas as MathML (code spans and blocks kept as they are)."""
    parts = CODE.split(source)
    for i in range(0, len(parts), 2):  # the even parts lie outside code
        parts[i] = _replace(INLINE, _replace(DISPLAY, parts[i], "block"), "inline")
    return "".join(parts)
