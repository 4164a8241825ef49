"""Text a student can choose (flags, reasons, outputs, names), made safe for where the grader
writes it: files (UTF-8, which has no lone surrogates), a terminal, a spreadsheet, markdown.

- `no_surrogates`: a lone surrogate ("\\ud800", which JSON and Python strings can hold but UTF-8
  cannot) becomes U+FFFD, so that no write of the text can fail; `deep` applies it (or any other
  cleaning) to every string of a JSON-like value, dict keys included.
- `printable`: also without control characters (ESC, BEL, the other C0 and C1 ones; newline and
  tab are kept), which a terminal would obey on ``cat report.md``.
- `shown`: a file name (or a message holding names) with every control character, tab and
  newline included, shown as `\\xNN`, for the instructor's terminal and the records. A file name
  may hold any character but `/`: raw, ESC and its friends would move the cursor, overwrite a
  line with a fake verdict, retitle the terminal or write to its clipboard (OSC 52).
- `csv_cell`: printable, and a cell that a spreadsheet would read as a formula (it starts with
  = + - @ or a tab, OWASP's list) gets a leading apostrophe; numbers are left as they are.
"""

from __future__ import annotations

import re

SURROGATE = re.compile("[\ud800-\udfff]")
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but tab and newline, DEL, C1
# C0 (tab and newline included), DEL, C1; and the lone surrogates that stand for bytes a file
# name holds but UTF-8 cannot decode (printing them raises UnicodeEncodeError)
NAME_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
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


def shown(text: object) -> str:
    """`text` with every control character shown as `\\xNN` (an undecodable byte of a file name
    too; any other lone surrogate as `\\uXXXX`): safe to print and to store."""

    def escape(match: re.Match) -> str:
        code = ord(match.group())
        if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's stand-in for the byte code - 0xDC00
            code -= 0xDC00
        return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"

    return NAME_CONTROL.sub(escape, str(text))
