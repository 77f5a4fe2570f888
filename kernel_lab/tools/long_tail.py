"""The balanced schedule's partition against FlashMLA's on every batch of the family bench, and what limits the batches
of one long request: ``python -m kernel_lab.tools.long_tail --out FILE``. No GPU: it reads the family bench's H200
run (``kernel_lab.tools.family_bench``; its families and its uniform grid) and the piece cap's A/B
(``kernel_lab.tools.partition_ab``, ``AB``).

Per batch: the balanced schedule's modelled makespan (one part's chunk and one overhead, in page-times) as the family
bench ran it ('capped': the piece cap ``schedule.MAX_PIECES`` at every batch) and as the package runs it now ('now':
``schedule.stage1_makespans``, the cap only where ``schedule.max_pieces`` keeps it, and at 32 heads in batches of at
most ``workspace.HALF_BLOCK_BATCH`` requests two 16-head programs a part, in the split rule's page-times), FlashMLA's
(``flashmla_schedule.flashmla_makespan``: its ``get_mla_metadata`` walk replayed at its ``num_sm_parts``), the pieces
the longest request is cut into by each, and the measured speed of the balanced schedule against FlashMLA
(``family_bench.x_flashmla``: FlashMLA's time / ours, above 1 ours faster; the capped partition's). Where FlashMLA's
modelled makespan is below ``DIFFER`` of the capped one, the partitions differ; elsewhere they agree and what is left
between the two kernels is not the partition (the per-page cost, the merge, the per-part overhead).

``PATCH`` (``kernel_lab/results/partition_variants/piece_cap.patch``) lifted the cap from batches of
``schedule.PIECE_CAP_BATCH`` requests or more; ``partition_ab`` timed it at 5a3b22c, and ``schedule.max_pieces``
superseded it. It no longer applies; ``apply_patch`` and ``patched_copy`` serve the next partition patch.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kernel_lab.tools import family_bench as fb
from kernel_lab.tools import print_and_write, rel
from mla_edu.files import read_json
from mla_edu.kernels import flashmla_schedule as fs
from mla_edu.kernels import schedule as sc
from mla_edu.kernels.workspace import HALF_BLOCK_BATCH
from mla_edu.paths import REPO_ROOT
from mla_edu.util import cdiv

FAMILY_BENCH = REPO_ROOT / "kernel_lab" / "results" / "family_bench_h200.json"
OUT = REPO_ROOT / "kernel_lab" / "results" / "long_tail_h200.md"
AB = REPO_ROOT / "kernel_lab" / "results" / "partition_ab_h200.json"
PATCH = REPO_ROOT / "kernel_lab" / "results" / "partition_variants" / "piece_cap.patch"
#: The files ``PATCH`` changes, relative to the repository root.
PATCHED_FILES = ("mla_edu/kernels/schedule.py", "mla_edu/kernels/partition.py")
PAGE = fb.PAGE
#: FlashMLA's modelled makespan below this fraction of ours: the partitions differ.
DIFFER = 0.9
HEADS = fb.HEADS


@dataclass(frozen=True)
class Row:
    """One batch of the family bench: its set, head count, batch size, parts (ours as benched, FlashMLA's), modelled
    makespans in page-times (capped, FlashMLA's, now), pieces of its longest request (capped, FlashMLA's, now),
    FlashMLA's time over the balanced schedule's (median over rounds; the capped partition's), the makespan of the
    package's piece cap on the bench's parts and head block (``cut``) and whether the package runs 16-head programs
    here on half the parts (``half``: ``workspace.HALF_BLOCK_BATCH``; 'now' is then ``HALF_BLOCK_PAGE_COST`` times
    their makespan), and whether the piece cap's rule as landed at e79b3dc kept the cap (``cap_kept_as_landed``)."""

    family: str
    heads: int
    batch: int
    parts: int
    fm_parts: int
    capped: int
    fm: int
    now: float  # schedule.stage1_makespans: in the split rule's page-times (HALF_BLOCK_PAGE_COST where it applies)
    pieces: int
    fm_pieces: int
    now_pieces: int
    x: float
    cut: int
    half: bool
    kept_as_landed: bool

    @property
    def ratio(self) -> float:
        """FlashMLA's modelled makespan over the capped one (below 1: its partition is modelled faster)."""
        return self.fm / self.capped

    @property
    def differ(self) -> bool:
        return self.ratio < DIFFER

    @property
    def cap_kept(self) -> bool:
        """Whether the package keeps the piece cap at this batch (``schedule.max_pieces``)."""
        return sc.max_pieces(self.batch, self.heads, self.parts) > 0


def apply_patch(root: Path, patch: Path = PATCH) -> subprocess.CompletedProcess:
    """``git apply`` of ``patch`` in ``root`` (a folder holding copies of ``PATCHED_FILES``). Git does not look for
    a repository above ``root``: inside one's subfolder, ``git apply`` skips, without a word, every path outside
    that subfolder (all of them here). A patch applied is then checked in reverse, so the return code is 0 only
    where it took."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(Path(root).resolve().parent)}
    patch = Path(patch).resolve()  # git runs in root
    done = subprocess.run(["git", "apply", str(patch)], cwd=root, capture_output=True, text=True, env=env)
    if done.returncode == 0:
        took = subprocess.run(["git", "apply", "--check", "--reverse", str(patch)], cwd=root, capture_output=True,
                              text=True, env=env)
        if took.returncode:
            return subprocess.CompletedProcess(done.args, 1, done.stdout, f"applied, but not in {root}: {took.stderr}")
    return done


def patched_copy(root: Path, patch: Path = PATCH, package: bool = False) -> Path:
    """Copies of ``PATCHED_FILES`` (or, with ``package``, of the whole ``mla_edu`` package) under ``root``, with the
    patch applied; an error if it does not apply."""
    if package:
        shutil.copytree(REPO_ROOT / "mla_edu", root / "mla_edu", ignore=shutil.ignore_patterns("__pycache__"))
    else:
        for name in PATCHED_FILES:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO_ROOT / name, root / name)
    done = apply_patch(root, patch)
    if done.returncode:
        raise RuntimeError(f"{patch.name} does not apply to the package's files: {done.stderr}")
    return root


def load_schedule(path: Path, name: str = "mla_edu.kernels.schedule_patched"):
    """A copy of ``schedule.py`` at ``path``, loaded under a name of its own (its host side: ``makespans``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def patched_schedule(patch: Path = PATCH):
    """``schedule.py`` with the patch applied (``load_schedule``)."""
    with tempfile.TemporaryDirectory() as tmp:
        return load_schedule(patched_copy(Path(tmp), patch) / PATCHED_FILES[0])


def pieces_per_request(n_pages: list[int], chunk: int) -> list[int]:
    """The parts each request's pages span on the balanced schedule's line at ``chunk`` (``batch_plan``'s
    ``p_last - p_first + 1``, ``schedule.line_parts``; 0 for an empty request), for requests of ``n_pages`` pages."""
    return [last - first + 1 for _, first, last in sc.line_parts(n_pages, chunk)]


def pieces_of_longest(lens: list[int], chunk: int) -> int:
    """The parts the longest request's pages span at ``chunk`` (``pieces_per_request``; ``schedule.segments`` gives
    the same, ``kernel_lab/tests/test_long_tail.py``)."""
    n = [cdiv(max(x, 0), PAGE) for x in lens]
    return pieces_per_request(n, chunk)[max(range(len(n)), key=lambda i: (n[i], -i))]


def capped_makespan(lens: list[int], parts: int) -> int:
    """The balanced schedule's modelled makespan with the piece cap at every batch, as the family bench ran it (at
    29d1c24): the chunk ``balanced_chunk`` at ``MAX_PIECES`` and one overhead."""
    w = [cdiv(x, PAGE) + sc.FIXED_OVERHEAD_PAGES for x in lens if x > 0]
    return sc.balanced_chunk(w, parts, sc.MAX_PIECES) + sc.FIXED_OVERHEAD_PAGES


def parts_as_benched(heads: int, sms: int, batch: int, n_pages: int) -> int:
    """``schedule.num_parts`` as it was from the family bench (29d1c24) to the piece cap's A/B (5a3b22c) and until
    a2e9367: one part a program slot of the split rule's head block (``workspace.gpu_block_h`` then: 16 heads where
    ``batch * head blocks * n_pages <= 32``, else ``h_q`` rounded up to a power of two in [16, 64]; one program an
    SM), over the head blocks. The balanced schedule's two 16-head programs a part at 32 heads came later
    (``workspace.HALF_BLOCK_BATCH``)."""
    block = min(64, max(16, 1 << (heads - 1).bit_length()))
    if block > 16 and 0 < batch and batch * cdiv(heads, block) * n_pages <= 32:
        block = 16
    return max(1, sms // cdiv(heads, block))


def benched_makespan(lens: list[int], heads: int, sms: int) -> int:
    """``capped_makespan`` on the parts of then (``parts_as_benched``): the balanced schedule's modelled makespan as
    the family bench ran it (29d1c24), in page-times of the split rule's head block."""
    return capped_makespan(lens, parts_as_benched(heads, sms, len(lens), max([cdiv(x, PAGE) for x in lens] + [1])))


def rows(family_bench=FAMILY_BENCH) -> list[Row]:
    """Every batch of the run that FlashMLA timed, families first, then the uniform grid."""
    data = read_json(str(family_bench), "--family-bench")
    sms = data["info"]["sm_count"]
    out = []
    for r in data["family"] + data["uniform"]:
        if "flashmla" not in r["us"]:
            continue
        lens, h = r["lens"], r["heads"]
        capped = capped_makespan(lens, r["parts"])
        now = sc.stage1_makespans(lens, PAGE, h, sms, r["rule_splits"])[1]  # the balanced term: no rule count in it
        n_pages = max(cdiv(x, PAGE) for x in lens)
        parts = sc.num_parts(h, sms, len(lens), n_pages)
        w = [cdiv(x, PAGE) + sc.FIXED_OVERHEAD_PAGES for x in lens if x > 0]
        now_chunk = sc.balanced_chunk(w, parts, sc.max_pieces(len(lens), h, parts))
        cut = sc.balanced_chunk(w, r["parts"], sc.max_pieces(len(lens), h, r["parts"])) + sc.FIXED_OVERHEAD_PAGES
        half = sc.half_block(h, len(lens), n_pages)
        fm_parts = fs.num_sm_parts(h, sms)
        longest = max(range(len(lens)), key=lambda i: (lens[i], -i))
        fm = fs.flashmla_makespan(lens, PAGE, fm_parts)
        out.append(Row(r["family"], h, r["batch"], r["parts"], fm_parts, capped, fm, now,
                       pieces_of_longest(lens, capped - sc.FIXED_OVERHEAD_PAGES),
                       fs.pieces_per_request(lens, fm_parts)[longest],
                       pieces_of_longest(lens, now_chunk), fb.x_flashmla(r, "balanced")[0], cut, half,
                       cap_kept_as_landed(len(lens), h, sms)))
    return out


def groups(table: list[Row]) -> dict:
    """``{(differ, heads): (batches, geomean of x FlashMLA)}``, and ``(differ, None)`` over every head count."""
    out = {}
    for differ in (True, False):
        for h in (*HEADS, None):
            xs = [r.x for r in table if r.differ == differ and h in (None, r.heads)]
            if xs:
                out[differ, h] = (len(xs), statistics.geometric_mean(xs))
    return out


#: Partials a request has on average, at most, where ``schedule.max_pieces`` kept the piece cap at 64 heads or
#: more (``schedule.few_partials``), by the commit that set it: the piece cap's landing after ``AB`` (e79b3dc) and
#: the part of many_uncapped.patch the package took (a2e9367, ``partition_ab_h200_many_uncapped.md``).
FEW_AS_LANDED = {"e79b3dc": 4, "a2e9367": 2}


def cap_kept_as_landed(batch: int, heads: int, sms: int, commit: str = "e79b3dc") -> bool:
    """Whether ``schedule.max_pieces`` kept the piece cap for a batch of an A/B as it was landed at ``commit``
    (``FEW_AS_LANDED``): below 16 requests, or at 64 heads or more with at most ``FEW_AS_LANDED[commit]`` partials a
    request on average (the parts: one 64-head block per slot, ``sms / ceil(h_q / 64)``, 132 below 64 heads). The
    package may have changed it since (``schedule.few_partials``); an A/B's numbers stay those of the rule it was
    landed for."""
    parts = sms // -(-heads // 64) if heads >= 64 else sms
    return batch < 16 or (heads >= 64 and parts + batch - 1 <= FEW_AS_LANDED[commit] * batch)


def ab_numbers(ab_json=AB) -> dict:
    """The piece cap's H200 A/B (``partition_ab``'s run): per group of batches (the ``changed`` ones, whose model
    the patch changed; the ``control``; of the changed, those where the package ``lifted`` the cap and those where it
    ``kept`` it) the rows, their count, geomean and range of base / patched; ``giant``: the giant batches at B <= 128
    where the cap was lifted; ``loss``: the changed row of the lowest ratio; ``landed``: the geomean over the changed
    batches of the package's speedup over the capped partition (the patch's ratio where it lifted the cap, 1 where
    it kept it)."""
    from kernel_lab.tools import partition_ab as ab

    data = read_json(str(ab_json), "partition A/B json")
    info, sms = data["info"], data["info"]["sm_count"]
    lens = {(f, h, len(x)): x for f, h, x in ab.problems(info["families"], info["batches"], info["heads"])}
    table = ab.table(data, PATCH)
    for r in table:  # the rule as landed: the patch's partition where it lifted the cap, the base's where it kept it
        x = lens[r["family"], r["heads"], r["batch"]]
        r["kept"] = cap_kept_as_landed(len(x), r["heads"], sms)

    def group(sel):
        xs = [r["x"] for r in sel]
        return dict(rows=sel, n=len(sel), geomean=statistics.geometric_mean(xs), lo=min(xs), hi=max(xs))

    changed = [r for r in table if r["changed"]]
    return dict(info=info, changed=group(changed), control=group([r for r in table if not r["changed"]]),
                lifted=group([r for r in changed if not r["kept"]]), kept=group([r for r in changed if r["kept"]]),
                giant=group([r for r in changed if r["family"] == "giant" and not r["kept"] and r["batch"] <= 128]),
                loss=min(changed, key=lambda r: r["x"]),
                landed=statistics.geometric_mean([1 if r["kept"] else r["x"] for r in changed]))


def _batches(rows: list[dict]) -> str:
    return ", ".join(f"{r['family']} h_q={r['heads']} B={r['batch']} {r['x']:.3f}" for r in rows)


def _listed(rows: list[Row], value) -> str:
    """``set h_q B capped -> value (FM fm)`` for each row, ``; ``-joined, or 'none'."""
    return "; ".join(f"{r.family} h_q={r.heads} B={r.batch} {r.capped} -> {value(r):g} (FM {r.fm})"
                     for r in rows) or "none"


def _which(rows: list[Row]) -> str:
    return ", ".join(f"{r.family} h_q={r.heads} B={r.batch}" for r in rows)


def family_bench_changes(table: list[Row]) -> list[str]:
    """The paragraphs on what the package changed in the family bench's models since the bench ran, by reason: the
    piece cap's rule (``schedule.max_pieces``; as landed at e79b3dc and since) and the 16-head programs at 32 heads
    (``workspace.HALF_BLOCK_BATCH``)."""
    changed = [r for r in table if r.now != r.capped]
    cut = [r for r in table if r.cut != r.capped]
    since = [r for r in cut if r.kept_as_landed]
    half = [r for r in table if r.half]
    giant = [r for r in table if r.family == "giant" and r.differ]
    lifted, kept = [r for r in giant if not r.cap_kept], [r for r in giant if r.cap_kept]
    at_fm, giant_half = [r for r in giant if r.now == r.fm], [r for r in giant if r.half]
    out = [f"In the family bench's batches the package's 'now' differs from 'capped' at {len(changed)} of "
           f"{len(table)}, by the piece cap's rule or by the 16-head programs at h_q=32. "
           + (f"The piece cap's rule (`schedule.max_pieces`) changes {len(cut)}, where it lifts the cap, all at "
              f"B >= {min(r.batch for r in cut)}; on the bench's parts and head block the model goes: " if cut else
              "The piece cap's rule (`schedule.max_pieces`) changes none of them. ")
           + (_listed(cut, lambda r: r.cut) + ". " if cut else "")
           + (f"The rule as landed at e79b3dc kept the cap at {len(since)} of these ({_which(since)}); since, "
              f"`schedule.few_partials` keeps it at 64 heads or more only up to {sc.FEW_PARTIALS[1]} partials a "
              f"request on average, not {FEW_AS_LANDED['e79b3dc']}. " if since else "")
           + (f"At h_q=32 in batches of at most {HALF_BLOCK_BATCH} requests the balanced schedule now runs two "
              "16-head programs a part on half the parts, where the bench ran one 32-head program a part: "
              f"{len(half)} models, whose 'now' is `schedule.HALF_BLOCK_PAGE_COST` = {sc.HALF_BLOCK_PAGE_COST:g} "
              "times the 16-head programs' makespan on those parts, in the split rule's page-times"
              + (f" (the cap lifted as well at B >= {sc.PIECE_CAP_BATCH})"
                 if any(not r.cap_kept for r in half) else "") + ": " + _listed(half, lambda r: r.now) + "."
              if half else "None changes by the 16-head programs at h_q=32 (`workspace.HALF_BLOCK_BATCH`)."),
           "",
           f"Of the {len(giant)} giant batches whose capped partition differs from FlashMLA's, the package lifts the "
           f"cap at {len(lifted)}"
           + (f", the giant request cut into {_span(r.now_pieces for r in lifted)} pieces" if lifted else "")
           + f"; {len(at_fm)} now model at FlashMLA's makespan"
           + (f", and {_which(giant_half)} at " + ", ".join(f"{r.now:g}" for r in giant_half)
              + " on the 16-head programs" if giant_half else "")
           + ". " + (f"The cap holds at the other {len(kept)} ({_which(kept)}). " if kept else
                     "The cap holds at none of them. ")
           + "The x FM column was measured on the capped partition: where 'now' differs from 'capped', the "
           "package's schedule was not timed against FlashMLA; the A/Bs timed its changes on three of the families "
           "(`kernel_lab/results/partition_ab_h200*.md`)."]
    return out


def to_markdown(table: list[Row], command: str, source: str, ab: dict) -> str:
    g = groups(table)
    giant = [r for r in table if r.family == "giant"]
    capped = [r for r in giant if r.differ]
    c, k, lifted = ab["changed"], ab["control"], ab["lifted"]
    loss = next(r for r in table if (r.family, r.heads, r.batch) == (ab["loss"]["family"], ab["loss"]["heads"],
                                                                      ab["loss"]["batch"]))
    lines = [
        "# The balanced schedule's partition against FlashMLA's, batch by batch (H200 family bench)", "",
        f"Command: `{command}` (no GPU). Input: `{source}` (the family bench's H200 run: its families and the "
        f"uniform grid it reached) and `{rel(AB)}` (the piece cap's A/B).", "",
        "Modelled makespans in page-times (one program's time for one 64-token page; each part pays one overhead "
        f"of {sc.FIXED_OVERHEAD_PAGES}): 'capped' = the balanced schedule as the family bench ran it, the piece cap "
        f"at every batch (`schedule.balanced_chunk` at `MAX_PIECES` = {sc.MAX_PIECES}, and one overhead), "
        "'FM' = `flashmla_schedule.flashmla_makespan` (FlashMLA's `get_mla_metadata` walk at its "
        "`num_sm_parts`), 'FM/capped' their ratio, 'now' = `schedule.stage1_makespans` of the package (the cap only "
        f"where `schedule.max_pieces` keeps it; at h_q=32 in batches of at most {HALF_BLOCK_BATCH} requests, "
        "`workspace.HALF_BLOCK_BATCH`, the balanced schedule runs two 16-head programs a part on half the parts, "
        f"and 'now' is `schedule.HALF_BLOCK_PAGE_COST` = {sc.HALF_BLOCK_PAGE_COST:g} times their makespan, in the "
        "split rule's page-times). 'pieces' = parts the longest request is cut across (capped / FM / now). "
        "'x FM' = FlashMLA's measured time over the balanced schedule's (capped), the median over rounds of the "
        "round-by-round ratio (`family_bench.x_flashmla`; above 1, ours is faster).", "",
        "## Where the partitions differ", "",
        f"The partitions differ where FM/capped < {DIFFER}: {g[True, None][0]} of {len(table)} batches. The measured "
        "x FM of the balanced schedule, geomean by head count:", "",
        "| h_q | differ: batches | differ: x FM | agree: batches | agree: x FM |", "|---|---|---|---|---|"]
    for h in (*HEADS, None):
        d, a = g.get((True, h), (0, None)), g.get((False, h), (0, None))
        lines.append(f"| {h or 'all'} | {d[0]} | " + (f"{d[1]:.2f}" if d[1] else "-") + f" | {a[0]} | "
                     + (f"{a[1]:.2f}" if a[1] else "-") + " |")
    low = [r for r in capped if r.heads < 128]  # h_q <= 64: 132 parts
    equal = [r for r in giant if r.fm == r.capped]
    bound = [r for r in giant if r.capped == 39]  # the cap sets the chunk: ceil(1029 / 31) and one overhead
    lines += [
        "",
        f"The one-giant-request batches (one 65536-token request among 512-token ones) differ most. The piece cap "
        f"sets the capped chunk in {len(bound)} of the {len(giant)} (all but h_q=128 at B >= 128): the makespan is "
        f"{_span(r.capped for r in bound)} page-times, the giant request cut into {_span(r.pieces for r in bound)} "
        f"pieces. At h_q <= 64 and B <= 128 ({len(low)} batches) FlashMLA's walk gives {_span(r.fm for r in low)}, "
        f"its giant request cut into {_span(r.fm_pieces for r in low)} pieces; measured there, the balanced schedule "
        "runs at " + ", ".join(f"{_span((r.x for r in low if r.heads == h), '.2f')}x at h_q={h}"
                               for h in sorted({r.heads for r in low})) +
        " FlashMLA's speed (h_q=16 stays ahead: its per-page cost is lower). At h_q=128 (66 parts) the models are "
        "equal at B >= "
        f"{min(r.batch for r in equal)} and measured at {_span((r.x for r in equal), '.2f')}x: there the gap is the "
        "kernel's per-tile cost, not the partition.", "",
        "Elsewhere the partitions differ in a few batches of a few long requests at B=16 and of one long request "
        "alone (B=1, where the cap was set), and there the balanced schedule runs at "
        f"{_span((r.x for r in table if r.differ and r.family != 'giant'), '.2f')}x FlashMLA's speed: the measured "
        "ratio does not follow the modelled one. Where the partitions agree, the gap by head count is the "
        "kernel's.", "",
        "## What was landed: the cap only where it pays", "",
        f"`{rel(PATCH)}` lifted the cap from batches of {sc.PIECE_CAP_BATCH} requests or more at every head count. "
        f"It was applied at 5a3b22c and timed on the H200 in alternating processes (`{ab['info']['command']}`, "
        f"{ab['info']['rounds']} rounds a process; `kernel_lab/results/partition_ab_h200.md`); it no longer applies. "
        f"The {c['n']} batches whose model it changed ran at {c['geomean']:.3f} base / patched in geomean "
        f"({c['lo']:.3f}-{c['hi']:.3f}; above 1 the patch is faster), the {k['n']} it left alone at "
        f"{k['geomean']:.3f} ({k['lo']:.3f}-{k['hi']:.3f}). The giant batches at B <= 128 where the rule as landed "
        f"lifted the cap ran {ab['giant']['lo']:.3f}-{ab['giant']['hi']:.3f}x faster. The loss was at "
        f"h_q={ab['loss']['heads']}, B={ab['loss']['batch']} ({ab['loss']['x']:.3f}): with 64 heads or more and "
        "few partials per request (`schedule.few_partials`) stage 2's config then, "
        "`split_kv_triton.STAGE2_FEW_WIDE`, merged a request's partials one at a time, and the giant request's "
        f"{loss.fm_pieces} partials (as FlashMLA's walk cuts it) cost more than the shorter chunk saves.", "",
        f"The rule as landed (e79b3dc, `schedule.max_pieces`) kept the cap below {sc.PIECE_CAP_BATCH} requests and "
        "where stage 2 merged one partial at a time (at 64 heads or more, at most "
        f"{FEW_AS_LANDED['e79b3dc']} partials a request on average); elsewhere a request is cut as the share of the "
        f"parts falls, as FlashMLA cuts it. Of the A/B's {c['n']} changed batches it lifted the cap in "
        f"{lifted['n']} (geomean {lifted['geomean']:.3f}, {lifted['lo']:.3f}-{lifted['hi']:.3f}) and kept it in "
        f"{ab['kept']['n']}: {_batches(ab['kept']['rows'])}. "
        f"Over the {c['n']}, that rule comes to {ab['landed']:.3f} the capped partition's speed in geomean (the "
        f"patch's ratio where it lifted the cap, 1 where it kept it), against {c['geomean']:.3f} for the patch. "
        "Since, at 64 heads or more stage 2 loads several partials at a time and the cap goes where a request has "
        f"more than {sc.FEW_PARTIALS[1]} partials on average (`schedule.FEW_PARTIALS`, timed in "
        "`kernel_lab/results/partition_ab_h200_many_uncapped.md`).", "",
        *family_bench_changes(table), "",
        "## Every batch", "",
        "| set | h_q | B | parts (ours / FM) | capped | FM | FM/capped | now | pieces (capped / FM / now) | x FM |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        mark = "**" if r.differ else ""
        lines.append(f"| {r.family} | {r.heads} | {r.batch} | {r.parts} / {r.fm_parts} | {r.capped} | {r.fm} | "
                     f"{mark}{r.ratio:.2f}{mark} | {r.now:g} | {r.pieces} / {r.fm_pieces} / {r.now_pieces} | "
                     f"{r.x:.2f} |")
    return "\n".join(lines) + "\n"


def _span(values, fmt: str = "d") -> str:
    """``lo-hi`` of the values, or the one value."""
    v = sorted(values)
    return f"{v[0]:{fmt}}" if f"{v[0]:{fmt}}" == f"{v[-1]:{fmt}}" else f"{v[0]:{fmt}}-{v[-1]:{fmt}}"


def render(family_bench=FAMILY_BENCH, out=None) -> str:
    """The markdown of this run, its command line naming ``out`` and the input if not the default."""
    command = "python -m kernel_lab.tools.long_tail" + (
        f" --family-bench {rel(family_bench)}" if rel(family_bench) != rel(FAMILY_BENCH) else "") + (
        f" --out {rel(out)}" if out else "")
    return to_markdown(rows(family_bench), command, rel(family_bench), ab_numbers())


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family-bench", default=str(FAMILY_BENCH), help="a family_bench run's json")
    ap.add_argument("--out", help="write the markdown here too (committed: kernel_lab/results/long_tail_h200.md)")
    args = ap.parse_args(argv)
    return print_and_write(ap, args.out, lambda: render(args.family_bench, args.out))


if __name__ == "__main__":
    main()
