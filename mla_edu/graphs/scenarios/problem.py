"""``Problem``: a step to capture on the toy server, how the host feeds it, its eager reference, its batches."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from mla_edu.graphs.scenarios.toy_decode import MAX_BS, NUM_REQS, PAGE, W, ToyServer

Batch = tuple  # (req ids, lengths)
CAPTURE_BATCH: Batch = ([0, 1, 2, 3], [1, 1, 1, 1])  # SGLang captures with seq_len fill value 1
REPLAY_BATCHES: list[Batch] = [([4, 1, 6, 3], [17, 9, 30, 5]), ([2, 7, 5, 0], [32, 13, 4, 21])]


@dataclass
class Problem:
    """A step to capture, how the host feeds it, and its eager reference."""

    name: str
    server: ToyServer
    step: Callable[[], torch.Tensor]  # captured; reads only the static buffers
    prepare: Callable[[list, list], None]  # host work before a replay: copy inputs, fill metadata
    reference: Callable[[list, list], torch.Tensor]  # eager answer for the real rows
    batches: list = field(default_factory=lambda: [CAPTURE_BATCH, *REPLAY_BATCHES])
    persistent: list = field(default_factory=list)  # scratch buffers a replay must not depend on
    make_batch: Callable | None = None  # (generator, trial) -> (reqs, lens); default: random_batch

    def batch(self, gen: torch.Generator, trial: int):
        if trial < 0:
            return self.batches[0]
        return (self.make_batch or random_batch)(gen, trial)


def random_batch(gen: torch.Generator, trial: int):
    """A random batch between capture buckets: 1..MAX_BS distinct requests, lengths 1..W*PAGE."""
    bs = int(torch.randint(1, MAX_BS + 1, (1,), generator=gen))
    reqs = torch.randperm(NUM_REQS, generator=gen)[:bs].tolist()
    lens = torch.randint(1, W * PAGE + 1, (bs,), generator=gen).tolist()
    return reqs, lens


def default_prepare(s: ToyServer):
    """The host work before a replay: copy the batch into the static buffers, fill the page table."""
    def prepare(reqs, lens):
        s.set_batch(reqs, lens)
        s.fill_page_table(s.kv_indices, len(reqs))
    return prepare
