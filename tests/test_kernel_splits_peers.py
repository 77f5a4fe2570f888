"""The Triton kernel's split rule (``triton_num_kv_splits``) and the benchmark's peer loaders (CPU)."""

import sys

import pytest

from mla_edu.kernels import SPLIT_CHOICES, gpu_block_h, num_kv_splits_for, triton_num_kv_splits
from mla_edu.kernels import peers


@pytest.mark.parametrize("heads,expected", [(1, 16), (16, 16), (20, 32), (64, 64), (128, 64)])
def test_gpu_block_h(heads, expected):
    assert gpu_block_h(heads) == expected


def test_gpu_block_h_takes_16_heads_for_tiny_problems():
    # 1 request x 2 head blocks x 8 pages = 16 programs at most: 16-head programs give 4x as many
    assert gpu_block_h(128, batch=1, n_pages=8) == 16
    assert gpu_block_h(128, batch=1, n_pages=32) == 64  # 64 programs of 64 heads: large enough
    assert gpu_block_h(128, batch=8, n_pages=8) == 64


@pytest.mark.parametrize("length", [64, 512, 4096, 32768])
@pytest.mark.parametrize("batch", [1, 8, 64, 128])
@pytest.mark.parametrize("heads", [16, 128])
@pytest.mark.parametrize("page", [64, 128])
def test_rule_picks_an_allowed_split(length, batch, heads, page):
    s = triton_num_kv_splits(length, batch, heads, page, 132)
    assert s in SPLIT_CHOICES and s <= max(1, -(-length // page))


def test_rule_counts_waves_and_head_blocks():
    # one request, long context: as many splits as allowed (one wave of 64 programs)
    assert triton_num_kv_splits(32768, 1, 128, 64, 132) == 32
    # 128 requests x 2 head blocks = 256 programs, two waves on 132 SMs already: no split
    assert triton_num_kv_splits(4096, 128, 128, 64, 132) == 1
    # h_q=128, B=64: 128 programs, one wave: no split; sgl-kernel's heuristic ignores heads and gives 2
    assert triton_num_kv_splits(4096, 64, 128, 64, 132) == 1
    assert num_kv_splits_for(4096, 64, 132, -1) == 2
    # h_q=16, B=64: 2 splits (128 programs, one wave)
    assert triton_num_kv_splits(4096, 64, 16, 64, 132) == 2


@pytest.mark.parametrize("args,exc", [((0, 1, 16, 64), ValueError), ((64, 1, 0, 64), ValueError),
                                      ((64, 1, 16, 0), ValueError), ((64.0, 1, 16, 64), TypeError)])
def test_rule_rejects_bad_arguments(args, exc):
    with pytest.raises(exc):
        triton_num_kv_splits(*args)


def test_sglang_loader_says_why_when_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    mod, why = peers.load_sglang_decode()
    assert mod is None and "sglang is not installed" in why


def test_sglang_loader_stubs_only_is_hip(monkeypatch, tmp_path):
    # a stand-in for the wheel's file: it imports the one helper, as decode_attention.py does
    path = tmp_path / peers.SGLANG_MODULE
    path.parent.mkdir(parents=True)
    path.write_text("from sglang.srt.utils import is_hip\n_is_hip = is_hip()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mod, why = peers.load_sglang_decode()
    assert why is None and mod._is_hip is False
    assert "sglang.srt.utils" not in sys.modules and "sglang" not in sys.modules  # no package import, stub removed


def test_flash_mla_loader_says_why_when_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "flash_mla", None)  # import fails
    mod, why = peers.load_flash_mla()
    assert mod is None and "flash_mla is not importable" in why


def test_triton_backend_auto_split_uses_the_kernels_rule():
    import types

    import torch

    from mla_edu.serving.backends.triton import PAGE_SIZE, TritonBackend

    pool = types.SimpleNamespace(req_to_token=torch.zeros(4, 4096, dtype=torch.int32))
    auto = TritonBackend(pool, None, sm_scale=0.1, max_context_len=4096, num_heads=16, num_kv_splits=-1,
                          sm_count=132)
    fixed = TritonBackend(pool, None, sm_scale=0.1, max_context_len=4096, num_heads=16, num_kv_splits=3,
                           sm_count=132)
    width = auto.width * PAGE_SIZE
    for bs, heads in ((1, 16), (64, 16), (64, 128)):
        assert auto.splits(bs, heads) == triton_num_kv_splits(width, bs, heads, PAGE_SIZE, 132)
        assert fixed.splits(bs, heads) == 3
    assert auto.splits(64, 128) != num_kv_splits_for(width, 64, 132, -1)  # not sgl-kernel's heuristic
