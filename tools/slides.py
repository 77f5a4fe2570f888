"""A reveal.js deck per notebook and per workshop track, made for a projector: ``python -m tools.slides``
(``make slides``).

Each deck is built from its slide file ``docs/slides/<notebook>.yaml``, kept beside the book's sources and written
for the screen, not taken from the notebook: per slide a title, at most ``MAX_BULLETS`` bullets and
``MAX_WORDS`` words, at most one figure (a PNG of figures/, drawn by ``tools.figures``) or ``MAX_CODE_LINES`` lines
of code, display equations, and speaker notes (``s`` opens the speaker view). Every slide names the notebook
section it teaches; that section must exist and be marked (core) (``tools.notebook_timings.sections``, which
splits a notebook at each heading line, so a heading partway down a cell starts its own section), unless the
notebook has no (core) section below its introduction (09, the GPU track's deep dive): then any of them.

Nothing on a slide is typed that a table holds: an exercise slide's minutes (its title reads "Exercise (N min):
...") come from the timing table ``results/notebook_timings.json`` (``exercise_minutes``: the attendees' minutes
of ``tools.notebook_timings``), and a slide's text may quote a measured number as ``{{repro_cpu:table.pre_fix.
accuracy}}`` (a key path into ``results/repro_cpu.json``; ``{{seed:pre_fix}}``: the seed's numbers,
``mla_edu.case_study.seed.SEED``). A typed "N min" is refused.

A track deck (``track-<name>.slides.html``) follows ``tools.notebook_timings.TRACKS``, read when the decks are
built: per block, the per-notebook slides of the sections (and exercise units) it teaches, in the block's order,
and a slide for each break, for lunch and for questions. The first slide of every block asks the class a question in its
speaker notes (a line "Ask the class: ...?"), checked here.

reveal.js (with its notes and math plugins) and MathJax 2 come from the npm registry (``VENDOR``: exact versions
and their sha512), fetched once by ``npm pack`` into ``build/npm/`` and unpacked beside the decks, so that a deck
opens without a network:

    build/book/slides/ (a deck per notebook, <notebook>.slides.html; a deck per track,
                        track-<name>.slides.html), vendor/ (what the decks load), figures/
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
from mla_edu.paths import FIGURES_DIR, NOTEBOOKS_DIR, REPO_ROOT, RESULTS_DIR

OUT = REPO_ROOT / "build" / "book" / "slides"
TABLE_NAME = "results/notebook_timings.json"
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
TYPED_MINUTES = re.compile(r"\b\d+(?:\.\d+)?\s*min(?:utes?)?\b", re.IGNORECASE)
NUMBER = re.compile(r"\{\{(\w+):([\w.]+)\}\}")  # {{source:key.path}}
ASK = re.compile(r"^Ask the class: .+\?$", re.MULTILINE)
EXERCISE_UNIT = " · exercise "


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

    @field_validator("notes", "title", "bullets")
    @classmethod
    def _no_typed_minutes(cls, v):
        for text in [v] if isinstance(v, str) else v:
            if TYPED_MINUTES.search(text):
                raise ValueError(f"expected no typed minutes (an exercise's come from {TABLE_NAME}), got "
                                 f"{TYPED_MINUTES.search(text).group(0)!r} in {text[:60]!r}")
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


def timing_table() -> dict:
    """The timing table of ``tools.notebook_timings`` (``results/notebook_timings.json``)."""
    from tools import notebook_timings

    if not notebook_timings.TABLE_JSON.is_file():
        raise FileNotFoundError(f"expected {TABLE_NAME} (python -m tools.notebook_timings writes it), got no file")
    return json.loads(notebook_timings.TABLE_JSON.read_text())


def exercise_minutes(table: dict, notebook: str, unit: str) -> int:
    """Whole minutes of the exercise unit ``unit`` of ``notebook`` (a stem) as the timing table gives them: the
    attendees' pace, rounded as ``tools.notebook_timings.track_minutes`` counts an exercise
    (``exercise_unit_minutes``), so a track table's row for a block of one exercise says the same."""
    from tools import notebook_timings

    entry = table.get("notebooks", {}).get(f"{notebook}.ipynb")
    units = [s for s in (entry or {}).get("sections", []) if s.get("exercise") is not None]
    found = [s for s in units if s["title"] == unit]
    if not found:
        raise ValueError(f"{TABLE_NAME}: expected the exercise unit {unit!r} of {notebook}.ipynb, got "
                         f"{[s['title'] for s in units] if entry else 'no such notebook'} "
                         "(python -m tools.notebook_timings rewrites the table)")
    if "prose_factor" not in table:
        raise ValueError(f"{TABLE_NAME}: expected the key 'prose_factor' (the read-aloud factor the minutes use), "
                         "got none (python -m tools.notebook_timings rewrites the table)")
    return notebook_timings.exercise_unit_minutes(found[0], prose_factor=table["prose_factor"])


