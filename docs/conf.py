"""The book: a static HTML site of the executed notebooks (``make book`` -> build/book/index.html).

Sphinx with MyST-NB renders each notebook from its stored outputs (nothing is re-executed), so
what the site shows is what ``make test`` checked. ``docs/notebooks`` links to ``../notebooks``.
"""

import sys
from pathlib import Path

project = "mla-edu"
author = "the mla-edu developers"
extensions = ["myst_nb"]
nb_execution_mode = "off"  # show the committed outputs
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
# timings.md is not a page: instructor.md includes it (python -m tools.notebook_timings writes it)
exclude_patterns = ["_build", "notebooks/gpu", "notebooks/*.py", "**/.ipynb_checkpoints", "timings.md"]
nb_merge_streams = True  # one output box per cell, not one per print that a table was written with
# The book shows a static image, never a widget: a widget needs a live kernel. A cell's widget view
# ranks below its PNG; notebook 08 adds the panel's figure as a PNG output after the widget cell.
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
html_theme = "sphinx_book_theme"
html_title = "mla-edu: MLA, paged KV caches and a CUDA-graph bug"
html_theme_options = {"show_toc_level": 2}
# The widget views are not shown (above), so the book loads no widget JavaScript (myst-nb's default: require.js
# and the widget manager, from CDNs).
nb_ipywidgets_js: dict = {}

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout, for tools.slides
from tools.slides import NBVAL_MARKER, vendor, without_nbval_markers  # noqa: E402

# The maths: MathJax 2.7.9 from the slides' vendored copy (tools.slides.VENDOR: npm pack once into build/npm,
# sha512 checked), unpacked into build/book_static/vendor/mathjax/ and copied into the site's _static/, so that the
# book works offline. Sphinx writes inline maths as \( \) and display maths as \[ \] (myst's amsmath blocks too).
BOOK_STATIC = ROOT / "build" / "book_static"
vendor(BOOK_STATIC, names=("mathjax",))
html_static_path = [str(BOOK_STATIC)]
mathjax_path = "vendor/mathjax/MathJax.js?config=TeX-AMS_CHTML-full"  # relative: under the site's _static/
mathjax_inline = [r"\(", r"\)"]
mathjax_display = [r"\[", r"\]"]
mathjax2_config = {"tex2jax": {"inlineMath": [mathjax_inline], "displayMath": [mathjax_display]}}
myst_update_mathjax = False  # myst would write a MathJax 3/4 configuration, which MathJax 2 does not read


def strip_nbval_markers(app, doctree) -> None:
    """Drop nbval's marker lines from the code cells the book shows (the notebooks keep them)."""
    from docutils import nodes

    for block in list(doctree.findall(nodes.literal_block)):
        text = block.astext()
        if NBVAL_MARKER not in text:
            continue
        kept = without_nbval_markers(text)
        block.children = [nodes.Text(kept)]
        block.rawsource = kept


def setup(app):
    app.connect("doctree-read", strip_nbval_markers)
