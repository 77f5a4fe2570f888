"""The kernel lab's measuring tools, on any machine: ``kernel_lab.tools.stall_summary`` (Nsight Compute's
source-level stall samples, per kernel), ``kernel_lab.tools.stage1_ab``'s argument check and its reading of its own
output, ``kernel_lab.tools.back_to_back``'s (both time on a GPU), and ``family_bench``'s clock log."""

import gzip
import math

import pytest

from kernel_lab.tools import back_to_back, stage1_ab, stall_summary

HEADER = '"Address","Source","Warp Stall Sampling (All Samples)","stall_long_sb","stall_barrier","stall_wait"'


def table(name: str, rows: list[tuple]) -> str:
    return f'"Kernel Name","{name}",\n{HEADER}\n' + "".join(
        f'"0x{i:x}","{src}","{sum(s)}","{s[0]}","{s[1]}","{s[2]}"\n' for i, (src, *s) in enumerate(rows))


def test_stall_summary_shares_a_common_scale_and_names_the_waiting_barrier(tmp_path):
    text = (table("mine", [("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR5+0x10], R1", 0, 0, 0), ("@!P0 BRA 0x90", 60, 0, 0),
                           ("WARPGROUP.DEPBAR.LE gsb0, 0x0", 0, 30, 10)])
            + table("void peer<T>(P)", [("@!P0 BRA 0x40", 40, 0, 0), ("HGMMA.64x256x16", 0, 0, 10)]))
    out = stall_summary.summary(text)
    assert "== mine: 3 instructions, 100 samples (100.0 on the common scale)" in out
    assert "== peer: 2 instructions, 50 samples (50.0 on the common scale)" in out  # the template arguments cut
    assert "stall_long_sb             60.0%    60.0" in out and "stall_long_sb             80.0%    40.0" in out
    assert "60  SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR5+0x10], R1 ; @!P0 BRA 0x90" in out  # the branch's barrier
    path = tmp_path / "s.csv.gz"
    path.write_bytes(gzip.compress(text.encode()))
    stall_summary.main([str(path)])


def test_stage1_ab_refuses_versions_it_could_not_tell_apart():
    with pytest.raises(ValueError, match="distinct file names other than new.py"):
        stage1_ab.run(["a/v.py", "b/v.py"])
    with pytest.raises(ValueError, match="distinct file names other than new.py"):
        stage1_ab.run(["new.py"])
    with pytest.raises(ValueError, match="other than new.py and aa.py"):  # --aa's own name taken
        stage1_ab.run(["old/aa.py"], aa=True)
    with pytest.raises(ValueError, match="nothing to time"):
        stage1_ab.run([])
    with pytest.raises(SystemExit):  # the command line says so too
        stage1_ab.main([])


def test_stage1_ab_reads_its_own_output_back():
    out = ("FlashMLA: installed\n"
           "u B64 1024 h128 rule1 parts66: rule: a 45.1 (0.891x, same=False) b_2 44.2 (0.874x, same=True) new 50.6"
           "  balanced: a 52.0 (0.884x, same=False) b_2 52.3 (0.889x, same=False) new 58.8  FlashMLA 35.2\n"
           "r B16 2048 h128 rule4 parts66: rule: a 1.0 (1.000x, same=True) b_2 2.0 (2.000x, same=True) new 1.0"
           "  balanced: a 3.0 (1.500x, same=True) b_2 4.0 (2.000x, same=True) new 2.0  FlashMLA nan\n")
    x, us = stage1_ab.parse(out), stage1_ab.times(out)
    assert x == {("u B64 1024", "rule", "a"): 0.891, ("u B64 1024", "rule", "b_2"): 0.874,
                 ("u B64 1024", "balanced", "a"): 0.884, ("u B64 1024", "balanced", "b_2"): 0.889,
                 ("r B16 2048", "rule", "a"): 1.0, ("r B16 2048", "rule", "b_2"): 2.0,
                 ("r B16 2048", "balanced", "a"): 1.5, ("r B16 2048", "balanced", "b_2"): 2.0}
    assert len(us) == 14 and us["u B64 1024", "rule", "new"] == 50.6 and us["u B64 1024", "balanced", "b_2"] == 52.3
    assert us["u B64 1024", "FlashMLA", "FlashMLA"] == 35.2 and math.isnan(us["r B16 2048", "FlashMLA", "FlashMLA"])


