"""Scenarios behave on the emulator as on the H200 (committed log); the checker flags every unsafe one. Both read
the pitfall registry only: a toy pitfall registered here runs through the runner and the checker."""

import re
from pathlib import Path

import pytest
import torch
from docs_text import NUMBER_WORDS

import mla_edu  # noqa: F401
from mla_edu.device import HAS_CUDA, TRITON_INTERPRET, triton_available
from mla_edu.graphs.check import CheckReport, check
from mla_edu.graphs.scenarios import (MATCHES, PITFALLS, Pitfall, Problem, ToyServer, check_problem, checker_row,
                                      classify, count, register, run_all, run_scenario, scenario, scenarios)
from mla_edu.graphs.scenarios.problem import default_prepare
from mla_edu.graphs.scenarios.toy_decode import paged_sum_torch

from mla_edu.paths import RESULTS_DIR as RESULTS
# Every test here runs the emulator on CPU tensors; the Triton scenarios then need Triton's
# interpreter (the default without a GPU). On a GPU machine they are left out here, and
# test_real_graphs_match_the_h200_log runs all of them, Triton included, on real graphs.
CPU_SCENARIOS = [s for s in scenarios() if (TRITON_INTERPRET and triton_available()) or not s.needs_triton]


def _gpu_outcomes(path: Path) -> dict[str, str]:
    rows = {}
    for line in path.read_text().splitlines():
        m = re.match(r"\|\s*cuda\s*\|\s*(cuda|emulated)\s*\|\s*(\S+)\s*\|\s*(.+?)\s*\|$", line)
        if m:
            rows[m.group(2)] = m.group(3)
    return rows


def test_emulator_outcomes_equal_the_records_and_the_h200_log():
    gpu = _gpu_outcomes(RESULTS / "graph_scenarios_h200_cuda.md")
    assert list(gpu) == [s.name for s in scenarios()]
    assert gpu == {s.name: s.expected("cuda") for s in scenarios()}
    cpu = {name: outcome for _, backend, name, outcome in run_all("cpu", "auto", CPU_SCENARIOS)
           if backend == "emulated"}
    assert cpu == {s.name: s.expected("emulated") for s in CPU_SCENARIOS}
    assert cpu == {s.name: gpu[s.name] for s in CPU_SCENARIOS}
    for s in scenarios():  # the pitfalls fail, their fixes pass
        assert (s.expected("cuda") == MATCHES) == s.safe == (s.fixed or s.pitfall.number is None)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_real_graphs_match_the_h200_log():
    gpu = _gpu_outcomes(RESULTS / "graph_scenarios_h200_cuda.md")
    rows = run_all("cuda", "auto")
    assert {backend for _, backend, _, _ in rows} == {"cuda"}
    assert {name: outcome for _, _, name, outcome in rows} == gpu == {s.name: s.expected("cuda") for s in scenarios()}


SAFE = [s for s in CPU_SCENARIOS if s.safe]
UNSAFE = [s for s in CPU_SCENARIOS if not s.safe]


def test_checker_no_false_alarm_over_100_random_schedules():
    runs = 0
    for s in SAFE:
        seeds = range(3) if s.needs_triton else range(19)  # the Triton interpreter is slow
        for seed in seeds:
            report = check_problem(s.build("cpu"), n_trials=4, seed=seed)
            assert report.ok, f"{s.name}, seed {seed}: {report}"
            runs += 1
    assert runs >= 100


@pytest.mark.parametrize("sc", UNSAFE, ids=lambda s: s.name)
def test_checker_flags_every_unsafe_scenario(sc):
    for seed in range(3):
        report = check_problem(sc.build("cpu"), n_trials=4, seed=seed)
        assert not report.ok and report.hint, f"{sc.name}, seed {seed}"
        assert sc.hint in report.hint


def test_checker_without_poison_still_catches_stale_and_padding():
    stale = check_problem(scenario("stale_buffer").build("cpu"), n_trials=3, poison=False)
    assert not stale.ok and "second replay" in stale.hint
    padded = check_problem(scenario("padded_slots").build("cpu"), n_trials=4, poison=False)
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
    with pytest.raises(ValueError, match="scenario: expected one of"):
        run_scenario("narrow_view", "cpu")


