"""The book: a static HTML site of the executed notebooks (``make book`` -> build/book/index.html).

Sphinx with MyST-NB renders each notebook from its stored outputs (nothing is re-executed), so
what the site shows is what ``make test`` checked. ``docs/notebooks`` links to ``../notebooks``.
"""

project = "mla-edu"
author = "the mla-edu developers"
extensions = ["myst_nb"]
nb_execution_mode = "off"  # show the committed outputs
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
exclude_patterns = ["_build", "notebooks/gpu", "notebooks/*.py", "**/.ipynb_checkpoints"]
html_theme = "sphinx_book_theme"
html_title = "mla-edu: MLA, paged KV caches and a CUDA-graph bug"
html_theme_options = {"show_toc_level": 2}
html_static_path: list[str] = []
