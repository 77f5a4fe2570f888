"""A reveal.js deck per notebook, made for a projector: ``python -m tools.slides`` (``make slides``).

Each deck is built from its slide file ``docs/slides/<notebook>.yaml``, kept beside the book's sources and written
for the screen, not taken from the notebook: per slide a title, at most ``MAX_BULLETS`` bullets and
``MAX_WORDS`` words, at most one figure (a PNG of figures/, drawn by ``tools.figures``) or ``MAX_CODE_LINES`` lines
of code, display equations, and speaker notes (``s`` opens the speaker view). Every slide names the notebook
section it teaches; that section must exist and be marked (core) (``tools.notebook_timings.sections``, which
splits a notebook at each heading line, so a heading partway down a cell starts its own section), unless the
notebook has no (core) section below its introduction (09, the GPU track's deep dive): then any of them.

reveal.js (with its notes and math plugins) and MathJax 2 come from the npm registry (``VENDOR``: exact versions
and their sha512), fetched once by ``npm pack`` into ``build/npm/`` and unpacked beside the decks, so that a deck
opens without a network:

    build/book/slides/ (a deck per notebook, <notebook>.slides.html), vendor/ (what the decks load), figures/
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from mla_edu import plotstyle
from mla_edu.paths import FIGURES_DIR, NOTEBOOKS_DIR, REPO_ROOT

OUT = REPO_ROOT / "build" / "book" / "slides"
SLIDES_DIR = REPO_ROOT / "docs" / "slides"
NPM_CACHE = REPO_ROOT / "build" / "npm"
MAX_BULLETS = 5
MAX_WORDS = 60
MAX_CODE_LINES = 15
MAX_CODE_COLS = 80
MAX_EQUATIONS = 3
# npm package -> (version, sha512 integrity as the registry states it, members unpacked into vendor/<name>/)
VENDOR = {
    "reveal.js": ("4.6.0", "QC80rYsZldAe95bW9VImucIPTjfsKhI0jRQrIOXU4P92ZyXb/dfw9L3EE96bN6i7UmeUl1qBieH4UNTr25erYw==",
                  ("dist/", "plugin/notes/", "plugin/math/")),
    "mathjax": ("2.7.9", "NOGEDTIM9+MrsqnjPEjVGNx4q0GQxqm61yQwSK+/5S59i26wId5IC5gNu9/bu8+CCVl5p9G2IHcAl/wJa+5+BQ==",
                ("MathJax.js", "config/TeX-AMS_CHTML-full.js", "config/Safe.js", "extensions/",
                 "jax/input/TeX/", "jax/output/CommonHTML/", "jax/element/", "fonts/HTML-CSS/TeX/woff/")),
}
NBVAL_MARKER = "# NBVAL_"


class Slide(BaseModel):
    """One slide: what the projector shows and what the instructor says."""

    model_config = ConfigDict(extra="forbid")
    section: str  # the notebook section it teaches: a heading without its marker, "introduction", or an exercise
    title: str
    bullets: list[str] = []
    math: list[str] = []  # display equations, LaTeX
    figure: str | None = None  # a PNG of figures/, by name
    code: str | None = None
    notes: str

    @field_validator("notes", "title")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("expected text, got a blank string")
        return v

    @field_validator("bullets", "math")
    @classmethod
    def _few_items(cls, v: list[str], info) -> list[str]:
        most, what = {"bullets": (MAX_BULLETS, "bullets"),
                      "math": (MAX_EQUATIONS, "display equations")}[info.field_name]
        if len(v) > most:
            raise ValueError(f"expected at most {most} {what}, got {len(v)}")
        return v

    @field_validator("code")
    @classmethod
    def _short_code(cls, v: str | None) -> str | None:
        if v is not None:
            lines = v.rstrip("\n").splitlines()
            wide = [line for line in lines if len(line) > MAX_CODE_COLS]
            if len(lines) > MAX_CODE_LINES or wide:
                raise ValueError(f"expected at most {MAX_CODE_LINES} lines of at most {MAX_CODE_COLS} characters, "
                                 f"got {len(lines)} lines, {len(wide)} wider")
        return v

    @model_validator(mode="after")
    def _one_picture_and_few_words(self):
        if self.figure is not None and (self.code is not None or self.bullets or self.math):
            raise ValueError(f"slide {self.title!r}: a figure takes the slide under its title (plotstyle's "
                             "SLIDE_FIGURE_BOX); expected no code, bullets or equations beside it")
        if self.figure is not None and not (FIGURES_DIR / f"{self.figure}.png").is_file():
            raise ValueError(f"slide {self.title!r}: expected a figure of figures/, got {self.figure!r}")
        words = len(" ".join(self.bullets).split())
        if words > MAX_WORDS:
            raise ValueError(f"slide {self.title!r}: expected at most {MAX_WORDS} words, got {words}")
        return self


class Deck(BaseModel):
    model_config = ConfigDict(extra="forbid")
    notebook: str  # the notebook's stem
    title: str
    slides: list[Slide]


def load(path: Path) -> Deck:
    """A slide file, checked against the model and against its notebook's sections."""
    from tools import notebook_timings

    deck = Deck.model_validate(yaml.safe_load(path.read_text()))
    nb_path = NOTEBOOKS_DIR / f"{deck.notebook}.ipynb"
    if deck.notebook != path.stem or not nb_path.is_file():
        raise ValueError(f"{path.name}: expected notebook {path.stem!r} (a notebook of notebooks/), "
                         f"got {deck.notebook!r}")
    marker = {s["title"]: s["marker"] for s in notebook_timings.sections(json.loads(nb_path.read_text()))}
    headed = {t: m for t, m in marker.items() if t != "introduction"}  # the text above the first heading is core
    wanted = ("core",) if "core" in headed.values() else notebook_timings.MARKERS  # a notebook all optional: any
    for slide in deck.slides:
        if marker.get(slide.section) not in wanted:
            raise ValueError(f"{path.name}, slide {slide.title!r}: expected a ({' or '.join(wanted)}) section of "
                             f"{deck.notebook}, got {slide.section!r} ({marker.get(slide.section, 'no such section')})")
    return deck


