"""The mini serving engine: continuous batching over a paged latent cache.

Scheduling follows SGLang's scheduler in miniature: waiting requests are prefilled one by one
(the model's contiguous forward; latents written into the paged cache) while fewer than
``max_running_requests`` run; they join the running batch; every step decodes one token for
each running request (greedy); finished requests (end marker, ``max_new_tokens``, or an error)
leave the batch and free their ``req_to_token`` row and their pages, which later requests reuse.

Row order: SGLang's ``ScheduleBatch.filter_batch`` keeps the surviving rows in order and
``merge_batch`` appends the joining requests at the end (``schedule_batch.py``,
``self.reqs.extend(other.reqs)``): ``row_order="append"``. ``"prepend"`` puts them first.
"""

from __future__ import annotations

import operator
from collections import deque
from dataclasses import dataclass, field

import torch

from mla_edu.device import check_device
from mla_edu.kvcache import PoolExhausted
from mla_edu.serving.args import ServerArgs
from mla_edu.serving.batch import ForwardBatch
from mla_edu.serving.model_runner import ModelRunner
from mla_edu.settings import check_value
from mla_edu.util import cdiv, is_int

#: ``generate``'s ``stop_token_ids``: token ids (a str such as "2" would never match a token) or None.
STOP_TOKEN_IDS = list[int] | tuple[int, ...] | set[int] | frozenset[int] | None


def stop_set(stop_token_ids, name: str = "stop_token_ids") -> set:
    """``stop_token_ids`` checked against ``STOP_TOKEN_IDS`` (TypeError naming ``name``) -> the set of stop tokens:
    the one check of every ``generate`` (``Engine``, ``DPEngine``, ``run_dp_multiprocess``) and of the ``stop``
    of ``Engine.prefill`` and ``Engine.decode_step``."""
    check_value(name, stop_token_ids, STOP_TOKEN_IDS)
    return set(stop_token_ids or ())


@dataclass
class Req:
    """One request and what happened to it."""

    rid: int
    prompt_ids: list
    max_new_tokens: int
    output_ids: list = field(default_factory=list)
    req_pool_idx: int | None = None
    pages: list = field(default_factory=list)
    seq_len: int = 0  # tokens whose latents are in the cache
    finished_reason: str | None = None  # "stop" | "length" | "error"
    error: str | None = None
    rows: list = field(default_factory=list)  # the batch row of each decode step
    replayed: list = field(default_factory=list)  # per decode step: True if a graph replayed it
    engine: object = field(default=None, repr=False, compare=False)  # the Engine whose row and pages it holds

    @property
    def finished(self) -> bool:
        return self.finished_reason is not None

    @property
    def decoded_only_in_row0(self) -> bool:
        return all(r == 0 for r in self.rows)


def server_args_for(model, args: ServerArgs | None, kw: dict) -> ServerArgs:
    """``args``, or ``ServerArgs(**kw)`` with the model's context by default; not both."""
    if args is None:
        kw.setdefault("context_length", model.config.mla.max_position_embeddings)
        return ServerArgs(**kw)
    if kw:
        raise TypeError(f"pass either args or keyword server arguments, got both ({sorted(kw)})")
    return args


