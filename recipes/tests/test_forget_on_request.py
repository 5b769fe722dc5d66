"""Recipe forget_on_request: forgetting after a spoken confirmation."""

from __future__ import annotations

import sqlite3

import memory
from tests.conftest import call
from tests.scripted_llm import ScriptedLLM, ToolCall

CALLER = "caller-1"


def forget(
    what: str, kind: str = "", confirmed: bool = False, value: str = ""
) -> ToolCall:
    return ToolCall(
        "forget", {"what": what, "kind": kind, "value": value, "confirmed": confirmed}
    )


def tool_outputs(model: ScriptedLLM) -> list[str]:
    seen: dict[str, str] = {}
    for request in model.requests:
        for item in request.items:
            if item.type == "function_call_output":
                seen[item.call_id] = item.output
    return list(seen.values())


def assert_index_holds(store_url: str, word: str, entries: int) -> None:
    """Forgetting deletes search-index entries too, not only rows: with SQLite, read
    the FTS5 index (turns_fts: a row per turn, the turns next to it as its context)
    from the file itself. (Other backends check their own index in
    their store tests; recall through the store is checked below for every backend.)"""
    if not store_url.startswith("sqlite:"):
        return
    from memory import sqlite_store

    conn = sqlite3.connect(sqlite_store.path_of(store_url))
    try:
        found = conn.execute(
            "SELECT count(*) FROM turns_fts WHERE turns_fts MATCH ?",
            (sqlite_store.fts_query(word, CALLER),),
        ).fetchone()[0]
    finally:
        conn.close()
    assert found == entries, f"{word!r}: {found} index entries, expected {entries}"


async def earlier_call(store, text: str) -> None:
    async with call(store, CALLER, ScriptedLLM(), call_id="call-0") as (session, _):
        await session.run(user_input=text)


async def test_a_fact_is_forgotten_after_the_caller_says_yes(store):
    await store.remember(CALLER, memory.Fact.of("home address", "1 Placeholder Street"))
    await store.remember(CALLER, memory.Fact.of("name", "Maria"))
    model = ScriptedLLM(
        [
            "Hello!",
            forget("fact", "home address"),
            "Should I forget your home address?",
            forget("fact", "home address", confirmed=True),
            "Done, it's forgotten.",
        ]
    )
    async with call(store, CALLER, model) as (session, _):
        await session.run(user_input="Forget my address.")
        assert len((await store.profile(CALLER)).facts) == 2  # nothing yet: only asked
        await session.run(user_input="Yes, please.")
    assert tool_outputs(model)[-1] == "Forgotten: home address."
    assert [f.kind for f in (await store.profile(CALLER)).facts] == ["name"]


async def test_one_value_of_a_kind_with_several_is_forgotten_and_the_others_kept(store):
    await store.remember(CALLER, memory.Fact.of("allergy", "peanuts"))
    await store.remember(CALLER, memory.Fact.of("allergies", "shellfish"))
    model = ScriptedLLM(
        [
            "Hello!",
            forget("fact", "allergy", value="peanuts"),
            "Should I forget your peanut allergy?",
            forget("fact", "allergy", confirmed=True, value="peanuts"),
            "Done.",
        ]
    )
    async with call(store, CALLER, model) as (session, _):
        await session.run(
            user_input="I'm not allergic to peanuts any more, forget that."
        )
        await session.run(user_input="Yes.")
    assert tool_outputs(model)[-2:] == [
        "Ask the caller to confirm that you should forget their allergy 'peanuts'.",
        "Forgotten: allergy = peanuts.",
    ]
    assert [f.value for f in (await store.profile(CALLER)).facts] == ["shellfish"]


async def test_the_model_cannot_confirm_on_the_callers_behalf(store):
    await store.remember(CALLER, memory.Fact.of("home address", "1 Placeholder Street"))
    model = ScriptedLLM(
        [
            "Hello!",
            forget("fact", "home address"),
            forget("fact", "home address", confirmed=True),  # same turn: no yes heard
            "Okay.",
        ]
    )
    async with call(store, CALLER, model) as (session, _):
        await session.run(user_input="Forget my address.")
    assert tool_outputs(model)[-1].startswith(
        "Not done: ask the caller to confirm first"
    )
    assert (await store.profile(CALLER)).facts[0].value == "1 Placeholder Street"


async def test_everything_is_deleted_index_included_and_the_rest_of_the_call_is_not_saved(
    store, store_url
):
    await earlier_call(store, "My locker code is pineapple.")
    await store.remember(CALLER, memory.Fact.of("name", "Maria"))
    assert_index_holds(
        store_url, "pineapple", 2
    )  # the caller's turn; the reply's context
    model = ScriptedLLM(
        [
            "Hello!",
            "Sure.",
            forget("everything"),
            "Should I forget everything I know about you?",
            forget("everything", confirmed=True),
            "Everything is forgotten.",
            "Fine.",
        ]
    )
    async with call(store, CALLER, model, call_id="call-1") as (session, _):
        await session.run(user_input="My gym is on Elm Road.")
        await session.run(user_input="Delete everything you know about me.")
        await session.run(user_input="Yes.")
        await session.run(user_input="By the way, my dog is called Biscuit.")
    assert (await store.profile(CALLER)).facts == ()
    assert await store.exchanges(CALLER) == []
    for word in ("pineapple", "Elm", "Biscuit"):
        assert_index_holds(store_url, word, 0)
    assert (await store.recall(CALLER, "pineapple Elm Biscuit")).empty


async def test_dont_remember_this_call_keeps_earlier_calls(store, store_url):
    await earlier_call(store, "My favourite colour is teal.")
    model = ScriptedLLM(
        [
            "Hello!",
            "Sure.",
            forget("this_call"),
            "Should I not remember this call?",
            forget("this_call", confirmed=True),
            "This call won't be remembered.",
            "Okay.",
        ]
    )
    async with call(store, CALLER, model, call_id="call-1") as (session, _):
        await session.run(user_input="My bank PIN hint is marmalade.")
        await session.run(user_input="Don't remember this call.")
        await session.run(user_input="Yes.")
        await session.run(user_input="One more secret: saffron.")
    # call-0's opening (its greeting) and its exchange; nothing of call-1, its opening included
    assert [(e.call_id, e.user_text) for e in await store.exchanges(CALLER)] == [
        ("call-0", ""),
        ("call-0", "My favourite colour is teal."),
    ]
    assert (await store.recall(CALLER, "marmalade saffron")).exchanges == ()
    assert_index_holds(store_url, "marmalade", 0)
    assert_index_holds(store_url, "saffron", 0)
    assert [s.call_id for s in (await store.profile(CALLER)).summaries] == ["call-0"]


async def test_a_forget_request_that_names_nothing_gets_a_sentence(store):
    model = ScriptedLLM(["Hello!", forget("fact"), "Which fact?"])
    async with call(store, CALLER, model) as (session, _):
        await session.run(user_input="Forget that.")
    assert tool_outputs(model)[-1].startswith("Say what to forget")
