"""The store contract: what every backend promises (memory.MemoryStore), run unchanged
against this project's backend (a fresh store from tests/store_fixtures.py) and
against tests/doubles.InMemoryStore. A new backend passes this file first."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import time
from collections.abc import AsyncIterator

import pytest

import memory
from tests.doubles import InMemoryStore, make_exchange

ALICE = "alice@example.com"
BOB = "+15550100200"


@pytest.fixture(params=["backend", "in-memory"])
async def any_store(request, store_url) -> AsyncIterator[memory.MemoryStore]:
    s = memory.open_store(store_url) if request.param == "backend" else InMemoryStore()
    yield s
    await s.close()


def fact(kind: str, value: str, at: float | None = None) -> memory.Fact:
    return memory.Fact.of(kind, value, at)


async def test_recall_ranks_the_exchange_that_matches_the_question_first(any_store):
    # each in a call of its own: a store may also return the exchange after a match in
    # the same call, as its context (sqlite indexes each turn with the one before)
    await any_store.save(
        make_exchange(1, text="I'm training for the Berlin marathon in September.")
    )
    await any_store.save(
        make_exchange(2, text="My cat knocked over a plant today.", call_id="call-2")
    )
    await any_store.save(
        make_exchange(3, text="The weather is grey again.", call_id="call-3")
    )
    recall = await any_store.recall(ALICE, "Which marathon am I training for?")
    assert recall.exchanges[0].user_text.startswith(
        "I'm training for the Berlin marathon"
    )
    assert all("cat" not in e.user_text for e in recall.exchanges)


async def test_recall_leaves_out_the_current_call(any_store):
    await any_store.save(make_exchange(1, text="Paris trip planning", call_id="call-1"))
    await any_store.save(make_exchange(2, text="Paris hotel booking", call_id="call-2"))
    recall = await any_store.recall(ALICE, "Paris", exclude_call_id="call-2")
    assert [e.call_id for e in recall.exchanges] == ["call-1"]


async def test_recall_returns_at_most_limit_exchanges(any_store):
    for n in range(12):
        await any_store.save(make_exchange(n, text=f"Lisbon note number {n}"))
    assert len((await any_store.recall(ALICE, "Lisbon", limit=5)).exchanges) == 5
    assert (await any_store.recall(ALICE, "Lisbon", limit=0)).exchanges == ()


async def test_a_caller_never_recalls_another_callers_rows(any_store):
    await any_store.save(make_exchange(1, caller=BOB, text="my locker code is 4417"))
    await any_store.remember(BOB, fact("locker", "4417"))
    await any_store.save_summary(BOB, "call-9", "talked about the locker")
    recall = await any_store.recall(ALICE, "locker code 4417")
    assert recall.empty
    assert await any_store.exchanges(ALICE) == []
    assert (await any_store.profile(ALICE)).empty


# What a caller says in one call and asks in a later one, in languages written without
# spaces between words (Chinese, Japanese, Thai) or with particles on words (Korean).
LATER_CALLS = {
    "chinese": ("下周二我要去上海出差", "我上海出差的事情你还记得吗"),
    "japanese": ("来週の火曜日に大阪へ出張します", "大阪出張のこと覚えてる？"),  # noqa: RUF001
    "korean": ("다음 주에 부산에 가요", "부산 여행 기억나요?"),
    "thai": ("พรุ่งนี้ฉันจะไปเชียงใหม่", "เรื่องเชียงใหม่คุณจำได้ไหม"),
}
OUR_SEARCH = {"memory.sqlite_store", "memory.postgres_store"}
"""Backends whose search is this project's (memory.words.search_words); a hosted service
searches with its own engine."""


HOSTED = (
    "memory.hosted",
    "memory.supermemory_store",
    "memory.mem0_store",
    "memory.zep_store",
)


def searched_by(store: memory.MemoryStore) -> str:
    """The module whose search ``store`` recalls with: a spool's store's, not the
    spool's (``memory.spool.SpooledStore`` holds the store it writes through to)."""
    inner = (
        getattr(store, "store", store)
        if type(store).__module__ == "memory.spool"
        else store
    )
    return type(inner).__module__


