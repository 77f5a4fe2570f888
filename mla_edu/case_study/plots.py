"""The case study's figures, drawn from what ``mla_edu.case_study.diagnose`` measured (notebooks 06 and 07,
the panel, ``figures/``). Nothing here measures: each function takes a measurement and draws it.

    d = diagnose.diagnose_step(model, prompts, earlier=older_prompts)
    page_reads_figure(d); page_table_figure(d)
    piece_by_piece_figure(diagnose.accuracy_runs(model, questions))
"""

from __future__ import annotations

import torch

from mla_edu import palette, plotstyle
from mla_edu.case_study.diagnose import (MERGED_FIX_STEPS, OUTSIDE, POISON, UNUSED, PageReads, StepDiagnosis,
                                         page_reads)
from mla_edu.kvcache.plots import draw_index_buffer, draw_intended_and_read
from mla_edu.serving import PRE_FIX
from mla_edu.serving.backends.cutlass_mla import POISON_PAGE
from mla_edu.util import is_int


def draw_buffer(ax, buffer: torch.Tensor, fresh: torch.Tensor, frames=()):
    """The persistent page-table buffer ``[padded bs, W]`` (SGLang's ``cuda_graph_kv_indices``): entries written
    for this step (green), stale ones (orange, x: old ids or the initial 1), poison (grey, P); ``frames``: flat
    indices framed in red."""
    draw_index_buffer(ax, buffer, fresh, poison=POISON_PAGE, reads=frames)
    ax.set_xlabel("column of the page-table buffer")
    ax.set_ylabel("row (request slot)")


def shows_poison(buffer: torch.Tensor) -> bool:
    """Whether ``buffer`` holds the poison page: a legend names P only where its figure shows one."""
    return bool((buffer == POISON_PAGE).any())


def draw_buffer_panel(ax, reads: PageReads):
    """The index buffer at replay, titled: entries written for the step plain, stale ones x, poison P."""
    draw_buffer(ax, reads.buffer, reads.live)
    poison = ", P: poison" if shows_poison(reads.buffer) else ""
    ax.set_title(f"page-table buffer, rows 0..{reads.buffer.shape[0] - 1}\n"
                 f"(plain: written now, x: stale{poison})", fontsize=plotstyle.MIN_FONT_PT)


def draw_page_reads(ax_buf, ax_int, ax_read, reads: PageReads, show_stride: bool = True):
    """The index buffer (``ax_buf``, may be None), the intended pages, and the pages read (right, or wrong and
    hatched)."""
    if ax_buf is not None:
        draw_buffer_panel(ax_buf, reads)
    draw_intended_and_read(ax_int, ax_read, reads.intended, reads.read, unused=UNUSED,
                           labels={POISON: "P", OUTSIDE: "X"})
    stride = (f"\n(row stride {reads.launch.row_stride}, buffer's {reads.launch.buffer_row_stride})"
              if show_stride else "\n(plain: its own page; hatched: another)")
    ax_read.set_title("page ids read under replay" + stride, fontsize=plotstyle.MIN_FONT_PT)
    for ax in (ax_int, ax_read):
        ax.set_yticks(range(len(reads.seq_lens)), [f"{b}: len {n}" for b, n in enumerate(reads.seq_lens)],
                      fontsize=plotstyle.MIN_FONT_PT)


def page_reads_figure(d: StepDiagnosis):
    """Left: the pages each request owns. Right: the pages the replayed kernel read (red: wrong)."""

    reads = page_reads(d)
    bs, p = reads.intended.shape
    fig, (ax0, ax1) = plotstyle.subplots(1, 2, figsize=(6.5, 0.45 * bs + 1.6), sharey=True)  # legible at ~590 px
    draw_page_reads(None, ax0, ax1, reads)
    fig.suptitle(f"one decode step, defects={','.join(sorted(d.defects)) or 'none'}"
                 + ", poison fill" * d.poison_fill, fontsize=10)
    fig.tight_layout()
    return fig


