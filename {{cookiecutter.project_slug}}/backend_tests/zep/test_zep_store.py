"""What only the Zep backend does: users and threads by UUID, messages sent once each,
Idempotency-Key, facts from Zep's graph in recall. The store contract
(tests/test_store_contract.py) and the outbox (tests/test_hosted_store.py) cover the
rest."""

from __future__ import annotations

import asyncio

import memory
from memory import zep_store
from tests.doubles import make_exchange
from tests.store_fixtures import running_fake  # noqa: F401  (fixture `fake`)
from tests.test_hosted_store import delivered

ALICE = "alice@example.com"


def test_a_caller_id_is_the_zep_user_id_behind_a_prefix():
    assert zep_store.user_id(ALICE) == "lkmem:alice@example.com"
    assert len(zep_store.user_id("x" * 128)) <= 500


async def test_one_call_is_one_thread_of_the_callers_user(store, fake):
    for n in range(3):
        await store.save(make_exchange(n, text=f"turn {n}", call_id="call-1"))
    await store.save(make_exchange(9, text="another call", call_id="call-2"))
    await store.flush(2.0)
    (user,) = fake.users.values()
    assert user["user_id"] == "lkmem:alice@example.com"
    by_thread = sorted(len(t["messages"]) for t in fake.threads.values())
    assert by_thread == [2, 6]  # caller + agent per exchange
    add = next(r for r in fake.requests if r["path"].endswith("/messages"))
    assert add["headers"]["Authorization"] == "Api-Key offline-test-key"
    assert add["headers"]["Idempotency-Key"]
    assert [m["name"] for m in add["json"]["messages"]] == ["caller", "agent"]


async def test_a_reply_that_comes_after_its_turn_was_delivered_is_sent_alone(
    store, fake
):
    turn = make_exchange(1, text="can you book a table", reply="")
    await store.save(turn)
    await delivered(store, fake, {turn.key})
    await store.save(
        memory.Exchange(**{**turn.__dict__, "assistant_text": "Booked for eight."})
    )
    await store.flush(1.0)
    (thread,) = fake.threads.values()
    assert [(m["role"], m["content"]) for m in thread["messages"]] == [
        ("user", "can you book a table"),
        ("assistant", "Booked for eight."),
    ]


async def test_a_caller_known_to_zep_from_another_worker_is_found_not_made_twice(
    store_url, fake, tmp_path
):
    first = memory.open_store(store_url)
    await first.save(make_exchange(1, call_id="call-1"))
    await first.close()
    other = memory.open_store(fake.url(tmp_path / "other-outbox.db"))
    await other.save(make_exchange(2, call_id="call-2"))
    await other.close()
    assert len(fake.users) == 1 and len(fake.threads) == 2


async def test_recall_adds_the_facts_zeps_graph_extracted_after_the_callers_own(
    store, fake
):
    await store.remember(ALICE, memory.Fact.of("name", "Alice"))
    await store.save(
        make_exchange(1, text="I moved to Porto last spring", call_id="call-1")
    )
    await store.flush(1.0)
    await asyncio.sleep(fake.lag + 0.1)  # Zep extracts asynchronously
    recall = await store.recall(
        ALICE, "where did I move to, Porto?", exclude_call_id="call-2"
    )
    assert recall.facts[0] == (await store.profile(ALICE)).facts[0]
    assert ("stated", "Caller: I moved to Porto last spring") not in [
        (f.kind, f.value) for f in recall.facts
    ]
    assert any(f.value == "I moved to Porto last spring" for f in recall.facts[1:])


async def test_a_new_value_of_a_fact_replaces_its_episode_at_zep(store, fake):
    await store.remember(ALICE, memory.Fact.of("home city", "Lisbon", 1.0))
    await store.flush(1.0)
    await store.remember(ALICE, memory.Fact.of("home city", "Porto", 2.0))
    await store.flush(1.0)
    # the old value's episode is gone; it is kept as history, marked as no longer current
    assert sorted(e["content"] for e in fake.episodes.values()) == [
        "home city (no longer current): Lisbon",
        "home city: Porto",
    ]
