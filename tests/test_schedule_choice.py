"""``schedule.prefers_balanced`` (the triton backend's choice per batch) and ``tools.schedule_choice``, which scores
it on the committed H200 run. The script's markdown is the committed ``results/schedule_choice_h200.md``, and the
model's picks are pinned on batches built to need one or the other."""

import copy
import json
from pathlib import Path

import pytest

from mla_edu.kernels import schedule as sc
from mla_edu.kernels.workspace import triton_num_kv_splits
from tools import schedule_choice as choice

ROOT = Path(__file__).resolve().parents[1]
BENCH = "results/kernel_bench_h200_schedule.json"


@pytest.fixture(scope="module")
def bench():
    return json.loads((ROOT / BENCH).read_text())


def test_the_committed_results_file_is_the_scripts_output(bench):
    result = choice.score(bench)
    result["engine"] = choice.engine_batches()
    assert choice.to_markdown(result, BENCH) == (ROOT / "results" / "schedule_choice_h200.md").read_text()
    # from the lengths: within 5% of the best at all 42 problems (all 30 uniform shapes); by the table's width (the
    # backend until v7) 36 (24) on the v20 run (35 and 23 on v19's)
    assert result["within_5pct"] == {"table": 36, "lengths": 42} and result["uniform_within_5pct"] == {
        "table": 24, "lengths": 30}
    assert all(e["pick"] == "rule" for e in result["engine"])  # the engine's small ragged batches keep the rule


@pytest.mark.parametrize("lens,heads,pick", [
    ([4096] * 64, 128, "rule"),  # uniform: nothing to balance, the schedule's overhead is extra
    ([16384] * 128, 16, "rule"),  # uniform and long: the two models within 10% of each other
    ([32768] + [64] * 63, 16, "balanced"),  # one long request: the rule's two programs for it run alone
    ([7702, 102] + [627] * 14, 128, "balanced"),
])
def test_the_model_picks_the_path_a_batch_needs(lens, heads, pick):
    width = -(-max(lens) // choice.PAGE)
    splits = triton_num_kv_splits(choice.PAGE * width, len(lens), heads, choice.PAGE, choice.SM_COUNT)
    rule, bal = sc.makespans(lens, choice.PAGE, heads, choice.SM_COUNT, splits)
    assert ("balanced" if bal < (1 - sc.BALANCED_MARGIN) * rule else "rule") == pick
    assert sc.prefers_balanced(lens, choice.PAGE, heads, choice.SM_COUNT, splits) == (pick == "balanced")


def test_a_bench_of_other_problems_is_refused(bench):
    fewer = copy.deepcopy(bench)
    fewer["uniform"].pop()
    with pytest.raises(ValueError, match="expected the default sets"):
        choice.score(fewer)
    other = copy.deepcopy(bench)
    other["ragged"][0]["lens_max"] += 1
    with pytest.raises(ValueError, match="does not match the bench's lengths"):
        choice.score(other)


def test_the_backend_path_refuses_a_row_timed_at_another_split_count(bench):
    from tools.schedule_bench import backend_path

    sms = bench["info"]["sm_count"]
    rows = bench["uniform"]
    assert {backend_path(r, sms) for r in rows} <= {"balanced", "rule"}  # every committed row at today's count
    stale = {**rows[0], "rule_splits": rows[0]["rule_splits"] * 2}
    with pytest.raises(ValueError, match=r"expected the split rule's count of the run \(\d+\) .* got \d+ from the "
                                         r"package now: rerun the bench"):
        backend_path(stale, sms)
