"""What a workshop attendee does, in a real browser: Run All in JupyterLab, click the panel, read the book.

Run with ``make test-lab`` (``pytest -m lab tests/lab``); ``make test`` leaves these out.
"""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import pytest
from lab_harness import PANEL_JS, open_notebook, wait_for

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

# Run All through JupyterLab's own command on the notebook at arguments[0] (named, so activated, whatever has focus);
# resolves once every cell ran and the kernel is idle.
RUN_ALL_JS = PANEL_JS + """
const done = arguments[arguments.length - 1];
const app = window.jupyterapp, w = panel(arguments[0]);
const t0 = performance.now();
const idle = async () => {
  while (w.sessionContext.session.kernel.status !== 'idle') await new Promise(r => setTimeout(r, 100));
};
app.commands.execute('notebook:run-all-cells', {widgetId: w.id}).then(async () => {
  await idle();
  const problems = [], cells = w.content.model.cells;
  for (let i = 0; i < cells.length; i++) {
    const c = cells.get(i);
    if (c.type !== 'code') continue;
    if (c.executionCount === null) problems.push(`cell ${i}: not executed`);
    for (let j = 0; j < c.outputs.length; j++) {
      const o = c.outputs.get(j).toJSON();
      if (o.output_type === 'error') problems.push(`cell ${i}: ${o.ename}: ${o.evalue}`);
      const text = Array.isArray(o.text) ? o.text.join('') : (o.text || '');
      if (o.output_type === 'stream' && /Traceback \(most recent call last\)/.test(text))
        problems.push(`cell ${i}: ${o.name}: ${text.slice(0, 300)}`);
    }
  }
  done({seconds: (performance.now() - t0) / 1000, problems});
}, e => done({seconds: -1, problems: [String(e)]}));
"""

# The DOM node of the first code cell of the notebook at arguments[0] whose source contains arguments[1], scrolled
# into view.
CELL_JS = PANEL_JS + """
const nb = panel(arguments[0]).content;
for (let i = 0; i < nb.widgets.length; i++) {
  if (nb.widgets[i].model.sharedModel.getSource().includes(arguments[1])) {
    nb.activeCellIndex = i;
    nb.scrollToItem(i, 'start');
    return nb.widgets[i].node;
  }
}
return null;
"""

# The panel's output widget in the cell arguments[0] of the notebook at arguments[1]: its text and its image (a data:
# URL), if any, and whether the kernel is idle.
PANEL_OUT_JS = PANEL_JS + """
const out = arguments[0].querySelector('.widget-output');
if (!out) return null;
const imgs = out.querySelectorAll('img');
const errors = out.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]');
return {text: out.innerText, images: imgs.length, src: imgs.length ? imgs[imgs.length - 1].src : '',
        fresh: imgs.length > 0 && Array.from(imgs).every(i => !i.dataset.seen),
        idle: panel(arguments[1]).sessionContext.session.kernel.status === 'idle',
        loaded: imgs.length ? imgs[imgs.length - 1].complete && imgs[imgs.length - 1].naturalWidth > 0 : false,
        stderr: Array.from(errors).map(e => e.innerText).join('\\n')};
"""


def _run_all(browser, lab, name) -> dict:
    open_notebook(browser, *lab, name)
    return browser.execute_async_script(RUN_ALL_JS, name)


@pytest.mark.parametrize("name", [n for n in NOTEBOOKS if not n.startswith("08")])  # 08: the panel test
def test_run_all_in_jupyterlab(browser, lab, run_times, name):
    """Run All in JupyterLab: every code cell runs, no output holds an error or a traceback."""
    result = _run_all(browser, lab, name)
    run_times[name] = round(result["seconds"], 1)
    assert result["seconds"] > 0 and not result["problems"], result["problems"]


# ---- notebook 08's control panel ----------------------------------------------------------------
def _read_png(data: bytes):
    import matplotlib.image

    return matplotlib.image.imread(io.BytesIO(data), format="png")  # [h, w, 3 or 4] floats in [0, 1]


def _png(src: str):
    assert src.startswith("data:image/png;base64,"), f"expected an inline PNG, got {src[:40]!r}"
    return _read_png(base64.b64decode(src.split(",", 1)[1]))


def _ink(img, box) -> float:
    """Fraction of pixels in ``box`` (x0, y0, x1, y1 as fractions of the image, y from the top) that are
    not near-white: the drawn part of one axes."""
    h, w = img.shape[:2]
    x0, y0, x1, y1 = box
    mx, my = 0.02 * (x1 - x0), 0.02 * (y1 - y0)  # keep off the spines
    part = img[int((y0 + my) * h):int((y1 - my) * h), int((x0 + mx) * w):int((x1 - mx) * w), :3]
    return float((part.min(axis=2) < 0.9).mean())


