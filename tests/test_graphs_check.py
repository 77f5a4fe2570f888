"""Scenarios behave on the emulator as on the H200 (committed log); the checker flags every unsafe one."""

import re
from pathlib import Path

import pytest
import torch

import mla_edu  # noqa: F401
from mla_edu.device import HAS_CUDA, TRITON_INTERPRET
from mla_edu.graphs.check import CheckReport, check
from mla_edu.graphs.scenarios import EXPECTED, PROBLEMS, SCENARIOS, check_problem, classify, run_all

from mla_edu.paths import RESULTS_DIR as RESULTS
# Every test here runs the emulator on CPU tensors; the Triton scenarios then need Triton's
# interpreter (the default without a GPU). On a GPU machine they are left out here, and
# test_real_graphs_match_the_h200_log runs all of them, Triton included, on real graphs.
CPU_NAMES = [n for n in SCENARIOS if TRITON_INTERPRET or "triton" not in n]


def _gpu_outcomes(path: Path) -> dict[str, str]:
    rows = {}
    for line in path.read_text().splitlines():
        m = re.match(r"\|\s*cuda\s*\|\s*(cuda|emulated)\s*\|\s*(\S+)\s*\|\s*(.+?)\s*\|$", line)
        if m:
            rows[m.group(2)] = m.group(3)
    return rows


def test_emulator_outcomes_equal_the_h200_log():
    gpu = _gpu_outcomes(RESULTS / "graph_scenarios_h200_cuda.md")
    assert set(gpu) == set(SCENARIOS)
    cpu = {name: outcome for _, backend, name, outcome in run_all("cpu", "auto", CPU_NAMES) if backend == "emulated"}
    assert cpu == {name: gpu[name] for name in CPU_NAMES}
    for name, outcome in EXPECTED.items():  # the pitfalls fail, their fixes pass
        assert gpu[name] == outcome
        if name + ":fixed" in gpu:
            assert gpu[name + ":fixed"] == "matches eager"
    assert gpu["static_buffers"] == "matches eager"


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_real_graphs_match_the_h200_log():
    gpu = _gpu_outcomes(RESULTS / "graph_scenarios_h200_cuda.md")
    rows = run_all("cuda", "auto")
    assert {backend for _, backend, _, _ in rows} == {"cuda"}
    assert {name: outcome for _, _, name, outcome in rows} == gpu


CPU_PROBLEMS = [n for n in PROBLEMS if TRITON_INTERPRET or "triton" not in n]
SAFE = [n for n in CPU_PROBLEMS if n.endswith(":fixed") or n == "static_buffers"]
UNSAFE = [n for n in CPU_PROBLEMS if n not in SAFE]


def test_checker_no_false_alarm_over_100_random_schedules():
    runs = 0
    for name in SAFE:
        seeds = range(3) if "triton" in name else range(19)  # the Triton interpreter is slow
        for seed in seeds:
            report = check_problem(PROBLEMS[name]("cpu"), n_trials=4, seed=seed)
            assert report.ok, f"{name}, seed {seed}: {report}"
            runs += 1
    assert runs >= 100


@pytest.mark.parametrize("name", UNSAFE)
def test_checker_flags_every_unsafe_scenario(name):
    for seed in range(3):
        report = check_problem(PROBLEMS[name]("cpu"), n_trials=4, seed=seed)
        assert not report.ok and report.hint, f"{name}, seed {seed}"
    expected_hint = {"frozen_scalar": "host value", "narrow_view/torch": "row stride",
                     "narrow_view/triton": "row stride", "freed_pool_reuse": "freed capture-time allocation",
                     "stale_buffer": "never writes", "padded_slots": "never writes",
                     "sync_in_capture": "capture refused"}[name]
    assert expected_hint in report.hint


def test_checker_without_poison_still_catches_stale_and_padding():
    stale = check_problem(PROBLEMS["stale_buffer"]("cpu"), n_trials=3, poison=False)
    assert not stale.ok and "second replay" in stale.hint
    padded = check_problem(PROBLEMS["padded_slots"]("cpu"), n_trials=4, poison=False)
    assert not padded.ok and "padded slots" in padded.hint


def test_check_on_a_plain_step_and_report_text():
    w = torch.randn(8, 8)
    x = torch.zeros(4, 8)
    scale = {"s": 2.0}

    def step():
        return (x @ w) * scale["s"]

    def make_inputs(gen, trial):
        n = 4 if trial < 0 else int(torch.randint(1, 5, (1,), generator=gen))
        return {"x": torch.randn(n, 8, generator=gen)}

    ok = check(step, make_inputs, static_inputs={"x": x}, reference=lambda inp: (inp["x"] @ w) * scale["s"])
    assert ok.ok and ok.trials == 8 and "OK" in str(ok)

    def host_scaled():
        return (x @ w) * float(x.abs().sum() > -1) * scale["s"]  # bool() of a tensor: refused
    bad = check(host_scaled, make_inputs, static_inputs={"x": x}, reference=lambda inp: (inp["x"] @ w) * 2.0)
    assert not bad.ok and "capture refused" in bad.hint and "UNSAFE" in str(bad)


def test_classify_labels():
    ref = torch.arange(12.0).view(4, 3)
    assert classify(ref.clone(), ref) == "matches eager"
    wrong = ref.clone()
    wrong[1:] += 1
    assert classify(wrong, ref) == "wrong: rows>0"
    assert classify(ref + 1, ref) == "wrong: all rows"
    some = ref.clone()
    some[2] = float("nan")
    assert classify(some, ref) == "NaN"
    some[2] = 0.5
    assert classify(some, ref) == "wrong: some rows"


def test_check_rejects_bad_arguments():
    x = torch.zeros(3)
    with pytest.raises(TypeError, match="callables"):
        check(1, lambda g, t: {}, static_inputs={"x": x})
    with pytest.raises(TypeError, match="static_inputs"):
        check(lambda: x, lambda g, t: {}, static_inputs=[x])
    with pytest.raises(ValueError, match="n_trials"):
        check(lambda: x, lambda g, t: {}, static_inputs={"x": x}, n_trials=0)
    with pytest.raises(ValueError, match="does not fit"):
        check(lambda: x + 1, lambda g, t: {"x": torch.zeros(5)}, static_inputs={"x": x})
    assert isinstance(check(lambda: x + 1, lambda g, t: {"x": torch.ones(2)}, static_inputs={"x": x},
                            n_trials=1), CheckReport)


def test_run_scenario_refuses_an_unknown_name():
    from mla_edu.graphs.scenarios import run_scenario

    with pytest.raises(ValueError, match="scenario: expected one of"):
        run_scenario("narrow_view", "cpu")
