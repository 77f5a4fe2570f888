"""DP attention as SGLang runs it (``--dp N --enable-dp-attention``), at 7059ae16f.

Each DP rank is a scheduler with its own ``Engine`` (pools, latent cache, backend, graphs):

- Requests are dealt round-robin over the ranks (``DataParallelController.round_robin_scheduler``,
  data_parallel_controller.py lines 249-254).
- A rank runs at most ``max_running_requests // N`` requests (tp_worker.py lines 119-127); its
  ``req_to_token`` pool and graphs keep the full ``max_running_requests`` sizes.
- Every step each rank picks its batch as ``Scheduler.get_next_batch_to_run`` does
  (scheduler.py lines 1297-1345, the choice at 1329-1338): a prefill (extend) of waiting requests while there is room,
  else a decode of its running requests, else nothing.
- The ranks then all-gather ``[num_tokens, can_cuda_graph]`` (``prepare_dp_attn_batch_raw``,
  scheduler.py lines 1660-1764): ``num_tokens`` is the decode batch size (or the prefill's
  tokens), ``can_cuda_graph`` is 0 on a rank that prefills and the ranks take the minimum. A rank
  with nothing to do while another has tokens joins the step with an idle batch (lines 1744-1745).
- A decode (or idle) step replays a graph only if no rank prefills and the SUM of the ranks'
  tokens fits the largest graph (``CudaGraphRunner.can_run``, cuda_graph_runner.py lines
  310-318); the size replayed is the smallest captured size >= that sum (lines 539-545), so each
  rank's rows are padded to it (an idle rank: every row padded).

In SGLang the ranks' MLP/MoE layers then run on the gathered tokens of all ranks; the tiny
model's MLP acts on each token alone, so each rank computes its own rows and the gather carries
only the sizes. Not modelled: chunked prefill (a prefill step here admits every waiting request
that fits, whatever its length), and the radix cache.

Two drivers of the same ``DPRank`` steps: ``DPEngine`` steps all ranks in one process (lockstep;
what a notebook can afford on 2 cores) and ``run_dp_multiprocess`` runs one process per rank
over ``torch.distributed`` (gloo on CPU, NCCL on GPUs), gathering with ``all_gather``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections import deque
from pathlib import Path

import torch

from mla_edu.serving.args import ServerArgs
from mla_edu.serving.batch import ForwardBatch
from mla_edu.serving.engine import Engine, server_args_for, stop_set

EXTEND, DECODE, IDLE = "extend", "decode", "idle"


class DPRank:
    """One DP-attention rank: a waiting queue, a running batch, and the two halves of a step.

    ``schedule()`` picks this step's batch and returns ``(num_tokens, can_cuda_graph)`` for the
    all-gather; ``run(global_num_tokens, can_cuda_graph)`` runs the step with what was gathered.
    """

    def __init__(self, engine: Engine, rank: int):
        self.engine, self.rank = engine, rank
        self.waiting: deque = deque()
        self.running: list = []
        self.kind = None
        self.joining: list = []
        self.stop: set = set()
        self.progress = None
        self.steps = {EXTEND: 0, DECODE: 0, IDLE: 0, "graph": 0, "eager_for_extend": 0, "too_big": 0}

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> tuple:
        room = self.engine.args.max_running_requests_per_rank - len(self.running)
        if self.waiting and room > 0:
            self.kind = EXTEND
            self.joining = [self.waiting.popleft() for _ in range(min(room, len(self.waiting)))]
            return sum(len(r.prompt_ids) for r in self.joining), 0
        self.kind = DECODE if self.running else None
        return len(self.running), 1

    def _graph_bs(self, global_num_tokens, can_cuda_graph) -> int | None:
        gr = self.engine.runner.graph_runner
        total = sum(global_num_tokens)
        if gr is None:
            return None
        if not can_cuda_graph:
            self.steps["eager_for_extend"] += self.kind == DECODE
            return None
        if total > gr.max_bs:
            self.steps["too_big"] += self.kind == DECODE
            return None
        return gr.padded_size(total)

    def run(self, global_num_tokens, can_cuda_graph) -> None:
        eng = self.engine
        if self.kind == EXTEND:
            self.steps[EXTEND] += 1
            joined = []
            for req in self.joining:
                eng.prefill(req, self.stop)
                if req.finished:
                    self._done(1)
                else:
                    joined.append(req)
            self.joining = []
            self.running = eng.merge_batch(self.running, joined)
            return
        if max(global_num_tokens) == 0:
            return
        graph_bs = self._graph_bs(global_num_tokens, can_cuda_graph)
        self.steps["graph"] += graph_bs is not None
        if self.kind == DECODE:
            self.steps[DECODE] += 1
            eng.decode_step(self.running, self.stop, graph_bs=graph_bs, eager=graph_bs is None)
            self._done(sum(r.finished for r in self.running))
            self.running = [r for r in self.running if not r.finished]
        else:  # the idle batch: no rows of its own; in a graph every row is padding
            self.steps[IDLE] += 1
            if graph_bs is not None:
                eng.runner.decode(idle_batch(eng.runner.device), graph_bs=graph_bs)

    def _done(self, n: int):
        if self.progress and n:
            self.progress(n)


def idle_batch(device) -> ForwardBatch:
    """SGLang's ``get_idle_batch``: a decode batch with no rows."""
    i64, i32 = torch.zeros(0, dtype=torch.int64, device=device), torch.zeros(0, dtype=torch.int32, device=device)
    return ForwardBatch(0, i64, i64.clone(), i32, i32.clone(), i64.clone(), torch.zeros(0, dtype=torch.int32))


