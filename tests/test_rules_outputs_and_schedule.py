"""Rules of the schedule choice, the output files, the registry and the graph checker (issue 49), each pinned by
a test named after it that fails when the rule is bent.

Each test's docstring names the bend it was shown to catch; ``python tests/bend_rules.py`` applies each bend to a
copy of the package and runs that test there (it must fail), then the test on the unbent copy (it must pass).
"""

import os
import stat
import types

import pytest
import torch
from tiny_models import random_prompts, random_tiny_model

from mla_edu import files
from mla_edu.files import check_out_dir, check_out_file, write_atomic
from mla_edu.graphs import check
from mla_edu.kernels import mla_decode, observe_plans, schedule
from mla_edu.model import WEIGHTS_FILE
from mla_edu.model.train import check_out
from mla_edu.serving import Engine
from mla_edu.serving.backends import TritonBackend
from mla_edu.util import PAGE_SIZE


# ---- schedule and workspace ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def triton_backend():
    """The triton backend with auto splits (it chooses a schedule per batch), a 4096-token context: 33 columns."""
    eng = Engine(random_tiny_model(), attention_backend="triton", kernel_impl="triton", num_kv_splits=-1,
                 disable_cuda_graph=True, context_length=4096, max_running_requests=8)
    return eng.runner.backend


def test_the_triton_schedule_choice_models_the_width_the_step_reads(triton_backend):
    """Bends: ``choose_step`` models the table's width (33 columns) instead of the step's; ``auto_schedule`` models
    the longest request (``None``) instead of the width it is given.

    At 128 heads, three requests, the longest 17 pages: the step reads 32 columns (the narrowest of the table's
    widths that holds it), where the balanced schedule wins and on 33 columns the split rule would. Three requests,
    the longest 5 pages: the step reads 8 columns, where the split rule wins and on 5 the balanced schedule would."""
    be = triton_backend
    heads = 128
    assert be.width == 33 and be.widths() == (1, 2, 4, 8, 16, 32, 33)
    lens = [3, 339, 2084]
    assert be.choose_step(lens, heads) == (32, "balanced")
    assert not schedule.prefers_balanced(lens, PAGE_SIZE, heads, be.sm_count, be.splits(3, heads, 33), 33)
    lens = [498, 557, 381]
    assert be.choose_step(lens, heads) == (8, "splits")
    assert schedule.prefers_balanced(lens, PAGE_SIZE, heads, be.sm_count, be.splits(3, heads, 8), None)


@pytest.mark.triton  # the step runs the Triton kernels (its interpreter on CPU)
def test_the_triton_step_launches_at_the_width_and_count_it_chose():
    """Bends: ``forward_decode`` launches with the table's split count (``self.splits(bs, heads)``) instead of the
    width's; it hands the kernel the whole table (``self.page_table[:bs]``) instead of the step's columns.

    Eager steps of the triton backend with auto splits on 2 SMs, a 4096-token context (33 columns): every launch reads
    the width the step chose (``DecodePlan.width``, which sizes the launch) at the split rule's count on it."""
    eng = Engine(random_tiny_model(), attention_backend="triton", kernel_impl="triton", num_kv_splits=-1,
                 disable_cuda_graph=True, context_length=4096, max_running_requests=3, sm_count=2)
    be = eng.runner.backend
    plans = []
    with observe_plans(lambda plan, table, ws: plans.append((plan, be.step_schedule))):
        eng.generate(random_prompts(5, 3, 150, 400), max_new_tokens=2, stop_token_ids=())
    assert plans and {plan.width for plan, _ in plans} == {4}  # 150-400 tokens: up to 4 pages of 128
    assert any(chosen == "splits" for _, (_, chosen) in plans)
    for plan, (width, chosen) in plans:
        assert plan.width == width and plan.schedule == chosen
        if chosen == "splits":
            assert plan.num_splits == be.splits(plan.batch, plan.heads, width) != be.splits(plan.batch, plan.heads)


#: (context tokens, SMs, heads, kv_lora_rank, graphs up to max_bs): the tiny model's 2 heads, heads a server runs, a
#: GPU with fewer SMs than GPU 0 (2), and what the sizing for heads 1, 16, 32, 64 and 128 at a 512 latent fell short
#: of (112 heads on 78 SMs, the balanced partials; 256 heads and a 1024 latent, the splits')
WORKSPACE_CASES = [(4096, 132, 2, 512, 8), (4096, 132, 128, 512, 5), (4096, 2, 16, 512, 8), (256, 78, 112, 512, 4),
                   (512, 132, 256, 512, 8), (640, 132, 128, 1024, 4)]