def _reference(settings):
    """The summary and, per axes, its box and ink fraction, as the library draws this setting here."""
    from mla_edu.workshop.panel import PanelRuns, figure_png, panel_figure

    result = PanelRuns()(settings)
    fig = panel_figure(result)
    renderer = fig.canvas.get_renderer()
    tight = fig.get_tightbbox(renderer).padded(0.1)  # what bbox_inches="tight" keeps, in inches
    boxes = []
    for ax in fig.axes:
        b = ax.get_window_extent(renderer).transformed(fig.dpi_scale_trans.inverted())
        boxes.append(((b.x0 - tight.x0) / tight.width, (tight.y1 - b.y1) / tight.height,
                      (b.x1 - tight.x0) / tight.width, (tight.y1 - b.y0) / tight.height))
    img = _read_png(figure_png(fig))
    return result.summary(), img.shape, [(box, _ink(img, box)) for box in boxes]


def test_panel_redraws_in_jupyterlab(browser, lab, run_times):
    """Notebook 08 in JupyterLab: Run All, then the panel's run button with three settings. Each click
    prints the summary of exactly that setting and redraws a complete figure (each of its four axes
    holds as much ink as the library's own drawing of the same setting), with no traceback."""
    import torch
    from selenium.webdriver.common.by import By

    from mla_edu.workshop.panel import PanelSettings

    name = "08_workshop_exercises.ipynb"
    result = _run_all(browser, lab, name)
    run_times[name] = round(result["seconds"], 1)
    assert result["seconds"] > 0 and not result["problems"], result["problems"]

    cell = browser.execute_script(CELL_JS, name, "panel.show()")
    assert cell is not None, "notebook 08 has no panel.show() cell"
    opened = wait_for(browser, "the panel's first figure, loaded", lambda o: bool(o and o["loaded"]), PANEL_OUT_JS,
                      cell, name, timeout=60)
    assert opened["images"] == 1, "the panel should open on a figure"

    def click(label: str):
        for el in cell.find_elements(By.CSS_SELECTOR, "button, label"):
            if el.text.strip() == label:
                el.click()
                return
        raise AssertionError(f"no widget labelled {label!r} in the panel")

    # The panel opens on the notebook's last setting (the merged fix: no defect, no poison fill).
    width = frozenset({"width"})
    steps = [
        ("as opened (merged fix)", [], PanelSettings(defects=frozenset())),
        ("+ width defect", ["defect: width"], PanelSettings(defects=width)),
        ("+ poison fill", ["poison fill"], PanelSettings(defects=width, poison_fill=True)),
        ("triton backend", ["triton"], PanelSettings(attention_backend="triton", defects=width, poison_fill=True)),
    ]
    torch.set_num_threads(1)  # as the notebook does: the same numbers
    for what, clicks, settings in steps:
        for label in clicks:
            click(label)
        # Mark the figure on screen; the click must replace it with a new, loaded one.
        browser.execute_script(
            "arguments[0].querySelectorAll('.widget-output img').forEach(i => i.dataset.seen = '1')", cell)
        click("run")
        shown = wait_for(browser, f"{what}: a new figure, loaded, the kernel idle and the summary printed",
                         lambda o: bool(o and o["fresh"] and o["loaded"] and o["idle"]
                                        and "frozen at capture" in o["text"]), PANEL_OUT_JS, cell, name, timeout=180)
        summary, shape, axes = _reference(settings)
        assert not shown["stderr"], f"{what}: the panel printed to stderr: {shown['stderr'][:500]}"
        assert shown["images"] == 1, f"{what}: expected one figure, got {shown['images']}"
        text = re.sub(r"\s+", " ", shown["text"]).strip()
        assert re.sub(r"\s+", " ", summary) in text, f"{what}: the panel shows\n{text}\nexpected\n{summary}"
        img = _png(shown["src"])
        assert img.shape == shape, \
            f"{what}: the figure is {img.shape[1]}x{img.shape[0]} px, the library draws {shape[1]}x{shape[0]}"
        for i, (box, ink) in enumerate(axes):
            got = _ink(img, box)
            assert got > 0.02 and abs(got - ink) < 0.05, \
                f"{what}: axes {i} of the redrawn figure is incomplete: ink {got:.3f}, the library draws {ink:.3f}"


# ---- the book ------------------------------------------------------------------------------------
IMAGES_JS = """
const imgs = Array.from(document.images);
const broken = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src);
return {title: document.title, n: imgs.length, broken};
"""


