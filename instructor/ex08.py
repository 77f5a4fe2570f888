"""Solutions to notebook 08 (workshop exercises), for the instructor: not part of the learner's package. Each
passes its checker in ``mla_edu.workshop.exercises``; ``make instructor`` puts them into the instructor's copy of
the notebook, and ``python -m instructor.ex08`` rewrites the mystery figures' data
(``mla_edu/workshop/mysteries.json``) from the engines below.

    from mla_edu.workshop import exercises as ex
    from instructor import ex08
    ex.check_replay(ex08.replay)
"""

from __future__ import annotations

import json

from mla_edu import kvcache
from mla_edu.serving import MERGED_FIX, PRE_FIX
from mla_edu.util import PAGE_SIZE, cdiv


# 1. The replay hook of the fixed cutlass_mla backend (SGLang e58423b2b): only the *contents* of the
#    captured buffer change; the view, its width and the workspace stay what capture froze.
def replay(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):
    kvcache.fill_page_table(backend.req_to_token, req_pool_indices[:bs], seq_lens[:bs],
                            backend.cuda_graph_kv_indices[:bs], PAGE_SIZE)


# 2. Mystery 1: rows > 0 read wrong pages and hit the poison (P): width frozen, poison fill on.
#    Mystery 2: every row reads its own pages; old page ids sit past each request's pages: the merged fix.
#    Mystery 3: rows > 0 read wrong pages, no poison anywhere (stale ids, as SGLang leaves them): the pre-fix code.
MYSTERY_ANSWERS = {1: "b", 2: "c", 3: "a"}
#: the engine behind each mystery figure (its cutlass_mla defects, whether the poison fill is on): kept here, with
#: the answers; the package holds only the page reads they measured (``exercises.MYSTERY_FILE``)
MYSTERY_ENGINES = {1: dict(defects=frozenset({"width"}), poison_fill=True),
                   2: dict(defects=MERGED_FIX, poison_fill=False),
                   3: dict(defects=PRE_FIX, poison_fill=False)}


def option_for(defects: frozenset, poison_fill: bool = False) -> str:
    """The option of ``exercises.OPTIONS`` that describes an engine with these cutlass_mla defects and poison fill
    (the workspace defect is invisible in a page-read figure)."""
    if "width" in defects:
        return "b" if poison_fill else "a"
    return "d" if poison_fill else "c"


# 3. Capture fills seq_lens with 1 -> max_seqlen_pad = ceil(1 / 128) = 1 -> view [:8, :1], size(1) = 1.
#    Buffer: W = (640 + 128) // 128 = 6. Row 3, page 2: flat 3 * 1 + 2 = 5, which is row 0's slot 5
#    (a 640-token context is at most 5 pages, slots 0..4: slot 5 is never written, it still holds the initial 1).
ROW_STRIDE_ANSWERS = (1, (640 + 128) // 128, 3 * 1 + 2)


# 4. sgl-kernel's cutlass_mla_get_workspace_size.
def workspace_size(max_seq_len, num_batches, sm_count, num_kv_splits):
    if num_kv_splits == -1:
        max_splits = cdiv(max_seq_len, 128)
        heur = min(max_splits, max(1, sm_count // num_batches))
        split = cdiv(max_splits, cdiv(max_splits, heur))
    else:
        split = num_kv_splits
    per_batch_split = (4 * 512 + 4) * 128  # float32 o_acc [128, 512] + lse [128]
    return per_batch_split * split * num_batches


# 5. A read of flat index i lands in buffer row i // W, slot i % W; fresh iff that slot is among the
#    pages written for that row this step (ceil(len / 128); padded rows have length 1). Every row reads,
#    padded ones too.
def stale_reads(buffer, seq_lens, row_stride):
    rows, width = buffer.shape
    lens = list(seq_lens) + [1] * (rows - len(seq_lens))
    written = [cdiv(n, PAGE_SIZE) for n in lens]
    out = set()
    for b, n in enumerate(lens):
        for j in range(cdiv(n, PAGE_SIZE)):
            i = b * row_stride + j
            r, slot = divmod(i, width)
            if r >= rows or slot >= written[r]:
                out.add((b, j))
    return out


def measure_mysteries() -> dict:
    """The page reads of each mystery engine, as ``exercises.MYSTERY_FILE`` stores them."""
    from mla_edu.model import task
    from mla_edu.workshop.exercises import toy_model
    from mla_edu.workshop.panel import PanelSettings, measure_page_reads

    out = {}
    for k, engine in MYSTERY_ENGINES.items():
        reads = measure_page_reads(toy_model(), task.default_eval_set()[20:],
                                   PanelSettings(**engine, max_running_requests=6))
        out[str(k)] = {"seq_lens": list(reads.seq_lens), "intended": reads.intended.tolist(),
                       "read": reads.read.tolist(), "buffer": reads.buffer.tolist(),
                       "live": reads.live.int().tolist(), "row_err": [round(float(e), 6) for e in reads.row_err]}
    return out


if __name__ == "__main__":
    from mla_edu.workshop.exercises import MYSTERY_FILE

    MYSTERY_FILE.write_text(json.dumps(measure_mysteries(), separators=(",", ":")) + "\n")
    print(f"wrote {MYSTERY_FILE}")
