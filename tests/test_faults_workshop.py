"""The checkers and the main job's command line refuse what they cannot judge or run, in one line (an audit's
findings, each reproduced here first): a 0-d answer, a notebook's truth outside its options, settings too big for
the machine, a --json-out that cannot be written, a panel's split mode of the wrong type."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from cli_run import main_exit
from mla_edu.workshop import checks
from mla_edu.workshop.panel import PanelSettings

REPRO = "mla_edu.case_study.repro"


@pytest.mark.parametrize("answer", [torch.tensor(6), np.array(6)], ids=["torch", "numpy"])
def test_a_0d_answer_for_a_set_is_named_as_such(answer):
    r = checks.check_items("q", answer, {6})
    assert not r.passed and "expected a set or list, got a 0-d" in r.message, r.message


@pytest.mark.parametrize("truth", ["zeros", "other", 1, None])
def test_a_truth_outside_the_options_is_the_notebooks_error_not_the_learners(truth):
    # every answer would otherwise be told "the run contradicts" its option
    with pytest.raises(ValueError, match=r"q: the measured answer .* is none of the options \['-inf', '0', 'nan'\]"):
        checks.check_choice("q", "0", {"-inf": "log 0", "0": "zero", "nan": "not a number"}, truth)
    assert checks.check_choice("q", True, {True: "yes", False: "no"}, torch.tensor(True)).passed  # a 0-d bool


@pytest.mark.parametrize("flag", [["--context-length", "100000000"], ["--cuda-graph-bs", "100000000"]])
def test_repro_reports_settings_the_machine_cannot_hold_as_a_usage_error(flag, capsys):
    code, err = main_exit(REPRO, ["--num-questions", "2", *flag], capsys)
    assert code == 2 and "error: these settings need at least" in err and "Traceback" not in err, err


def test_repro_refuses_a_json_out_it_could_not_write_before_it_runs(tmp_path, capsys):
    dangling = tmp_path / "link.json"
    os.symlink(tmp_path / "no_such_folder" / "x.json", dangling)
    code, err = main_exit(REPRO, ["--num-questions", "2", "--json-out", str(dangling)], capsys)
    assert code == 2 and "--json-out: expected a file in an existing folder" in err and "no_such_folder" in err, err
    code, err = main_exit(REPRO, ["--num-questions", "2", "--json-out", ""], capsys)
    assert code == 2 and "--json-out: expected a file name, got an empty one" in err, err


@pytest.mark.parametrize("mode", [[1], {"auto"}, torch.tensor([1, 1]), np.int64(1), 1.0, True])
def test_the_panels_split_mode_refuses_other_types_with_its_message(mode):
    with pytest.raises(ValueError, match="split mode: expected '1' or 'auto'"):
        PanelSettings(num_kv_splits=mode)