def test_the_projects_own_stores_run_the_language_tests(store):
    # The spool in front of the sqlite and postgres stores once made the language
    # tests below skip in silence, as if a hosted service searched.
    if type(store).__module__ not in HOSTED:
        assert searched_by(store) in OUR_SEARCH, type(store)


def test_the_backends_searched_here_are_modules_of_the_memory_folder():
    # A name that matches no module would skip the language tests below in silence.
    for module in OUR_SEARCH:
        assert importlib.util.find_spec(module) is not None, module


@pytest.mark.parametrize("language", sorted(LATER_CALLS))
async def test_a_later_call_in_the_same_language_finds_what_was_said(store, language):
    # At the store, not through the agent: every recipe's suite runs this file, and
    # some recipes (realtime, tool_only) put no memory block in the model's requests.
    backend = searched_by(store)
    if backend not in OUR_SEARCH:
        pytest.skip(
            f"{backend}: the service's own engine searches, which its fake does not model"
        )
    said, asked = LATER_CALLS[language]
    await store.save(make_exchange(1, text=said, call_id="call-1"))
    # an unrelated exchange, so a match is a match and not the only row there is
    await store.save(
        make_exchange(9, text="I need a new phone charger", call_id="call-0")
    )
    recall = await store.recall(ALICE, asked)
    assert [e.user_text for e in recall.exchanges] == [said]


def both_painted_the_lake() -> list[memory.Exchange]:
    """The caller and the agent each say they painted the lake; BM25 alone prefers
    the agent's shorter turn (backend_tests/sqlite uses them too)."""
    return [
        make_exchange(
            1,
            text="I painted the lake at sunrise last summer with my old brushes",
            reply="That sounds lovely.",
        ),
        make_exchange(2, text="Guess what I did today.", reply="I painted the lake!"),
    ]


async def test_i_or_you_in_a_question_ranks_that_sides_turns_first(store):
    # "I" asks for the caller's words, "you" for the agent's (memory.words.whose_turns,
    # ranked up by ABOUT_WEIGHT).
    backend = searched_by(store)
    if backend not in OUR_SEARCH:
        pytest.skip(f"{backend}: the service's own engine ranks, not this project's")
    for exchange in both_painted_the_lake():
        await store.save(exchange)
    first = (await store.recall(ALICE, "What did I paint at the lake?")).exchanges[0]
    assert first.user_text.startswith("I painted the lake")
    first = (await store.recall(ALICE, "What did you paint at the lake?")).exchanges[0]
    assert first.assistant_text == "I painted the lake!"


async def test_a_fixed_greeting_in_every_opening_takes_one_place_in_recall(store):
    # Each call's opening (the greeting the caller answered) is saved; a deployment's
    # greeting is often the same words every time. They must not take every place.
    greeting = "Welcome back to Acme Travel! How can I help you with your travel plans?"
    await store.save(
        make_exchange(1, text="I love to travel by train.", call_id="c-old", at=1e9)
    )
    for n in range(2, 40):
        opening = make_exchange(n, reply=greeting, call_id=f"c{n}", at=1e9 + 86400 * n)
        await store.save(dataclasses.replace(opening, user_text=""))
    recall = await store.recall(ALICE, "How do I like to travel?")
    said = [(e.user_text, e.assistant_text) for e in recall.exchanges]
    assert said.count(("", greeting)) == 1 and len(said) == len(set(said))
    if searched_by(store) in OUR_SEARCH:  # (a service ranks with its own engine)
        assert ("I love to travel by train.", "ok") in said


@pytest.mark.parametrize(
    "question",
    ['"unbalanced', "NEAR(a b)", "a* OR -b", "x AND", "caller_key:k0", "%_'; --", ""],
)
async def test_search_syntax_in_what_the_caller_says_is_just_words(any_store, question):
    await any_store.save(make_exchange(1, text="near the river bank"))
    recall = await any_store.recall(ALICE, question)  # must not raise
    assert all(e.caller_id == ALICE for e in recall.exchanges)


async def test_saving_the_same_exchange_again_replaces_it(any_store):
    first = make_exchange(1, text="my number is 5")
    await any_store.save(first)
    await any_store.save(first)
    await any_store.save(
        memory.Exchange(**{**first.__dict__, "assistant_text": "noted, 5"})
    )
    rows = await any_store.exchanges(ALICE)
    assert [(e.user_text, e.assistant_text) for e in rows] == [
        ("my number is 5", "noted, 5")
    ]


