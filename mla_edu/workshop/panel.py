"""A control panel for the bug: pick a backend, defects, poison fill, split mode and batch size; see accuracy and
page reads.

    from mla_edu.workshop.panel import ControlPanel
    panel = ControlPanel()                 # the shipped tiny model, a small slice of the eval set
    result = panel.run()                   # default settings: prints a rounded summary, draws the figure
    panel.show()                           # ipywidgets: change settings, press "run", the figure is redrawn

Every number comes from the real mini engine (``mla_edu.serving``): real CUDA graphs on a GPU,
the CPU graph emulator otherwise. Two measurements per setting:

(a) accuracy: ``mla_edu.case_study.accuracy.run_bench`` eagerly (``--disable-cuda-graph``) and with graphs;
(b) page reads of one decode step: the page id each (request row, page slot) *should* read (a
    fresh table filled from ``req_to_token``) against the one the captured kernel *did* read:
    entry ``offset + b * row_stride + j`` of the persistent index buffer, with the row stride
    frozen into the graph at capture (``page_table.size(1)`` for cutlass_mla, as sgl-kernel's
    wrapper derives it; ``stride(0)`` for triton). The row stride is recorded from the very
    tensor the backend handed the kernel while the graph was captured.

``panel.callback(values)`` is what the "run" button calls: a dict of widget values in, a
:class:`PanelResult` out; tests call it directly, no browser needed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from mla_edu import palette, plotstyle
from mla_edu.case_study.accuracy import may_crash_the_gpu, run_bench
from mla_edu.case_study.diagnose import PageReads, diagnose_step, page_reads
from mla_edu.case_study.plots import accuracy_bars, draw_buffer_panel, draw_page_reads
from mla_edu.model import load_pretrained, task
from mla_edu.serving import DEFECTS, MERGED_FIX, PRE_FIX, STALE_REMOVED, ServerArgs, backend_class, backend_names
from mla_edu.settings import check_fields
from mla_edu.util import is_int

SPLIT_MODES = {"1": 1, "auto": -1}


def _split_mode_value(mode) -> int:
    if type(mode) is str and mode in SPLIT_MODES:  # by type first: a list is unhashable, a tensor has no one truth
        return SPLIT_MODES[mode]
    if is_int(mode) and mode in (1, -1):
        return mode
    raise ValueError(f"split mode: expected '1' or 'auto' (or 1 / -1), got {mode!r}")


@dataclass(frozen=True)
class PanelSettings:
    """One setting of the panel (SGLang's flag names).

    ``max_running_requests`` is also the batch size of the measured decode step; graphs are
    captured for ``(max_running_requests // 2, max_running_requests)``, as SGLang's
    ``--cuda-graph-bs 64 128 --max-running-requests 128``. ``defects`` and ``poison_fill`` apply to
    cutlass_mla; ``poison_fill`` (not in SGLang, see ``ServerArgs``) makes reads of unused index
    entries give NaN instead of a stale page.
    """

    # types and bounds checked by pydantic (``mla_edu.settings``); ``Any``: checked below by the field's own rule
    attention_backend: str = "cutlass_mla"
    defects: Any = PRE_FIX  # a set of names from DEFECTS (None: PRE_FIX, as ServerArgs)
    poison_fill: bool = False
    num_kv_splits: Any = 1  # an int split count or a split mode (_split_mode_value)
    max_running_requests: Annotated[int, Field(ge=2, le=64)] = 8
    num_questions: Annotated[int, Field(ge=1, le=256)] = 32

    def __post_init__(self):
        check_fields(self)
        backend_class(self.attention_backend)  # ValueError naming the registered backends
        defects = PRE_FIX if self.defects is None else self.defects  # None: the pre-fix defects, as ServerArgs
        if not isinstance(defects, (set, frozenset, list, tuple)) or not all(isinstance(d, str) for d in defects):
            raise TypeError(f"defects: expected a set of names from {DEFECTS}, got {defects!r}")
        if "stale" in defects:
            raise ValueError(f"defects: {STALE_REMOVED}")
        bad = sorted(set(defects) - set(DEFECTS))
        if bad:
            raise ValueError(f"defects: expected names from {DEFECTS}, got {bad}")
        object.__setattr__(self, "defects", frozenset(defects))
        object.__setattr__(self, "num_kv_splits", _split_mode_value(self.num_kv_splits))

    @property
    def cuda_graph_bs(self) -> tuple:
        return (max(1, self.max_running_requests // 2), self.max_running_requests)

    @property
    def active_defects(self) -> frozenset:
        return backend_class(self.attention_backend).active_defects(self.defects)

    @property
    def active_poison_fill(self) -> bool:
        return self.poison_fill and backend_class(self.attention_backend).supports_poison_fill

    def server_args(self, cuda_graph: bool) -> dict:
        """Keyword ``ServerArgs`` for the eager (``cuda_graph=False``) or graph run."""
        return dict(attention_backend=self.attention_backend, defects=self.active_defects,
                    poison_fill=self.active_poison_fill,
                    num_kv_splits=self.num_kv_splits, max_running_requests=self.max_running_requests,
                    cuda_graph_bs=self.cuda_graph_bs, disable_cuda_graph=not cuda_graph)

    def label(self) -> str:
        d = ",".join(sorted(self.active_defects)) or "none"
        split = "auto" if self.num_kv_splits == -1 else "1"
        defects = ""
        if backend_class(self.attention_backend).switchable_defects:
            defects = f", defects={d}" + ", poison fill" * self.active_poison_fill
        return (f"{self.attention_backend}{defects}, splits={split}, max running {self.max_running_requests} "
                f"(graphs for {self.cuda_graph_bs[0]}, {self.cuda_graph_bs[1]}), {self.num_questions} questions")


@dataclass
class PanelResult:
    settings: PanelSettings
    eager: dict  # run_bench result
    graph: dict  # run_bench result
    reads: PageReads
    device: str = field(default="")

    def summary(self) -> str:
        r, e, g = self.reads, self.eager, self.graph
        n_ok = sum(r.rows_ok)
        n_close = sum(err < 1e-3 for err in r.row_err)
        lines = [
            f"settings: {self.settings.label()}",
            f"accuracy: eager {e['accuracy']:.3f} | graph {g['accuracy']:.3f} "
            f"(invalid {g['invalid']:.3f}, errors {g['errors']})",
            f"one decode step, {len(r.seq_lens)} rows: {n_ok} read their own pages, "
            f"{n_close} match eager; {r.wrong_reads} wrong page reads",
            f"frozen at capture (bs {r.launch.bs}): width {r.launch.width}, row stride {r.launch.row_stride} "
            f"(buffer's {r.launch.buffer_row_stride}), max_seq_len {r.launch.max_seq_len}, "
            f"splits {r.launch.num_splits}",
        ]
        return "\n".join(lines)


# ---- measuring ---------------------------------------------------------------------------------
def measure_page_reads(model, questions, settings: PanelSettings, batch_size: int | None = None) -> PageReads:
    """One graph-replayed decode step of ``batch_size`` requests (default ``max_running_requests``) after
    an earlier wave of ``max_running_requests`` finished, measured by ``case_study.diagnose.diagnose_step``
    and laid out as grids (page ids, ``UNUSED``/``POISON``/``OUTSIDE``).

    The earlier wave (the next questions, longest first, one decode step) leaves its page ids in the
    rows of the persistent buffer, as a running server does; then the measured batch is prefilled and
    decoded by graph replay (padded to the next captured size, as SGLang pads) and eagerly.
    """
    mr = settings.max_running_requests
    bs = mr if batch_size is None else batch_size
    if not is_int(bs) or not 1 <= bs <= mr:
        raise ValueError(f"batch_size: expected an int in [1, {mr}], got {batch_size!r}")
    if len(questions) < bs + mr:
        raise ValueError(f"questions: expected at least {bs + mr} (a wave of {mr}, then {bs}), got {len(questions)}")
    earlier = sorted(questions[bs: bs + mr], key=lambda q: -q.prompt_len)  # long ones first
    d = diagnose_step(model, [q.prompt_ids for q in questions[:bs]], earlier=[q.prompt_ids for q in earlier],
                      attention_backend=settings.attention_backend, defects=settings.active_defects,
                      poison_fill=settings.active_poison_fill,
                      num_kv_splits=settings.num_kv_splits, cuda_graph_bs=settings.cuda_graph_bs, dtype="float32")
    return page_reads(d)


class PanelRuns:
    """Runs settings on one model and question set; shares prefill work and memoizes results."""

    def __init__(self, model=None, questions=None):
        self.model = load_pretrained() if model is None else model
        self.questions = task.default_eval_set() if questions is None else list(questions)
        self.prefill_cache: dict = {}
        self.results: dict = {}

    def __call__(self, settings: PanelSettings) -> PanelResult:
        if not isinstance(settings, PanelSettings):
            raise TypeError(f"expected PanelSettings, got {type(settings).__name__}")
        if settings.num_questions > len(self.questions):  # the label says num_questions: refuse, never run fewer
            raise ValueError(f"num_questions: expected at most {len(self.questions)} (the questions this panel holds), "
                             f"got {settings.num_questions}")
        if settings not in self.results:
            if may_crash_the_gpu(ServerArgs(**settings.server_args(True))):
                raise RuntimeError("this setting (workspace defect, automatic splits) can kill the CUDA context on a "
                                   "GPU, and the panel replays it in-process: see notebook 07, section 3, or run it "
                                   "with python -m mla_edu.case_study.accuracy, which isolates it in a child process")
            qs = self.questions[: settings.num_questions]
            runs = {}
            for graph in (False, True):
                runs[graph] = run_bench(self.model, qs, parallel=settings.max_running_requests,
                                        prefill_cache=self.prefill_cache, **settings.server_args(graph))
            reads = measure_page_reads(self.model, self.questions, settings)
            self.results[settings] = PanelResult(settings, runs[False], runs[True], reads, runs[True]["device"])
        return self.results[settings]


# ---- drawing -----------------------------------------------------------------------------------
def draw_accuracy(ax, result: PanelResult):
    """Bars: eager and graph accuracy (a graph that lost accuracy red and cross-hatched: the only hatching here;
    invalid answers, where there are any, stacked on top in plain grey) for one setting."""
    e, g = result.eager, result.graph
    names = ["eager", "graph" + ("\n(emulated)" if g["device"] == "cpu" else "")]
    accs = [e["accuracy"], g["accuracy"]]
    lost = g["accuracy"] < e["accuracy"] - 0.05
    bars = accuracy_bars(ax, names, accs, [False, lost], baseline=(0,))
    if lost:
        bars[1].set_label("lost accuracy")
    if e["invalid"] or g["invalid"]:
        ax.bar(names, [e["invalid"], g["invalid"]], bottom=accs, color=palette.GREY, label="invalid answers")
    for bar, a in zip(bars, accs):
        ax.annotate(f"{a:.3f}", (bar.get_x() + bar.get_width() / 2, a), ha="center", va="bottom",
                    fontsize=plotstyle.MIN_FONT_PT)
    ax.set_ylim(0, 1.3)
    ax.set_ylabel("accuracy")
    ax.set_title(f"{result.settings.num_questions} questions", fontsize=plotstyle.MIN_FONT_PT)
    if lost or e["invalid"] or g["invalid"]:
        ax.legend(fontsize=plotstyle.MIN_FONT_PT, loc="upper right")


def panel_figure(result: PanelResult):
    """One figure, 2 x 2 so that it reads at a book's width (~590 px): accuracy bars and the index buffer
    above, the pages each row owns and the pages it read under replay below.

    Built as a bare ``Figure`` with its own Agg canvas, outside pyplot's global state: the panel's
    button handler runs on a kernel subshell thread in JupyterLab >= 4.4, while matplotlib's inline
    backend flushes pyplot's figures from the main thread after each cell. A pyplot figure drawn
    from the handler can be shown half drawn or blank; a bare one is touched by one thread only.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    rows = result.reads.buffer.shape[0] + result.reads.intended.shape[0]
    fig = plotstyle.figure(figsize=(6.2, 2.6 + 0.32 * rows))
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2).ravel()
    draw_accuracy(axes[0], result)
    draw_page_reads(axes[1], axes[2], axes[3], result.reads)
    fig.suptitle(result.settings.label(), fontsize=plotstyle.MIN_FONT_PT)
    fig.tight_layout()
    return fig


SLIDE_HALVES = ("outcome", "reads")


def panel_slide_figure(result: PanelResult, half: str):
    """One row of ``panel_figure``, for a slide: "outcome" (the accuracy bars and the index buffer) or "reads" (the
    pages each row owns and those it read under replay). The 2 x 2 figure is taller than a slide's figure box
    (``plotstyle.SLIDE_FIGURE_BOX``) and is shrunk to two thirds there; a row fits it at full size."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if half not in SLIDE_HALVES:
        raise ValueError(f"half: expected one of {SLIDE_HALVES}, got {half!r}")
    rows = result.reads.buffer.shape[0] if half == "outcome" else result.reads.intended.shape[0]
    fig = plotstyle.figure(figsize=(6.8, 1.5 + 0.32 * rows))
    FigureCanvasAgg(fig)
    ax0, ax1 = fig.subplots(1, 2)
    if half == "outcome":
        draw_accuracy(ax0, result)
        draw_buffer_panel(ax1, result.reads)
    else:
        draw_page_reads(None, ax0, ax1, result.reads)
    fig.suptitle(result.settings.label(), fontsize=plotstyle.MIN_FONT_PT)
    fig.tight_layout()
    return fig


def figure_png(fig) -> bytes:
    """The figure as PNG bytes, as the panel shows it (a bare Figure has no notebook display of its own)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return buf.getvalue()


@functools.cache
def _figures_runs() -> PanelRuns:
    """One ``PanelRuns`` on the shipped model for the figures below: each setting is run once for all six."""
    return PanelRuns()


def panel_default():
    """figures/panel_default.png: the pre-fix cutlass_mla backend at the panel's default setting."""
    return panel_figure(_figures_runs()(PanelSettings()))


def panel_fixed():
    """figures/panel_fixed.png: SGLang's merged fix (no defect left) at the same setting."""
    return panel_figure(_figures_runs()(PanelSettings(defects=MERGED_FIX)))


def panel_slide(fixed: bool, half: str):
    """figures/panel_{default,fixed}_{outcome,reads}.png: one row of ``panel_default`` or ``panel_fixed``, for
    08's slides."""
    return panel_slide_figure(_figures_runs()(PanelSettings(defects=MERGED_FIX) if fixed else PanelSettings()), half)


# ---- the widgets -------------------------------------------------------------------------------
class ControlPanel:
    """Widgets over :class:`PanelRuns`. ``run()`` for static output, ``show()`` for the widgets."""

    def __init__(self, model=None, questions=None, settings: PanelSettings | None = None):
        self.runner = PanelRuns(model, questions)
        self.settings = settings or PanelSettings()
        self.result: PanelResult | None = None
        self.figure = None
        self._widgets = None

    def run(self, settings: PanelSettings | None = None, *, draw: bool = True, verbose: bool = True) -> PanelResult:
        """Measure ``settings`` (default: the current ones), print the summary, draw the figure."""
        if settings is not None:
            self.settings = settings
        self.result = self.runner(self.settings)
        if verbose:
            print(self.result.summary())
        if draw:
            self.figure = panel_figure(self.result)
        return self.result

    def show_figure(self):
        """Display the current figure (as PNG) in the notebook or in the panel's output widget."""
        from IPython.display import Image, display

        if self.figure is None:
            raise ValueError("show_figure: no figure yet; call run() first")
        display(Image(figure_png(self.figure)))

    @staticmethod
    def settings_from_values(values: dict) -> PanelSettings:
        """Widget values -> settings. Keys: backend, width, workspace, poison_fill (bools), split ("1"/"auto"),
        max_running_requests, num_questions."""
        if not isinstance(values, dict):
            raise TypeError(f"values: expected a dict of widget values, got {type(values).__name__}")
        if "stale" in values:
            raise ValueError(f"values: {STALE_REMOVED} (the 'poison_fill' key)")
        known = {"backend", "split", "max_running_requests", "num_questions", "poison_fill", *DEFECTS}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"values: expected keys from {sorted(known)}, got unknown {unknown}")
        d = PanelSettings()
        for name in DEFECTS:
            if name in values and not isinstance(values[name], bool):
                raise TypeError(f"{name}: expected a bool (defect on/off), got {values[name]!r}")
        if "poison_fill" in values and not isinstance(values["poison_fill"], bool):
            raise TypeError(f"poison_fill: expected a bool (poison fill on/off), got {values['poison_fill']!r}")
        defects = frozenset(n for n in DEFECTS if values.get(n, n in d.defects))
        return PanelSettings(attention_backend=values.get("backend", d.attention_backend), defects=defects,
                             poison_fill=values.get("poison_fill", d.poison_fill),
                             num_kv_splits=_split_mode_value(values.get("split", "1")),
                             max_running_requests=values.get("max_running_requests", d.max_running_requests),
                             num_questions=values.get("num_questions", d.num_questions))

    def callback(self, values: dict, draw: bool = True) -> PanelResult:
        """What the "run" button does: settings from widget values, measure, redraw."""
        return self.run(self.settings_from_values(values), draw=draw)

    def widgets(self):
        """Build (once) and return the widget box."""
        if self._widgets is not None:
            return self._widgets["box"]
        import ipywidgets as w

        s = self.settings
        wd = {
            "backend": w.ToggleButtons(options=list(backend_names()), value=s.attention_backend, description="backend"),
            **{n: w.Checkbox(value=n in s.defects, description=f"defect: {n}") for n in DEFECTS},
            "poison_fill": w.Checkbox(value=s.poison_fill, description="poison fill"),
            "split": w.ToggleButtons(options=list(SPLIT_MODES), value="auto" if s.num_kv_splits == -1 else "1",
                                     description="splits"),
            "max_running_requests": w.IntSlider(value=s.max_running_requests, min=2, max=16, step=2,
                                                description="max running requests"),
            "num_questions": w.IntSlider(value=s.num_questions, min=8, max=max(8, min(128, len(self.runner.questions))),
                                         step=8, description="questions"),
        }
        for widget in wd.values():  # labels in full, not cut at the default 80 px
            widget.style.description_width = "initial"
        button = w.Button(description="run", button_style="primary")
        out = w.Output()

        def on_click(_):
            values = {k: v.value for k, v in wd.items()}
            with out:
                out.clear_output(wait=True)
                try:
                    self.callback(values)
                    self.show_figure()
                except (ValueError, TypeError) as e:
                    print(f"error: {e}")

        button.on_click(on_click)
        box = w.VBox([w.HBox([wd["backend"], wd["split"]]), w.HBox([wd[n] for n in (*DEFECTS, "poison_fill")]),
                      w.HBox([wd["max_running_requests"], wd["num_questions"], button]), out])
        self._widgets = {"box": box, "button": button, "out": out, **wd}
        return box

    def set_values(self, **values):
        """Set widget values by key (as a user would click them)."""
        self.widgets()
        for k, v in values.items():
            if k not in self._widgets or k in ("box", "button", "out"):
                keys = sorted(set(self._widgets) - {"box", "button", "out"})
                raise ValueError(f"set_values: expected widget keys from {keys}, got {k!r}")
            self._widgets[k].value = v

    def click(self):
        """Press the run button (also works without a browser)."""
        self.widgets()
        self._widgets["button"].click()

    def show(self):
        """Display the widgets, opened on the figure of the current settings (measured now if needed)."""
        from IPython.display import display

        box = self.widgets()
        out = self._widgets["out"]
        with out:
            out.clear_output(wait=True)
            if self.result is None or self.figure is None:
                self.run()
            else:
                print(self.result.summary())
            self.show_figure()
        display(box)
