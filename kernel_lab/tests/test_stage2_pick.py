"""kernel_lab.tools.stage2_pick: the committed verdict regenerates from the committed A/Bs, and the rule at its edges
(the geomean bar, the floor, control batches left out, the higher of two, a missing json)."""

from __future__ import annotations

import json
import shutil

import pytest

from kernel_lab.tools import stage2_pick as sp
from mla_edu.paths import REPO_ROOT

LAB = REPO_ROOT / "kernel_lab" / "results"


def test_the_committed_verdict_is_the_tools_output(tmp_path, capsys):
    paths = []
    for name in ("few_wide_pipelined", "long_pipelined"):
        (tmp_path / name).mkdir()
        paths.append(shutil.copy(LAB / f"partition_ab_h200_stage2_{name}.json", tmp_path / name / "partition_ab.json"))
    assert sp.main([str(p) for p in paths]) == (LAB / "stage2_pick_h200.txt").read_text(encoding="utf-8")
    assert capsys.readouterr().out.splitlines()[-1] == "few_wide_pipelined"


def ab(folder, xs, control=2.0):
    """An A/B json in ``folder`` (one pair): at h_q=64 and 128 with B=256 (``STAGE2_FEW_WIDE``) base / patched is
    ``xs``, at h_q=64, B=128 (a control) ``control``."""
    keys = [("giant", 64, 256), ("giant", 128, 256)][:len(xs)] + [("giant", 64, 128)]
    rows = lambda us: [{"family": f, "heads": h, "batch": b, "us": [u], "err": 0.0}  # noqa: E731
                       for (f, h, b), u in zip(keys, us)]
    data = {"info": {"model": [[f, h, b, 1.0, 1.0] for f, h, b in keys]},
            "runs": [{"variant": "base", "rows": rows([*xs, control])},
                     {"variant": "patched", "rows": rows([1.0] * (len(xs) + 1))}]}
    folder.mkdir()
    (folder / "partition_ab.json").write_text(json.dumps(data))
    return folder / "partition_ab.json"


@pytest.mark.parametrize("xs, taken", [
    ((1.0101,), True), ((1.0099,), False),  # the geomean bar, one batch
    ((1.05, 0.98), True), ((1.05, 0.9799), False),  # the floor: at it taken, below it not, whatever the geomean
    ((1.0, 1.0), False),
])
def test_the_rule_at_its_edges(tmp_path, xs, taken):
    got = sp.pick([ab(tmp_path / "few_wide_pipelined", xs, control=0.5 if taken else 2.0)])
    assert got[-1] == ("few_wide_pipelined" if taken else "none")  # the control batch never decides
    assert got[0].endswith("accept" if taken else "reject")


def test_of_two_taken_the_higher_geomean_and_a_missing_json_is_named(tmp_path):
    a = ab(tmp_path / "few_wide_pipelined", (1.02, 1.02))
    b = ab(tmp_path / "long_pipelined", (1.05, 1.03))
    assert sp.pick([a, b])[-1] == "long_pipelined" and sp.pick([b, a])[-1] == "long_pipelined"
    got = sp.pick([tmp_path / "few_wide_two" / "partition_ab.json", a])
    assert got[0] == "few_wide_two no json" and got[-1] == "few_wide_pipelined"