def page_table_figure(d: StepDiagnosis, columns: int | None = None):
    """The persistent page-table buffer at replay: entries written for this step, stale ones (x), and
    the entries the mis-strided rows b > 0 actually read (red frame). ``columns``: draw only the first
    ones (default: those up to the last entry written or read, plus one; all when W is small)."""

    buf, w = d.buffer, d.buffer.shape[1]
    stride = d.captured.row_stride
    reads = [divmod(b * stride + j, w) for b in range(1, len(d.seq_lens)) for j in range(len(d.read[b]))]
    if columns is None:
        last = max([c for _, c in reads] + [len(row) - 1 for row in d.intended])
        columns = w if w <= 12 else min(w, last + 2)
    if not is_int(columns) or not 1 <= columns <= w:
        raise ValueError(f"columns: expected an int in 1..{w} (the buffer's width), got {columns!r}")
    frames = [r * columns + c for r, c in reads if c < columns]
    fig, ax = plotstyle.subplots(figsize=(0.7 * columns + 2.5, 0.42 * buf.shape[0] + 1.4))
    draw_buffer(ax, buf[:, :columns], d.fresh[:, :columns], frames)
    shown = "" if columns == w else f" (columns 0..{columns - 1} of W = {w})"
    poison = ", P = poison" if shows_poison(buf[:, :columns]) else ""
    ax.set_title(f"page-table buffer at replay{shown}: plain = written for this step, x = stale (old ids\n"
                 f"or the initial 1){poison}; framed = read by rows 1.. with the frozen row stride",
                 fontsize=plotstyle.MIN_FONT_PT)
    fig.tight_layout()
    return fig


def accuracy_bars(ax, names, accs, lost, baseline=()):
    """Accuracy bars on ``ax``: a bar that ``lost`` accuracy is red and hatched, a ``baseline`` one (indices) blue,
    the others green. Returns the bars."""
    colors = [palette.BASELINE if i in baseline else palette.WRONG if bad else palette.RIGHT
              for i, bad in enumerate(lost)]
    return ax.bar(names, accs, color=colors, **palette.hatched(lost))


def accuracy_bars_figure(rows: list, title: str = ""):
    """Bars of accuracy: ``rows`` = [(label, accuracy, invalid)]; red and hatched at 0.5 or below."""

    fig, ax = plotstyle.subplots(figsize=(1.0 * len(rows) + 1.5, 3.2))  # 6.5 in at five bars: legible at ~590 px
    names = [r[0] for r in rows]
    accs = [r[1] for r in rows]
    bars = accuracy_bars(ax, range(len(rows)), accs, [a <= 0.5 for a in accs])
    for bar, a in zip(bars, accs):
        ax.annotate(f"{a:.3f}", (bar.get_x() + bar.get_width() / 2, a), ha="center", va="bottom",
                    fontsize=plotstyle.MIN_FONT_PT)
    ax.set_xticks(range(len(rows)), names, rotation=20, ha="right", fontsize=plotstyle.MIN_FONT_PT)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("accuracy")
    ax.set_title(title, fontsize=plotstyle.MIN_FONT_PT)
    fig.tight_layout()
    return fig


def piece_by_piece_rows(run) -> list:
    """[(label, accuracy, invalid)]: eager, then each step of the merged fix (``run``: an ``accuracy_runs``)."""
    eager = run(disable_cuda_graph=True, defects=PRE_FIX)
    rows = [("eager", eager["accuracy"], eager["invalid"])]
    for name, server_args in MERGED_FIX_STEPS:
        r = run(**server_args)
        rows.append((name.split(" (")[0].split(" =")[0], r["accuracy"], r["invalid"]))
    return rows


def piece_by_piece_figure(run):
    """Accuracy bars: eager, then each step of the merged fix (``run``: an ``accuracy_runs``)."""
    title = f"cutlass_mla with graphs, {len(run.questions)} questions: the merged fix piece by piece"
    return accuracy_bars_figure(piece_by_piece_rows(run), title)
