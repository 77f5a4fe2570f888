"""The case study's verdicts, predictions and groups, each pinned so that bending it fails a test.

``repro.verdict`` calls a row "= eager" within 0.02 of eager's accuracy; ``repro.MECHANISM`` predicts each
ablation row's effect; ``accuracy.run_bench`` splits the requests into groups (only row 0; a decode step run
eagerly) for the "why 0.060" table. Each docstring names the one-line changes applied to a copy of the
package to see it fail.
"""

from __future__ import annotations

import json
import math

import pytest

from mla_edu.case_study import repro
from mla_edu.case_study.accuracy import may_crash_the_gpu, run_bench
from mla_edu.model import task
from mla_edu.paths import RESULTS_DIR
from mla_edu.serving import Engine, ServerArgs
from mla_edu.serving.engine import Req
from tiny_models import random_tiny_model

EAGER = 252 / 256  # the committed eager accuracy (0.984): accuracies move in steps of 1/256
ROW = {"accuracy": EAGER, "errors": 0}


@pytest.mark.parametrize("correct,same", [
    (252, True), (253, True), (247, True),  # 5 questions below eager: 0.0195 <= 0.02
    (246, False),  # 6 below: 0.0234, the first step past 0.02
    (226, False),  # 26 below: 0.102, between 0.02 and 0.2 (a loosened threshold would call it "= eager")
    (200, False), (255, True),
])
def test_verdict_same_as_eager_within_0_02(correct, same):
    """"= eager" exactly when within 0.02 of eager, on the steps a 256-question run can take: 5 questions
    apart (0.0195) is the same, 6 (0.0234) and 26 (0.102) are not. The prediction is met or "(NOT as
    predicted)" accordingly, for each kind of prediction.

    Bent in a copy, fails here: ``<= 0.02`` -> ``<= 0.2`` (26 apart called "= eager"), -> ``<= 0.03`` (6 apart),
    -> ``< 0.01`` (5 apart not the same); ``same == (prediction != HARMFUL)`` -> ``(prediction == HARMLESS)``
    (a met "harmless, or a crash" prediction reported as missed).
    """
    r = {**ROW, "accuracy": correct / 256}
    for prediction in (repro.HARMLESS, repro.HARMLESS_OR_CRASH, repro.HARMFUL):
        seen = repro.verdict(prediction, r, EAGER)
        assert seen.startswith("= eager") == same
        if not same:
            assert seen.startswith(f"{(correct - 252) / 256:+.3f} vs eager")
        assert seen.endswith("(NOT as predicted)") == (same == (prediction == repro.HARMFUL))


def test_verdict_names_nans_and_crashes():
    """A harmful row names its NaN answers; a crash is as predicted only where "harmless, or a crash on a
    GPU" was predicted. Bent: the crash's ``prediction == HARMLESS_OR_CRASH`` test -> ``!= HARMFUL``."""
    assert repro.verdict(repro.HARMFUL, {"accuracy": 15 / 256, "errors": 231}, EAGER) == "-0.926 vs eager, 231 NaN"
    crash = {**ROW, "crashed": "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"}
    assert repro.verdict(repro.HARMLESS_OR_CRASH, crash, EAGER) == "crashed: " + crash["crashed"]
    for prediction in (repro.HARMLESS, repro.HARMFUL):
        assert repro.verdict(prediction, crash, EAGER).endswith("(NOT as predicted)")


def _committed(name: str) -> dict:
    return json.loads((RESULTS_DIR / f"repro_{name}.json").read_text())


def test_each_ablation_rows_prediction_follows_the_evidence():
    """Each row's prediction, derived from what is known of it: harmful where the committed runs (CPU
    emulator fp32 and H200 bf16, both splits) are more than 0.02 from eager; otherwise "harmless, or a crash
    on a GPU" where a configuration of the row may crash a GPU (``accuracy.may_crash_the_gpu``: graphs keep
    a workspace Python dropped), else harmless. And no committed row's verdict reads "(NOT as predicted)".

    Bent in a copy, fails here: the workspace row's prediction ``HARMLESS_OR_CRASH`` -> ``HARMLESS`` (it may
    crash on a GPU); any row's ``HARMFUL`` <-> ``HARMLESS``.
    """
    runs = [_committed("cpu"), _committed("h200_bfloat16")]
    labels = [label for label, _, _ in repro.ABLATION]
    assert sorted(labels) == sorted(repro.MECHANISM)
    for i, (label, defects, poison_fill) in enumerate(repro.ABLATION):
        rows = [res["ablation"][2 * i + j] for res in runs for j in range(len(repro.WORLDS))]
        assert all(r["defects"] == sorted(defects) and r["poison_fill"] == poison_fill for r in rows), label
        harmful = [abs(r["accuracy"] - res["table"]["eager"]["accuracy"]) > 0.02
                   for res in runs for r in res["ablation"][2 * i: 2 * i + 2]]
        assert len(set(harmful)) == 1, f"{label}: harmful in some runs only"
        crash = any(may_crash_the_gpu(ServerArgs(device="cuda", attention_backend="cutlass_mla", defects=defects,
                                                 poison_fill=poison_fill, num_kv_splits=splits))
                    for splits, _ in repro.WORLDS)
        expected = repro.HARMFUL if harmful[0] else repro.HARMLESS_OR_CRASH if crash else repro.HARMLESS
        assert repro.MECHANISM[label][0] == expected, label
        for res in runs:
            for r in res["ablation"][2 * i: 2 * i + 2]:
                assert "NOT as predicted" not in repro.verdict(expected, r, res["table"]["eager"]["accuracy"])
    assert repro.MECHANISM["workspace"][0] == repro.HARMLESS_OR_CRASH  # the one row whose hazard is a crash