def test_back_to_back_reads_its_own_output_back_and_needs_a_gpu(monkeypatch):
    out = ("FlashMLA: installed\nseparator alone 0.9\n"
           "u B64 1024 h128 rule1: back to back / separated us  mla_edu 40.1 / 41.4 (+1.4)  FlashMLA 35.7 / 37.2 "
           "(+1.5)\n"
           "u B64 4096 h128 rule1: back to back / separated us  mla_edu 131.8 / 134.6 (+2.8)  FlashMLA 124.2 / 124.0 "
           "(-0.2)\n")
    assert back_to_back.parse(out) == {"separator": 0.9, ("u B64 1024", "mla_edu"): (40.1, 41.4, 1.4),
                                       ("u B64 1024", "FlashMLA"): (35.7, 37.2, 1.5),
                                       ("u B64 4096", "mla_edu"): (131.8, 134.6, 2.8),
                                       ("u B64 4096", "FlashMLA"): (124.2, 124.0, -0.2)}
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        back_to_back.run()


def test_family_bench_reads_the_clocks_and_names_every_slowed_problem():
    """``family_bench``'s clock log: nvidia-smi's line parsed, a malformed one refused by name, and the summary names
    the problems measured under a slowdown reason (the power cap 0x4 too; not idle 0x1, an application clock 0x2, sync
    boost 0x10 or the display clock 0x100) and no others."""
    from kernel_lab.tools import family_bench as fb

    assert fb.parse_gpu_state("1980, 3201, 41, 312.55, 700.00, 0x0000000000000004\n") == {
        "sm_mhz": 1980, "mem_mhz": 3201, "temp_c": 41, "power_w": 312.6, "power_limit_w": 700.0, "reasons": 4}
    for bad in ("", "1980, 3201, 41", "1980, 3201, 41, [N/A], 700, 0x0", "1980, 3201, 41, 300, 700, 0x0, 7"):
        with pytest.raises(ValueError, match=r"nvidia-smi: expected 6 values \(clocks.sm, .*\), got"):
            fb.parse_gpu_state(bad)
    rows = [{"family": f, "heads": 64, "batch": 128, "gpu_after": {"sm_mhz": sm, "mem_mhz": 3201, "temp_c": t,
                                                                    "power_w": 500.0, "reasons": why}}
            for f, sm, t, why in (("a", 1980, 40, 0x0), ("b", 1755, 70, 0x20), ("c", 1980, 45, 0x113),
                                  ("d", 1830, 66, 0x4))]
    out = fb.clock_summary(rows + [{"family": "e", "heads": 16, "batch": 4, "gpu_after": {"error": "no nvidia-smi"}}])
    assert out == ("Clocks after each of 4 problems (nvidia-smi): SM 1755-1980 MHz, memory 3201-3201 MHz, at most 70 C "
                   "and 500 W; a slowdown reason at 2: b h64 B128 (0x20), d h64 B128 (0x4).")
    assert fb.clock_summary(rows[:1]).endswith("a slowdown reason at none.")
    rows[0]["gpu_after"]["power_limit_w"] = 700.0
    assert "at most 40 C and 500 W (limit 700 W); a slowdown reason at none." in fb.clock_summary(rows[:1])
    # each round starts at another option: in three rounds of six, every option's predecessor changes
    names = list("abcdef")
    orders = [fb.round_order(names, i, 3) for i in range(3)]
    assert orders == [list("abcdef"), list("cdefab"), list("efabcd")]
    assert all(sorted(o) == names for o in orders) and fb.round_order(names, 0, 1) == names
    assert fb.clock_summary([{"family": "x", "heads": 16, "batch": 1}]) == "Clocks: not recorded in this run."