async def test_exchanges_keep_every_field_and_come_oldest_first(any_store):
    late = memory.Exchange(
        key="k2",
        caller_id=ALICE,
        call_id="c1",
        user_text="second",
        assistant_text="b",
        interrupted=True,
        item_ids=("u2", "a2"),
        created_at=2000.5,
    )
    early = memory.Exchange(
        key="k1",
        caller_id=ALICE,
        call_id="c1",
        user_text="first 🎉 ünïcode",
        created_at=1000.25,
    )
    await any_store.save(late)
    await any_store.save(early)
    assert await any_store.exchanges(ALICE) == [early, late]
    assert await any_store.exchanges(ALICE, call_id="other") == []


async def test_a_newer_fact_of_the_same_kind_replaces_the_old_and_keeps_it_as_history(
    any_store,
):
    first = await any_store.remember(ALICE, fact("home city", "Lisbon", 1.0))
    assert first.outcome == "added"
    stored = await any_store.remember(ALICE, fact("Home City", "Porto", 2.0))
    assert (stored.outcome, stored.fact.kind, stored.fact.value) == (
        "replaced",
        "home_city",
        "Porto",
    )
    assert stored.old is not None and stored.old.value == "Lisbon"
    assert [(f.kind, f.value) for f in (await any_store.profile(ALICE)).facts] == [
        ("home_city", "Porto")
    ]
    assert [
        (f.kind, f.value, f.learned_at, f.replaced_at)
        for f in await any_store.history(ALICE)
    ] == [("home_city", "Lisbon", 1.0, 2.0)]


async def test_a_reworded_kind_is_the_same_kind(any_store):
    await any_store.remember(ALICE, fact("city", "Lisbon", 1.0))
    moved = await any_store.remember(ALICE, fact("where I live", "Porto", 2.0))
    assert (
        moved.outcome == "replaced"
        and moved.old is not None
        and moved.old.value == "Lisbon"
    )
    assert [(f.kind, f.value) for f in (await any_store.profile(ALICE)).facts] == [
        ("home_city", "Porto")
    ]


async def test_a_known_value_said_again_is_confirmed_not_added(any_store):
    await any_store.remember(ALICE, fact("name", "Alice", 1000.0))
    again = await any_store.remember(ALICE, fact("my name", "alice.", 5000.0))
    assert again.outcome == "confirmed"
    assert (again.fact.value, again.fact.learned_at, again.fact.updated_at) == (
        "Alice",
        1000.0,
        5000.0,
    )
    (kept,) = (await any_store.profile(ALICE)).facts
    assert (kept.value, kept.learned_at, kept.confirmed_at) == ("Alice", 1000.0, 5000.0)
    assert await any_store.history(ALICE) == []
    assert (await any_store.stats())["facts"] == 1


async def test_a_kind_with_many_values_keeps_each_until_one_is_forgotten(any_store):
    assert (
        await any_store.remember(ALICE, fact("allergy", "peanuts", 1.0))
    ).outcome == "added"
    assert (
        await any_store.remember(ALICE, fact("allergies", "shellfish", 2.0))
    ).outcome == "added"
    assert (
        await any_store.remember(ALICE, fact("allergy", "Peanuts", 3.0))
    ).outcome == "confirmed"
    profile = await any_store.profile(ALICE)
    assert sorted(f.value for f in profile.facts if f.kind == "allergy") == [
        "peanuts",
        "shellfish",
    ]
    assert await any_store.forget(ALICE, kind="allergy", value="PEANUTS") == 1
    assert await any_store.forget(ALICE, kind="allergy", value="peanuts") == 0
    assert [f.value for f in (await any_store.profile(ALICE)).facts] == ["shellfish"]


async def test_forgetting_a_kind_deletes_its_history_too(any_store):
    await any_store.remember(ALICE, fact("home city", "Lisbon", 1.0))
    await any_store.remember(ALICE, fact("home city", "Porto", 2.0))
    await any_store.remember(ALICE, fact("name", "Alice", 3.0))
    assert await any_store.forget(ALICE, kind="home_city") == 2
    assert await any_store.history(ALICE) == []
    assert [f.kind for f in (await any_store.profile(ALICE)).facts] == ["name"]


