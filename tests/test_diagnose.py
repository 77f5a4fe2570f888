"""mla_edu.case_study.diagnose: the launch recorder, one decode step taken apart, the workspace hazard, figures.

A small random model is enough: the checks compare graph replay with eager decoding and with
the reference kernel on the predicted page reads, whatever the weights.
"""

import matplotlib
import pytest
from tiny_models import random_prompts, random_tiny_model

from mla_edu.case_study import diagnose as dg
from mla_edu.case_study import plots
from mla_edu.serving import MERGED_FIX
from mla_edu.serving.backends.cutlass_mla import POISON_PAGE

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def model():
    return random_tiny_model(qk_rope_head_dim=8)


def prompts(seed, n, lo=100, hi=380):
    return random_prompts(seed, n, lo, hi)


@pytest.fixture(scope="module")
def prefix(model):
    return dg.diagnose_step(model, prompts(1, 3), earlier=prompts(2, 4, 300, 500), cuda_graph_bs=(2, 4),
                            dtype="float32", device="cpu")


def test_record_launches_only_inside_the_block_and_sees_no_replay(prefix):
    from mla_edu.kernels import mla_decode
    from mla_edu.kernels.cases import random_decode_case

    c = random_decode_case(0, batch=2, heads=2, page_size=16, lens=[20, 40], d_latent=32, d_rope=16)
    call = lambda: mla_decode(c.q_nope, c.q_pe, c.cache, c.seq_lens, c.page_table, c.workspace(1),  # noqa: E731
                              c.sm_scale)
    with dg.record_launches() as log:
        call()
    call()  # after the block: not recorded
    assert [(r.launch.bs, r.launch.width, r.launch.num_splits) for r in log] == [(2, c.page_table.size(1), 1)]
    assert log[0].page_table is c.page_table
    assert prefix.launches_during_replay == 0  # a replay runs no host code


