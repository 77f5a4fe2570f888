"""kernel_lab.tools.partition_ab without a GPU: its table and markdown from a synthetic run (the model its json
stores), the committed H200 run's markdown, and its command line's errors."""

from __future__ import annotations

import json

import pytest

from kernel_lab.tools import long_tail as lt
from kernel_lab.tools import partition_ab as ab

#: The piece cap at every batch (base) and none (patched) on the giant family: the model piece_cap.patch gave
#: (the capped makespan; FlashMLA's, which the uncapped share matches at these batches).
MODEL = {(16, 16): (39, 15), (128, 16): (39, 24), (16, 64): (39, 19), (128, 64): (39, 33)}


def synthetic_run(tmp_path, base_us=10.0, patched_us=8.0):
    """Two pairs of processes over the giant family at B 16 and 64, h_q 16 and 128, the patch ``base_us /
    patched_us`` times faster on every batch."""
    rows = [(f, h, len(lens)) for f, h, lens in ab.problems(("giant",), (16, 64), (16, 128))]
    info = {"command": "python -m kernel_lab.tools.partition_ab", "patch": "p", "rounds": 2, "families": ["giant"],
            "batches": [16, 64], "heads": [16, 128], "sm_count": 132, "gpu": "test",
            "model": [[f, h, b, *MODEL[h, b]] for f, h, b in rows]}
    runs = [{"variant": v, "package": "x", "rows": [{"family": f, "heads": h, "batch": b, "err": 1e-3,
                                                    "us": [t, t * 1.01]} for f, h, b in rows]}
            for v, t in (("base", base_us), ("patched", patched_us)) * 2]
    path = tmp_path / "partition_ab.json"
    path.write_text(json.dumps({"info": info, "runs": runs}))
    return path


def test_the_table_reads_the_pairs_and_the_model(tmp_path):
    rows = ab.table(json.loads(synthetic_run(tmp_path).read_text()), lt.PATCH)
    assert [(r["heads"], r["batch"]) for r in rows] == [(16, 16), (128, 16), (16, 64), (128, 64)]
    assert all(r["x"] == pytest.approx(1.25) and r["x_min"] == r["x_max"] for r in rows)
    assert all(r["base_us"] == pytest.approx(10.05) for r in rows)
    # the stored model: the capped makespan (long_tail's) and the uncapped one, FlashMLA's at these batches
    capped = {(r.heads, r.batch): (r.capped, r.fm) for r in lt.rows() if r.family == "giant"}
    for r in rows:
        assert tuple(r["model"]) == MODEL[r["heads"], r["batch"]] == capped[r["heads"], r["batch"]]
        assert r["changed"] == (r["model"][0] != r["model"][1])
    assert all(r["changed"] for r in rows)


def test_the_markdown_gives_each_group_its_geomean(tmp_path):
    path = synthetic_run(tmp_path, 10.0, 12.5)
    ab.main(["--render", str(path), "--out", str(tmp_path)])
    text = (tmp_path / "partition_ab.md").read_text()
    assert "## Batches the patch changes\n\n4 batches, base / patched geomean 0.800" in text
    assert "| giant | 16 | 16 | 39 -> 15 | 10.1 | 12.6 | 0.800 [0.800-0.800] | 1.0e-03 |" in text
    assert "leaves alone" not in text


def test_a_run_with_an_unpaired_process_counts_whole_pairs_only(tmp_path):
    path = synthetic_run(tmp_path)
    data = json.loads(path.read_text())
    data["runs"] = data["runs"][:3]
    assert len(ab.table(data, lt.PATCH)) == 4
    data["runs"] = data["runs"][:1]
    assert ab.table(data, lt.PATCH) == []


@pytest.mark.parametrize("argv, says", [
    (["--families", "giant,nope"], "--families: expected names of"),
    (["--pairs", "0"], "expected at least 1"),
    (["--patch", "/no/such.patch"], "--patch"),
    (["--render", "/no/such.json"], "partition A/B json"),
])
def test_bad_arguments_are_refused_with_what_was_expected(tmp_path, capsys, argv, says):
    with pytest.raises(SystemExit):
        ab.main(["--out", str(tmp_path), *argv])
    assert says in capsys.readouterr().err


def test_an_out_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    with pytest.raises(SystemExit):
        ab.main(["--out", str(tmp_path / "f"), "--render", str(synthetic_run(tmp_path))])
    assert "--out: expected a folder" in capsys.readouterr().err


def test_a_patched_folder_without_the_package_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        ab.main(["--out", str(tmp_path), "--patched", str(tmp_path)])
    assert "--patched: expected a folder holding mla_edu/" in capsys.readouterr().err


@pytest.mark.parametrize("name, patch", [
    ("partition_ab_h200", None),
    ("partition_ab_h200_many_uncapped", "kernel_lab/results/partition_variants/many_uncapped.patch"),
    ("partition_ab_h200_h32", "kernel_lab/results/partition_variants/h32_block16.patch"),
])
def test_the_committed_markdown_is_the_render_of_the_committed_json(tmp_path, name, patch):
    result = ab.RESULT.with_name(f"{name}.json")
    extra = ["--patch", str(lt.REPO_ROOT / patch)] if patch else []
    ab.main(["--render", str(result), "--out", str(tmp_path), *extra])
    committed = result.with_suffix(".md").read_text(encoding="utf-8")
    assert (tmp_path / "partition_ab.md").read_text(encoding="utf-8") == committed, (
        f"kernel_lab/results/{name}.md is not the render of its json: python -m kernel_lab.tools.partition_ab "
        f"--render kernel_lab/results/{name}.json --out DIR" + (f" --patch {patch}" if patch else ""))


def test_the_committed_run_stores_the_model_of_the_commit_it_ran_at():
    info = json.loads(ab.RESULT.read_text(encoding="utf-8"))["info"]
    assert len(info["model"]) == len(info["families"]) * len(info["batches"]) * len(info["heads"])
    assert "5a3b22c" in info["note"]
    # the base's model is the piece cap at every batch on the parts of 5a3b22c: long_tail's 'capped'
    lens = {(f, h, len(x)): x for f, h, x in ab.problems(info["families"], info["batches"], info["heads"])}
    for f, h, b, base, _ in info["model"]:
        assert base == lt.benched_makespan(lens[f, h, b], h, info["sm_count"])