def number(source: str, key: str) -> str:
    """The value ``{{source:key}}`` quotes: a key path into ``results/<source>.json`` (floats as 0.000), or into
    the seed's numbers (``seed``: ``mla_edu.case_study.seed.SEED``)."""
    if source == "seed":
        from mla_edu.case_study.seed import SEED

        value, where = SEED, "mla_edu.case_study.seed.SEED"
    else:
        path = RESULTS_DIR / f"{source}.json"
        if not path.is_file():
            raise ValueError(f"{{{{{source}:{key}}}}}: expected a file results/{source}.json or 'seed', got no file")
        value, where = json.loads(path.read_text()), f"results/{source}.json"
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            got = sorted(value) if isinstance(value, dict) else type(value).__name__
            raise ValueError(f"{{{{{source}:{key}}}}}: expected a key {part!r} in {where}, got {got}")
        value = value[part]
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, (dict, list)):
        raise ValueError(f"{{{{{source}:{key}}}}}: expected a number or text in {where}, got a {type(value).__name__}")
    return str(value)


def fill_numbers(raw):
    """The slide file's text with every ``{{source:key}}`` replaced by ``number``'s value."""
    if isinstance(raw, str):
        return NUMBER.sub(lambda m: number(m.group(1), m.group(2)), raw)
    if isinstance(raw, list):
        return [fill_numbers(x) for x in raw]
    if isinstance(raw, dict):
        return {k: fill_numbers(v) for k, v in raw.items()}
    return raw


def load(path: Path, table: dict | None = None) -> Deck:
    """A slide file, checked against the model and against its notebook's sections; each exercise slide's title
    gets the unit's minutes from the timing table (``table``, default ``results/notebook_timings.json``)."""
    from tools import notebook_timings

    deck = Deck.model_validate(fill_numbers(yaml.safe_load(path.read_text())))
    nb_path = NOTEBOOKS_DIR / f"{deck.notebook}.ipynb"
    if deck.notebook != path.stem or not nb_path.is_file():
        raise ValueError(f"{path.name}: expected notebook {path.stem!r} (a notebook of notebooks/), "
                         f"got {deck.notebook!r}")
    secs = notebook_timings.sections(json.loads(nb_path.read_text()))
    marker = {s["title"]: s["marker"] for s in secs}
    units = {s["title"] for s in secs if s["exercise"] is not None}
    headed = {t: m for t, m in marker.items() if t != "introduction"}  # the text above the first heading is core
    wanted = ("core",) if "core" in headed.values() else notebook_timings.MARKERS  # a notebook all optional: any
    for slide in deck.slides:
        if marker.get(slide.section) not in wanted:
            raise ValueError(f"{path.name}, slide {slide.title!r}: expected a ({' or '.join(wanted)}) section of "
                             f"{deck.notebook}, got {slide.section!r} ({marker.get(slide.section, 'no such section')})")
    table = timing_table() if table is None and any(s.section in units for s in deck.slides) else table
    deck.slides = [s.model_copy(update={"title": f"Exercise ({exercise_minutes(table, deck.notebook, s.section)} "
                                                 f"min): {s.title}"}) if s.section in units else s
                   for s in deck.slides]
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


def slide_html(slide: Slide, where: str | None = None) -> str:
    """One ``<section>``; ``where`` (a track deck's "notebook · section") opens the speaker notes."""
    parts = [f"<h2>{inline(slide.title)}</h2>"]
    parts += [f'<div class="eq">\\[{html.escape(m, quote=False)}\\]</div>' for m in slide.math]
    if slide.bullets:
        parts.append("<ul>" + "".join(f"<li>{inline(b)}</li>" for b in slide.bullets) + "</ul>")
    if slide.figure:
        parts.append(f'<img class="figure" src="figures/{slide.figure}.png" alt="{html.escape(slide.figure)}">')
    if slide.code:
        parts.append(f'<pre><code>{html.escape(slide.code.rstrip())}</code></pre>')
    notes = slide.notes.strip() if where is None else f"[{where}]\n{slide.notes.strip()}"
    parts.append(f'<aside class="notes">{html.escape(notes)}</aside>')
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


