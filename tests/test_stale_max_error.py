"""``tools.stale_max_error``: what the seesaw's rescale threshold costs in P's rounding, and why
(``kernels/NOTES.md`` v19, ``results/stale_max_error_cpu.md``)."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.triton  # its kernels are Triton's (tests/conftest.py: skipped without Triton)
pytest.importorskip("triton", reason="needs Triton, which is not installed here (Linux wheels only)")

from mla_edu.kernels import split_kv_seesaw as seesaw
from tools import stale_max_error as sme

RESULTS = Path(__file__).resolve().parents[1] / "results" / "stale_max_error_cpu.md"


@pytest.fixture(scope="module")
def errs():
    return sme.errors()


@pytest.fixture(scope="module")
def offs():
    return sme.offset_errors()


def test_the_threshold_studied_is_the_kernels():
    assert seesaw.RESCALE_THRESHOLD.value == max(sme.THRESHOLDS) == 8.0


def test_a_stale_max_changes_nothing_in_exact_arithmetic(errs):
    # float64 P: the sums are taken against the same max as P, so every threshold gives the softmax
    assert all(rms < 1e-13 and mx < 1e-13 for (dt, _), (rms, mx) in errs.items() if dt == "float64")


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_a_staler_max_rounds_p_worse(errs, dt):
    rms = [errs[(dt, th)][0] for th in sme.THRESHOLDS]
    assert rms == sorted(rms) and len(set(rms)) == len(rms)  # grows with the threshold
    assert 1.3 < rms[-1] / rms[0] < 1.7  # at the kernel's 8: about 1.5x


def test_the_cost_is_the_top_entry_of_p_no_longer_exact(offs):
    # against the true max less a whole number the top entry of P is a power of two, exact in bf16: no cost;
    # less a fraction it is rounded, and the error grows
    assert offs[3.0] / offs[0.0] < 1.01
    assert offs[0.25] / offs[0.0] > 1.2 and offs[0.75] / offs[0.0] > 1.2


def numbers(text: str) -> list[float]:
    """Every number in the cells of the markdown tables in ``text``, row by row."""
    cells = [cell.strip() for line in text.splitlines() if line.startswith("|") for cell in line.strip("|").split("|")]
    return [float(cell) for cell in cells if re.fullmatch(r"[0-9.]+(e[+-][0-9]+)?", cell)]


def test_the_committed_table_is_this_run(errs, offs):
    # each number as printed, to 1% (the float64 matmuls may sum in another order on another machine)
    committed, fresh = numbers(RESULTS.read_text()), numbers(sme.table(errs, offs))
    assert len(fresh) == 4 * len(errs) + 3 * len(offs)  # threshold, rms, x, max; offset, rms, x
    assert committed == pytest.approx(fresh, rel=1e-2)


def test_the_command_writes_its_table(tmp_path, errs, offs, monkeypatch, capsys):
    monkeypatch.setattr(sme, "errors", lambda: errs)  # the numbers of this module's run, not a second one
    monkeypatch.setattr(sme, "offset_errors", lambda: offs)
    sme.main(["--out", str(tmp_path / "t.md")])
    assert (tmp_path / "t.md").read_text() == sme.table(errs, offs) + "\n" == capsys.readouterr().out


def test_a_table_without_its_baseline_is_refused(errs, offs):
    with pytest.raises(ValueError, match="every P dtype needs threshold 0 and the offsets need 0"):
        sme.table({k: v for k, v in errs.items() if k[1] != 0.0}, offs)
    with pytest.raises(ValueError, match="the offsets need 0"):
        sme.table(errs, {k: v for k, v in offs.items() if k != 0.0})
