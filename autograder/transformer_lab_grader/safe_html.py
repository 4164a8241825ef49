"""The HTML of a feedback page without a student's active content.

A student's markdown cell (or an output) may hold raw HTML: ``<script>``, ``<img onerror=...>``.
nbconvert drops scripts and cleans the HTML of markdown cells and outputs when its exporter's
``sanitize_html`` is on, through its ``clean_html`` filter; that filter's own list of tags has no
headings, paragraphs or MathML (`maths_html`), so a sanitised page would show the course's
formatting as text. `clean_html` here is that filter with the tags a rendered lesson uses
(markdown's, ``<details>``, MathML) and harmless attributes only: no ``on…`` handler, no
``javascript:`` link, no ``<script>``, ``<style>``, ``<iframe>``, ``<form>``.

`EXPORTER` is the exporter's configuration, for nbgrader's ``generate_feedback``
(``autograder/nbgrader_config.py``) and the course's own rendering (`feedback`).
"""

from __future__ import annotations

import bleach

MARKDOWN_TAGS = {
    *("p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre", "code"),
    *("em", "strong", "b", "i", "u", "s", "del", "ins", "sub", "sup", "small", "kbd", "mark"),
    *("ul", "ol", "li", "dl", "dt", "dd", "a", "img", "div", "span", "details", "summary"),
    *("table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "colgroup", "col"),
}
MATHML_TAGS = {
    *("math", "semantics", "annotation", "mrow", "mi", "mn", "mo", "ms", "mtext", "mspace"),
    *("msup", "msub", "msubsup", "mfrac", "msqrt", "mroot", "mover", "munder", "munderover"),
    *("mtable", "mtr", "mtd", "mstyle", "mpadded", "mphantom", "menclose", "mfenced"),
}
MATHML_ATTRIBUTES = [
    *("display", "xmlns", "mathvariant", "stretchy", "fence", "separator", "lspace", "rspace"),
    *("accent", "accentunder", "largeop", "movablelimits", "symmetric", "minsize", "maxsize"),
    *("columnalign", "rowalign", "columnspacing", "rowspacing", "linethickness", "width"),
    *("height", "depth", "encoding", "form", "notation", "scriptlevel", "displaystyle"),
]
TAGS = set(bleach.ALLOWED_TAGS) | MARKDOWN_TAGS | MATHML_TAGS
ATTRIBUTES = {
    "*": ["class", "id"],
    "a": ["href", "title", "class", "id"],
    "img": ["src", "alt", "title", "width", "height", "class"],
    "th": ["align", "colspan", "rowspan", "style", "class"],
    "td": ["align", "colspan", "rowspan", "style", "class"],
    "details": ["open", "class"],
    "ol": ["start", "class"],
    **{tag: ["class", "id", *MATHML_ATTRIBUTES] for tag in MATHML_TAGS},
}
PROTOCOLS = ["http", "https", "mailto", "data"]  # data: an embedded image


def clean_html(element) -> str:
    """nbconvert's ``clean_html`` filter, keeping what a rendered lesson uses (see module)."""
    from nbconvert.filters import strings

    element = element.decode() if isinstance(element, bytes) else str(element)
    kwargs = {}
    css = getattr(strings, "_get_default_css_sanitizer", lambda: None)()
    if css:
        kwargs["css_sanitizer"] = css
    return bleach.clean(
        element,
        tags=TAGS,
        attributes=ATTRIBUTES,
        protocols=PROTOCOLS,
        strip=True,  # an unknown tag goes, its text stays (a heading's ns0:math: as before)
        strip_comments=True,
        **kwargs,
    )


EXPORTER = {
    "sanitize_html": True,
    "filters": {"clean_html": "transformer_lab_grader.safe_html.clean_html"},
}