def test_six_pitfalls_in_eight_records():
    assert count() == 6 and len(PITFALLS) == 8 and len(scenarios()) == 14
    assert sorted({p.number for p in PITFALLS.values()} - {None}) == [1, 2, 3, 4, 5, 6]


def _doubled(device="cpu", fixed: bool = False) -> Problem:
    """A toy pitfall: the step doubles the sum into a buffer zeroed only at capture (fix: zeroed in the graph)."""
    s = ToyServer(device)
    acc = torch.zeros(4, s.kv_cache.shape[-1], device=s.device)

    def step():
        if fixed:
            acc.zero_()
        acc.add_(paged_sum_torch(s.kv_indices, s.seq_lens, s.kv_cache))
        return acc * 1.0

    return Problem("toy", s, step, default_prepare(s), s.truth, persistent=[acc, s.kv_indices])


@pytest.fixture
def toy():
    record = register(Pitfall("toy", count() + 1, _doubled, lambda dev: _doubled(dev, fixed=True),
                              outcome_cpu="wrong: stale state (2nd replay)",
                              outcome_cuda="wrong: stale state (2nd replay)", hint="never writes"))
    try:
        yield record
    finally:
        del PITFALLS["toy"]


def test_a_new_pitfall_is_one_record(toy):
    """Registered here and nowhere else: the runner, the table, the checker and the count pick it up."""
    assert count() == 7 and [s.name for s in scenarios()][-2:] == ["toy", "toy:fixed"]
    rows = run_all("cpu", "auto", [scenario("toy"), scenario("toy:fixed")])
    assert [(name, outcome) for _, _, name, outcome in rows] == [("toy", toy.outcome_cpu), ("toy:fixed", MATCHES)]
    assert checker_row(scenario("toy"), "cpu", 2)[1:3] == (False, "FF")
    assert "never writes" in checker_row(scenario("toy"), "cpu", 1)[3]
    assert checker_row(scenario("toy:fixed"), "cpu", 2) == ("toy:fixed", True, "..", "")


def test_a_record_is_checked_when_built_and_when_registered(toy):
    def build(dev):
        return _doubled(dev)

    with pytest.raises(ValueError, match="'toy' is already registered"):
        register(toy)
    with pytest.raises(ValueError, match="needs the checker's hint"):
        Pitfall("p", 1, build, None, outcome_cpu="wrong: all rows", outcome_cuda="wrong: all rows", hint=None)
    with pytest.raises(ValueError, match="needs the checker's hint"):
        Pitfall("p", None, build, None, outcome_cpu=MATCHES, outcome_cuda=MATCHES, hint="host value")
    with pytest.raises(ValueError, match="outcome_cuda must be one of"):
        Pitfall("p", 1, build, None, outcome_cpu="wrong: all rows", outcome_cuda="wrong", hint="x")
    with pytest.raises(ValueError, match="without ':fixed'"):
        Pitfall("p:fixed", 1, build, None, outcome_cpu=MATCHES, outcome_cuda=MATCHES, hint=None)
    with pytest.raises(ValueError, match="number must be a positive int or None, got 0"):
        Pitfall("p", 0, build, None, outcome_cpu=MATCHES, outcome_cuda=MATCHES, hint=None)
    with pytest.raises(TypeError, match="fix must be callable, got 3"):
        Pitfall("p", 1, build, 3, outcome_cpu=MATCHES, outcome_cuda=MATCHES, hint=None)
    with pytest.raises(TypeError, match="expected a Pitfall, got dict"):
        register({})
    with pytest.raises(ValueError, match="register the records of one pitfall one after another"):
        register(Pitfall("p", 2, build, None, outcome_cpu=MATCHES, outcome_cuda=MATCHES, hint=None))
    with pytest.raises(ValueError, match="backend: expected 'emulated' or 'cuda', got 'cpu'"):
        scenario("toy").expected("cpu")
    assert list(PITFALLS)[-1] == "toy"  # the refused records left the registry as it was


QUOTES = re.compile(r"\b(" + "|".join(NUMBER_WORDS) + r") (?:pitfalls\b|ways those rules break)", re.IGNORECASE)


