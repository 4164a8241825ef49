"""The built book under test: book/_build/quick/html (`make book QUICK=1`), or the folder that
TRANSFORMER_LAB_BOOK_HTML names. Without a built book its tests skip, saying how to build it, so
that `make test` stays green on a fresh clone; `make book-test` sets TRANSFORMER_LAB_BOOK_REQUIRED=1,
which turns that skip into a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(
    os.environ.get("TRANSFORMER_LAB_BOOK_HTML", ROOT / "book" / "_build" / "quick" / "html")
)


def built_site() -> Path:
    if (SITE / "README.html").is_file():
        return SITE
    reason = f"no built book at {SITE}: run `make book QUICK=1` first"
    if os.environ.get("TRANSFORMER_LAB_BOOK_REQUIRED"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def site() -> Path:
    return built_site()


@pytest.fixture(scope="session")
def site_pages(site) -> list[Path]:
    """Every HTML page of the book, the search page and the index included (not the theme's
    templates under _static/)."""
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.relative_to(site).parts)