# ---- the groups of the "why 0.060" table, on hand-built requests -----------------------------------------------
def _hand_built(questions):
    """Six finished requests, as an engine would return them: (right answer?, rows, replayed per decode step)."""
    spec = [
        (True, [0, 0], [True, True]),  # only row 0, every step replayed
        (True, [0, 3], [True, False]),  # its second step ran eagerly: an eager step
        (False, [2, 1], [False, False]),  # no step replayed: an eager step
        (True, [5, 0], [False, True]),  # the first ran eagerly: an eager step
        (False, [], []),  # finished at its prefill: no decode step, so no eager step; rows [] -> only row 0
        (False, [1], [True]),  # one replayed step in row 1
    ]
    reqs = []
    for i, ((right, rows, replayed), q) in enumerate(zip(spec, questions)):
        answer = q.answer if right else f"{(int(q.answer) + 1) % 100:02d}"
        reqs.append(Req(i, q.prompt_ids, task.MAX_NEW_TOKENS, output_ids=task.encode(answer) + [task.EOS],
                        finished_reason="stop", rows=rows, replayed=replayed))
    return reqs


def test_why_0060_groups_a_request_by_whether_some_step_ran_eagerly(monkeypatch):
    """``run_bench``'s groups on six hand-built requests: "eager step" = SOME decode step ran eagerly
    (``not all(replayed)``: requests 1, 2, 3; 2 of 3 right), the rest (0, 4, 5; 1 of 3 right); "only row 0" =
    every step in row 0 (requests 0 and 4, whose empty list counts; 1 of 2 right).

    Bent in a copy, fails here: ``not all(r.replayed)`` -> ``not any(r.replayed)`` (NO step replayed: requests
    2 and 4, 0 of 2 right); the only-row-0 test ``all(r == 0 ...)`` -> ``any(...)``; the groups' accuracies
    computed over the wrong complement.
    """
    questions = task.default_eval_set()[:6]
    monkeypatch.setattr(Engine, "generate", lambda self, prompts, **kw: _hand_built(questions))
    r = run_bench(random_tiny_model(), questions, disable_cuda_graph=True, max_running_requests=8, device="cpu")
    assert r["accuracy"] == 3 / 6 and r["num_questions"] == 6
    assert (r["eager_step"], r["accuracy_eager_step"], r["accuracy_no_eager_step"]) == (3, 2 / 3, 1 / 3)
    assert (r["only_row0"], r["accuracy_only_row0"]) == (2, 1 / 2)


def test_why_0060_groups_empty_sides_are_nan(monkeypatch):
    """No request had an eager step: its group's accuracy is NaN (printed "-"), the other side holds all."""
    questions = task.default_eval_set()[:2]
    reqs = _hand_built(questions)
    monkeypatch.setattr(Engine, "generate", lambda self, prompts, **kw: reqs)
    r = run_bench(random_tiny_model(), questions, disable_cuda_graph=True, max_running_requests=8, device="cpu")
    assert r["eager_step"] == 1 and r["accuracy_eager_step"] == 1.0 and r["accuracy_no_eager_step"] == 1.0
    for req in reqs:
        req.replayed = [True] * len(req.rows)
    r = run_bench(random_tiny_model(), questions, disable_cuda_graph=True, max_running_requests=8, device="cpu")
    assert r["eager_step"] == 0 and math.isnan(r["accuracy_eager_step"]) and r["accuracy_no_eager_step"] == 1.0


def test_an_errored_request_is_in_no_row_group(monkeypatch):
    """A rejected request (no decode step, so ``rows == []``) was counted in "only row 0", as if it had read its own
    pages, and a NaN one too: both have no answer, so neither is in any group.

    Bent in a copy, fails here: ``ok = [True for r in reqs]`` (the request in the group again)."""
    questions = task.default_eval_set()[:6]
    reqs = _hand_built(questions)
    reqs[4].output_ids, reqs[4].finished_reason, reqs[4].error = [], "error", "prompt too long: ..."
    reqs[1].finished_reason, reqs[1].error = "error", "decode: non-finite logits (the kernel read the poison page id)"
    monkeypatch.setattr(Engine, "generate", lambda self, prompts, **kw: reqs)
    r = run_bench(random_tiny_model(), questions, disable_cuda_graph=True, max_running_requests=8, device="cpu")
    assert r["errors"] == 2
    assert (r["only_row0"], r["accuracy_only_row0"]) == (1, 1.0)  # request 0 alone; 4 was rejected
    assert r["only_row0"] + r["first_row0"] + r["rest"] == 4  # 1 (errored) and 4 in no group
