"""Text a student can choose (flags, reasons, outputs, names), made safe for where the grader
writes it: files (UTF-8, which has no lone surrogates), a terminal, a spreadsheet, markdown.

- `no_surrogates`: a lone surrogate ("\\ud800", which JSON and Python strings can hold but UTF-8
  cannot) becomes U+FFFD, so that no write of the text can fail; `deep` applies it (or any other
  cleaning) to every string of a JSON-like value, dict keys included.
- `printable`: also without control characters (ESC, BEL, the other C0 and C1 ones; newline and
  tab are kept), which a terminal would obey on ``cat report.md``.
- `csv_cell`: printable, and a cell that a spreadsheet would read as a formula (it starts with
  = + - @ or a tab, OWASP's list) gets a leading apostrophe; numbers are left as they are.
"""

from __future__ import annotations

import re

SURROGATE = re.compile("[\ud800-\udfff]")
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but tab and newline, DEL, C1
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def no_surrogates(text: str) -> str:
    return SURROGATE.sub("\ufffd", text)


def printable(text: str) -> str:
    return CONTROL.sub("", no_surrogates(str(text)))


def deep(value, clean=no_surrogates):
    """`value` (dicts, lists, tuples, strings, anything else kept) with every string cleaned."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {deep(k, clean): deep(v, clean) for k, v in value.items()}
    if isinstance(value, list):
        return [deep(v, clean) for v in value]
    if isinstance(value, tuple):
        return tuple(deep(v, clean) for v in value)
    return value


def csv_cell(value) -> str:
    text = printable("" if value is None else value)
    if text.startswith(FORMULA_START) and not NUMBER.match(text):
        return "'" + text
    return text