class Engine:
    """``Engine(model, **server_args)``; ``generate(prompts)`` -> list of ``Req`` (same order)."""

    def __init__(self, model, args: ServerArgs | None = None, prefill_cache: dict | None = None, **kw):
        self.args = args = server_args_for(model, args, kw)
        if args.device is not None:  # "cuda" without CUDA: a ValueError here, not torch's AssertionError later
            check_device("device", args.device)
        self.runner = ModelRunner(model, args, prefill_cache)
        self.vocab_size = model.config.vocab_size
        self.stats = {"decode_steps": 0, "max_running": 0, "graph_steps": 0, "padded_rows": 0}

    # --- request checks: a bad request fails alone --------------------------------------------
    def check(self, req: Req, room: int | None = None) -> str | None:
        """What is wrong with ``req`` (a message), or None. ``room``: the new tokens the context must hold after
        the prompt (default: its ``max_new_tokens``)."""
        ids = req.prompt_ids
        if not isinstance(ids, (list, tuple)):
            return f"prompt: expected a list of int token ids, got {type(ids).__name__}"
        ints = []
        for i, t in enumerate(ids):
            try:  # ints and integer-like scalars (numpy's int64, a 0-d int tensor); not bools or floats
                if isinstance(t, bool):
                    raise TypeError
                ints.append(operator.index(t))
            except TypeError:
                return f"prompt: expected int token ids, got {type(t).__name__} {t!r} at position {i}"
        req.prompt_ids = ids = ints
        if len(ids) == 0:
            return "prompt: expected at least one token, got an empty prompt"
        if any(t < 0 or t >= self.vocab_size for t in ids):
            return f"prompt: expected token ids in [0, {self.vocab_size}), got {min(ids)}..{max(ids)}"
        if not is_int(req.max_new_tokens) or req.max_new_tokens < 1:
            return f"max_new_tokens: expected an int >= 1, got {req.max_new_tokens!r}"
        ctx = self.args.context_length
        room, what = (req.max_new_tokens, "max_new_tokens") if room is None else (room, "new tokens")
        if len(ids) + room > ctx:
            return f"prompt too long: {len(ids)} prompt tokens + {what} {room} exceed the context length {ctx}"
        positions = self.max_positions
        if len(ids) + room > positions:  # --context-length may exceed it (the seed's 4096 sizes the page table)
            return (f"prompt too long for the model: {len(ids)} prompt tokens + {what} {room} exceed its "
                    f"max_position_embeddings {positions} (the context length {ctx} sizes the page table only)")
        return None

    @property
    def max_positions(self) -> int:
        """The model's own limit, ``max_position_embeddings``: no request goes past it, whatever the context length.
        A longer ``--context-length`` is accepted, as SGLang accepts it with a warning that it "may lead to
        incorrect model outputs" (``python/sglang/srt/configs/model_config.py`` lines 136-151 at ``7059ae16f``,
        ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`` true by default): the seed's runs here set 4096 on a
        512-position model, for the page table's width. Here a request past the model's positions is refused."""
        return self.runner.model.config.mla.max_position_embeddings

    def new_req(self, prompt, max_new_tokens: int = 3) -> Req:
        """A new request with the next rid (not yet checked, holding no row or page)."""
        self._next_rid = getattr(self, "_next_rid", 0) + 1
        return Req(self._next_rid - 1, list(prompt) if isinstance(prompt, (list, tuple)) else prompt, max_new_tokens)

    # --- memory ---------------------------------------------------------------------------------
    def _alloc(self, req: Req, n_tokens: int):
        """Make sure ``req`` owns pages for ``n_tokens`` tokens."""
        need = cdiv(n_tokens, self.runner.page_size) - len(req.pages)
        if need > 0:
            req.pages.extend(int(p) for p in self.runner.allocator.alloc_pages(need))

    def free_req(self, req: Req):
        """Give back ``req``'s ``req_to_token`` row and pages (idempotent); refuses another engine's request."""
        if req.engine is not None and req.engine is not self:
            raise ValueError(f"free_req: request {req.rid} holds a row and pages of another engine, not this one's")
        req.engine = None
        if req.req_pool_idx is not None:
            self.runner.req_to_token_pool.free([req.req_pool_idx])
            req.req_pool_idx = None
        if req.pages:
            self.runner.allocator.free_pages(req.pages)
            req.pages = []

    def _finish(self, req: Req, reason: str, error: str | None = None):
        req.finished_reason, req.error = reason, error
        self.free_req(req)

    def _after_token(self, req: Req, tok: int, stop: set):
        req.output_ids.append(tok)
        if tok in stop:
            self._finish(req, "stop")
        elif len(req.output_ids) >= req.max_new_tokens:
            self._finish(req, "length")

    # --- the two forward kinds ------------------------------------------------------------------
    def prefill(self, req: Req, stop: set = frozenset(), room: int | None = None):
        """Prefill a new request: a ``req_to_token`` row and pages for its prompt, then its first token. Refuses a
        request that already holds a row, pages or output, or one ``check`` refuses (``room`` as there), before
        anything is taken; gives the row and pages back if the forward fails (an exception or an interrupt).
        ``stop``: the stop token ids (``stop_set``'s check, before anything is taken)."""
        stop = stop_set(stop, "stop")
        if not isinstance(req, Req):
            raise TypeError(f"prefill: expected a Req, got {type(req).__name__}")
        if req.req_pool_idx is not None or req.pages or req.output_ids or req.finished:
            raise ValueError(f"prefill: expected a new request (no row, pages or output yet), got request {req.rid} "
                             f"with req_pool_idx={req.req_pool_idx!r}, {len(req.pages)} pages, "
                             f"{len(req.output_ids)} output tokens")
        err = self.check(req, room)
        if err:
            raise ValueError(f"prefill: request {req.rid}: {err}")
        try:
            req.engine = self
            req.req_pool_idx = int(self.runner.req_to_token_pool.alloc(1)[0])
            self._alloc(req, len(req.prompt_ids))
            logits = self.runner.prefill(req.prompt_ids, req.req_pool_idx, req.pages)
        except BaseException:
            self.free_req(req)
            raise
        req.seq_len = len(req.prompt_ids)
        if not torch.isfinite(logits).all():
            return self._finish(req, "error", "prefill: non-finite logits")
        self._after_token(req, int(logits.argmax()), stop)

    def prefill_requests(self, prompts) -> list:
        """New requests for ``prompts``, each prefilled with no stop token (so all stay running):
        the batch that a diagnosis or a checker then decodes by hand. Each prompt passes ``check`` (as
        ``generate``'s) with room for one decode step after it; a step past the context is refused then."""
        reqs = [self.new_req(p) for p in prompts]
        for i, req in enumerate(reqs):  # before any row or page is taken
            err = self.check(req, room=1)
            if err:
                raise ValueError(f"prefill_requests: prompts[{i}]: {err}")
        rows = self.runner.req_to_token_pool.available()
        if len(reqs) > rows:
            raise PoolExhausted(f"prefill_requests: expected at most {rows} prompts (free request rows of "
                                f"max_running_requests={self.args.max_running_requests}), got {len(reqs)}")
        try:
            for req in reqs:
                self.prefill(req, room=1)
        except BaseException:  # a failure half-way: the requests already prefilled give back rows and pages
            for req in reqs:
                self.free_req(req)
            raise
        return reqs

    def check_running(self, running: list) -> None:
        """Refuse a decode batch holding a finished request or one this engine did not prefill, before
        any page or ``req_to_token`` entry is touched (a freed row index is None: the slot write would
        hit a whole pool row)."""
        if len(running) == 0:
            raise ValueError("running: expected at least one request, got an empty batch")
        seen = set()
        # the tighter of the context length and the model's positions (the seed's context exceeds the latter)
        limit, what = min((self.args.context_length, "context_length"),
                          (self.max_positions, "the model's max_position_embeddings"))
        for row, req in enumerate(running):
            if not isinstance(req, Req):
                raise TypeError(f"running[{row}]: expected a Req, got {type(req).__name__}")
            if req.finished:
                raise ValueError(f"running[{row}]: expected a running request, got request {req.rid} finished "
                                 f"({req.finished_reason!r}), which holds no row or pages")
            idx = req.req_pool_idx
            if (idx is None or not req.pages or idx in seen or req.engine is not self
                    or not self.runner.req_to_token_pool.is_allocated(idx)):
                raise ValueError(f"running[{row}]: expected a request prefilled by this engine, each once, got "
                                 f"request {req.rid} with req_pool_idx={idx!r}")
            if req.seq_len >= limit:  # the fed-back token would sit at position seq_len, past the limit
                raise ValueError(f"running[{row}]: expected a request with room for one more token, got request "
                                 f"{req.rid} with seq_len={req.seq_len} = {what} {limit}")
            seen.add(idx)

    def make_batch(self, running: list) -> ForwardBatch:
        """Give each running request a slot for its fed-back token; build the decode batch (row = list order)."""
        self.check_running(running)
        rn = self.runner
        pos, rpi, locs = [], [], []
        for row, req in enumerate(running):
            p = req.seq_len  # the fed-back token's position
            self._alloc(req, p + 1)
            locs.append(rn.assign_slots(req.req_pool_idx, req.pages, p, p + 1))
            pos.append(p)
            rpi.append(req.req_pool_idx)
        dev = rn.device
        positions = torch.tensor(pos, dtype=torch.int64)
        return ForwardBatch(
            batch_size=len(running),
            input_ids=torch.tensor([r.output_ids[-1] for r in running], dtype=torch.int64, device=dev),
            positions=positions.to(dev),
            req_pool_indices=torch.tensor(rpi, dtype=torch.int32, device=dev),
            seq_lens=(positions + 1).to(dev, torch.int32),
            out_cache_loc=torch.cat(locs),
            seq_lens_cpu=(positions + 1).to(torch.int32),
        )

    def decode_step(self, running: list, stop: set, graph_bs: int | None = None, eager: bool = False):
        """Decode one token for each request of ``running`` (row = list order); finished ones free
        their row and pages. ``graph_bs`` / ``eager``: as ``ModelRunner.decode`` (DP attention).

        The arguments are checked before any slot is assigned; each request's ``rows`` and ``replayed`` and
        the engine's ``stats`` record the step only once the decode returned (a failed or interrupted step
        records nothing). ``stop``: the stop token ids (``stop_set``'s check)."""
        stop = stop_set(stop, "stop")
        self.check_running(running)
        self.runner.check_decode(len(running), graph_bs, eager)
        batch = self.make_batch(running)
        gr = self.runner.graph_runner
        replay = graph_bs is not None or (not eager and gr is not None and gr.can_run(batch.batch_size))
        next_ids, bad, _ = self.runner.decode(batch, graph_bs, eager)
        next_ids, bad = next_ids.tolist(), bad.tolist()
        if replay:
            self.stats["graph_steps"] += 1
            self.stats["padded_rows"] += (graph_bs or gr.padded_size(batch.batch_size)) - batch.batch_size
        self.stats["decode_steps"] += 1
        for row, (req, tok, is_bad) in enumerate(zip(running, next_ids, bad)):
            req.rows.append(row)
            req.replayed.append(replay)
            req.seq_len += 1
            if is_bad:
                self._finish(req, "error", "decode: non-finite logits (the kernel read the poison page id)")
            else:
                self._after_token(req, tok, stop)

    # --- the loop ---------------------------------------------------------------------------------
    def merge_batch(self, running: list, joining: list) -> list:
        """The running batch after ``joining`` requests prefilled: SGLang's ``merge_batch`` appends
        them (``row_order="append"``); ``"prepend"`` puts them first. Rows follow this order."""
        return running + joining if self.args.row_order == "append" else joining + running

    def _loop(self, waiting: deque, stop: set, progress) -> None:
        running: list = []
        max_running = self.args.max_running_requests_per_rank
        while waiting or running:
            joining = []
            while waiting and len(running) + len(joining) < max_running:
                req = waiting.popleft()
                self.prefill(req, stop)
                if req.finished:
                    if progress:
                        progress(1)
                else:
                    joining.append(req)
            running = self.merge_batch(running, joining)
            if not running:
                continue
            self.stats["max_running"] = max(self.stats["max_running"], len(running))
            self.decode_step(running, stop)
            if progress:
                for req in running:
                    if req.finished:
                        progress(1)
            running = [r for r in running if not r.finished]  # filter_batch: order kept

    def abandon(self, reqs: list, exc: BaseException) -> None:
        """``generate`` was interrupted: every unfinished request gives back its row and pages."""
        for req in reqs:
            if not req.finished:
                self._finish(req, "error", f"interrupted: {type(exc).__name__}")
            elif req.req_pool_idx is not None or req.pages:
                self.free_req(req)

    def new_requests(self, prompts, max_new_tokens: int = 3, progress=None) -> tuple:
        """``(reqs, good)``: one ``Req`` per prompt, in order, and those that passed ``check``;
        the others are finished with their error (and counted by ``progress``)."""
        reqs = [self.new_req(p, max_new_tokens) for p in prompts]
        good = []
        for req in reqs:
            err = self.check(req)
            if err:
                req.finished_reason, req.error = "error", err
                if progress:
                    progress(1)
            else:
                good.append(req)
        return reqs, good

    def generate(self, prompts, max_new_tokens: int = 3, stop_token_ids=(2,), progress=None) -> list:
        """Greedy-decode every prompt (a list of token-id lists) with continuous batching.

        Returns one ``Req`` per prompt, in order; a bad request comes back with ``error`` set and
        ``finished_reason == "error"``, the others run as if it were not there.
        ``progress``: an optional callable, called with 1 for every finished request.
        If anything interrupts it (``KeyboardInterrupt``, an exception at any step), the unfinished
        requests end with ``error="interrupted: ..."`` and free their rows and pages, then the
        exception propagates: the engine stays usable.
        """
        stop = stop_set(stop_token_ids)
        reqs, good = self.new_requests(prompts, max_new_tokens, progress)
        waiting = deque(good)
        try:
            self._loop(waiting, stop, progress)
        except BaseException as e:  # an interrupt (Jupyter's stop button) or an error at any step
            self.abandon(reqs, e)
            raise
        return reqs

