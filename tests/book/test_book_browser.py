"""The built book in a real browser: Debian's chromium driven by Playwright (the `browser`
fixture of tests/conftest.py, as every browser test), the site served from 127.0.0.1 and every request
for another machine refused and recorded. Screenshots (landing page, lecture 02 light and dark,
a search, a print preview) and a PDF of lecture 02 go to tests/artifacts/book/ (git-ignored).
Skips without chromium, playwright or a built book (the conftest.py files).
"""

from __future__ import annotations

import functools
import http.server
import re
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "tests" / "artifacts" / "book"
TIMEOUT_MS = 30_000
LECTURE = "lectures/02_qkv_attention_lecture.html"
# A4 at 96 dpi less Chromium's default print margins (about 1 cm a side)
PRINT_WIDTH, PRINT_HEIGHT = 718, 1047
_RAW_MATH = re.compile(r"\$[^$\s][^$]{0,200}\$|\\\(|\\\[")

pytestmark = pytest.mark.slow


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def base(site):
    """The site on a free 127.0.0.1 port: its base URL."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


class Visit:
    """A browser context that records console errors, page errors and refused requests."""

    def __init__(self, browser, **options):
        self.context = browser.new_context(viewport={"width": 1280, "height": 900}, **options)
        self.context.set_default_timeout(TIMEOUT_MS)
        self.errors: list[str] = []
        self.outside: list[str] = []
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on(
            "console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}")
        )
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))

    def _route(self, route):
        host = urlsplit(route.request.url).hostname
        if route.request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            route.continue_()
        else:
            self.outside.append(route.request.url)
            route.abort()

    def open(self, url: str):
        self.page.goto(url, wait_until="load")
        # MathJax typesets after load; its promise settles once every formula is rendered
        self.page.evaluate(
            "() => window.MathJax && MathJax.startup && MathJax.startup.promise"
            " ? MathJax.startup.promise.then(() => true) : true"
        )
        return self.page

    def close(self):
        self.context.close()


@pytest.fixture
def visit(browser):
    v = Visit(browser)
    yield v
    v.close()


def shot(page, name: str, **options) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), **options)
    return path


def raw_math(page) -> list[str]:
    """Prose (code excluded) that still holds TeX delimiters: maths MathJax did not render."""
    text = page.evaluate(
        """() => {
            const article = document.querySelector('article') || document.body;
            const copy = article.cloneNode(true);
            copy.querySelectorAll('pre, code, script, style, mjx-container, .cell_output')
                .forEach(e => e.remove());
            return copy.innerText;
        }"""
    )
    return _RAW_MATH.findall(text)


def test_every_page_loads_offline_without_errors_with_maths_and_alt_text(
    base, site, site_pages, visit
):
    problems = []
    for path in site_pages:
        rel = path.relative_to(site).as_posix()
        if rel == "index.html":  # a redirect to the README: test_landing_page_has_the_course_map
            continue
        page = visit.open(base + rel)
        visit.page.wait_for_load_state("networkidle")
        images = page.evaluate(
            """() => [...document.querySelectorAll('article img, .cell_output img')]
                .map(i => ({src: i.getAttribute('src'), alt: i.alt, loaded: i.naturalWidth > 0}))"""
        )
        problems += [f"{rel}: {e}" for e in visit.errors]
        problems += [f"{rel}: request to another machine {u}" for u in visit.outside]
        problems += [
            f"{rel}: figure without alt text {i['src']}"
            for i in images  # docutils writes the file name where a figure has no alt text
            if not i["alt"].strip() or i["alt"].split("/")[-1] == i["src"].split("/")[-1]
        ]
        problems += [f"{rel}: image did not load {i['src']}" for i in images if not i["loaded"]]
        if rel not in ("search.html", "genindex.html"):  # the site's own pages hold no maths
            problems += [f"{rel}: raw maths {m!r}" for m in raw_math(page)]
        visit.errors.clear()
        visit.outside.clear()
    assert problems == []


def test_lecture_02_renders_its_maths_and_has_copy_buttons(base, visit):
    page = visit.open(base + LECTURE)
    assert page.locator("mjx-container").count() >= 5
    assert page.locator("button.copybtn").count() >= 3
    assert page.locator(".cell_output img").count() >= 3
    shot(page, "lecture02-light")


def test_landing_page_has_the_course_map(base, visit):
    page = visit.page
    page.goto(base + "index.html")  # index.html redirects to the README
    page.wait_for_url(re.compile(r"README\.html$"))
    page.wait_for_load_state("networkidle")
    assert visit.errors == [] and visit.outside == []
    assert page.locator("table a[href='lectures/02_qkv_attention_lecture.html']").count() == 1
    assert (
        page.locator(
            "nav.bd-docs-nav a[href='lectures/12_attention_at_scale_lecture.html']"
        ).count()
        == 1
    )
    shot(page, "landing")


def test_search_finds_softmax_in_lectures_02_and_12(base, visit):
    page = visit.open(base + "search.html?q=softmax")
    results = page.locator("#search-results li a")
    results.first.wait_for()
    page.wait_for_function(
        "() => document.querySelector('#search-results .search-summary')"
        " && !/Searching/.test(document.querySelector('#search-results h2')?.innerText || '')"
    )
    hrefs = [results.nth(i).get_attribute("href") for i in range(results.count())]
    assert any("lectures/02_qkv_attention" in h for h in hrefs), hrefs
    assert any("lectures/12_attention_at_scale" in h for h in hrefs), hrefs
    shot(page, "search-softmax")


def _luminance(rgb: str) -> float:
    r, g, b = (int(v) / 255 for v in re.findall(r"\d+", rgb)[:3])
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_contrast_of_black_on_black_is_one_and_white_on_black_is_high():
    assert contrast("rgb(0, 0, 0)", "rgba(0, 0, 0, 1)") == pytest.approx(1.0)
    assert contrast("rgb(255, 255, 255)", "rgb(18, 18, 18)") > 15


def test_dark_theme_shows_figures_on_a_contrasting_background(base, browser):
    dark = Visit(browser, color_scheme="dark")
    try:
        page = dark.open(base + LECTURE)
        assert page.evaluate("document.documentElement.dataset.theme") == "dark"
        colours = page.evaluate(
            """() => ({
                page: getComputedStyle(document.body).backgroundColor,
                figures: [...document.querySelectorAll('.cell_output img')]
                    .map(i => getComputedStyle(i).backgroundColor),
            })"""
        )
        assert colours["figures"], "no figure on the page"
        for figure in colours["figures"]:
            assert contrast(figure, colours["page"]) >= 4.5, (figure, colours["page"])
        page.locator(".cell_output img").first.scroll_into_view_if_needed()
        shot(page, "lecture02-dark")
    finally:
        dark.close()


def test_print_style_fits_lecture_02_on_the_page(base, visit):
    page = visit.open(base + LECTURE)
    page.set_viewport_size({"width": PRINT_WIDTH, "height": PRINT_HEIGHT})
    page.emulate_media(media="print")
    hidden = page.evaluate(
        """() => ['.bd-sidebar-primary', '.bd-header', '.prev-next-area']
            .map(s => document.querySelector(s))
            .filter(e => e && e.offsetParent !== null).length"""
    )
    assert hidden == 0, "the site's navigation is printed"
    boxes = page.evaluate(
        """() => [...document.querySelectorAll('.cell_output img')]
            .map(i => { const r = i.getBoundingClientRect(); return [r.left, r.right, r.height]; })"""
    )
    assert boxes
    for left, right, height in boxes:
        assert left >= 0 and right <= PRINT_WIDTH + 1 and height <= PRINT_HEIGHT, (
            left,
            right,
            height,
        )
    shot(page, "lecture02-print", full_page=False)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.pdf(path=str(SHOTS / "lecture02.pdf"), format="A4")
