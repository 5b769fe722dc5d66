"""What only the Mem0 backend does: user ids, the v3 request shapes, and the outbox as
idempotency ledger (Mem0 has no idempotency key). The store contract
(tests/test_store_contract.py) and the outbox (tests/test_hosted_store.py) cover the
rest."""

from __future__ import annotations

import memory
from memory import mem0_store
from tests.doubles import make_exchange
from tests.store_fixtures import running_fake  # noqa: F401  (fixture `fake`)
from tests.test_hosted_store import delivered, outbox_rows

ALICE = "alice@example.com"


def test_a_caller_id_is_the_mem0_user_id_behind_a_prefix():
    assert mem0_store.user_id(ALICE) == "lkmem:alice@example.com"
    assert mem0_store.user_id("+15550100200") != mem0_store.user_id("15550100200")


async def test_an_exchange_is_one_verbatim_memory_of_the_callers_user(store, fake):
    exchange = make_exchange(1, text="I'm allergic to peanuts")
    await store.save(exchange)
    await delivered(store, fake, {exchange.key})
    (add,) = [r for r in fake.requests if r["path"] == "/v3/memories/add/"]
    assert add["headers"]["Authorization"] == "Token offline-test-key"
    assert (
        add["json"]["infer"] is False
        and add["json"]["user_id"] == "lkmem:alice@example.com"
    )
    assert add["json"]["messages"] == [
        {"role": "user", "content": "Caller: I'm allergic to peanuts\nAgent: ok"}
    ]
    (memory_id,) = fake.memories
    assert fake.memories[memory_id]["metadata"]["lkm_id"] == exchange.key


async def test_a_new_version_updates_the_same_memory_by_the_id_the_ledger_kept(
    store, fake
):
    first = make_exchange(1, text="my number is 5", reply="")
    await store.save(first)
    await delivered(store, fake, {first.key})
    await store.save(
        memory.Exchange(**{**first.__dict__, "assistant_text": "noted, 5"})
    )
    await store.flush(1.0)
    (memory_id,) = fake.memories
    assert fake.memories[memory_id]["memory"].endswith("Agent: noted, 5")
    assert [r["method"] for r in fake.requests if memory_id in r["path"]] == ["PUT"]
    assert outbox_rows(store) == [(first.key, 2, 2)]


async def test_search_and_listing_put_the_user_id_inside_filters(store, fake):
    await store.recall(ALICE, "where did I go hiking")
    search = next(r for r in fake.requests if r["path"] == "/v3/memories/search/")
    listing = next(r for r in fake.requests if r["path"] == "/v3/memories/")
    assert "user_id" not in search["json"]
    assert search["json"]["filters"] == {
        "user_id": "lkmem:alice@example.com",
        "metadata": {"lkm_type": "exchange"},
    }
    assert listing["json"] == {
        "filters": {
            "user_id": "lkmem:alice@example.com",
            "OR": [
                {"metadata": {"lkm_type": "fact"}},
                {"metadata": {"lkm_type": "summary"}},
            ],
        }
    }
    assert listing["query"]["page_size"] == "200"


async def test_forgetting_a_caller_queues_mem0s_entity_delete_and_hides_what_is_left_meanwhile(
    store, fake
):
    fake.lag = 2.0  # Mem0 deletes an entity after answering
    exchange = make_exchange(1, text="delete me please")
    await store.save(exchange)
    await delivered(store, fake, {exchange.key})
    assert await store.forget(ALICE) == 1
    await store.flush(1.0)
    assert any(
        r["path"] == "/v2/entities/user/lkmem:alice@example.com/" for r in fake.requests
    )
    assert fake.item_ids() == [exchange.key]  # still there at Mem0
    assert (
        await store.exchanges(ALICE) == []
        and (await store.recall(ALICE, "delete me")).empty
    )