def title_html(title: str, subtitle: str, notes: str) -> str:
    return (f"<section><h1>{inline(title)}</h1><p>{inline(subtitle)}</p>"
            f"<aside class=\"notes\">{html.escape(notes)}</aside></section>")


def deck_html(deck: Deck) -> str:
    title = title_html(deck.title, "mla-edu", f"{deck.title}: {len(deck.slides)} slides; the instructor guide gives "
                                              "the minutes of each section.")
    return page_html(deck.title, [title, *map(slide_html, deck.slides)])


def track_blocks(name: str, decks: dict[str, Deck], table: dict) -> list[tuple[tuple, list[tuple[Slide, str]]]]:
    """``tools.notebook_timings.TRACKS[name]`` as read now, block by block: (the block, its slides with where each
    comes from). A notebook block: the slides of ``decks`` (by notebook prefix) on the sections it teaches, in the
    order ``tools.notebook_timings.select`` gives them (a section's slides in their deck's order); a break, a lunch
    or questions: one slide of its stated minutes. A slide's title opens with its notebook's number ("06 · ..."):
    the notebook the class has open."""
    from tools import notebook_timings

    if name not in notebook_timings.TRACKS:
        raise ValueError(f"track: expected one of {sorted(notebook_timings.TRACKS)}, got {name!r}")
    blocks = notebook_timings.TRACKS[name]
    out = []
    for i, (prefix, which, mode) in enumerate(blocks):
        if prefix is None:
            out.append(((prefix, which, mode), [(pause_slide(which, mode, blocks[i + 1:], decks), mode)]))
            continue
        if prefix not in decks:
            raise ValueError(f"track {name}: expected a slide file docs/slides/{prefix}_*.yaml, got "
                             f"{sorted(decks)}")
        chosen = [s["title"] for s in notebook_timings.select(notebook_timings.notebook_entry(table, prefix)[1],
                                                              which)]
        deck = decks[prefix]
        picked = sorted((s for s in deck.slides if s.section in chosen), key=lambda s: chosen.index(s.section))
        if not picked:
            raise ValueError(f"track {name}, block {(prefix, which, mode)}: expected a slide of "
                             f"docs/slides/{deck.notebook}.yaml on one of {chosen}, got none (a gap in the deck)")
        out.append(((prefix, which, mode), [(s.model_copy(update={"title": f"{prefix} · {s.title}"}),
                                             f"{deck.notebook} · {s.section}") for s in picked]))
    return out


#: A break's and the lunch's speaker notes (their slide: the stated minutes and what comes next).
PAUSE_NOTES = {
    "break": "Stretch, refill.\nAsk the class: which slide before the break would you like to see again?",
    "lunch": "Say when the class starts again; shut down the kernels of the notebooks whose exercises are done (the "
             "instructor guide's day track names them).\n"
             "Ask the class: which idea of the morning would you like to hear again after lunch?",
}


def pause_slide(minutes: float, what: str, rest: list, decks: dict[str, Deck]) -> Slide:
    """A break's, the lunch's or the questions' slide: its minutes, and what comes next."""
    if what not in ("break", "lunch", "questions"):
        raise ValueError(f"track block: expected 'break', 'lunch' or 'questions', got {what!r}")
    following = [decks[p].title for p, _, _ in rest if p is not None and p in decks]
    if what in PAUSE_NOTES:
        return Slide.model_construct(section=what, title=f"{what.capitalize()} ({minutes:g} min)", bullets=(
            [f"Next: {following[0]}"] if following else []), math=[], figure=None, code=None, notes=PAUSE_NOTES[what])
    return Slide.model_construct(section="questions", title=f"Questions ({minutes:g} min)", bullets=[
        "What would you check first in your own CUDA-graph code?"], math=[], figure=None, code=None,
        notes="Ask the class: which host value does your own serving code compute at capture and never again?\n"
              "The instructor guide lists the questions attendees ask.")


