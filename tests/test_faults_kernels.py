"""``mla_decode`` and the schedule's host side refuse what would give a silent wrong answer (an audit's findings,
each reproduced here first): q_nope and q_pe swapped, the cutlass path's scale and devices, its workspace sized
for another SM count, an empty batch skipping checks, a NaN cost in the choice's model, lengths past int32."""

from __future__ import annotations

import pytest
import torch

import mla_edu  # noqa: F401  (sets TRITON_INTERPRET before anything imports triton)
from mla_edu.device import TRITON_INTERPRET, triton_available
from mla_edu.kernels import mla_decode
from mla_edu.kernels import schedule as sc
from mla_edu.kernels.cases import random_decode_case
from mla_edu.kernels.contract import pages_read
from mla_edu.kernels.workspace import get_workspace_size


def case(d_latent=32, d_rope=16):
    return random_decode_case(0, batch=3, heads=2, page_size=16, max_len=60, d_latent=d_latent, d_rope=d_rope)


def ws(n=1 << 20):
    return torch.zeros(n, dtype=torch.uint8)


@pytest.mark.parametrize("impl", ["reference", "torch"] + (["triton"] if triton_available() else []))
def test_q_nope_and_q_pe_swapped_are_refused(impl):
    # a cache of 64 + 512 = 576 columns: swapped, the shapes still add up, and each impl returned [B, H, 64]
    c = case(d_latent=512, d_rope=64)
    with pytest.raises(ValueError, match="got 64 and 512: are q_nope and q_pe swapped"):
        mla_decode(c.q_pe, c.q_nope, c.cache, c.seq_lens, c.page_table, ws(), c.sm_scale, impl=impl)


def bf16_cutlass_case(b=1):
    q_nope, q_pe = torch.zeros(b, 8, 512, dtype=torch.bfloat16), torch.zeros(b, 8, 64, dtype=torch.bfloat16)
    cache = torch.zeros(4, 64, 576, dtype=torch.bfloat16)
    return q_nope, q_pe, cache, torch.full((b,), 64, dtype=torch.int32), torch.ones(b, 2, dtype=torch.int32)


@pytest.mark.parametrize("scale, error, match", [
    (float("nan"), ValueError, "sm_scale must be a finite float > 0"), (-1.0, ValueError, "finite float > 0"),
    (0.0, ValueError, "finite float > 0"), (True, TypeError, "sm_scale must be a float"),
    ("0.1", TypeError, "sm_scale must be a float")])
def test_the_cutlass_path_checks_the_scale_as_every_impl_does(scale, error, match):
    q_nope, q_pe, cache, lens, table = bf16_cutlass_case()
    with pytest.raises(error, match=match):  # before "no GPU here": on a Blackwell GPU it reached the kernel
        mla_decode(q_nope, q_pe, cache, lens, table, ws(1 << 24), scale, impl="cutlass")


def test_the_cutlass_path_checks_devices_and_sizes_the_workspace_with_the_callers_sm_count():
    q_nope, q_pe, cache, lens, table = bf16_cutlass_case()
    with pytest.raises(ValueError, match="all tensors must be on one device"):
        mla_decode(q_nope, q_pe, cache, lens.to("meta"), table, ws(1 << 24), 0.1, impl="cutlass")
    need = get_workspace_size(128, 1, 8, -1)
    with pytest.raises(RuntimeError, match="cutlass_mla_decode needs"):  # the workspace passed; no kernel here
        mla_decode(q_nope, q_pe, cache, lens, table, ws(need), 0.1, -1, impl="cutlass", sm_count=8)
    with pytest.raises(ValueError, match=r"workspace must hold >= \d+ bytes \(get_workspace_size\(128, 1, 8, -1\)"):
        mla_decode(q_nope, q_pe, cache, lens, table, ws(need - 1), 0.1, -1, impl="cutlass", sm_count=8)


@pytest.mark.parametrize("kw, match", [
    (dict(stride_policy="rows"), "stride_policy must be one of"),
    *([(dict(impl="triton", stage1="bogus"), "stage1 must be None or one of"),
       (dict(impl="triton", launch=(3, 5, 1, 1)), "launch must be")] if triton_available() else []),
    (dict(impl="cutlass"), "q_nope last dim must be 512")])
def test_an_empty_batch_runs_the_checks_a_batch_of_one_runs(kw, match):
    c = case()
    for b in (1, 0):
        with pytest.raises(ValueError, match=match):
            mla_decode(c.q_nope[:b], c.q_pe[:b], c.cache, c.seq_lens[:b], c.page_table[:b], ws(), c.sm_scale, **kw)


@pytest.mark.parametrize("cost", [float("nan"), -1.0, float("inf"), "0.8"])
def test_the_choices_model_refuses_a_half_block_cost_that_is_not_a_finite_number(cost):
    lens = [4096] * 16
    for fn in (sc.makespans, sc.stage1_makespans, sc.prefers_balanced):
        with pytest.raises(ValueError, match="half_block_cost must be a finite number >= 0"):
            fn(lens, 64, 32, 132, 1, half_block_cost=cost)


@pytest.mark.skipif(not triton_available(), reason="schedule.segments runs the partition as a Triton kernel")
def test_segments_refuses_lengths_past_int32():
    with pytest.raises(ValueError, match=r"seq_lens: expected int32 values .* got \[16, 4294967301\]"):
        sc.segments([2**32 + 5, 16], 16, 4, 2, 16)


