"""What a stale row max costs in rounding: ``python -m kernel_lab.tools.stale_max_error [--out FILE]``, on CPU.

The seesaw stage 1 (``split_kv_seesaw``) keeps a row's running max m until a score passes it by more than
``RESCALE_THRESHOLD`` (8, in log2 units), so that most tiles skip the rescale of the output. P = 2^(S - m) is then
below 2^8 instead of at most 1. In exact arithmetic nothing changes: the row sums are taken against the same m. But
the kernel rounds P to bf16 for the tensor cores. Against the row's true max, the largest entry of P, the token
with the most weight, is exactly 1 and is not rounded at all; against a stale max it is 2^(S_top - m), rounded like
any other entry. ``offset_errors`` shows it: P against the true max less a fixed offset costs nothing where the
offset is a whole number (the top entry is a power of two, exact), and costs where it is not.

This runs the kernel's online softmax in torch, tile by tile (64 tokens, scores in log2 units as the kernel's), on
seeded random requests (q and the cache N(0, 1), rounded to bf16; 64 heads, 1024 tokens, MLA's 576 / 512 columns),
with everything in float64 but P, rounded to ``P_DTYPES`` in turn, and prints for each threshold the output's rms
and max error against the float64 softmax, each relative to the reference's rms and max, averaged over the
requests; then the same for fixed offsets. Quoted in ``docs/kernel_essay.md`` from
``kernel_lab/results/stale_max_error_cpu.md``.
"""
from __future__ import annotations

import argparse
import math

import torch

from mla_edu.files import check_out_file, write_atomic

THRESHOLDS = (0.0, 1.0, 2.0, 4.0, 8.0)  # 0: the row's true max at every tile (no threshold)
OFFSETS = (0.0, 0.25, 0.5, 0.75, 3.0)  # P against the true max less this (log2 units)
P_DTYPES = (torch.bfloat16, torch.float16, torch.float64)
HEADS, TOKENS, TILE, D, DL = 64, 1024, 64, 576, 512
TRIALS, SEED = 8, 0
ERROR_FORMAT, RATIO_FORMAT = ".3g", ".2f"  # the table's errors and its ratios to the baseline row


def online_softmax(q: torch.Tensor, kv: torch.Tensor, sm_scale: float, threshold: float,
                   p_dtype: torch.dtype, offset: float = 0.0) -> torch.Tensor:
    """softmax(q kv^T sm_scale) kv[:, :DL] for q [H, D], kv [T, D], a TILE of tokens at a time: float64 except
    P, rounded to ``p_dtype``; the running max moves where a tile's max passes it by more than ``threshold``
    (log2 units; 0: wherever the tile's max is higher), and P is taken against it less ``offset``. [H, DL]
    float64."""
    s = (q.double() @ kv.double().T) * (sm_scale * math.log2(math.e))  # [H, T], log2 units
    v = kv[:, :DL].double()
    m = torch.full((q.size(0),), -math.inf, dtype=torch.float64)
    l = torch.zeros(q.size(0), dtype=torch.float64)
    acc = torch.zeros(q.size(0), DL, dtype=torch.float64)
    for t in range(0, kv.size(0), TILE):
        st = s[:, t:t + TILE]
        top = st.amax(1)
        m_new = torch.where(top > m + threshold, top, m) if threshold > 0 else torch.maximum(m, top)
        scale = torch.exp2(m - m_new)
        p = torch.exp2(st - (m_new - offset)[:, None]).to(p_dtype).double()  # P as the tensor cores read it
        l = l * scale + p.sum(1)
        acc = acc * scale[:, None] + p @ v[t:t + TILE]
        m = m_new
    return acc / l[:, None]


def _requests(trials: int, seed: int):
    """``trials`` seeded (q [HEADS, D], kv [TOKENS, D], sm_scale, float64 reference [HEADS, DL])."""
    gen = torch.Generator().manual_seed(seed)
    sm_scale = 1 / math.sqrt(192)  # DeepSeek's (qk_nope_head_dim + qk_rope_head_dim) ** -0.5
    for _ in range(trials):
        q = torch.randn(HEADS, D, generator=gen).bfloat16()
        kv = torch.randn(TOKENS, D, generator=gen).bfloat16()
        yield q, kv, sm_scale, torch.softmax(q.double() @ kv.double().T * sm_scale, -1) @ kv[:, :DL].double()


def _relative(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    err = (out - ref).abs()
    return (err.pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item(), (err.max() / ref.abs().max()).item()


def errors(thresholds=THRESHOLDS, p_dtypes=P_DTYPES, trials: int = TRIALS, seed: int = SEED) -> dict:
    """``{(p_dtype name, threshold): (rms, max)}``: relative errors against float64, averaged over ``trials``
    requests."""
    sums: dict = {}
    for q, kv, sm_scale, ref in _requests(trials, seed):
        for dt in p_dtypes:
            for th in thresholds:
                rms, mx = _relative(online_softmax(q, kv, sm_scale, th, dt), ref)
                a, b = sums.get((str(dt).removeprefix("torch."), th), (0.0, 0.0))
                sums[(str(dt).removeprefix("torch."), th)] = (a + rms / trials, b + mx / trials)
    return sums


def offset_errors(offsets=OFFSETS, trials: int = TRIALS, seed: int = SEED) -> dict:
    """``{offset: rms}``: P in bf16 against each row's true max less ``offset``, the relative rms error averaged
    over ``trials`` requests."""
    sums = dict.fromkeys(offsets, 0.0)
    for q, kv, sm_scale, ref in _requests(trials, seed):
        for off in offsets:
            sums[off] += _relative(online_softmax(q, kv, sm_scale, 0.0, torch.bfloat16, off), ref)[0] / trials
    return sums


def table(errs: dict, offs: dict) -> str:
    """Markdown: one row per P dtype and threshold, the rms error also as a multiple of the same dtype's at 0;
    then one row per offset. Both need their 0 (the exact max), what the others are measured against."""
    bases = {dt for dt, th in errs if th == 0.0}
    if {dt for dt, _ in errs} - bases or 0.0 not in offs:
        raise ValueError(f"every P dtype needs threshold 0 and the offsets need 0, got thresholds "
                         f"{sorted(set(th for _, th in errs))} and offsets {sorted(offs)}")
    lines = ["| P | threshold (log2) | rms error | x threshold 0 | max error |", "|---|---|---|---|---|"]
    for (dt, th), (rms, mx) in errs.items():
        base = errs[(dt, 0.0)][0]
        lines.append(f"| {dt} | {th:g} | {rms:{ERROR_FORMAT}} | {rms / base:{RATIO_FORMAT}} | {mx:{ERROR_FORMAT}} |")
    lines += ["", "| P against the true max less (log2) | rms error | x offset 0 |", "|---|---|---|"]
    lines += [f"| {off:g} | {rms:{ERROR_FORMAT}} | {rms / offs[0.0]:{RATIO_FORMAT}} |" for off, rms in offs.items()]
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="also write the table to this markdown file")
    args = ap.parse_args(argv)
    if args.out:  # before the computation: a bad path fails in a second
        try:
            check_out_file(args.out, "--out")
        except ValueError as e:
            ap.error(str(e))
    text = table(errors(), offset_errors())
    print(text)
    if args.out:
        write_atomic(args.out, text + "\n")


if __name__ == "__main__":
    main()
