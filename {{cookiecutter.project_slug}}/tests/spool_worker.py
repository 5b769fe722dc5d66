"""Worker processes for the spool's tests (memory/spool.py): a call through
CallMemory on the store a URL names, in a process of its own, that the test kills
with SIGKILL mid-call; and the next worker's call, which ends as LiveKit ends it.
Run with multiprocessing's spawn, so each is a fresh interpreter like a job process.

And the bodies of the spool tests every local backend runs (backend_tests/sqlite,
backend_tests/postgres): each backend gives how its store refuses every write
(``refusing``) and how to read what the store holds (``stored``)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import memory
from memory import outbox_ledger

PROJECT = Path(__file__).resolve().parents[1]
ALICE, BOB = "alice@example.com", "+15550100200"
SPAWN = multiprocessing.get_context("spawn")

Refusing = Callable[[], Any]
"""An async context manager's factory: the store refuses every write inside, and
takes writes once it has exited."""
Stored = Callable[[str], list[tuple[str, str]]]
"""(key, user_text) of a caller's exchanges in the store, read directly, by key."""


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


async def killed_while_the_store_refused(
    url: str, turns: list[str], refusing: Refusing, stored: Stored
) -> None:
    """A worker runs a call of ALICE and one of BOB, each handing ``turns`` to
    memory, while the store refuses every write, and is killed with SIGKILL
    mid-call; then the store takes writes again. It took nothing meanwhile."""
    async with refusing():
        ready = SPAWN.Event()
        worker = SPAWN.Process(
            target=call_then_hang, args=(url, [ALICE, BOB], turns, ready, {})
        )
        worker.start()
        assert await asyncio.to_thread(ready.wait, 60)
        await asyncio.sleep(0.3)
        assert worker.pid is not None
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(10)
        assert worker.exitcode == -signal.SIGKILL
    assert stored(ALICE) == stored(BOB) == []


def next_worker(url: str) -> None:
    """The next worker process on the store: one call, ended as LiveKit ends it."""
    later = SPAWN.Process(target=a_later_call, args=(url, {}))
    later.start()
    later.join(60)
    assert later.exitcode == 0


async def a_killed_call_reaches_the_store_through_the_next_worker(
    url: str, refusing: Refusing, stored: Stored
) -> None:
    """The store refused every write of a call, the worker was killed: the next
    worker delivers every exchange of both callers, once."""
    turns = caller_turns(6, "saffron")
    await killed_while_the_store_refused(url, turns, refusing, stored)
    next_worker(url)
    for caller in (ALICE, BOB):
        keys = [memory.exchange_key(caller, f"user_{n}") for n in range(len(turns))]
        assert stored(caller) == sorted(zip(keys, turns, strict=True))


async def an_erasure_after_the_kill_stops_that_callers_exchanges_only(
    url: str, refusing: Refusing, stored: Stored, word: str
) -> None:
    """As above, with ``memory_admin forget ALICE`` (another process) between the
    kill and the next worker: none of ALICE's exchanges arrives, all of BOB's do.
    Every turn of the killed call says ``word``."""
    turns = caller_turns(6, word)
    await killed_while_the_store_refused(url, turns, refusing, stored)
    erased = subprocess.run(
        [sys.executable, "memory_admin.py", "forget", ALICE, "--yes"],
        cwd=PROJECT,
        env={**os.environ, "MEMORY_URL": url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert erased.returncode == 0, erased.stderr
    next_worker(url)
    assert stored(ALICE) == []
    assert len(stored(BOB)) == len(turns)  # only the erased caller's stop
