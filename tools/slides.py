"""A reveal.js deck per notebook, from its core sections: ``python -m tools.slides`` (``make slides``).

Each deck is nbconvert's slides exporter over the executed notebook, with the slideshow metadata set here
(the committed notebooks are not touched): the title cell and each ``(core)`` section heading open a slide,
every further cell of a core section is a sub-slide (down arrow), every ``(optional)`` section is skipped,
and nbval's marker lines are dropped from the code. reveal.js, require.js, jQuery and MathJax 2 come from
the npm registry (``VENDOR``: exact versions and their sha512), fetched once by ``npm pack`` into
``build/npm/`` and unpacked beside the decks, so that a deck opens without a network:

    build/book/slides/ (a deck per notebook, named after it), build/book/slides/vendor/ (what the decks load)
"""

from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

from mla_edu.paths import NOTEBOOKS_DIR, REPO_ROOT

OUT = REPO_ROOT / "build" / "book" / "slides"
NPM_CACHE = REPO_ROOT / "build" / "npm"
# npm package -> (version, sha512 integrity as the registry states it, members unpacked into vendor/<name>/)
VENDOR = {
    "reveal.js": ("4.6.0", "QC80rYsZldAe95bW9VImucIPTjfsKhI0jRQrIOXU4P92ZyXb/dfw9L3EE96bN6i7UmeUl1qBieH4UNTr25erYw==",
                  ("dist/", "plugin/notes/")),
    "requirejs": ("2.3.8", "7/cTSLOdYkNBNJcDMWf+luFvMriVm7eYxp4BcFCsAX0wF421Vyce5SXP17c+Jd5otXKGNehIonFlyQXSowL6Mw==",
                  ("require.js",)),
    "jquery": ("3.7.1", "m4avr8yL8kmFN8psrbFFFmB/If14iN5o9nw/NgnnM+kybDJpRsAynV2BsfpTYrTRysYUdADVD7CkUUizgkpLfg==",
               ("dist/jquery.min.js",)),
    "mathjax": ("2.7.9", "NOGEDTIM9+MrsqnjPEjVGNx4q0GQxqm61yQwSK+/5S59i26wId5IC5gNu9/bu8+CCVl5p9G2IHcAl/wJa+5+BQ==",
                ("MathJax.js", "config/TeX-AMS_CHTML-full.js", "config/Safe.js", "extensions/",
                 "jax/input/TeX/", "jax/output/CommonHTML/", "jax/element/", "fonts/HTML-CSS/TeX/woff/")),
}
_HEADING = re.compile(r"^## .+ \((core|optional)\)\s*$", re.MULTILINE)
NBVAL_MARKER = "# NBVAL_"


def without_nbval_markers(code: str) -> str:
    """``code`` without nbval's marker lines (``# NBVAL_IGNORE_OUTPUT``, ...): they are for the tests, not for
    readers (the decks here, the book's code cells in docs/conf.py)."""
    return "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(NBVAL_MARKER))


def _tarball(name: str) -> Path:
    """``build/npm/<name>-<version>.tgz``, fetched with ``npm pack`` if absent, checked against its sha512."""
    version, integrity, _ = VENDOR[name]
    path = NPM_CACHE / f"{name}-{version}.tgz"
    if not path.is_file():
        NPM_CACHE.mkdir(parents=True, exist_ok=True)
        if shutil.which("npm") is None:
            raise RuntimeError("make slides needs npm (Debian: apt-get install npm) to fetch reveal.js once")
        subprocess.run(["npm", "pack", "--silent", f"{name}@{version}"], cwd=NPM_CACHE, check=True,
                       stdout=subprocess.DEVNULL)
    got = base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()
    if got != integrity:
        path.unlink()
        raise ValueError(f"{path.name}: expected sha512 {integrity}, got {got} (deleted; run make slides again)")
    return path


def vendor(out: Path = OUT) -> None:
    """Unpack the pinned packages' needed files into ``out/vendor/<name>/``."""
    for name, (_, _, members) in VENDOR.items():
        dest = out / "vendor" / name
        if dest.is_dir():
            continue
        with tarfile.open(_tarball(name)) as tar:
            chosen = [m for m in tar.getmembers() if m.isfile()
                      and any(m.name.removeprefix("package/").startswith(p) for p in members)]
            for m in chosen:
                m.name = m.name.removeprefix("package/")
            tar.extractall(dest, members=chosen, filter="data")


def slideshow(nb: dict) -> dict:
    """A copy of the notebook with each cell's ``slideshow`` metadata set from the section markers."""
    nb = copy.deepcopy(nb)
    in_core = True  # the title and the introduction before the first section are core
    for i, cell in enumerate(nb["cells"]):
        src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        m = _HEADING.search(src) if cell["cell_type"] == "markdown" else None
        if m:
            in_core = m.group(1) == "core"
        kind = "skip" if not in_core else "slide" if (m or i == 0) else "subslide"
        cell.setdefault("metadata", {})["slideshow"] = {"slide_type": kind}
        if cell["cell_type"] == "markdown":  # the book's glossary page, and headings without their marker
            linked = src.replace("](../docs/glossary.md#", "](../glossary.html#")
            cell["source"] = re.sub(r" \((?:core|optional)\)$", "", linked, flags=re.MULTILINE)
        if cell["cell_type"] == "code":
            cell["source"] = without_nbval_markers(src)
    return nb


def export(path: Path, out: Path = OUT) -> Path:
    """Write ``out/<notebook>.slides.html``: the deck of one notebook's core sections."""
    import nbformat
    from nbconvert import SlidesExporter

    nb = slideshow(nbformat.reads(path.read_text(), as_version=4))
    exporter = SlidesExporter(reveal_url_prefix="vendor/reveal.js", reveal_theme="simple",
                              reveal_scroll=True, require_js_url="vendor/requirejs/require.js",
                              jquery_url="vendor/jquery/dist/jquery.min.js",
                              mathjax_url="vendor/mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe")
    html, _ = exporter.from_notebook_node(nb)
    target = out / f"{path.stem}.slides.html"
    target.write_text(html)
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="notebook stems (default: every notebook)")
    args = parser.parse_args(argv)
    paths = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
    unknown = sorted(set(args.names) - {p.stem for p in paths})
    if unknown:
        parser.error(f"unknown notebooks {unknown}; known: {[p.stem for p in paths]}")
    OUT.mkdir(parents=True, exist_ok=True)
    vendor()
    for path in paths:
        if not args.names or path.stem in args.names:
            print(export(path).relative_to(REPO_ROOT))


if __name__ == "__main__":
    main()
