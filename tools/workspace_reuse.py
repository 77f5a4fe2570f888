"""The pre-fix workspace hazard on a real CUDA graph, shown deterministically (CUDA only).

    python -m tools.workspace_reuse [--cuda-graph-bs 4 8]

With the ``workspace`` defect and automatic splits, each capture stores a fresh workspace on the
backend and so drops the one the graph captured before it writes (graphs are captured largest
first). This builds such an engine, records the largest graph's workspace address at capture,
allocates a new tensor of that size (the caching allocator hands it a free block that fits),
fills it with 0x5A, replays the largest graph once for a batch only it runs, and counts the new
owner's bytes that the replay overwrote. Printed: the addresses, whether they match, the bytes
overwritten, and whether the graph's own logits still match eager. On CPU the graph emulator keeps
the dropped storage alive, so there the hazard is shown by handing it over explicitly
(``mla_edu.case_study.diagnose.workspace_hazard``, notebook 07).
"""

from __future__ import annotations

import argparse
import sys

import torch

from mla_edu import cli
from mla_edu.case_study import diagnose as dg
from mla_edu.model import load_pretrained, task


@torch.no_grad()
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cuda-graph-bs", type=cli.positive_int, nargs=2, default=[4, 8],
                        help="two graph sizes; the batch has between the two (default 4 8)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (on CPU: notebook 07, section 3)")
    small, big = sorted(args.cuda_graph_bs)
    if not small < big:
        parser.error(f"--cuda-graph-bs: expected two different sizes, got {args.cuda_graph_bs}")
    model = load_pretrained()
    prompts = [q.prompt_ids for q in task.default_eval_set()[:small + 1]]  # a batch only the larger graph runs
    with dg.record_launches() as log:
        engine = dg.make_engine(model, frozenset({"workspace"}), num_kv_splits=-1, cuda_graph_bs=(small, big),
                                dtype="bfloat16", device="cuda")
    launch = dg.last_launch(log, big).launch
    del log  # the recorder keeps no workspace (keep_workspace=False): nothing holds the dropped one
    held = engine.runner.backend.cuda_graph_mla_workspace
    print(f"graph {big} froze {launch.num_splits} splits and its workspace at {launch.workspace_ptr:#x} "
          f"({launch.workspace_bytes} bytes); the backend now holds {held.data_ptr():#x} ({held.numel()} bytes)")
    owner = torch.empty(launch.workspace_bytes, dtype=torch.uint8, device="cuda")
    print(f"a new allocation of {launch.workspace_bytes} bytes: {owner.data_ptr():#x}; the graph's dropped "
          f"workspace's address: {owner.data_ptr() == launch.workspace_ptr}")
    owner.fill_(0x5A)
    reqs = engine.prefill_requests(prompts)
    batch = engine.make_batch(reqs)
    _, _, logits_g = engine.runner.decode(batch)  # replays graph `big`
    changed = owner != 0x5A
    print(f"one replay of graph {big} ({len(prompts)} requests) overwrote {int(changed.sum())} of {owner.numel()} "
          f"of the new owner's bytes ({float(changed.float().mean()):.1%})")
    engine.runner.backend.init_forward_metadata(batch)
    _, _, logits_e = engine.runner.decode_forward(batch)
    err = float((logits_g.float() - logits_e.float()).abs().max())
    print(f"the graph's own logits vs eager: max |diff| {err:.3f} (bf16): {'match' if err < 0.5 else 'differ'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
