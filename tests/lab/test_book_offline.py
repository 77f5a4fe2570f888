"""The book works offline (``make test-lab``; marker ``lab``): no page of ``make book`` (nor of the instructor's book,
where ``make instructor`` built it) loads a script or a stylesheet from another host, and a page's maths is typeset
by the vendored MathJax (docs/conf.py) with every request the page makes answered by the local server."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest

from lab_harness import chromium

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
BOOKS = [ROOT / "build" / "book", ROOT / "build" / "instructor" / "book"]
#: a <script src=...> or <link href=...> (stylesheets, fonts, preloads) naming another host
REMOTE = re.compile(r"<(?:script|link)\b[^>]*\b(?:src|href)=[\"']?(?:https?:)?//[^>]*>", flags=re.I)
#: pages with maths, and the least number of formulas each must show typeset
MATHS_PAGES = [("notebooks/01_mla_from_the_paper.html", 10), ("notebooks/02_weight_absorption.html", 10)]

TYPESET_JS = """
const done = arguments[arguments.length - 1];
const wait = () => {
  if (!(window.MathJax && MathJax.Hub && MathJax.Hub.queue && MathJax.Hub.queue.pending === 0
        && document.querySelector('.mjx-chtml'))) return setTimeout(wait, 100);
  MathJax.Hub.Queue(() => done({typeset: document.querySelectorAll('.mjx-chtml').length,
                                errors: document.querySelectorAll('.mjx-merror, .MathJax_Error').length}));
};
wait();
"""


def _pages():
    built = [b for b in BOOKS if (b / "index.html").is_file()]
    if not built:
        pytest.fail(f"{BOOKS[0] / 'index.html'} is missing: run make book first (make test-lab does)")
    return [p for b in built for p in sorted(b.rglob("*.html")) if "slides" not in p.relative_to(b).parts]


def test_no_page_of_the_books_loads_a_script_or_stylesheet_from_another_host():
    pages = _pages()
    assert len(pages) > 10, pages
    remote = {str(p.relative_to(ROOT)): REMOTE.findall(p.read_text()) for p in pages}
    assert not {k: v for k, v in remote.items() if v}, remote


@pytest.fixture(scope="module")
def logged_browser(tmp_path_factory):
    """Headless Chromium whose DevTools performance log records every network request."""
    driver = chromium(tmp_path_factory.mktemp("chromium-book"), "1280,900", performance_log=True)
    driver.set_script_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _requests(driver) -> list:
    """Every URL requested since the log was last read."""
    return [m["params"]["request"]["url"] for m in (json.loads(e["message"])["message"]
                                                    for e in driver.get_log("performance"))
            if m["method"] == "Network.requestWillBeSent"]


@pytest.mark.parametrize("page, least", MATHS_PAGES)
def test_the_maths_is_typeset_by_the_vendored_mathjax(logged_browser, book_url, page, least):
    _requests(logged_browser)  # drop what an earlier page loaded
    logged_browser.get(f"{book_url}/{page}")
    got = logged_browser.execute_async_script(TYPESET_JS)
    assert got["typeset"] >= least and not got["errors"], got
    requests = _requests(logged_browser)
    local = urlparse(book_url).netloc
    assert any("/_static/vendor/mathjax/MathJax.js" in url for url in requests), requests
    outside = [url for url in requests  # (chrome:// and data: URLs are the browser's own)
               if urlparse(url).scheme in ("http", "https") and urlparse(url).netloc != local]
    assert not outside, f"{page}: {len(outside)} requests leave the machine: {outside[:5]}"