@pytest.mark.parametrize("page, text, min_images", [
    ("index.html", "Read them in order", 0),
    ("setup.html", "Apple silicon", 0),
    ("notebooks/06_reproducing_the_zero_accuracy_bug.html", "Reproducing", 2),
    ("notebooks/08_workshop_exercises.html", "control panel", 2),
    ("instructor.html", "The 3-hour track", 0),
    ("glossary.html", "max_seqlen_pad", 0),
    ("results.html", "Other measurements", 0),
    ("slides.html", "reveal.js deck per workshop track", 0),
])
def test_book_page_loads_with_figures(browser, book_url, page, text, min_images):
    """The static book: the index and a notebook page load, show their text and every figure."""
    browser.get(f"{book_url}/{page}")
    wait_for(browser, f"{page} loaded (document.readyState)", lambda s: s == "complete",
             "return document.readyState", timeout=30)
    info = browser.execute_script(IMAGES_JS)
    assert text in browser.find_element("tag name", "body").text
    assert info["n"] >= min_images and not info["broken"], info
    links = browser.execute_script("return Array.from(document.links).map(a => a.getAttribute('href'))")
    if page.startswith("notebooks/"):  # one output box per cell's prints, and no nbval marker in sight
        split = browser.execute_script(
            "return Array.from(document.querySelectorAll('.cell')).filter(c => c.querySelectorAll("
            "'.output.stream').length > 1).length")
        assert split == 0, f"{split} cells show their printed output in more than one box"
        assert "NBVAL" not in browser.find_element("tag name", "body").text
    if page == "index.html":  # every notebook is linked from the index
        assert all(any(f"notebooks/{n[:-6]}.html" in (h or "") for h in links) for n in NOTEBOOKS), links
    if page == "slides.html":  # and every deck from the slides page, each track's deck too
        assert all(f"slides/{n[:-6]}.slides.html" in links for n in NOTEBOOKS), links
        from tools.notebook_timings import TRACKS

        assert all(f"slides/track-{t}.slides.html" in links for t in TRACKS), links
    if page == "instructor.html":  # the timings table is on the page (included from docs/timings.md)
        assert "minutes of teaching" in browser.find_element("tag name", "body").text.lower()


# The deck's state: reveal.js initialised, the current slide's indices, its visible images that loaded.
DECK_JS = """
const reveal = document.querySelector('.reveal');
const present = Array.from(document.querySelectorAll('.slides section.present')).pop();
const imgs = present ? Array.from(present.querySelectorAll('img')) : [];
const shown = imgs.filter(i => i.complete && i.naturalWidth > 0 && i.getBoundingClientRect().width > 100
                               && i.getBoundingClientRect().height > 50);
return {ready: !!reveal && reveal.classList.contains('ready'), hash: location.hash, figures: shown.length,
        sections: document.querySelectorAll('.slides section').length};
"""


def test_slide_deck_advances_to_a_figure(browser, book_url):
    """make slides' deck of notebook 03 in Chromium, served beside the book with no network: reveal.js starts,
    the space key advances slide by slide, and a slide of the core sections shows its figure."""
    from selenium.webdriver.common.keys import Keys

    deck = "03_paged_kv_cache.slides.html"
    if not (ROOT / "build" / "book" / "slides" / deck).is_file():
        pytest.fail(f"build/book/slides/{deck} is missing: run make slides first (make test-lab does)")
    browser.get(f"{book_url}/slides/{deck}")
    state = wait_for(browser, f"{deck}: reveal.js ready", lambda s: s["ready"], DECK_JS, timeout=30)
    assert state["sections"] > 5, state
    seen = [state["hash"]]
    body = browser.find_element("tag name", "body")
    for _ in range(state["sections"]):
        body.send_keys(Keys.SPACE)
        state = wait_for(browser, f"{deck}: the next slide after {seen[-1]}", lambda s: s["hash"] != seen[-1],
                         DECK_JS, timeout=10)
        seen.append(state["hash"])
        if state["figures"]:
            break
    assert state["figures"] >= 1, f"no slide showed a figure after {len(seen) - 1} steps: {seen}"
    assert len(set(seen)) == len(seen) > 2, seen  # every step moved to a new slide


# Before any of JupyterLab's code runs: no element takes focus, and the document says it has none, as in a headless
# Chromium that never gives the page focus (JupyterLab's current widget then stays null).
NO_FOCUS_JS = ("HTMLElement.prototype.focus = function () {};"
               "Document.prototype.hasFocus = function () { return false; };")


def test_run_all_needs_no_focus(browser, lab):
    """Run All of notebook 00 on a page that never has focus, Chromium's focus emulation off: the harness finds the
    notebook by path, waits for its kernel and runs it, though JupyterLab has no current widget."""
    name = "00_setup_check.ipynb"
    browser.execute_cdp_cmd("Emulation.setFocusEmulationEnabled", {"enabled": False})
    script = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": NO_FOCUS_JS})["identifier"]
    try:
        state = open_notebook(browser, *lab, name)
        assert state["current_widget"] is None and not state["has_focus"], state
        result = browser.execute_async_script(RUN_ALL_JS, name)
        assert result["seconds"] > 0 and not result["problems"], result["problems"]
    finally:
        browser.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": script})
        browser.execute_cdp_cmd("Emulation.setFocusEmulationEnabled", {"enabled": True})
