"""FlashMLA's split scheduler replayed on the host: how ``get_mla_metadata`` cuts a batch into parts.

FlashMLA (at ``9edee0c``; ``docs/sources.md``) runs one warp before its attention kernel
(``csrc/kernels/get_mla_metadata.cu`` lines 8-75). It counts each request's 64-token blocks, adds a fixed
overhead of ``FIXED_OVERHEAD_NUM_BLOCKS`` = 5 per request (``csrc/kernels/config.h`` line 11), and gives each of
``num_sm_parts`` parts the same payload (line 34)::

    payload = max(ceil(total / num_sm_parts) + 5, 2 * 5)      total = sum over requests of (blocks + 5)

Then it walks the requests in order (lines 38-67): a part takes the rest of the next request whole while
``rest + 5`` fits what is left of its payload; otherwise it takes a piece of ``left - 5`` blocks if that is more
than nothing, and the next part goes on from there. Every piece pays the overhead, so no part exceeds the payload.
``num_sm_parts = sm_count / h_k / ceil(h_q / h_k / 64)`` (``csrc/flash_api.cpp`` line 39; h_k = 1 in MLA), and
the attention kernel's grid is ``(ceil(h_q / h_k / 64), h_k, num_sm_parts)`` (``csrc/kernels/splitkv_mla.cu`` line
1339): one CTA per part and head block, so a part is one CTA at h_q <= 64 and two at h_q = 128.

``flashmla_parts`` is that walk; every number this project quotes about FlashMLA's partition comes from it
(notebook 09 section 3 sets it beside this project's closed form; ``docs/kernel_essay.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

from mla_edu.util import cdiv

#: FlashMLA's ``Config::FIXED_OVERHEAD_NUM_BLOCKS`` (``csrc/kernels/config.h`` line 11 at ``9edee0c``): the blocks
#: each request (each piece of one) is charged besides its own. The source gives the number, not what it stands for.
FIXED_OVERHEAD_NUM_BLOCKS = 5
#: FlashMLA's ``Config::BLOCK_SIZE_M`` (line 5): query heads per CTA; and ``PAGE_BLOCK_SIZE`` (line 6): tokens a block.
BLOCK_SIZE_M = 64
PAGE_BLOCK_SIZE = 64


@dataclass(frozen=True)
class Piece:
    """Blocks ``[first, end)`` of request ``request``, walked by part ``part``."""

    part: int
    request: int
    first: int
    end: int


def num_sm_parts(h_q: int, sm_count: int, h_k: int = 1) -> int:
    """FlashMLA's part count at decode (one query token): ``sm_count / h_k / ceil((h_q / h_k) / 64)``
    (``csrc/flash_api.cpp`` line 39, whose ``num_heads_per_head_k`` is ``s_q * h_q / h_k``), e.g. 66 at h_q=128 and
    132 at h_q=16 on a 132-SM H200."""
    for name, value in (("h_q", h_q), ("sm_count", sm_count), ("h_k", h_k)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if h_q % h_k:
        raise ValueError(f"h_q must be a multiple of h_k (each key head serves h_q / h_k query heads), got "
                         f"h_q={h_q}, h_k={h_k}")
    parts = sm_count // h_k // cdiv(h_q // h_k, BLOCK_SIZE_M)
    if parts < 1:
        raise ValueError(f"{sm_count} SMs give no part at h_q={h_q}, h_k={h_k}")
    return parts


def payload(lens, parts: int, block: int = PAGE_BLOCK_SIZE) -> int:
    """Each part's payload in blocks (``get_mla_metadata.cu`` line 34), the floor of two overheads included."""
    o = FIXED_OVERHEAD_NUM_BLOCKS
    total = sum(cdiv(_length(x), block) + o for x in lens)
    return max(cdiv(total, parts) + o, 2 * o)


def flashmla_parts(lens, parts: int, block: int = PAGE_BLOCK_SIZE) -> list[list[Piece]]:
    """The pieces each of ``parts`` parts walks, in order, for requests of ``lens`` tokens (host ints), cut as
    ``get_mla_metadata.cu`` cuts them (lines 34-67). A part may get no piece: a batch of equal requests that each
    fit a part once leaves the last parts idle."""
    if not isinstance(parts, int) or isinstance(parts, bool) or parts < 1:
        raise ValueError(f"parts must be an int >= 1, got {parts!r}")
    o = FIXED_OVERHEAD_NUM_BLOCKS
    blocks = [cdiv(_length(x), block) for x in lens]
    each = payload(lens, parts, block)
    out: list[list[Piece]] = []
    b, done = 0, 0  # the request being walked, and its blocks already given to earlier parts
    for p in range(parts):
        left, mine = each, []
        while b < len(blocks):
            rest = blocks[b] - done
            if left >= rest + o:  # the rest of request b fits: it ends in this part (lines 47-53)
                mine.append(Piece(p, b, done, blocks[b]))
                left -= rest + o
                b, done = b + 1, 0
            else:  # a piece of it, if more than the overhead is left; then the next part (lines 55-60)
                if left - o > 0:
                    mine.append(Piece(p, b, done, done + left - o))
                    done += left - o
                break
        out.append(mine)
    if b < len(blocks):  # never: the payloads cover the total and every cut; FlashMLA asserts it too (line 68)
        raise RuntimeError(f"FlashMLA's walk ended at request {b} of {len(blocks)}")
    return out


def pieces_per_request(lens, parts: int, block: int = PAGE_BLOCK_SIZE) -> list[int]:
    """How many pieces (splits, partials) each request is cut into."""
    count = [0] * len(lens)
    for mine in flashmla_parts(lens, parts, block):
        for piece in mine:
            count[piece.request] += 1
    return count


def part_loads(lens, parts: int, block: int = PAGE_BLOCK_SIZE) -> list[int]:
    """Each part's cost in blocks: its pieces' blocks plus one overhead a piece (no more than ``payload``)."""
    return [sum(pc.end - pc.first + FIXED_OVERHEAD_NUM_BLOCKS for pc in mine)
            for mine in flashmla_parts(lens, parts, block)]


def flashmla_makespan(lens, page_size: int, parts: int) -> int:
    """The slowest part's cost in blocks of ``page_size`` tokens under FlashMLA's walk (``part_loads``)."""
    return max(part_loads(lens, parts, page_size))


def _length(x) -> int:
    n = int(x)
    return max(n, 0)
