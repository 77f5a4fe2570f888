"""Notebook 08's checkers: every solution passes, stubs and typical mistakes fail with a hint, nothing raises."""

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from mla_edu import exercises as ex, kvcache  # noqa: E402
from mla_edu.solutions import ex08  # noqa: E402


pytestmark = pytest.mark.usefixtures("one_thread")


def test_replay_solution_passes_and_mistakes_fail(capsys):
    assert ex.check_replay(ex08.replay).passed

    def stub(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):
        raise NotImplementedError("write me")

    def nothing(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):
        pass

    def new_table(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):  # the pre-fix replay's habit
        t = torch.full((bs, 4), -1, dtype=torch.int32, device=backend.device)
        kvcache.fill_page_table(backend.req_to_token, req_pool_indices[:bs], seq_lens[:bs], t, 128)
        backend.forward_metadata.block_kv_indices = t

    def first_row_only(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):
        kvcache.fill_page_table(backend.req_to_token, req_pool_indices[:1], seq_lens[:1],
                                backend.cuda_graph_kv_indices[:1], 128)

    for fn, hint in [(stub, "raised NotImplementedError"), (nothing, "rows 0, 1, 2 read the poison"),
                     (new_table, "new tensor"), (first_row_only, "rows 1, 2 read the poison"),
                     ("replay", "expected a function")]:
        r = ex.check_replay(fn, n_trials=1)
        assert not r.passed and hint in r.message, r.message
    out = capsys.readouterr().out
    assert out.count("NOT YET") == 5 and out.count("PASS") == 1


def test_mysteries():
    for k, answer in ex08.MYSTERY_ANSWERS.items():
        assert answer == ex.option_for(ex.MYSTERIES[k])
        assert ex.check_mystery(k, answer).passed
        for other in set(ex.OPTIONS) - {answer}:
            assert not ex.check_mystery(k, other).passed
        assert not ex.check_mystery(k, None).passed
        assert not ex.check_mystery(k, "e").passed
    assert not ex.check_mystery(7, "a").passed
    assert len(ex.mystery_figure(1).axes) == 3
    with pytest.raises(ValueError, match="expected one of"):
        ex.mystery_figure(7)
    # the hint is read from the measured step, not from the answer key
    assert "only row 0" in ex.check_mystery(1, "d").message
    assert "every row reads its own pages" in ex.check_mystery(2, "a").message


def test_row_stride():
    assert ex.check_row_stride(*ex08.ROW_STRIDE_ANSWERS).passed
    for answers, hint in [((None, None, None), "not answered"), ((6, 6, 20), "That is the buffer's stride"),
                          ((1, 5, 5), "one page more"), ((1, 6, 20), "should"), ((1.0, 6, 5), "expected three ints")]:
        r = ex.check_row_stride(*answers)
        assert not r.passed and hint in r.message, r.message


def test_workspace_size():
    assert ex.check_workspace_size(ex08.workspace_size).passed
    no_lse = lambda L, B, s, n: B * 4 * 512 * 128 * max(n, 1)  # noqa: E731
    no_auto = lambda L, B, s, n: B * (4 * 512 + 4) * 128 * max(n, 1)  # noqa: E731
    for fn, hint in [(lambda *a: 0, "not 0"), (no_lse, "lse"), (no_auto, "automatic split"),
                     (lambda *a: None, "returned None"), (lambda *a: 1 / 0, "ZeroDivisionError")]:
        r = ex.check_workspace_size(fn)
        assert not r.passed and hint in r.message, r.message


def test_stale_reads():
    assert ex.check_stale_reads(ex08.stale_reads).passed

    def wrong_reads(buffer, seq_lens, row_stride):  # a plausible mistake: every misdirected read
        _, _, reads = next(ex.stale_case(k) for k in range(3) if ex.stale_case(k)[0][1] == seq_lens)
        return {(b, j) for b in range(len(seq_lens)) for j in range(-(-seq_lens[b] // 128))
                if int(reads.read[b, j]) != int(reads.intended[b, j])}

    r = ex.check_stale_reads(wrong_reads)
    assert not r.passed and "wrong* reads" in r.message
    assert not ex.check_stale_reads(lambda *a: set()).passed
    assert not ex.check_stale_reads(lambda *a: 5).passed
    # the truth counts reads that land in unwritten slots: some in every case under the bug
    assert all(len(ex.stale_case(k)[1]) > 0 for k in range(3))
