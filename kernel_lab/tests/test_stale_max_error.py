"""``kernel_lab.tools.stale_max_error``: what the seesaw's rescale threshold costs in P's rounding, and why
(``docs/kernel_essay.md``, ``kernel_lab/results/stale_max_error_cpu.md``)."""

from pathlib import Path

import pytest
from printed import printed_as

from mla_edu.kernels import split_kv_seesaw as seesaw
from kernel_lab.tools import stale_max_error as sme

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


# float64 P's errors are float64 rounding (about 1e-15), their digits the BLAS's summation order: only their bound
# (NOTES v19: "within 1e-13") is a claim, and their ratio to threshold 0, one noise over another, is none.
NOISE, NOISE_BOUND = "float64", 1e-13
# bf16 and fp16 P: P's rounding decides, and moving the float64 sums' last bits does not move it (the dot products
# of bf16 q and kv summed in another order gave the same errors to the last bit), so 1e-6 is well inside the
# printed step (3 significant digits; 0.01 of a ratio near 1)
REL = 1e-6


def rows(text: str) -> list[list[str]]:
    """The cells of every data row of the markdown tables in ``text``, as printed (a header is the line above a
    ``|---|`` line)."""
    lines = [line.strip() for line in text.splitlines()]
    rule = [line.startswith("|-") for line in lines] + [False]
    return [[c.strip() for c in line.strip("|").split("|")] for i, line in enumerate(lines)
            if line.startswith("|") and not rule[i] and not rule[i + 1]]


def mismatches(text: str, errs: dict, offs: dict) -> list[str]:
    """Where the committed ``text`` is not the table of the fresh ``errs`` and ``offs`` (what each cell says, the
    committed cell, the fresh value)."""
    def cell(what, got, value, spec):
        return [] if printed_as(got, value, spec, REL) else [f"{what}: committed {got}, fresh {value!r}"]

    def bounded(what, got, value):
        try:
            ok = 0 <= float(got) < NOISE_BOUND and 0 <= value < NOISE_BOUND
        except ValueError:
            ok = False
        return [] if ok else [f"{what}: committed {got}, fresh {value!r}, both must be below {NOISE_BOUND}"]

    got = rows(text)
    fresh = [[dt, f"{th:g}"] for dt, th in errs] + [[f"{off:g}"] for off in offs]
    if [r[:2] if len(r) == 5 else r[:1] for r in got] != fresh or [len(r) for r in got] != [5] * len(errs) + [
            3] * len(offs):
        return [f"the rows are {[r[:2] for r in got]}, the fresh table's {fresh}"]
    out = []
    for ((dt, th), (rms, mx)), r in zip(errs.items(), got):
        what, base = f"{dt} at threshold {th:g}", errs[(dt, 0.0)][0]
        if dt == NOISE:
            out += bounded(f"{what}, rms", r[2], rms) + bounded(f"{what}, max", r[4], mx)
            out += [] if printed_as(r[3], 1.0, sme.RATIO_FORMAT, 0.1) else [f"{what}, x threshold 0: {r[3]}"]
        else:
            out += cell(f"{what}, rms", r[2], rms, sme.ERROR_FORMAT)
            out += cell(f"{what}, x threshold 0", r[3], rms / base, sme.RATIO_FORMAT)
            out += cell(f"{what}, max", r[4], mx, sme.ERROR_FORMAT)
    for (off, rms), r in zip(offs.items(), got[len(errs):]):
        out += cell(f"offset {off:g}, rms", r[1], rms, sme.ERROR_FORMAT)
        out += cell(f"offset {off:g}, x offset 0", r[2], rms / offs[0.0], sme.RATIO_FORMAT)
    return out


def test_the_committed_table_is_this_run(errs, offs):
    wrong = mismatches(RESULTS.read_text(), errs, offs)
    assert not wrong, "results/stale_max_error_cpu.md is not this run's table:\n" + "\n".join(wrong)


def _edit(text: str, row: str, col: int, new: str) -> str:
    """``text`` with column ``col`` of the row that starts with ``row`` set to ``new``."""
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(row))
    cells = lines[i].split("|")
    assert cells[col + 1].strip() != new, (row, col, new)
    cells[col + 1] = f" {new} "
    lines[i] = "|".join(cells)
    return "\n".join(lines)


@pytest.mark.parametrize("row, col, new, caught", [
    # digits that carry no claim: float64's rounding noise, and its ratio
    ("| float64 | 0 |", 2, "1.13e-15", False), ("| float64 | 8 |", 4, "2.58e-15", False),
    ("| float64 | 8 |", 3, "1.00", False), ("| float64 | 4 |", 3, "0.98", False),
    # meaningful numbers, each moved by one step of its last printed digit
    ("| bfloat16 | 8 |", 3, "1.51", True), ("| bfloat16 | 8 |", 3, "1.49", True),
    ("| bfloat16 | 8 |", 2, "0.0014", True), ("| float16 | 0 |", 4, "8.4e-05", True),
    ("| float16 | 8 |", 2, "0.000159", True), ("| 0.25 |", 2, "1.38", True), ("| 3 |", 1, "0.000866", True),
    # the same number spelled otherwise, and float64's bound broken
    ("| bfloat16 | 8 |", 2, "0.00130", True), ("| float64 | 8 |", 2, "1.11e-13", True),
    ("| float64 | 0 |", 4, "n/a", True), ("| float64 | 4 |", 3, "1.5", True),
])
def test_a_changed_number_is_caught_only_where_it_means_something(errs, offs, row, col, new, caught):
    """The comparison above on the committed file edited in one cell: float64's noise digits may differ on another
    machine and still pass, a meaningful number one printed step off fails."""
    text = RESULTS.read_text()
    assert not mismatches(text, errs, offs)
    assert bool(mismatches(_edit(text, row, col, new), errs, offs)) == caught


@pytest.mark.parametrize("text, value, spec, ok", [
    ("1.50", 1.5028, ".2f", True), ("1.51", 1.5028, ".2f", False), ("1.5", 1.5028, ".2f", False),
    # a fresh value on a rounding boundary: either side passes, within rel of it
    ("1.00", 0.995, ".2f", True), ("0.99", 0.995, ".2f", True), ("0.98", 0.995, ".2f", False),
    ("0.0013", 0.0012994, ".3g", True), ("0.0013", 0.001305 * (1 + 2e-6), ".3g", False),
    ("8.3e-05", 8.301e-05, ".3g", True), ("x", 1.0, ".2f", False),
])
def test_printed_as(text, value, spec, ok):
    assert printed_as(text, value, spec, REL) == ok


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
