"""The timing model checked once against a run-through of one notebook read aloud at a steady pace:
``python -m tools.timing_readaloud [NN]`` (default notebook 03; needs ``espeak-ng``, Debian: apt-get install espeak-ng).

Each section's narration is its markdown prose as a speaker says it (markup dropped, ``req_to_token`` said as
"req to token", inline maths as its symbols), synthesised by espeak-ng at ``tools.notebook_timings``' words a
minute, with a silence for each display equation, each line of code and each figure, of the model's stated length.
The cells' run time is left out: it is measured, not narrated, and it moves with the machine's load. The
length of each section's audio is set against the model's minutes.

What it checks: the words counted against the words spoken (code spans, numbers and symbols a speaker says as
several words), and the model's arithmetic per section. What it does not: a person's pace, pauses and
questions; the equation, code and figure allowances are the model's own numbers here, not measured.
Writes results/timing_readaloud_03.md and .json for notebook 03 (the same names with the prefix for another).
The "model" here is the words at ``WORDS_PER_MIN`` alone; ``tools.notebook_timings`` reads the prose's audio over
that (``prose_audio_min / prose_model_min`` of notebook 03's json) as the read-aloud factor it applies to all
prose, so rerunning this updates the tracks' minutes at the next ``python -m tools.notebook_timings``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

from mla_edu.paths import NOTEBOOKS_DIR, RESULTS_DIR
from tools import notebook_timings as nt

TOLERANCE = 0.15  # the audio within 15% of the model per notebook: else the rate or the word count is wrong


def speakable(line: str) -> str:
    """A markdown prose line as a speaker reads it."""
    s = re.sub(r"<[^>]+>", " ", line)  # HTML tags (details, summary)
    s = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", s)  # links and images: their text
    s = re.sub(r"\$([^$]*)\$", lambda m: re.sub(r"\\[a-zA-Z]+|[{}^\\]", " ", m.group(1)), s)  # inline maths
    s = re.sub(r"[`*_|#>]", " ", s)
    return re.sub(r"\s+", " ", s).strip()


def narration(nb: dict) -> list[dict]:
    """Per section of ``nb`` (as ``tools.notebook_timings.sections`` splits it): its prose as spoken and the
    seconds of silence the model allows for its equations, code and figures."""
    secs = nt.sections(nb)
    prose: list[list[str]] = [[] for _ in secs]
    k = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for kind, text in nt.markdown_parts(nt.cell_source(cell)):
            if kind == "heading" or (kind == "exercise" and "xercise" in secs[k]["title"] and k + 1 < len(secs)
                                     and secs[k + 1]["exercise"] is not None):
                k += 1
            if kind in ("prose", "exercise", "figure", "heading"):
                prose[k].append(speakable(re.sub(r"^## ", "", text)))
    return [{"title": s["title"], "words": s["words"], "text": " ".join(t for t in p if t),
             "pause_s": 60 * (s["equations"] * nt.MIN_PER_EQUATION + s["code_lines"] * nt.MIN_PER_CODE_LINE
                              + s["figures"] * nt.MIN_PER_FIGURE)} for s, p in zip(secs, prose)]


def seconds(wav: Path) -> float:
    with wave.open(str(wav)) as w:
        return w.getnframes() / w.getframerate()


def speak(text: str, pause_s: float, out: Path) -> float:
    """Seconds of espeak-ng's audio of ``text`` at the model's rate, then ``pause_s`` of silence."""
    ssml = f'<speak>{text.replace("&", " and ").replace("<", " ")}<break time="{round(pause_s * 1000)}ms"/></speak>'
    subprocess.run(["espeak-ng", "-m", "-s", str(nt.WORDS_PER_MIN), "-w", str(out), "--stdin"], input=ssml.encode(),
                   check=True)
    return seconds(out)


def check(prefix: str) -> dict:
    paths = sorted(NOTEBOOKS_DIR.glob(f"{prefix}_*.ipynb"))
    if len(paths) != 1:
        raise ValueError(f"notebook: expected one notebook named {prefix}_*, got {[p.name for p in paths]}")
    if shutil.which("espeak-ng") is None:
        raise RuntimeError("the read-aloud check needs espeak-ng (Debian: apt-get install espeak-ng)")
    nb = json.loads(paths[0].read_text())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, sec in enumerate(narration(nb)):
            audio = speak(sec["text"], sec["pause_s"], Path(tmp) / f"{i}.wav")
            spoken = len(sec["text"].split())
            model = sec["words"] / nt.WORDS_PER_MIN + sec["pause_s"] / 60
            rows.append({"title": sec["title"], "words_counted": sec["words"], "words_spoken": spoken,
                         "pause_s": round(sec["pause_s"], 1), "model_min": round(model, 2),
                         "audio_min": round(audio / 60, 2)})
    model = sum(r["model_min"] for r in rows)
    audio = sum(r["audio_min"] for r in rows)
    pause = sum(r["pause_s"] for r in rows) / 60
    return {"notebook": paths[0].name, "words_per_min": nt.WORDS_PER_MIN, "synthesiser": _version(),
            "sections": rows, "model_min": round(model, 2), "audio_min": round(audio, 2),
            "ratio": round(audio / model, 3),
            # the prose alone: the silences are the model's own allowances, the same in both
            "prose_model_min": round(model - pause, 2), "prose_audio_min": round(audio - pause, 2),
            "spoken_per_counted": round(sum(r["words_spoken"] for r in rows) / sum(r["words_counted"] for r in rows),
                                        3)}


def _version() -> str:
    return subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True, check=True).stdout.split(
        "Data at")[0].strip()


def to_markdown(result: dict) -> str:
    lines = ["<!-- written by python -m tools.timing_readaloud; do not edit -->", "",
             f"# {result['notebook']} read aloud at {result['words_per_min']} words a minute", "",
             f"Synthesiser: {result['synthesiser']} (`-s {result['words_per_min']}`). Each section's prose, then a "
             "silence of the model's allowance for its equations, code lines and figures (run time left out). Exercise "
             "attempts (the attendees' minutes) are not narrated and not counted here.", "",
             "| section | words counted | words spoken | silence, s | model, min | audio, min |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['title']} | {r['words_counted']} | {r['words_spoken']} | {r['pause_s']:.0f} "
              f"| {r['model_min']:.1f} | {r['audio_min']:.1f} |" for r in result["sections"]]
    lines += ["", f"In all: model {result['model_min']:.1f} min, audio {result['audio_min']:.1f} min "
              f"(audio / model = {result['ratio']:.2f}). The prose alone: model {result['prose_model_min']:.1f} min, "
              f"audio {result['prose_audio_min']:.1f} min; {result['spoken_per_counted']:.2f} words spoken per word "
              "counted."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", nargs="?", default="03", help="the notebook's two-digit prefix (default 03)")
    args = parser.parse_args(argv)
    result = check(args.notebook)
    stem = RESULTS_DIR / f"timing_readaloud_{args.notebook}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    stem.with_suffix(".md").write_text(to_markdown(result))
    print(to_markdown(result))
    if abs(result["ratio"] - 1) > TOLERANCE:
        parser.error(f"audio / model = {result['ratio']}: more than {TOLERANCE:.0%} off; the rate or the counts")


if __name__ == "__main__":
    main()