def without_nbval_markers(code: str) -> str:
    """``code`` without nbval's marker lines (``# NBVAL_IGNORE_OUTPUT``, ...): they are for the tests, not for
    readers (the book's code cells in docs/conf.py)."""
    return "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(NBVAL_MARKER))


def inline(text: str) -> str:
    """A bullet's markdown (``code``, *emphasis*, $maths$) as HTML; maths is left to MathJax."""
    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?!\w)", r"<em>\1</em>", out)


def slide_html(slide: Slide) -> str:
    parts = [f"<h2>{inline(slide.title)}</h2>"]
    parts += [f'<div class="eq">\\[{html.escape(m, quote=False)}\\]</div>' for m in slide.math]
    if slide.bullets:
        parts.append("<ul>" + "".join(f"<li>{inline(b)}</li>" for b in slide.bullets) + "</ul>")
    if slide.figure:
        parts.append(f'<img class="figure" src="figures/{slide.figure}.png" alt="{html.escape(slide.figure)}">')
    if slide.code:
        parts.append(f'<pre><code>{html.escape(slide.code.rstrip())}</code></pre>')
    parts.append(f'<aside class="notes">{html.escape(slide.notes.strip())}</aside>')
    return "<section>\n" + "\n".join(parts) + "\n</section>"


STYLE = """
.reveal { font-size: 30px; }
.reveal .slides section { text-align: left; height: 100%%; }
.reveal h1 { font-size: 1.9em; } .reveal h2 { font-size: 1.35em; margin-bottom: 0.5em; }
.reveal ul { display: block; margin-left: 1em; } .reveal li { margin: 0.25em 0; }
.reveal .eq { font-size: 0.9em; margin: 0.3em 0; }
.reveal img.figure { display: block; margin: 0 auto; max-width: %(fig_w)dpx; max-height: %(fig_h)dpx;
                     object-fit: contain; border: 0; box-shadow: none; }
.reveal pre { width: 100%%; font-size: 0.62em; box-shadow: none; }
.reveal pre code { max-height: 560px; padding: 0.5em; white-space: pre; }
""" % {"fig_w": plotstyle.SLIDE_FIGURE_BOX[0], "fig_h": plotstyle.SLIDE_FIGURE_BOX[1]}


