"""What only the Supermemory backend does: namespaces, the v5 request shapes, the
document id as idempotency key. The store contract (tests/test_store_contract.py) and
the outbox (tests/test_hosted_store.py) cover the rest."""

from __future__ import annotations

import logging
import re

import pytest

import memory
from memory import hosted, supermemory_store
from tests.doubles import make_exchange
from tests.store_fixtures import running_fake  # noqa: F401  (fixture `fake`)
from tests.test_hosted_store import delivered

ALICE = "alice@example.com"


@pytest.mark.parametrize(
    ("caller", "ns"),
    [
        ("alice@example.com", "lkmem:alice_aexample_dcom"),
        ("+15550100200", "lkmem:_p15550100200"),
        ("sip:room-7", "lkmem:sip:room-7"),
        ("a_b", "lkmem:a__b"),
    ],
)
def test_a_caller_id_becomes_a_readable_namespace(caller, ns):
    assert supermemory_store.namespace(caller) == ns


def test_a_long_caller_id_becomes_a_hashed_namespace_within_100_characters():
    long_ids = ["." * 128, "." * 127 + "x"]
    spaces = [supermemory_store.namespace(c) for c in long_ids]
    assert spaces[0] != spaces[1]
    assert all(
        re.fullmatch(r"lkmem:_h[0-9a-f]{64}", s) and len(s) <= 100 for s in spaces
    )


async def test_an_exchange_is_one_document_keyed_by_the_exchange_key(store, fake):
    exchange = make_exchange(1, text="I'm allergic to peanuts")
    await store.save(exchange)
    await delivered(store, fake, {exchange.key})
    (add,) = [
        r
        for r in fake.requests
        if r["method"] == "POST" and r["path"].endswith("/document")
    ]
    assert add["path"] == "/ns/lkmem:alice_aexample_dcom/document"
    assert add["headers"]["Authorization"] == "Bearer offline-test-key"
    assert add["json"]["id"] == exchange.key
    assert add["json"]["content"] == "Caller: I'm allergic to peanuts\nAgent: ok"
    assert set(add["json"]) == {"content", "id", "metadata", "date"}


async def test_a_new_version_of_an_exchange_replaces_the_document(store, fake):
    first = make_exchange(1, text="my number is 5", reply="")
    await store.save(first)
    await delivered(store, fake, {first.key})
    await store.save(
        memory.Exchange(**{**first.__dict__, "assistant_text": "noted, 5"})
    )
    await store.flush(1.0)
    (doc,) = fake.namespaces["lkmem:alice_aexample_dcom"].values()
    assert doc["content"].endswith("Agent: noted, 5") and doc["versions"] == 2


async def test_recall_asks_supermemory_for_the_callers_exchanges_only(store, fake):
    await store.recall(ALICE, "where did I go hiking", exclude_call_id="call-2")
    (search,) = [r for r in fake.requests if r["path"].endswith("/search")]
    assert search["path"] == "/ns/lkmem:alice_aexample_dcom/search"
    assert search["json"]["filter"] == {
        "field": "lkm_type",
        "operator": "eq",
        "value": "exchange",
    }
    assert search["json"]["query"] == "where did I go hiking"


async def test_forgetting_everything_deletes_the_namespace(store, fake):
    exchange = make_exchange(1)
    await store.save(exchange)
    await delivered(store, fake, {exchange.key})
    await store.forget(ALICE)
    await store.flush(1.0)
    assert any(
        r["method"] == "DELETE" and r["path"] == "/ns/lkmem:alice_aexample_dcom"
        for r in fake.requests
    )
    # what is left of the namespace is the mark of the erasure: its time, no words
    left = fake.namespaces.get("lkmem:alice_aexample_dcom", {})
    assert [d["metadata"]["lkm_type"] for d in left.values()] in ([], ["erasure"])


async def test_a_request_supermemory_refuses_is_kept_in_the_outbox_marked_and_logged(
    store, fake, monkeypatch, caplog
):
    # v5 rejects legacy keys such as containerTag with 400 [SM-MIG5]; retrying the same
    # request cannot help, so the row stays (nothing is lost) and the log says why.
    async def legacy_put(self, item, attempts):
        body = {"content": item.text(), "containerTag": "x"}
        await self.http.call(
            "POST", hosted.path("ns", "lkmem:x", "document"), json=body
        )
        return {}

    monkeypatch.setattr(supermemory_store.Supermemory, "put", legacy_put)
    exchange = make_exchange(1, text="kept despite a refusal")
    caplog.set_level(logging.DEBUG, logger="memory")
    await store.save(exchange)
    for _ in range(50):  # the background delivery logs it
        await store.flush(0.1)
        if "rejected" in caplog.text:
            break
    # the status above DEBUG; the service's answer (it may quote what was sent, the
    # caller's words) only at DEBUG
    (error,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "Supermemory rejected exchange" in error and "(status 400)" in error
    assert "kept despite" not in error and "containerTag" not in error
    assert any(
        "Unrecognized key: containerTag" in r.getMessage()
        for r in caplog.records
        if r.levelno == logging.DEBUG
    )
    assert [e.key for e in await store.exchanges(ALICE)] == [exchange.key]
