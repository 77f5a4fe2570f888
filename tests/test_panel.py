"""The control panel's logic without a browser: settings, the callback, page reads, widgets."""

import matplotlib
import matplotlib.figure
import pytest

matplotlib.use("Agg")

from mla_edu.workshop.exercises import toy_model  # noqa: E402
from mla_edu.model import task  # noqa: E402
from mla_edu.case_study.diagnose import POISON, UNUSED  # noqa: E402
from mla_edu.workshop.panel import ControlPanel, PanelSettings, panel_figure  # noqa: E402
from mla_edu.serving import PRE_FIX  # noqa: E402

SMALL = dict(max_running_requests=4, num_questions=12)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def panel():
    return ControlPanel(toy_model(), task.default_eval_set()[:40], PanelSettings(**SMALL))


def test_prefix_only_row0_reads_its_pages(panel):
    res = panel.callback({"backend": "cutlass_mla", "width": True, "workspace": True,
                          "split": "1", "max_running_requests": 4, "num_questions": 12}, draw=False)
    r = res.reads
    assert res.settings.defects == PRE_FIX and res.settings.cuda_graph_bs == (2, 4)
    assert (r.launch.width, r.launch.row_stride, r.launch.max_seq_len) == (1, 1, 128)
    assert r.launch.buffer_row_stride == (512 + 128) // 128
    assert r.rows_ok == [True, False, False, False]
    assert r.row_err[0] < 1e-3 and all(e > 1e-3 for e in r.row_err[1:])
    assert not (r.read == POISON).any()  # silent: stale ids, no poison
    # the read of row b, page j is flat entry b + j of the buffer
    flat = r.buffer.reshape(-1)
    for b, n in enumerate(r.seq_lens):
        for j in range(-(-n // 128)):
            assert r.read[b, j] == flat[b + j]
    assert res.eager["num_questions"] == 12 and res.graph["graph_steps"] == res.graph["decode_steps"] > 0


@pytest.mark.parametrize("values", [
    {"width": False, "workspace": False},  # SGLang's merged fix
    {"width": False, "workspace": False, "poison_fill": True},  # the merged fix with the poison fill
    {"backend": "triton", "split": "auto"},
])
def test_fixed_settings_read_right_and_match_eager(panel, values):
    res = panel.callback({**values, **SMALL}, draw=False)
    r = res.reads
    assert all(r.rows_ok) and r.wrong_reads == 0
    assert max(r.row_err) < 1e-3
    assert r.launch.row_stride == r.launch.buffer_row_stride == 5
    assert res.graph["accuracy"] == res.eager["accuracy"] and res.graph["errors"] == 0


def test_width_alone_reads_poison(panel):
    res = panel.run(PanelSettings(defects=frozenset({"width"}), poison_fill=True, **SMALL), draw=False,
                    verbose=False)
    assert "defects=width, poison fill" in res.settings.label()
    r = res.reads
    assert (r.read == POISON).any()
    bad = [e == float("inf") for e in r.row_err]
    assert bad[0] is False and any(bad)  # NaN logits exactly where poison was read
    for b, is_bad in enumerate(bad):
        assert is_bad == bool((r.read[b] == POISON).any())
    assert res.graph["errors"] > 0 and res.eager["errors"] == 0


def test_summary_figure_and_memo(panel, capsys):
    res = panel.run(PanelSettings(**SMALL))
    out = capsys.readouterr().out
    assert "row stride 1 (buffer's 5)" in out and "1 read their own pages" in out
    assert panel.runner(PanelSettings(**SMALL)) is res  # memoized
    fig = panel_figure(res)
    assert len(fig.axes) == 4
    assert (res.reads.intended[:, :1] != UNUSED).all()


def test_hatching_means_lost_accuracy_only(panel):
    """The graph bar that lost accuracy is cross-hatched; invalid answers were hatched too (//), with a legend
    entry 'invalid' beside a bar of 0.000 invalid: a reader took the lost bar for invalid answers."""
    import dataclasses

    from mla_edu.workshop.panel import draw_accuracy

    res = panel.run(PanelSettings(**SMALL), draw=False, verbose=False)
    for invalid in (0.0, 0.25):  # the graph lost accuracy (the seed's 0.060 against eager)
        fake = dataclasses.replace(res, eager={**res.eager, "accuracy": 0.9, "invalid": 0.0},
                                   graph={**res.graph, "accuracy": 0.06, "invalid": invalid})
        fig = matplotlib.figure.Figure()
        ax = fig.add_subplot()
        draw_accuracy(ax, fake)
        hatched = [p for p in ax.patches if p.get_hatch()]
        assert len(hatched) == 1 and hatched[0].get_label() == "lost accuracy", [p.get_label() for p in hatched]
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert labels == (["lost accuracy"] + (["invalid answers"] if invalid else [])), labels


def test_widgets_click_runs_the_callback(panel):
    pytest.importorskip("ipywidgets")
    panel.set_values(width=False, workspace=False, poison_fill=False, max_running_requests=4, num_questions=12)
    assert panel._widgets["poison_fill"].description == "poison fill"
    panel.click()
    assert panel.result.settings == PanelSettings(defects=frozenset(), **SMALL)
    assert all(panel.result.reads.rows_ok)
    with pytest.raises(ValueError, match="widget keys"):
        panel.set_values(colour="red")


@pytest.mark.parametrize("kw,exc,msg", [
    (dict(attention_backend="flashinfer"), ValueError, "attention_backend: expected one of"),
    (dict(defects=frozenset({"width", "bogus"})), ValueError, "defects: expected names"),
    (dict(defects="width"), TypeError, "defects: expected a set"),
    (dict(defects=frozenset({"stale"})), ValueError, "defects: 'stale' is no longer a defect"),
    (dict(poison_fill=1), TypeError, "poison_fill: expected a bool, got 1"),
    (dict(num_kv_splits=2), ValueError, "split mode: expected '1' or 'auto'"),
    (dict(max_running_requests=1), ValueError, r"max_running_requests: expected an int in \[2, 64\]"),
    (dict(num_questions=0), ValueError, "num_questions"),
])
def test_bad_settings(kw, exc, msg):
    with pytest.raises(exc, match=msg):
        PanelSettings(**kw)


def test_bad_widget_values():
    with pytest.raises(ValueError, match="unknown"):
        ControlPanel.settings_from_values({"backend": "triton", "speed": 3})
    with pytest.raises(TypeError, match="expected a bool"):
        ControlPanel.settings_from_values({"width": "yes"})
    with pytest.raises(TypeError, match="expected a dict"):
        ControlPanel.settings_from_values(["width"])
    with pytest.raises(TypeError, match="poison_fill: expected a bool"):
        ControlPanel.settings_from_values({"poison_fill": 1})
    with pytest.raises(ValueError, match="'stale' is no longer a defect.*the 'poison_fill' key"):
        ControlPanel.settings_from_values({"stale": True})
    s = ControlPanel.settings_from_values({"split": "auto", "workspace": False})
    assert s.num_kv_splits == -1 and s.defects == {"width"} and not s.poison_fill
    s = ControlPanel.settings_from_values({"poison_fill": True, "backend": "triton"})
    assert s.poison_fill and not s.active_poison_fill and s.server_args(True)["poison_fill"] is False


def test_too_few_questions():
    from mla_edu.workshop.panel import measure_page_reads

    with pytest.raises(ValueError, match="at least 8"):
        measure_page_reads(toy_model(), task.default_eval_set()[:5], PanelSettings(max_running_requests=4))


def test_measured_batch_can_be_padded():
    from mla_edu.workshop.panel import measure_page_reads

    qs = task.default_eval_set()
    with pytest.raises(ValueError, match="batch_size"):
        measure_page_reads(toy_model(), qs, PanelSettings(max_running_requests=4), batch_size=5)
    reads = measure_page_reads(toy_model(), qs, PanelSettings(max_running_requests=4), batch_size=3)
    assert len(reads.seq_lens) == 3 and reads.buffer.shape[0] == 4  # padded to the captured 4
    assert reads.live[3].tolist()[:1] == [True] and not reads.live[3, 1:].any()  # the padded row writes one page