async def test_forgetting_one_old_value_leaves_the_current_one(any_store):
    await any_store.remember(ALICE, fact("home city", "Lisbon", 1.0))
    await any_store.remember(ALICE, fact("home city", "Porto", 2.0))
    assert await any_store.forget(ALICE, kind="home_city", value="Lisbon") == 1
    assert await any_store.history(ALICE) == []
    assert [f.value for f in (await any_store.profile(ALICE)).facts] == ["Porto"]


async def test_facts_and_summaries_come_newest_first_and_summaries_are_limited(
    any_store,
):
    await any_store.remember(ALICE, fact("name", "Alice", 1.0))
    await any_store.remember(ALICE, fact("job", "nurse", 2.0))
    for n in range(memory.RECENT_SUMMARIES + 2):
        await any_store.save_summary(ALICE, f"call-{n}", f"summary {n}")
        await asyncio.sleep(0.01)  # distinct times
    profile = await any_store.profile(ALICE)
    assert [f.kind for f in profile.facts] == ["job", "name"]
    assert [s.text for s in profile.summaries] == [
        f"summary {n}" for n in reversed(range(2, memory.RECENT_SUMMARIES + 2))
    ]
    assert profile.exchanges == ()


async def test_saving_a_summary_of_the_same_call_again_replaces_it(any_store):
    await any_store.save_summary(ALICE, "call-1", "first version")
    await any_store.save_summary(ALICE, "call-1", "second version")
    assert [s.text for s in (await any_store.profile(ALICE)).summaries] == [
        "second version"
    ]


async def test_forgetting_a_fact_deletes_only_that_fact(any_store):
    await any_store.remember(ALICE, fact("home city", "Lisbon"))
    await any_store.remember(ALICE, fact("name", "Alice"))
    assert await any_store.forget(ALICE, kind="home_city") == 1
    assert await any_store.forget(ALICE, kind="home_city") == 0
    assert [f.kind for f in (await any_store.profile(ALICE)).facts] == ["name"]


async def test_forgetting_one_call_keeps_the_others_and_the_facts(any_store):
    await any_store.save(make_exchange(1, text="Paris trip", call_id="call-1"))
    await any_store.save(make_exchange(2, text="Rome trip", call_id="call-2"))
    await any_store.save_summary(ALICE, "call-1", "Paris")
    await any_store.remember(ALICE, fact("name", "Alice"))
    assert await any_store.forget(ALICE, call_id="call-1") == 2
    assert [e.call_id for e in await any_store.exchanges(ALICE)] == ["call-2"]
    profile = await any_store.profile(ALICE)
    assert profile.summaries == () and [f.value for f in profile.facts] == ["Alice"]


async def test_forgetting_everything_leaves_nothing_to_recall_and_other_callers_intact(
    any_store,
):
    await any_store.save(make_exchange(1, text="my secret word is pineapple"))
    await any_store.save(make_exchange(2, caller=BOB, text="bob likes pineapple too"))
    await any_store.remember(ALICE, fact("name", "Alice"))
    await any_store.save_summary(ALICE, "call-1", "talked about pineapple")
    assert await any_store.forget(ALICE) == 3
    assert (await any_store.recall(ALICE, "secret pineapple")).empty
    assert await any_store.exchanges(ALICE) == []
    assert [
        e.user_text for e in (await any_store.recall(BOB, "pineapple")).exchanges
    ] == ["bob likes pineapple too"]


async def test_an_exchange_said_before_its_caller_was_forgotten_is_not_saved_after_it(
    any_store,
):
    said = time.time() - 5  # a live call's turn, its save still pending
    assert await any_store.erased_at(ALICE) == 0.0
    await any_store.forget(ALICE)
    erased = await any_store.erased_at(ALICE)
    assert said < erased <= time.time()
    await any_store.save(make_exchange(1, text="my locker code is 4417", at=said))
    await any_store.save(make_exchange(2, caller=BOB, text="bob's turn", at=said))
    await any_store.save(make_exchange(3, text="what time do you close", at=erased + 1))
    assert [e.user_text for e in await any_store.exchanges(ALICE)] == [
        "what time do you close"
    ]
    assert len(await any_store.exchanges(BOB)) == 1
    assert await any_store.erased_at(BOB) == 0.0


