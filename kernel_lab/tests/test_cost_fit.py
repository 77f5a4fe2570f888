"""``kernel_lab.tools.cost_fit``: the committed markdown is its output; the fit recovers known coefficients from times
built from the features; the features of a batch of two requests, worked by hand for both partitions."""

import itertools
from types import SimpleNamespace

import pytest

from kernel_lab.tools import cost_fit as cf
from mla_edu.kernels import schedule as sc
from mla_edu.kernels.split_kv_triton import STAGE2_MANY, stage2_config
from mla_edu.kernels.workspace import gpu_block_h

#: Two requests of 20 and 3 pages (page 64) on a GPU of 4 SMs at 64 heads: 4 parts on both sides.
TINY = (20 * 64, 3 * 64)
TINY_HEADS, TINY_SMS = 64, 4


def test_the_committed_markdown_is_the_tools_output():
    assert cf.OUT.read_text(encoding="utf-8") == cf.render(), (
        "kernel_lab/results/cost_fit_h200.md is stale: python -m kernel_lab.tools.cost_fit --out "
        "kernel_lab/results/cost_fit_h200.md")


def test_the_tiny_batch_by_hand():
    # ours: 4 parts of one 64-head program (32 < 2 * 20 pages: not the small-grid block); costs w = 25 and 8 on the
    # line, chunk ceil(33 / 4) = 9 (the piece cap, 31 pieces, does not bind). Request 0 lies at [0, 25), its pages at
    # x = 5..24; request 1 at [25, 33), its pages at x = 30..32. Parts [0, 9), [9, 18), [18, 27), [27, 36) take 4, 9
    # and 7 pages of request 0 and the 3 of request 1: charges 9, 14, 12, 8, the busiest part 1 (9 pages, 1
    # segment). Request 0 leaves 3 partials; stage 2 loads 4 at a time (5 segment rows > 2 a request): one step.
    assert gpu_block_h(TINY_HEADS, 2, 20, balanced=True) == 64 and sc.num_parts(TINY_HEADS, TINY_SMS, 2, 20) == 4
    assert stage2_config(2, TINY_HEADS, 4) == STAGE2_MANY
    assert cf.ours(TINY, TINY_HEADS, TINY_SMS) == cf.Features(pages=9, segments=1, partials=3, merge=1,
                                                               max_partials=3)
    # FlashMLA: payload max(ceil(33 / 4) + 5, 10) = 14 blocks a part. Part 0 takes blocks [0, 9) of request 0 (9 + 5),
    # part 1 [9, 18), part 2 its last 2 (2 + 5) and blocks [0, 2) of request 1 (2 + 5), part 3 its last block. Parts
    # 0-2 are charged 14 each: the busiest, of most segments, is part 2 (4 pages, 2 segments). Request 0 in 3 pieces,
    # request 1 in 2: 5 partials, the longest merge 3.
    assert cf.flashmla(TINY, TINY_HEADS, TINY_SMS) == cf.Features(pages=4, segments=2, partials=5, merge=3,
                                                                   max_partials=3)


def test_the_busiest_part_is_charged_most_and_ties_go_to_more_segments():
    assert cf.busiest([(9, 1), (4, 2), (9, 1), (3, 1)]) == (4, 2)
    assert cf.busiest([(10, 1), (4, 2)]) == (10, 1)
    assert cf.busiest([(0, 0)]) == (0, 0)


def test_one_request_uncut_has_no_partials_and_no_merge():
    f = cf.ours((64,), TINY_HEADS, TINY_SMS)
    assert (f.pages, f.segments, f.partials, f.merge, f.max_partials) == (1, 1, 0, 0, 1)
    assert cf.flashmla((64,), TINY_HEADS, TINY_SMS) == f


@pytest.fixture(scope="module")
def h128():
    pts, sms = cf.points()
    return [p for p in pts if cf.in_fit(p, 128)], sms


#: Coefficient sets (a, b, c, e, d), enumerated: a page, a segment, a partial, a merge step, the fixed cost.
COEFS = list(itertools.product((1.5, 2.5), (0.0, 9.0), (0.0, 0.1), (0.0, 0.9), (-1.0, 12.0)))


@pytest.mark.parametrize("kernel", cf.KERNELS)
def test_the_fit_recovers_known_coefficients(h128, kernel):
    pts, sms = h128
    feats = [p.features(kernel, sms) for p in pts]
    for coefs in COEFS:
        us = [cf.predict(list(coefs), f) for f in feats]
        assert min(us) > 0
        got = cf.solve([f.row() for f in feats], us)
        assert got == pytest.approx(coefs, abs=1e-6), coefs
        synthetic = [cf.Point(p.run, p.family, p.heads, p.lens, p.block, {kernel: t}) for p, t in zip(pts, us)]
        f = cf.fit(synthetic, kernel, sms)
        assert f.r2 == pytest.approx(1) and f.max_rel < 1e-9 and f.lofo_max < 1e-9
        assert all(lo == pytest.approx(c, abs=1e-6) and hi == pytest.approx(c, abs=1e-6)
                   for (lo, hi), c in zip(f.ranges, coefs))


def test_too_few_batches_for_the_terms_is_an_error():
    with pytest.raises(ValueError, match="cannot fit"):
        cf.solve([[1.0, 2.0, 3.0, 4.0, 1.0]] * 4, [1.0] * 4)


def test_the_gap_splits_into_the_kernel_the_partition_and_the_residual():
    p = cf.Point("run", "fam", TINY_HEADS, TINY, 64, {"balanced": 50.0, "flashmla": 40.0})
    o, f = [2.0, 9.0, 0.1, 0.9, 5.0], [2.5, 7.0, 0.05, 0.5, 3.0]
    fits = {"balanced": SimpleNamespace(coefs=o), "flashmla": SimpleNamespace(coefs=f)}
    g = cf.gap([p], fits, TINY_SMS)
    xo, xf = cf.ours(TINY, TINY_HEADS, TINY_SMS), cf.flashmla(TINY, TINY_HEADS, TINY_SMS)
    modelled = cf.predict(o, xo) - cf.predict(f, xf)
    assert g.n == 1 and g.measured == 10.0
    assert sum(g.kernel) + sum(g.partition) == pytest.approx(modelled) and g.residual == pytest.approx(10 - modelled)
    # pages: ours 9, FlashMLA 4 -> kernel (2 - 2.5) * 9, partition 2.5 * (9 - 4)
    assert (g.kernel[0], g.partition[0]) == pytest.approx((-4.5, 12.5))


def test_a_bad_out_path_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cf.main(["--out", str(tmp_path / "missing" / "x.md")])
    assert "--out" in capsys.readouterr().err
