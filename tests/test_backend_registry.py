"""Adding a backend is one module and its registration (``docs/CONTRIBUTING.md``): a toy backend, registered
here for the test, runs a decode step through the engine, the accuracy CLI and the panel, which ask its class
what it supports."""

import json

import matplotlib
import pytest
import torch

from mla_edu import kernels, kvcache
from mla_edu.case_study.accuracy import bench as accuracy  # the module whose _load_model run_bench calls
from mla_edu.case_study.accuracy import __main__ as accuracy_cli
from mla_edu.model import task
from mla_edu.serving import Engine, ServerArgs, backend_class, backend_names
from mla_edu.serving.backends import BACKEND_CLASSES, AttentionBackend, page_table_width, register_backend
from mla_edu.util import PAGE_SIZE
from mla_edu.workshop.exercises import toy_model
from mla_edu.workshop.panel import ControlPanel, PanelSettings

matplotlib.use("Agg")


class ToyBackend(AttentionBackend):
    """The smallest graph-safe backend: one full-width page table for every batch size, read with its real row
    stride, one split. It switches no defect on and has no poison fill (the base class's declarations)."""

    table = workspace = None

    def init_cuda_graph_state(self, max_bs: int):
        width = page_table_width(self.max_context_len)
        self.table = torch.zeros((max_bs, width), dtype=torch.int32, device=self.device)  # [max_bs, W]
        size = kernels.get_workspace_size(width * PAGE_SIZE, max_bs, self.sm_count, 1)
        self.workspace = torch.empty(size, dtype=torch.uint8, device=self.device)

    def init_forward_metadata(self, batch):
        if self.table is None or batch.batch_size > self.table.size(0):
            self.init_cuda_graph_state(batch.batch_size)
        self.init_forward_metadata_capture_cuda_graph(batch.batch_size, batch.req_pool_indices, batch.seq_lens)

    def init_forward_metadata_capture_cuda_graph(self, bs, req_pool_indices, seq_lens):
        kvcache.fill_page_table(self.req_to_token, req_pool_indices[:bs], seq_lens[:bs], self.table[:bs], PAGE_SIZE)

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens, seq_lens_cpu):
        self.init_forward_metadata_capture_cuda_graph(bs, req_pool_indices, seq_lens)

    def graph_index_buffer(self):
        return self.table

    def forward_decode(self, q_nope, q_pe, layer_id, batch):
        bs = q_nope.size(0)
        return kernels.mla_decode(q_nope, q_pe, self.kv_cache.kv_buffer[layer_id], batch.seq_lens, self.table[:bs],
                                  self.workspace, self.sm_scale, 1, impl=self.kernel_impl, stride_policy="stride")


@pytest.fixture
def toy():
    cls = register_backend("toy")(ToyBackend)
    try:
        yield cls
    finally:
        del BACKEND_CLASSES["toy"]


def test_registration_is_checked(toy):
    assert backend_names()[-1] == "toy" and backend_class("toy") is ToyBackend and ToyBackend.name == "toy"
    with pytest.raises(ValueError, match=r"'toy' is already registered \(ToyBackend\)"):
        register_backend("toy")(ToyBackend)
    with pytest.raises(TypeError, match="expected an AttentionBackend subclass"):
        register_backend("other")(dict)
    with pytest.raises(ValueError, match=r"attention_backend: expected one of \('cutlass_mla', 'triton', 'toy'\)"):
        backend_class("flashinfer")
    with pytest.raises(ValueError, match="poison_fill: applies to the cutlass_mla backend only, got "
                                         "attention_backend='toy'"):
        ServerArgs(attention_backend="toy", poison_fill=True)
    assert ServerArgs(attention_backend="toy").defects  # the pre-fix default, which toy does not apply
    assert ToyBackend.active_defects({"width", "workspace"}) == frozenset()


def test_one_decode_step_through_the_engine_matches_triton(toy):
    prompts = [q.prompt_ids for q in task.default_eval_set()[:3]]
    outs = {}
    for name in ("toy", "triton"):
        engine = Engine(toy_model(), attention_backend=name, cuda_graph_bs=(2, 4), max_running_requests=4)
        reqs = engine.generate(prompts, max_new_tokens=2)
        assert engine.stats["graph_steps"] == engine.stats["decode_steps"] == 1
        outs[name] = [r.output_ids for r in reqs]
    assert outs["toy"] == outs["triton"]


def test_the_cli_and_the_panel_ask_the_class(toy, monkeypatch, capsys):
    monkeypatch.setattr(accuracy, "_load_model", lambda device=None: toy_model())
    rc = accuracy_cli.main(["--attention-backend", "toy", "--num-questions", "2", "--parallel", "2",
                        "--cuda-graph-bs", "1", "2", "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and res["attention_backend"] == "toy" and res["defects"] == [] and res["graph_steps"] > 0
    settings = PanelSettings(attention_backend="toy", poison_fill=True, max_running_requests=2, num_questions=2)
    assert settings.active_defects == frozenset() and not settings.active_poison_fill
    assert settings.label().startswith("toy, splits=1, max running 2")
    panel = ControlPanel(toy_model(), task.default_eval_set()[:8], settings)
    assert "toy" in panel.widgets().children[0].children[0].options
    r = panel.run(settings, draw=False, verbose=False)
    assert all(r.reads.rows_ok) and r.reads.wrong_reads == 0 and r.graph["accuracy"] == r.eager["accuracy"]