def test_the_docs_quote_the_registrys_count():
    """Every "six pitfalls" of README, docs/ and notebook 05 is ``count()`` in words, and so is notebook 05's split
    into silent pitfalls and those whose capture CUDA refuses."""
    from mla_edu.paths import REPO_ROOT

    files = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")),
             REPO_ROOT / "notebooks" / "05_cuda_graphs_and_their_pitfalls.py"]
    quoted = {(f.name, m.group(1).lower()) for f in files for m in QUOTES.finditer(f.read_text(encoding="utf-8"))}
    assert {"README.md", "05_cuda_graphs_and_their_pitfalls.py"} <= {name for name, _ in quoted}
    assert quoted == {(name, NUMBER_WORDS[count()]) for name, _ in quoted}
    refused = len({s.pitfall.number for s in scenarios() if s.pitfall.number and s.refuses_capture})
    split = f"({NUMBER_WORDS[count() - refused]} silently, {NUMBER_WORDS[refused]} with an error at capture)"
    assert split in " ".join((REPO_ROOT / "notebooks" / "05_cuda_graphs_and_their_pitfalls.py").read_text().split())


@pytest.mark.skipif(not (TRITON_INTERPRET and triton_available()),
                    reason="the Triton scenarios on CPU tensors need Triton and its interpreter")
def test_the_committed_cpu_run_reproduces(capsys):
    """``python -m mla_edu.graphs.scenarios --check --schedules 3`` prints results/graph_scenarios_cpu.md below its
    first line (the torch version)."""
    from mla_edu.graphs.scenarios.__main__ import main

    main(["--check", "--schedules", "3", "--device", "cpu"])
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == (RESULTS / "graph_scenarios_cpu.md").read_text().splitlines()[1:]


@pytest.mark.parametrize("rows_written, label", [(1, "wrong: rows>0"), (0, "wrong: all rows")])
def test_an_output_the_replay_leaves_unwritten_is_caught_not_filled_by_eagers_answer(rows_written, label):
    # the step writes out[:n] with n a host int frozen at capture (1 there; 0: the graph writes nothing). The default
    # reference runs the step eagerly into the same buffer: the replay's unwritten rows held eager's right answer,
    # and the checker said OK. The eager run now puts the graph's outputs back as it found them.
    from mla_edu.graphs.emulator import host_tensor

    x, out = torch.zeros(4), torch.zeros(4)
    n = host_tensor(torch.zeros(1, dtype=torch.int64))

    def step():
        k = int(n[0])
        out[:k].copy_(x[:k] * 2)
        return out

    def make_inputs(gen, trial):
        k = rows_written if trial == -1 else 4
        return {"x": torch.randn(k, generator=gen), "n": k}

    report = check(step, make_inputs, static_inputs={"x": x}, prepare=lambda inp: n.fill_(inp["n"]), n_trials=2)
    assert not report.ok and label in report.failure, report


def test_an_output_the_check_does_not_own_is_left_as_it_was():
    # a step that returns a weight it reads (not one of its buffers): the check must not write into it
    w, x, out = torch.ones(4), torch.zeros(4), torch.zeros(4)

    def step():
        out.copy_(x * w)
        return out, w

    def make_inputs(gen, trial):
        return {"x": torch.randn(4, generator=gen)}

    report = check(step, make_inputs, static_inputs={"x": x}, n_trials=2)
    assert report.ok and torch.equal(w, torch.ones(4)), (report, w)


@pytest.mark.skipif(HAS_CUDA, reason="a machine without CUDA")
def test_an_emulated_graph_on_a_cuda_device_without_cuda_is_refused():
    # every CPU tensor counted as host memory there: the capture recorded nothing and each replay did nothing
    from mla_edu.graphs import Graph

    with pytest.raises(ValueError, match=r"device: expected cpu \(CUDA is not available here\), got cuda"):
        Graph(device="cuda", mode="emulated")


def test_capture_refuses_a_host_tensor_among_its_outputs_as_it_refuses_a_host_number():
    from mla_edu.graphs import Graph
    from mla_edu.graphs.emulator import host_tensor

    x, lens = torch.ones(4), host_tensor(torch.tensor([5, 3]))
    with pytest.raises(TypeError, match=r"got a host tensor \(output leaf 1 of 2\): host work runs once, at capture"):
        Graph.capture(lambda: (x * 2, lens.max()), device="cpu", mode="emulated")  # lens.max() stayed 5 forever