def deck_html(deck: Deck) -> str:
    title = f"<section><h1>{inline(deck.title)}</h1><p>mla-edu</p><aside class=\"notes\">{html.escape(deck.title)}: " \
            f"{len(deck.slides)} slides; the instructor guide gives the minutes of each section.</aside></section>"
    slides = "\n".join([title, *map(slide_html, deck.slides)])
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(deck.title)}</title><link rel="icon" href="data:,">
<link rel="stylesheet" href="vendor/reveal.js/dist/reveal.css">
<link rel="stylesheet" href="vendor/reveal.js/dist/theme/white.css">
<style>{STYLE}</style></head>
<body><div class="reveal"><div class="slides">
{slides}
</div></div>
<script src="vendor/reveal.js/dist/reveal.js"></script>
<script src="vendor/reveal.js/plugin/notes/notes.js"></script>
<script src="vendor/reveal.js/plugin/math/math.js"></script>
<script>
Reveal.initialize({{width: {plotstyle.SLIDE_CANVAS[0]}, height: {plotstyle.SLIDE_CANVAS[1]},
  margin: {plotstyle.SLIDE_MARGIN},
  center: false, hash: true, transition: 'none',
  math: {{mathjax: 'vendor/mathjax/MathJax.js', config: 'TeX-AMS_CHTML-full',
          tex2jax: {{inlineMath: [['$', '$'], ['\\\\(', '\\\\)']]}}}},
  plugins: [RevealNotes, RevealMath.MathJax2]}});
</script></body></html>
"""


def _tarball(name: str) -> Path:
    """``build/npm/<name>-<version>.tgz``, fetched with ``npm pack`` if absent, checked against its sha512."""
    version, integrity, _ = VENDOR[name]
    path = NPM_CACHE / f"{name}-{version}.tgz"
    if not path.is_file():
        NPM_CACHE.mkdir(parents=True, exist_ok=True)
        if shutil.which("npm") is None:
            raise RuntimeError("make slides and make book need npm (Debian: apt-get install npm) to fetch "
                               "reveal.js and MathJax once")
        subprocess.run(["npm", "pack", "--silent", f"{name}@{version}"], cwd=NPM_CACHE, check=True,
                       stdout=subprocess.DEVNULL)
    got = base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()
    if got != integrity:
        path.unlink()
        raise ValueError(f"{path.name}: expected sha512 {integrity}, got {got} (deleted; run make slides again)")
    return path


def vendor(out: Path = OUT, names=tuple(VENDOR)) -> None:
    """Unpack the needed files of the pinned packages ``names`` (a subset of ``VENDOR``) into ``out/vendor/<name>/``."""
    unknown = sorted(set(names) - set(VENDOR))
    if unknown:
        raise ValueError(f"expected package names of VENDOR {sorted(VENDOR)}, got {unknown}")
    for name in names:
        version, _, members = VENDOR[name]
        dest = out / "vendor" / name
        stamp = dest / ".version"
        if stamp.is_file() and stamp.read_text() == f"{version} {members}":
            continue
        shutil.rmtree(dest, ignore_errors=True)
        with tarfile.open(_tarball(name)) as tar:
            chosen = [m for m in tar.getmembers() if m.isfile()
                      and any(m.name.removeprefix("package/").startswith(p) for p in members)]
            for m in chosen:
                m.name = m.name.removeprefix("package/")
            tar.extractall(dest, members=chosen, filter="data")
        stamp.write_text(f"{version} {members}")


def export(path: Path, out: Path = OUT) -> Path:
    """Write ``out/<notebook>.slides.html`` from the slide file ``path``, with the figures it shows."""
    deck = load(path)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    for slide in deck.slides:
        if slide.figure:
            shutil.copyfile(FIGURES_DIR / f"{slide.figure}.png", out / "figures" / f"{slide.figure}.png")
    target = out / f"{deck.notebook}.slides.html"
    target.write_text(deck_html(deck))
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="notebook stems (default: every notebook)")
    args = parser.parse_args(argv)
    paths = sorted(SLIDES_DIR.glob("[0-9][0-9]_*.yaml"))
    unknown = sorted(set(args.names) - {p.stem for p in paths})
    if unknown:
        parser.error(f"no slide file for {unknown}; known: {[p.stem for p in paths]}")
    OUT.mkdir(parents=True, exist_ok=True)
    vendor()
    for path in paths:
        if not args.names or path.stem in args.names:
            print(export(path).relative_to(REPO_ROOT))


if __name__ == "__main__":
    main()
