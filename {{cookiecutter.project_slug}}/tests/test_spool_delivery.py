"""The delivery loop of every spool (memory/hosted_delivery.py over an outbox file,
memory/outbox.py), on a target that records what it is given: the same code for
the SQLite and PostgreSQL spools and the hosted backends' outbox."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from memory import outbox
from memory.hosted_delivery import Delivery
from memory.outbox_items import Item
from memory.outbox_ledger import Ledger
from memory.outbox_threads import OutboxThreads
from tests.doubles import counting_syncs, make_exchange

ALICE, BOB = "alice@example.com", "+15550100200"


class Recording:
    """A delivery target (``hosted_delivery.Target``, and its ``Paced``) that takes
    everything and records it."""

    name = "recording"
    claim = 16
    batched = False
    retries_at_close = True
    paused_until = 0.0

    def __init__(self) -> None:
        self.items: list[str] = []
        self.deleted: list[str] = []

    async def put(self, item: Item, attempts: int) -> dict[str, Any]:
        self.items.append(item.id)
        return {}

    async def put_all(self, items: list[Item]) -> None:
        raise NotImplementedError

    async def delete(self, caller_id: str, items: list[Any]) -> None:
        self.deleted.append(caller_id)

    async def delete_caller(self, caller_id: str) -> None:
        self.deleted.append(caller_id)


@pytest.fixture(autouse=True)
def no_settling(monkeypatch):
    monkeypatch.setattr(outbox, "SETTLE", 0.0)


async def test_a_round_cut_short_while_it_claims_gives_back_what_it_claimed_at_once(
    tmp_path, monkeypatch
):
    # A flush whose bound runs out while the round's claim runs on the outbox's
    # writer thread (a 429's retry, due just before the bound: 12-40 s instead of
    # about 6 s for the hosted 429 test): the claim leases the rows all the same.
    # They must come back at once, not after the lease (outbox_ledger.LEASE, 30 s).
    io = OutboxThreads(tmp_path / "outbox.db")
    ledger = Ledger(io.outbox)
    target = Recording()
    delivery = Delivery(target, target, io, ledger)
    bob = make_exchange(1, BOB, text="my order number is 4411")
    await io.put([Item.of_exchange(bob)])
    await io.write(io.outbox.forget, ALICE, {}, [], float("inf"))  # queues a delete
    claiming, go = threading.Event(), threading.Event()
    claim = ledger.claim

    def claim_once_let_go(limit: int) -> Any:
        claiming.set()
        go.wait(30)
        return claim(limit)

    monkeypatch.setattr(ledger, "claim", claim_once_let_go)
    cut = asyncio.create_task(delivery.deliver_once())
    assert await asyncio.to_thread(claiming.wait, 30)
    cut.cancel()  # the bound runs out while the claim is on the writer thread
    go.set()
    with pytest.raises(asyncio.CancelledError):
        await cut
    monkeypatch.setattr(ledger, "claim", claim)
    for _ in range(500):  # the next round takes them as soon as they are given back
        if await delivery.deliver_once():
            break
        await asyncio.sleep(0.01)
    assert (target.items, target.deleted) == ([bob.key], [ALICE])
    await io.close()


async def test_what_many_calls_spool_at_once_is_fsynced_once_within_the_window(
    tmp_path, monkeypatch
):
    synced = counting_syncs(monkeypatch)
    io = OutboxThreads(tmp_path / "spool.db", keeps_record=False, sync_window=0.2)
    exchanges = [make_exchange(n, f"caller-{n}") for n in range(8)]
    await asyncio.gather(*(io.put([Item.of_exchange(e)]) for e in exchanges))
    assert synced == []  # committed, in the operating system's hands
    for _ in range(500):  # the window's one fsync
        if synced:
            break
        await asyncio.sleep(0.01)
    assert synced == ["spool.db"]
    await io.close()


async def test_closing_a_spool_fsyncs_what_it_holds_before_it_returns(
    tmp_path, monkeypatch
):
    synced = counting_syncs(monkeypatch)
    io = OutboxThreads(tmp_path / "spool.db", keeps_record=False, sync_window=60.0)
    await io.put([Item.of_exchange(make_exchange(1, text="my code is 4411"))])
    await io.close()
    assert synced == ["spool.db"]


async def test_the_hosted_outbox_fsyncs_every_put_before_it_returns(tmp_path):
    io = OutboxThreads(tmp_path / "outbox.db")
    assert io.outbox.synced
    assert io.outbox.db.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
    await io.close()


def _damage(path: Path, how: str) -> None:
    for f in [path.with_name(path.name + s) for s in ("", "-wal", "-shm")]:
        f.unlink(missing_ok=True)  # `rm data/*` while the worker runs
    if how == "replaced":  # another tool puts a database of its own there
        other = sqlite3.connect(path)
        other.execute("CREATE TABLE notes (text)")
        other.commit()
        other.close()


@pytest.mark.parametrize("how", ["deleted", "replaced"])
async def test_a_spool_deleted_or_replaced_in_use_keeps_what_waits_in_it(
    tmp_path, how, caplog
):
    # Measured before: with the store refusing writes, a spool deleted mid-call
    # took all 11 exchanges of the call with it, and the call logged them as saved
    # (the open connection wrote on into the deleted file).
    path = tmp_path / "memory.db-spool"
    io = OutboxThreads(path, keeps_record=False, sync_window=0.05)
    said = [
        Item.of_exchange(make_exchange(n, BOB, text=f"turn {n}")) for n in range(10)
    ]
    await io.put(said[:5])  # waiting: the store refuses writes
    await io.sync()
    _damage(path, how)
    for item in said[5:]:
        await io.put([item])
    await io.sync()
    await io.close()
    after = OutboxThreads(path, keeps_record=False)  # the next worker's view
    rows, _ = await after.read(after.outbox.rows, BOB, ("exchange",))
    await after.close()
    kept = {r.item.id for r in rows if r.pending}
    (error,) = [r.message for r in caplog.records if r.levelname == "ERROR"]
    assert "deleted or replaced while in use" in error
    assert kept == {i.id for i in said}, (how, error)  # read back, and what came after