#: The opening of a track deck, after its title, where the track does not teach ``SEED_TABLE`` (whose slide shows the
#: same numbers, in the track's minutes): what the day reproduces, the seed's numbers and this project's
#: (``{{source:key}}``, filled when the deck is built).
SEED_TABLE = ("06", "1. The seed's table, in miniature")  # (notebook prefix, section)
HEADLINE = dict(
    section="headline", title="What we will reproduce",
    bullets=["SGLang's cutlass MLA backend, DeepSeek-V3 on GSM8K: {{seed:eager}} eager, {{seed:pre_fix}} with CUDA "
             "graphs (PR #6998)",
             "Here, a small model on a laptop: eager {{repro_cpu:table.eager.accuracy}}, pre-fix graph "
             "{{repro_cpu:table.pre_fix.accuracy}}, merged fix {{repro_cpu:table.fixed.accuracy}}",
             "Today: build MLA, page its cache, capture a graph, watch the replay fail, fix it"],
    notes="The day's one result, before any mechanism. The first line's numbers are SGLang's (the PR's author); the "
          "second line's are measured by this project's main job (make repro, results/repro_cpu.json).\n"
          "Ask the class: what could make a model answer right without graphs and almost never with them?")


def headline_slide() -> Slide:
    """``HEADLINE`` with its numbers filled in."""
    return Slide(**fill_numbers(HEADLINE))


def track_html(name: str, decks: dict[str, Deck], table: dict) -> str:
    from tools import notebook_timings

    blocks = track_blocks(name, decks, table)
    total = notebook_timings.track_minutes(table, notebook_timings.TRACKS[name])["total_min"]
    budget = notebook_timings.BUDGET_MIN.get(name)
    plan = "; ".join(f"{b[0] or b[2]}: {len(sl)} slides" for b, sl in blocks)
    title = title_html(f"MLA and SGLang's CUDA-graph bug: the {name} track",
                       f"mla-edu · {total}{f' of {budget}' if budget else ''} minutes",
                       f"{len(blocks)} blocks ({TABLE_NAME}): {plan}")
    teaches_seed = any(b[0] == SEED_TABLE[0] and s.section == SEED_TABLE[1] for b, sl in blocks for s, _ in sl)
    opening = [] if teaches_seed else [slide_html(headline_slide())]
    return page_html(f"{name} track", [title, *opening,
                                        *(slide_html(s, where) for _, sl in blocks for s, where in sl)])


def page_html(title: str, sections: list[str]) -> str:
    slides = "\n".join(sections)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title><link rel="icon" href="data:,">
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


def _copy_figures(slides: list[Slide], out: Path) -> None:
    (out / "figures").mkdir(parents=True, exist_ok=True)
    for slide in slides:
        if slide.figure:
            shutil.copyfile(FIGURES_DIR / f"{slide.figure}.png", out / "figures" / f"{slide.figure}.png")


def export(path: Path, out: Path = OUT, table: dict | None = None) -> Path:
    """Write ``out/<notebook>.slides.html`` from the slide file ``path``, with the figures it shows."""
    deck = load(path, table)
    _copy_figures(deck.slides, out)
    target = out / f"{deck.notebook}.slides.html"
    target.write_text(deck_html(deck))
    return target


def track_path(name: str, out: Path = OUT) -> Path:
    return out / f"track-{name}.slides.html"


def export_track(name: str, decks: dict[str, Deck], table: dict, out: Path = OUT) -> Path:
    """Write ``out/track-<name>.slides.html``: the track's blocks as ``track_blocks`` reads them from TRACKS."""
    _copy_figures([s for _, sl in track_blocks(name, decks, table) for s, _ in sl], out)
    target = track_path(name, out)
    target.write_text(track_html(name, decks, table))
    return target


def main(argv: list[str] | None = None) -> None:
    from tools import notebook_timings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="notebook stems (default: every notebook, and every track's deck)")
    args = parser.parse_args(argv)
    paths = sorted(SLIDES_DIR.glob("[0-9][0-9]_*.yaml"))
    unknown = sorted(set(args.names) - {p.stem for p in paths})
    if unknown:
        parser.error(f"no slide file for {unknown}; known: {[p.stem for p in paths]}")
    OUT.mkdir(parents=True, exist_ok=True)
    vendor()
    table = timing_table()
    for path in paths:
        if not args.names or path.stem in args.names:
            print(export(path, table=table).relative_to(REPO_ROOT))
    if not args.names:
        decks = {p.stem[:2]: load(p, table) for p in paths}
        for name in notebook_timings.TRACKS:
            print(export_track(name, decks, table).relative_to(REPO_ROOT))


if __name__ == "__main__":
    main()