def _dp_args(model, args: ServerArgs | None, kw: dict) -> ServerArgs:
    args = server_args_for(model, args, kw)
    if not args.enable_dp_attention:
        raise ValueError("DP attention: expected enable_dp_attention=True and dp_size > 1")
    return args


class DPEngine:
    """``DPEngine(model, dp_size=8, enable_dp_attention=True, **server_args)``: all ranks in one
    process, stepped in lockstep (the all-gather is a list). ``generate`` as ``Engine.generate``.

    ``ranks[i].engine`` is rank i's ``Engine``; ``ranks[i].steps`` counts its extend, decode and
    idle steps, its graph replays, and its decode steps run eagerly because a rank was prefilling
    (``eager_for_extend``) or the ranks' sum exceeded the largest graph (``too_big``).
    """

    def __init__(self, model, args: ServerArgs | None = None, prefill_cache: dict | None = None, **kw):
        self.args = _dp_args(model, args, kw)
        cache = {} if prefill_cache is None else prefill_cache  # the ranks share one model
        self.ranks = [DPRank(Engine(model, self.args, cache), r) for r in range(self.args.dp_size)]
        self.global_steps = 0

    def generate(self, prompts, max_new_tokens: int = 3, stop_token_ids=(2,), progress=None) -> list:
        stop = stop_set(stop_token_ids)
        reqs, good = self.ranks[0].engine.new_requests(prompts, max_new_tokens, progress)
        for i, req in enumerate(good):  # round robin
            self.ranks[i % len(self.ranks)].waiting.append(req)
        for rank in self.ranks:
            rank.stop, rank.progress = set(stop), progress
        try:
            while any(r.busy for r in self.ranks):
                info = [r.schedule() for r in self.ranks]  # the all-gather
                global_num_tokens = [n for n, _ in info]
                can_cuda_graph = min(c for _, c in info)
                for rank in self.ranks:
                    rank.run(global_num_tokens, can_cuda_graph)
                self.global_steps += 1
        except BaseException as e:
            for rank in self.ranks:
                rank.engine.abandon([r for r in reqs if r in rank.running or r in rank.waiting
                                     or r in rank.joining], e)
                rank.waiting.clear()
                rank.running, rank.joining = [], []
            raise
        return reqs


def _worker(rank: int, world: int, model, args: ServerArgs, prompts, max_new_tokens, stop_token_ids,
            init_file: str, out_dir: str, backend: str):
    torch.set_num_threads(1)
    torch.distributed.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
            args = dataclasses.replace(args, device=f"cuda:{rank}")
        dp = DPRank(Engine(model, args, {}), rank)
        reqs, good = dp.engine.new_requests(prompts, max_new_tokens)
        mine = [r for i, r in enumerate(good) if i % world == rank]  # round robin
        index = {id(r): i for i, r in enumerate(reqs)}
        dp.waiting.extend(mine)
        dp.stop = set(stop_token_ids or ())
        dev = dp.engine.runner.device
        while True:
            n, can = dp.schedule()
            local = torch.tensor([n, can, int(dp.busy or bool(dp.joining))], dtype=torch.int64, device=dev)
            gathered = [torch.empty_like(local) for _ in range(world)]
            torch.distributed.all_gather(gathered, local)
            info = torch.stack(gathered).cpu().tolist()
            if not any(busy for _, _, busy in info):
                break
            dp.run([g[0] for g in info], min(g[1] for g in info))
        out = {index[id(r)]: {"output_ids": r.output_ids, "finished_reason": r.finished_reason, "error": r.error,
                       "rows": r.rows, "replayed": r.replayed} for r in mine}
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps({"reqs": out, "steps": dp.steps}))
    finally:
        torch.distributed.destroy_process_group()


def run_dp_multiprocess(model, prompts, *, max_new_tokens: int = 3, stop_token_ids=(2,), **server_args) -> tuple:
    """One process per DP rank over ``torch.distributed`` (gloo on CPU, NCCL when ``device`` is
    CUDA and there are enough GPUs). Returns ``(reqs, steps)``: one ``Req`` per prompt, in order
    (rid = index), and each rank's step counts."""
    try:
        items = iter(prompts)
    except TypeError:
        raise TypeError(f"prompts: expected an iterable of token-id lists, got {type(prompts).__name__}") from None
    prompts = list(items)  # read once: the parent's checks and the ranks see the same prompts (a generator too)
    args = _dp_args(model, None, dict(server_args))
    stop = stop_set(stop_token_ids)
    world = args.dp_size
    use_nccl = (args.device or "").startswith("cuda") and torch.cuda.device_count() >= world
    backend = "nccl" if use_nccl else "gloo"
    if (args.device or "cpu").startswith("cuda") and not use_nccl:
        raise ValueError(f"run_dp_multiprocess: dp_size={world} on CUDA needs {world} GPUs, "
                         f"found {torch.cuda.device_count()}")
    small = dataclasses.replace(args, disable_cuda_graph=True, max_running_requests=world, device="cpu")
    reqs, _ = Engine(model, small).new_requests(prompts, max_new_tokens)  # the same checks as the ranks'
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        torch.multiprocessing.spawn(
            _worker, args=(world, model, args, prompts, max_new_tokens, tuple(stop),
                           init_file, tmp, backend), nprocs=world, join=True)
        results = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]
    for res in results:
        for rid, d in res["reqs"].items():
            req = reqs[int(rid)]
            req.output_ids, req.finished_reason, req.error, req.rows, req.replayed = (
                d["output_ids"], d["finished_reason"], d["error"], d["rows"], d["replayed"])
    return reqs, [res["steps"] for res in results]
