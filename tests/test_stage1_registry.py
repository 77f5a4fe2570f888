"""Stage-1 kernels behind one registry (``kernels.stage1``): a new kind is one module and one entry (a toy kind,
``tests/toy_stage1.py``, as ``tests/test_backend_registry.py`` adds a toy backend), and the choice rule "seesaw
where it applies, else tma" is the registry's, for every caller."""

import pytest
import torch

from mla_edu.kernels import mla_decode, observe_plans, stage1
from mla_edu.kernels.cases import random_decode_case
from markers import CPU_TRITON

pytestmark = pytest.mark.triton  # stage 2 and the built-in kinds are Triton kernels

LENS = [1, 16, 50, 37, 0]


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(stage1.KINDS, "toy", stage1.Stage1Kind("toy_stage1", gluon=False))  # the one entry
    return "toy"


@CPU_TRITON
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("checked", [False, True])
def test_a_toy_kind_is_one_module_and_one_entry(toy, splits, checked):
    case = random_decode_case(0, heads=8, page_size=16, lens=LENS)
    plans = []
    table = case.page_table.clone()
    table[3, 1] = 10**6 if checked else table[3, 1]  # an out-of-range page: NaN for request 3 when checked
    with observe_plans(lambda plan, *_: plans.append(plan)):
        out = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, table, case.workspace(splits),
                         case.sm_scale, splits, impl="triton", stage1=toy, checked=checked)
        tl = mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, table, case.workspace(splits),
                        case.sm_scale, splits, impl="triton", stage1="tl", checked=checked)
    assert [(p.stage1, p.launch) for p in plans] == [("toy", (8, 1, 1, 1)), ("tl", plans[1].launch)]
    assert torch.equal(out.isnan(), tl.isnan()) and out[3].isnan().all() == checked
    ok = [0, 1, 2, 4] if checked else list(range(5))
    ref = case.dense_f64()[ok]
    assert ((out[ok].double() - ref).abs().max() / ref.abs().max()).item() < 1e-5


def test_an_unregistered_kind_is_refused_and_a_kind_without_a_compile_spec_is_not_compiled(toy):
    case = random_decode_case(0, heads=8, page_size=16, lens=LENS)
    with pytest.raises(ValueError, match=r"stage1 must be None or one of \('tl', 'cp.async', 'tma', 'seesaw', "
                                         r"'toy'\), got 'toys'"):
        mla_decode(case.q_nope, case.q_pe, case.cache, case.seq_lens, case.page_table, case.workspace(1),
                   case.sm_scale, 1, impl="triton", stage1="toys")
    from mla_edu.kernels import sm90

    with pytest.raises(ValueError, match="stage-1 kind 'toy' has no compile_spec"):
        sm90.spec_for("toy")


@pytest.mark.parametrize("page, block_h, runs", [(64, 64, "seesaw"), (64, 16, "tma"), (64, 32, "tma"),
                                                 (32, 64, "tma")])
def test_the_choice_rule_is_the_registry_s(page, block_h, runs):
    # "seesaw" runs at 64 heads a program on a cache TMA reads (pages of whole 64-token tiles); elsewhere its
    # fallback, "tma"; the other kinds run as named
    cache = torch.empty(4, page, 576, dtype=torch.bfloat16)
    assert stage1.running_kind("seesaw", block_h, cache) == runs
    assert [stage1.running_kind(k, block_h, cache) for k in ("tl", "cp.async", "tma")] == ["tl", "cp.async", "tma"]
    assert stage1.KINDS["seesaw"].fallback == "tma" and stage1.DEFAULT_GLUON == "seesaw"