@pytest.mark.parametrize("context, sms, heads, kv_lora_rank, max_bs", WORKSPACE_CASES)
def test_the_workspace_fits_every_batch_size_and_width_at_the_models_head_count(monkeypatch, context, sms, heads,
                                                                                 kv_lora_rank, max_bs):
    """Bends: ``_alloc`` sizes the workspace for batch sizes ``range(1, max_bs)`` (an off-by-one at ``max_bs``), for
    the table's width alone (on 4096 tokens, 32 columns take more splits than 33), for 128 heads instead of the
    model's, or for a 512 latent instead of the cache's; ``forward_decode`` leaves the kernel to count GPU 0's SMs
    (132 on CPU) instead of the backend's.

    Every batch size up to ``max_bs`` steps through ``forward_decode`` at every (width, schedule) a graph is captured
    for, into ``mla_decode``'s own checks (the split rule's partials in ``make_plan``, the balanced schedule's in
    ``contract.check_balanced``, at the SM count the call passes); only the kernels are left out. A step with another
    head count is refused before any kernel."""
    from mla_edu.kernels import decode
    from mla_edu.kvcache import LatentKVCache

    launched = []
    stub = lambda q_nope, *rest: launched.append(q_nope.shape[0]) or torch.empty_like(q_nope)  # noqa: E731
    monkeypatch.setitem(decode.IMPLS, "triton", decode.Impl(stub, plan_stage1=lambda *a: a[3], balanced=stub))
    pool = types.SimpleNamespace(req_to_token=torch.zeros(max_bs, context, dtype=torch.int32))
    cache = LatentKVCache(1, 2, PAGE_SIZE, kv_lora_rank=kv_lora_rank, qk_rope_head_dim=64, dtype=torch.float32,
                          device="cpu")
    be = TritonBackend(pool, cache, sm_scale=0.1, max_context_len=context, num_heads=heads, num_kv_splits=-1,
                       kernel_impl="triton", sm_count=sms)
    be.init_cuda_graph_state(max_bs)
    be._use(be.graph_buffers)
    assert be.page_table.shape == (max_bs, be.width)
    for b in range(1, max_bs + 1):
        q_nope, q_pe = torch.zeros(b, heads, kv_lora_rank), torch.zeros(b, heads, 64)
        step = types.SimpleNamespace(seq_lens=torch.ones(b, dtype=torch.int32))
        for variant in be.graph_variants():  # raises "workspace too small" where it is short
            be.graph_variant = variant
            be.forward_decode(q_nope, q_pe, 0, step)
    assert len(launched) == max_bs * len(be.graph_variants()) == max_bs * 2 * len(be.widths())
    with pytest.raises(ValueError, match=f"built for num_heads={heads} query heads .* got q_nope with {heads + 1}"):
        be.forward_decode(torch.empty(1, heads + 1, kv_lora_rank), torch.empty(1, heads + 1, 64), 0, step)


# ---- output files -------------------------------------------------------------------------------------
def test_write_atomic_leaves_the_old_content_when_the_writer_fails(tmp_path):
    """Bend: ``write_atomic`` opens ``path`` itself and writes (``open(path, "w").write(data)``): the failing
    write has already truncated the old file."""
    path = tmp_path / "results.md"
    path.write_text("old content\n")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(path, "new content \udc80")  # a lone surrogate: the encoder fails mid-write
    assert path.read_text() == "old content\n"
    assert os.listdir(tmp_path) == ["results.md"]  # no temporary file left behind


def test_write_atomic_leaves_the_old_content_when_interrupted_between_write_and_rename(tmp_path, monkeypatch):
    """Bend: as above (a plain open-and-write: the new content is in place before the interrupt, half of it had
    the write been cut)."""
    path = tmp_path / "results.md"
    path.write_text("old content\n")

    def interrupted(src, dst):
        raise KeyboardInterrupt  # Ctrl-C after the write, before the rename

    monkeypatch.setattr(files.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, "new content\n")
    assert path.read_text() == "old content\n"
    assert os.listdir(tmp_path) == ["results.md"]


def test_write_atomic_gives_a_replaced_file_its_old_mode_and_a_new_file_the_umasks(tmp_path):
    """Bend: no ``os.chmod`` of the temporary file (mkstemp's 0600 stays)."""
    old = tmp_path / "old.md"
    old.write_text("x")
    old.chmod(0o640)
    write_atomic(old, "y")
    assert stat.S_IMODE(old.stat().st_mode) == 0o640 and old.read_text() == "y"
    mask = os.umask(0o022)
    try:
        write_atomic(tmp_path / "new.md", b"z")
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "new.md").stat().st_mode) == 0o644