def test_pages_read_refuses_a_negative_stride_and_a_column_major_table():
    table = torch.arange(6, dtype=torch.int32).reshape(3, 2)
    with pytest.raises(ValueError, match="row_stride must be an int >= 0"):
        pages_read(table, [2, 2, 2], row_stride=-1)
    with pytest.raises(ValueError, match="row_stride must be an int >= 0"):
        pages_read(table, [2, 2, 2], row_stride=2.0)
    with pytest.raises(ValueError, match="page_table"):
        pages_read(table.t().contiguous().t(), [2, 2, 2], row_stride=2)
    assert pages_read(table, [2, 1, 2], row_stride=2) == [[0, 1], [2], [4, 5]]


def test_the_host_models_refuse_sizes_that_would_divide_by_zero_or_wrap():
    with pytest.raises(ValueError, match="slots must be >= 1, got 0"):
        sc.simulate([(0, 3)], 0)
    with pytest.raises(ValueError, match="overhead must be a finite number >= 0"):
        sc.simulate([(0, 3)], 1, float("nan"))
    with pytest.raises(ValueError, match="page_size must be >= 1, got 0"):
        sc.pages_per_program([5], 0, 16, 132, 1)
    with pytest.raises(ValueError, match=r"sm_count must be >= 0 \(0: the device's\), got -3"):
        get_workspace_size(4096, 1, -3, -1)  # was read as the device's count


IMPLS_HERE = ["torch", "cutlass"] + (["triton"] if triton_available() else [])


@pytest.mark.parametrize("impl", IMPLS_HERE)
@pytest.mark.parametrize("which", ["q_nope", "q_pe", "kv_c_and_k_pe_cache"])
def test_a_kernel_with_no_backward_refuses_inputs_that_require_grad(impl, which):
    # the custom ops have no backward: the output came back with no grad_fn, and a loss through it left the
    # input's gradient at zero, silently
    if impl == "cutlass":
        q_nope, q_pe, cache, lens, table = bf16_cutlass_case()
    else:
        c = case(d_latent=512, d_rope=64)
        q_nope, q_pe, cache, lens, table = c.q_nope, c.q_pe, c.cache, c.seq_lens, c.page_table
    args = {"q_nope": q_nope, "q_pe": q_pe, "kv_c_and_k_pe_cache": cache}
    args[which] = args[which].clone().requires_grad_()
    call = (args["q_nope"], args["q_pe"], args["kv_c_and_k_pe_cache"], lens, table, ws(1 << 24), 0.1)
    with pytest.raises(ValueError, match=f"impl='{impl}' is inference only .* got {which} requiring grad"):
        mla_decode(*call, impl=impl)
    if impl == "triton" and not TRITON_INTERPRET:
        return  # a GPU machine: its Triton runs on the GPU, not on these CPU tensors
    with torch.no_grad():  # the way a server calls it (and a detached input): refused only by what it lacks
        if impl == "cutlass":
            with pytest.raises(RuntimeError, match="cutlass_mla_decode needs"):
                mla_decode(*call, impl=impl)
        else:
            assert not mla_decode(*call, impl=impl).requires_grad


def test_the_reference_carries_the_gradient():
    c = case(d_latent=512, d_rope=64)
    q_nope = c.q_nope.clone().requires_grad_()
    out = mla_decode(q_nope, c.q_pe, c.cache, c.seq_lens, c.page_table, ws(), c.sm_scale, impl="reference")
    out.square().sum().backward()
    assert q_nope.grad is not None and q_nope.grad.abs().sum() > 0


def test_the_peers_refuse_lengths_and_tables_their_kernels_would_read_past():
    # SGLang's kv_indptr counted a length past the table row while kv_indices held only the row: its kernel
    # read past kv_indices; FlashMLA reads the table as given
    from mla_edu.kernels import peers

    c = random_decode_case(0, batch=2, heads=2, page_size=64, max_len=100, d_latent=512, d_rope=64)
    table = c.page_table
    width = table.size(1) * 64
    for lens, match in ((torch.tensor([width + 1, 1], dtype=torch.int32), rf"\[0, page_table.size\(1\) \* page = "
                         rf"{width}\], got \(request, length\) \[\(0, {width + 1}\)\]"),
                        (torch.tensor([1, -1], dtype=torch.int32), r"got \(request, length\) \[\(1, -1\)\]")):
        with pytest.raises(ValueError, match=match):
            peers.SGLangTriton(None, c.q_nope, c.q_pe, c.cache, lens, table, c.sm_scale, 4)
        with pytest.raises(ValueError, match=match):
            peers.FlashMLA(None, c.q_nope, c.q_pe, c.cache, lens, table, c.sm_scale)
    outside = table.clone()
    outside[1, 0] = c.cache.size(0)
    with pytest.raises(ValueError, match=rf"must lie in \[0, {c.cache.size(0)}\)"):
        peers.SGLangTriton(None, c.q_nope, c.q_pe, c.cache, c.seq_lens, outside, c.sm_scale, 4)
    assert (table[:, -1] < 0).all()  # the case's padded rows: entries past a length are never read, so allowed
    peers.SGLangTriton(None, c.q_nope, c.q_pe, c.cache, c.seq_lens, table, c.sm_scale, 4)
