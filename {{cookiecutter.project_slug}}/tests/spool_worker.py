"""Worker processes for the spool's tests (memory/spool.py): a call through
CallMemory on the store a URL names, in a process of its own, that the test kills
with SIGKILL mid-call; and the next worker's call, which ends as LiveKit ends it.
Run with multiprocessing's spawn, so each is a fresh interpreter like a job process."""

from __future__ import annotations

import asyncio
import contextlib
import os

import memory
from memory import outbox_ledger


def caller_turns(count: int, word: str) -> list[str]:
    """What the caller says in the killed call: ``count`` turns, each with ``word``
    (a word no other test text has, to look for in files)."""
    return [
        f"turn {n}: the {word} code for my order is {4000 + n}" for n in range(count)
    ]


def call_then_hang(
    url: str, callers: list[str], turns: list[str], ready, env: dict[str, str]
) -> None:
    """A call of each of ``callers``, at once in one worker, whose turns are all
    handed to memory (``ready`` set then), that goes on until the worker is killed."""
    os.environ.update(env)
    # the rows this process leases are taken over by the next one within the test
    outbox_ledger.LEASE = 1.0

    async def main() -> None:
        store = memory.open_store(url)
        calls = [memory.CallMemory(store, c, f"call-killed-{c}") for c in callers]
        for call in calls:
            for n, text in enumerate(turns):
                at = 1000.0 + n
                call.capture("user", f"user_{n}", text, created_at=at)
                call.capture(
                    "assistant", f"reply_{n}", f"reply {n}", created_at=at + 0.5
                )
        # Every exchange handed to the store: the spool holds them at once; without
        # one, a store that refuses holds them in memory (and the wait runs out).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(c.writer.drain() for c in calls)), 20
            )
        ready.set()
        await asyncio.sleep(3600)  # the calls go on until the worker is killed

    asyncio.run(main())


def a_later_call(url: str, env: dict[str, str]) -> None:
    """The next worker: another caller's call, ended as the job's shutdown ends it,
    then the store closed as the process ends."""
    os.environ.update(env)

    async def main() -> None:
        store = memory.open_store(url)
        call = memory.CallMemory(store, "someone-else", "call-later")
        call.capture("user", "later_1", "hello again", created_at=2000.0)
        call.capture("assistant", "later_2", "Hello!", created_at=2000.5)
        await call.aclose("participant hung up")
        await store.close()

    asyncio.run(main())