def test_check_out_dir_checks_that_the_folder_is_writable_before_the_work(tmp_path, monkeypatch):
    """Bend: ``check_out_dir`` returns after ``mkdir`` without its write probe. (The probe is made to fail as a
    read-only folder makes it fail; root writes into read-only folders, so the test cannot chmod one.)"""
    def read_only(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(files.tempfile, "mkstemp", read_only)
    with pytest.raises(ValueError, match=r"--out: expected a folder this process can write, got .* \(Permission "):
        check_out_dir(tmp_path / "out", "--out")


def test_check_out_file_refuses_a_folder(tmp_path):
    """Bend: ``check_out_file`` without its ``is_dir`` check (the folder's parent is writable, so it passes)."""
    with pytest.raises(ValueError, match=r"--out: expected a file name, got .*, which is a folder"):
        check_out_file(tmp_path, "--out")


def test_training_refuses_without_force_a_folder_holding_the_weights_file_alone(tmp_path):
    """Bend: ``check_out`` looks for the manifest only (``held`` from ``MANIFEST_FILE`` alone)."""
    (tmp_path / WEIGHTS_FILE).write_bytes(b"weights of an earlier run")
    with pytest.raises(ValueError, match=f"--out: expected a folder without weights, got .*, which holds "
                                         f"{WEIGHTS_FILE}; pass --force"):
        check_out(tmp_path, force=False)
    assert check_out(tmp_path, force=True) == tmp_path


# ---- registry and graphs ------------------------------------------------------------------------------
def test_a_backend_whose_class_declares_no_poison_fill_refuses_it_when_built_directly(triton_backend):
    """Bend: ``AttentionBackend.__init__`` without its ``supports_poison_fill`` check (``ServerArgs`` would still
    refuse it; a backend built directly would take it and never poison)."""
    be = triton_backend
    pool = type("Pool", (), {"req_to_token": be.req_to_token})()
    with pytest.raises(ValueError, match="poison_fill: the triton backend does not implement it"):
        TritonBackend(pool, be.kv_cache, sm_scale=0.1, max_context_len=4096, num_heads=2, poison_fill=True)


def test_the_checkers_nan_hint_names_the_persistent_buffer_that_causes_it():
    """Bend: the NaN hint formatted with ``buffers="persistent buffers"`` (no culprit named)."""
    x = torch.zeros(4)
    written = torch.zeros(4)  # persistent, written by the step before it reads it: harmless
    stale = torch.zeros(4)  # persistent, read and never written: NaN once poisoned
    out = torch.zeros(4)

    def step():
        written.copy_(x)
        out.copy_(written + stale)
        return out

    report = check(step, lambda g, t: {"x": torch.randn(4, generator=g)}, static_inputs={"x": x},
                   persistent=[written, stale], n_trials=2, device="cpu", mode="emulated")
    assert not report.ok
    assert report.hint == "NaN after poisoning persistent[1] float32[4]: the step reads entries it never writes " \
                          "this step (stale state)"


@pytest.mark.parametrize("bad,error,msg", [
    (dict(sm_scale=float("nan")), ValueError, "sm_scale must be a finite float > 0"),
    (dict(seq_lens=torch.zeros(0, dtype=torch.int64)), TypeError, "seq_lens must be int32"),
    (dict(cache=torch.zeros(0, 16, 48)), ValueError, "kv_c_and_k_pe_cache must hold at least one page"),
])
def test_mla_decode_with_no_requests_still_runs_the_general_argument_checks(bad, error, msg):
    """Bend: ``mla_decode``'s ``B = 0`` branch returns the empty output before the impl's argument checks."""
    args = dict(q_nope=torch.zeros(0, 2, 32), q_pe=torch.zeros(0, 2, 16), cache=torch.zeros(4, 16, 48),
                seq_lens=torch.zeros(0, dtype=torch.int32), page_table=torch.zeros(0, 2, dtype=torch.int32),
                workspace=torch.zeros(16, dtype=torch.uint8), sm_scale=0.1)
    args.update(bad)
    with pytest.raises(error, match=msg):
        mla_decode(*args.values())
    good = mla_decode(torch.zeros(0, 2, 32), torch.zeros(0, 2, 16), torch.zeros(4, 16, 48),
                      torch.zeros(0, dtype=torch.int32), torch.zeros(0, 2, dtype=torch.int32),
                      torch.zeros(16, dtype=torch.uint8), 0.1)
    assert good.shape == (0, 2, 32)