async def test_a_store_reopened_from_its_url_keeps_what_it_holds(store_url):
    first = memory.open_store(store_url)
    await first.remember(ALICE, fact("name", "Alice", 1000.0))
    await first.remember(ALICE, fact("name", "Alice", 2000.0))
    await first.save(make_exchange(1, text="kept across processes"))
    await first.close()
    second = memory.open_store(store_url)
    (kept,) = (await second.profile(ALICE)).facts
    assert (kept.value, kept.learned_at, kept.updated_at) == ("Alice", 1000.0, 2000.0)
    assert [e.user_text for e in await second.exchanges(ALICE)] == [
        "kept across processes"
    ]
    await second.close()


async def test_a_closed_store_refuses_work_with_a_memory_error(store_url):
    s = memory.open_store(store_url)
    await s.close()
    await s.close()  # idempotent
    with pytest.raises(memory.MemoryStoreError):
        await s.recall(ALICE, "anything")


async def test_concurrent_saves_from_many_calls_lose_and_double_nothing(any_store):
    callers = [f"caller-{n}" for n in range(5)]
    await asyncio.gather(
        *(
            any_store.save(make_exchange(n, caller=c, text=f"{c} note {n}"))
            for c in callers
            for n in range(20)
        ),
        *(
            any_store.save(make_exchange(n, caller=c, text=f"{c} note {n}"))
            for c in callers
            for n in range(20)
        ),
    )
    for c in callers:
        assert len(await any_store.exchanges(c)) == 20


async def test_every_summary_of_a_caller_comes_newest_first(any_store):
    for n in range(memory.RECENT_SUMMARIES + 2):
        await any_store.save_summary(ALICE, f"call-{n}", f"summary {n}")
        await asyncio.sleep(0.01)
    await any_store.save_summary(BOB, "call-b", "bob's")
    assert [s.text for s in await any_store.summaries(ALICE)] == [
        f"summary {n}" for n in reversed(range(memory.RECENT_SUMMARIES + 2))
    ]


async def test_callers_are_listed_in_pages(any_store):
    await any_store.save(make_exchange(1, caller="c-1"))
    await any_store.remember("c-2", fact("name", "Two"))
    await any_store.save_summary("c-3", "call", "three")
    await any_store.save(make_exchange(2, caller="c-1"))
    assert await any_store.callers() == ["c-1", "c-2", "c-3"]
    assert await any_store.callers(limit=2) == ["c-1", "c-2"]
    assert await any_store.callers(after="c-2") == ["c-3"]


async def test_purge_deletes_only_what_is_older_than_the_cutoff(any_store):
    await any_store.save(make_exchange(1, text="old words about lanterns", at=1000.0))
    await any_store.save(make_exchange(2, text="new words about lanterns", at=9e9))
    await any_store.remember(ALICE, fact("old", "fact", 1000.0))
    await any_store.remember(ALICE, fact("new", "fact"))
    assert await any_store.purge(before=5000.0, what="exchanges") == 1
    assert await any_store.purge(before=5000.0, what="facts") == 1
    assert [e.user_text for e in await any_store.exchanges(ALICE)] == [
        "new words about lanterns"
    ]
    assert [
        e.user_text for e in (await any_store.recall(ALICE, "lanterns")).exchanges
    ] == ["new words about lanterns"]
    assert [f.kind for f in (await any_store.profile(ALICE)).facts] == ["new"]
    with pytest.raises(ValueError):
        await any_store.purge(before=5000.0, what="everything")


async def test_stats_count_what_is_stored(any_store):
    await any_store.save(make_exchange(1))
    await any_store.save(make_exchange(2, caller=BOB))
    await any_store.remember(ALICE, fact("name", "Alice"))
    await any_store.save_summary(BOB, "c", "s")
    assert await any_store.stats() == {
        "callers": 2,
        "exchanges": 2,
        "facts": 1,
        "summaries": 1,
    }
