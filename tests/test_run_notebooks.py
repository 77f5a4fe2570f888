"""tools.run_notebooks: channel polls in slices (the nbclient#312 workaround, see its docstring)."""

import asyncio
import time
from queue import Empty

import pytest

from tools.run_notebooks import poll_in_slices


class FakeChannel:
    """A channel whose message is there but whose poll never wakes early: get_msg returns it only
    at the end of a poll (as the pyzmq poll did on the H200), after ``misses`` empty polls."""

    def __init__(self, misses=None):
        self.misses, self.timeouts = misses, []

    async def get_msg(self, timeout=None):
        self.timeouts.append(timeout)
        await asyncio.sleep(timeout or 0)
        if self.misses is not None and len(self.timeouts) > self.misses:
            return {"msg_type": "execute_reply"}
        raise Empty


def test_a_message_missed_by_one_poll_arrives_after_one_slice_not_after_the_timeout():
    ch = FakeChannel(misses=0)
    poll_in_slices(ch, slice_s=0.05)
    t0 = time.monotonic()
    msg = asyncio.run(ch.get_msg(timeout=30))
    assert msg["msg_type"] == "execute_reply"
    assert time.monotonic() - t0 < 5 and ch.timeouts == [0.05]


def test_polls_until_the_message_comes_with_no_timeout():
    ch = FakeChannel(misses=3)
    poll_in_slices(ch, slice_s=0.01)
    assert asyncio.run(ch.get_msg())["msg_type"] == "execute_reply"
    assert ch.timeouts == [0.01] * 4


def test_the_total_timeout_still_holds():
    ch = FakeChannel(misses=None)  # never a message
    poll_in_slices(ch, slice_s=0.05)
    t0 = time.monotonic()
    with pytest.raises(Empty):
        asyncio.run(ch.get_msg(timeout=0.12))
    assert 0.1 <= time.monotonic() - t0 < 2
    assert len(ch.timeouts) == 3 and ch.timeouts[-1] <= 0.05
