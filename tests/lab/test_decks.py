"""Every deck of ``make slides`` (one per notebook, one per track) on a 1280x720 screen in headless Chromium
(``make test-lab``; marker ``lab``).

For every slide of every deck: nothing runs past the slide's canvas (nothing to scroll), no code box overflows,
every figure loads, fits and is shown at the scale mla_edu.plotstyle sizes its labels for (tests/test_plotstyle.py),
every slide has speaker notes; and the whole deck loads nothing from any host but
the local server (Chrome's DevTools performance log: every request the page made).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from lab_harness import chromium
from mla_edu import plotstyle
from tools.notebook_timings import TRACKS

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
DECKS = sorted(p.stem for p in (ROOT / "docs" / "slides").glob("[0-9][0-9]_*.yaml")) + [
    f"track-{name}" for name in TRACKS]  # and a deck per workshop track (tools.slides.track_path)
SCREEN = dict(zip(("width", "height"), plotstyle.SLIDE_CANVAS))
#: URL schemes of the page's requests over the network (the performance log's Network.requestWillBeSent); the others
#: are the browser's own: data: URLs, and the chrome:// and chrome-untrusted://new-tab-page/ pages Chromium 150 loads
#: for its first tab.
NETWORK = ("http", "https")

# Resolves once reveal.js is ready, every image has loaded, the fonts are in, and MathJax has typeset every display
# equation (each .eq holds MathJax's output, its queue empty).
READY_JS = """
const done = arguments[arguments.length - 1];
const typeset = () => Array.from(document.querySelectorAll('.eq')).every(e => e.querySelector('.mjx-chtml'));
const wait = () => {
  if (!(window.Reveal && Reveal.isReady()) || !typeset()
      || Array.from(document.images).some(i => !i.complete)) return setTimeout(wait, 100);
  const settle = () => document.fonts.ready.then(() => { Reveal.layout(); done(true); });
  if (window.MathJax && MathJax.Hub) return MathJax.Hub.Queue(settle);
  settle();
};
wait();
"""


# Each slide in turn: what runs past the canvas, code boxes that overflow, figures that did not load or do not
# fit, and the speaker notes' length.
MEASURE_JS = """
const box = document.querySelector('.reveal .slides').getBoundingClientRect();
const [figW, figH] = arguments[0];
const out = [];
Reveal.getSlides().forEach((section, i) => {
  Reveal.slide(i);
  const inside = r => r.left >= box.left - 1 && r.right <= box.right + 1 && r.top >= box.top - 1
                      && r.bottom <= box.bottom + 1;
  const shown = Array.from(section.querySelectorAll('*')).filter(e => !e.closest('aside.notes')
      && e.getClientRects().length > 0);
  const past = shown.filter(e => !inside(e.getBoundingClientRect())).map(e => e.tagName + ': '
      + (e.textContent || e.getAttribute('src') || '').trim().slice(0, 40));
  const code = Array.from(section.querySelectorAll('pre code')).filter(c => c.scrollWidth > c.clientWidth + 1
      || c.scrollHeight > c.clientHeight + 1).map(c => c.textContent.slice(0, 40));
  const figures = Array.from(section.querySelectorAll('img')).filter(img => !(img.complete && img.naturalWidth > 0
      && inside(img.getBoundingClientRect()))).map(img => img.getAttribute('src'));
  // shown smaller than plotstyle's model of a slide (fit into SLIDE_FIGURE_BOX, never enlarged): labels too small
  const shrunk = Array.from(section.querySelectorAll('img')).filter(img => img.naturalWidth > 0
      && img.clientWidth / img.naturalWidth < Math.min(1, figW / img.naturalWidth, figH / img.naturalHeight) - 0.01)
      .map(img => `${img.getAttribute('src')}: ${img.clientWidth} of ${img.naturalWidth} px`);
  const notes = section.querySelector('aside.notes');
  out.push({slide: i, title: (section.querySelector('h1, h2') || {}).textContent || '', past, code, figures, shrunk,
            scroll: section.scrollHeight > section.clientHeight + 1 || section.scrollWidth > section.clientWidth + 1,
            notes: notes ? notes.textContent.trim().length : 0});
});
return out;
"""


@pytest.fixture(scope="module")
def deck_browser(tmp_path_factory):
    """Headless Chromium (Debian's) at a 1280x720 viewport, its DevTools performance log recording every
    network request."""
    driver = chromium(tmp_path_factory.mktemp("chromium-slides"), "1280,720", performance_log=True)
    driver.set_script_timeout(60)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {**SCREEN, "deviceScaleFactor": 1,
                                                                  "mobile": False})
    try:
        yield driver
    finally:
        driver.quit()


#: How long a deck's requests may stay in flight after the deck says it is ready: MathJax asks for a font only
#: when it first typesets a glyph of it, so a font request can still be loading then (seen once, in CI at 0bd22ab).
SETTLE_S = 10.0


def _requests(driver, settle_s: float = 0.0) -> list[tuple[str, int | str | None]]:
    """(URL, outcome) of every request in the performance log since it was last read: the HTTP status, "failed: "
    and Chromium's error text, or None for a request still in flight. With ``settle_s``, the log is read again until
    no request is in flight or that many seconds have passed."""
    sent, status = [], {}
    deadline = time.monotonic() + settle_s
    while True:
        for entry in driver.get_log("performance"):
            msg = json.loads(entry["message"])["message"]
            if msg["method"] == "Network.requestWillBeSent":
                sent.append((msg["params"]["requestId"], msg["params"]["request"]["url"]))
            elif msg["method"] == "Network.responseReceived":
                status[msg["params"]["requestId"]] = msg["params"]["response"]["status"]
            elif msg["method"] == "Network.loadingFailed":
                status[msg["params"]["requestId"]] = f"failed: {msg['params'].get('errorText', '')}"
        if all(rid in status for rid, _ in sent) or time.monotonic() >= deadline:
            return [(url, status.get(rid)) for rid, url in sent]
        time.sleep(0.2)


@pytest.mark.parametrize("deck", DECKS)
def test_every_slide_fits_1280x720_offline_with_notes(deck_browser, book_url, deck):
    path = ROOT / "build" / "book" / "slides" / f"{deck}.slides.html"
    if not path.is_file():
        pytest.fail(f"{path.relative_to(ROOT)} is missing: run make slides first (make test-lab does)")
    _requests(deck_browser)  # drop what an earlier page loaded
    deck_browser.get(f"{book_url}/slides/{deck}.slides.html")
    deck_browser.execute_async_script(READY_JS)
    slides = deck_browser.execute_script(MEASURE_JS, list(plotstyle.SLIDE_FIGURE_BOX))
    assert deck_browser.execute_script("return window.innerWidth") == SCREEN["width"]
    assert len(slides) >= 2, slides
    for s in slides:
        where = f"{deck}, slide {s['slide']} ({s['title']!r})"
        assert not s["scroll"] and not s["past"], f"{where}: runs past the 1280x720 canvas: {s['past'][:5]}"
        assert not s["code"], f"{where}: code boxes overflow: {s['code']}"
        assert not s["figures"], f"{where}: figures missing or past the canvas: {s['figures']}"
        assert not s["shrunk"], f"{where}: figures shown smaller than mla_edu.plotstyle assumes: {s['shrunk']}"
        assert s["notes"] > 0, f"{where}: no speaker notes"
    local = urlparse(book_url).netloc
    requests = _requests(deck_browser, settle_s=SETTLE_S)
    page = [url for url, _ in requests if urlparse(url).scheme in NETWORK]
    outside = [url for url in page if urlparse(url).netloc != local]
    failed = [(url, st) for url, st in requests if url in page and st not in (200, 304)]
    own = f"{book_url}/slides/{deck}.slides.html"
    assert own in page, f"the performance log missed the deck's own load: {requests}"
    assert not outside, f"{deck}: {len(outside)} requests leave the machine: {outside[:5]}"
    assert not failed, f"{deck}: requests that failed (None: still loading after {SETTLE_S:g} s): {failed[:5]}"