def test_prefix_step_reads_other_rows_pages(prefix):
    d = prefix
    assert d.padded_bs == 4
    assert (d.captured.width, d.captured.row_stride, d.captured.max_seq_len) == (1, 1, 128)
    assert d.captured.buffer_row_stride == d.buffer.shape[1] == (512 + 128) // 128
    assert d.needed.row_stride == d.needed.width == max(-(-n // 128) for n in d.seq_lens)
    own = d.rows_reading_own_pages
    assert own[0]
    for b in range(1, len(d.seq_lens)):
        assert d.read[b] == [int(x) for x in d.buffer.reshape(-1)[b: b + len(d.intended[b])]]
        if not own[b]:
            assert d.row_err[b] > 1e-2  # wrong pages, wrong logits
    assert not all(own[1:])
    assert d.row_err[0] < 1e-4
    assert max(d.check_err) < 1e-4  # the reference kernel on the predicted reads gives the replay's logits
    assert dg.stale_entries(d).any()  # the earlier, longer requests left page ids behind


def test_seed_context_length_wrong_rows_read_row0s_entries(model):
    """--context-length 4096 (W = 33): with few rows, row b's frozen reads b..b+n-1 all fall in row 0's
    entries (its later pages, then its unused tail), never in another row's."""
    d = dg.diagnose_step(model, prompts(1, 3), earlier=prompts(2, 4, 300, 500), cuda_graph_bs=(2, 4),
                         dtype="float32", device="cpu", context_length=4096)
    w = d.buffer.shape[1]
    assert w == d.captured.buffer_row_stride == (4096 + 128) // 128 == 33
    for b in range(1, len(d.seq_lens)):
        flat = [b + j for j in range(len(d.intended[b]))]  # row stride 1
        assert all(i // w == 0 for i in flat)  # inside row 0
        assert d.read[b] == [int(d.buffer[0, i]) for i in flat]
    assert max(d.check_err) < 1e-4


def test_merged_fix_reads_own_pages(model):
    d = dg.diagnose_step(model, prompts(1, 3), earlier=prompts(2, 4, 300, 500), defects=MERGED_FIX,
                         cuda_graph_bs=(2, 4), dtype="float32", device="cpu")
    assert d.captured.width == d.captured.row_stride == d.buffer.shape[1]
    assert all(d.rows_reading_own_pages)
    assert max(d.row_err) < 1e-4 and max(d.check_err) < 1e-4
    assert dg.stale_entries(d).any()  # stale tails stay (no reset), and are harmless
    assert MERGED_FIX == frozenset() and not d.poison_fill and not (d.buffer == POISON_PAGE).any()


def test_poison_makes_stray_reads_nan(model):
    d = dg.diagnose_step(model, prompts(3, 4), earlier=prompts(4, 4), defects={"width", "workspace"},
                         poison_fill=True, cuda_graph_bs=(2, 4), dtype="float32", device="cpu")
    assert d.poison_fill
    expect = [POISON_PAGE in d.read[b] for b in range(len(d.seq_lens))]
    assert d.nan_rows == expect and any(expect)
    assert max(d.check_err) < 1e-4  # NaN in both where expected, equal elsewhere


def test_workspace_hazard(model):
    h = dg.workspace_hazard(model, prompts(5, 3), cuda_graph_bs=(2, 4), dtype="float32", device="cpu")
    assert h.splits > 1 and not h.graph_workspace_held
    assert h.freed_uses and "dropped after capture" in h.freed_uses[0]
    assert h.owner_bytes_changed > 0  # the replay wrote into the new owner's bytes
    assert max(h.row_err) < 1e-4  # ...while its own output stayed right (partials written before read)
    fixed = dg.workspace_hazard(model, prompts(5, 3), defects=frozenset(), cuda_graph_bs=(2, 4),
                                dtype="float32", device="cpu")
    assert fixed.graph_workspace_held and fixed.freed_uses == []


def test_bad_input(model, prefix):
    with pytest.raises(ValueError, match="expected 1..4 prompts"):
        dg.diagnose_step(model, prompts(1, 5), cuda_graph_bs=(2, 4), device="cpu")
    with pytest.raises(ValueError, match="expected 3..4 prompts"):
        dg.workspace_hazard(model, prompts(1, 2), cuda_graph_bs=(2, 4), device="cpu")
    with pytest.raises(ValueError, match="no mla_decode launch with batch size 7"):
        dg.last_launch([], 7)


def test_figures(prefix):
    import matplotlib.pyplot as plt

    for fig in (plots.page_reads_figure(prefix), plots.page_table_figure(prefix),
                plots.accuracy_bars_figure([("eager", 0.9, 0.0), ("graph", 0.1, 0.0)], "t")):
        assert isinstance(fig, matplotlib.figure.Figure)
        plt.close(fig)
    rows = dg.launch_table(prefix.captured, prefix.needed)
    assert rows[1] == ("row stride the kernel used", 1, prefix.needed.row_stride)


def test_the_page_table_figure_names_poison_only_where_it_shows_some(prefix):
    """Its title is a legend: P = poison only where the drawn buffer holds the poison page (06's pre-fix figure
    has none); the buffer is called what 03 and 06 call it, the page-table buffer."""
    import dataclasses

    import matplotlib.pyplot as plt

    assert not (prefix.buffer == POISON_PAGE).any()
    poisoned = dataclasses.replace(prefix, buffer=prefix.buffer.clone().fill_(POISON_PAGE))
    for d, shown in ((prefix, False), (poisoned, True)):
        fig = plots.page_table_figure(d)
        title = fig.axes[0].get_title()
        plt.close(fig)
        assert title.startswith("page-table buffer at replay") and ("P = poison" in title) == shown, title


def test_example_batch():
    from mla_edu.model import task

    qs = task.default_eval_set()
    prompts, earlier = dg.example_batch(qs)
    assert prompts == [q.prompt_ids for q in qs[:6]] and len(earlier) == 8
    assert [len(p) for p in earlier] == sorted((len(p) for p in earlier), reverse=True)
    with pytest.raises(ValueError, match="expected at least 14, got 3"):
        dg.example_batch(qs[:3])


def test_row0_study_partitions_requests(one_thread):
    from mla_edu.model import load_pretrained, task

    m, qs = load_pretrained(), task.default_eval_set()[:12]
    cache = {}
    res = {o: dg.row0_study(m, qs, max_running_requests=4, row_order=o, prefill_cache=cache, dtype="float32",
                            device="cpu") for o in ("append", "prepend")}
    for r in res.values():
        assert r["only_row0"] + r["first_row0"] + r["rest"] == r["n"] == 12
        assert r["right_only_row0"] + r["right_first_row0"] + r["right_rest"] == round(r["accuracy"] * 12)
    row0 = {order: res[order]["first_row0"] + res[order]["only_row0"] for order in ("prepend", "append")}
    assert row0["prepend"] > row0["append"]
    with pytest.raises(ValueError, match="max_running_requests: expected an int >= 1, got 0"):
        dg.row0_study(m, qs, max_running_requests=0)
