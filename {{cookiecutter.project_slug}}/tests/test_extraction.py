"""Facts extracted from each call when it ends (memory.CallMemory, agent.py's
Assistant.ask_model): the end-of-call path LiveKit drives (the job's shutdown
callback, through the real entrypoint, or the same close after a real AgentSession),
the agent's own model asked once, and only what the caller said in this call kept."""

from __future__ import annotations

import json
import logging
import time

import pytest

import memory
from tests.conftest import call
from tests.doubles import Failing
from tests.livekit_job import run_job
from tests.scripted_llm import ScriptedLLM, Slow
from tests.test_entrypoint import assert_clean

ALICE = "alice@example.com"


def facts_json(*facts: tuple[str, str, int]) -> str:
    """The model's answer: facts as (kind, value, number of the exchange cited)."""
    return json.dumps(
        {"facts": [{"kind": k, "value": v, "exchange": n} for k, v, n in facts]}
    )


def stored(facts: tuple[memory.Fact, ...]) -> list[tuple[str, str]]:
    return sorted((f.kind, f.value) for f in facts)


async def test_a_real_call_yields_the_facts_its_caller_stated(store_url):
    before = time.time()
    job = run_job(
        store_url,
        ["Hi, I'm Maria.", "I live in Lisbon, and my daughter Ana loves horses."],
        identity=ALICE,
        script=["Hello!", "Nice to meet you, Maria.", "How lovely."],
        extract=[
            facts_json(("name", "Maria", 1), ("city", "Lisbon", 2), ("child", "Ana", 2))
        ],
    )
    assert_clean(job)
    (request,) = job["extractions"]  # one model request per call
    assert request[0] == ["system", memory.extraction.EXTRACT_INSTRUCTIONS]
    assert request[1][1] == (
        "[1] Caller: Hi, I'm Maria.\nAgent: Nice to meet you, Maria.\n"
        "[2] Caller: I live in Lisbon, and my daughter Ana loves horses.\nAgent: How lovely."
    )
    store = memory.open_store(store_url)
    profile = await store.profile(ALICE)
    assert stored(profile.facts) == [
        ("child", "Ana"),
        ("home_city", "Lisbon"),
        ("name", "Maria"),
    ]
    assert all(before <= f.learned_at <= time.time() for f in profile.facts)
    await store.close()


@pytest.mark.parametrize(
    ("answer", "logged"),
    [
        ("Sure! The caller lives in Porto.", "fact extraction failed; no facts taken"),
        ('{"facts": {"city": "Porto"}}', "fact extraction failed; no facts taken"),
        (
            {"slow": 60, "text": facts_json(("city", "Porto", 1))},
            "fact extraction took too long; no facts taken",
        ),
    ],
    ids=["not-json", "not-a-list", "times-out"],
)
async def test_a_malformed_or_late_answer_takes_no_facts_and_loses_nothing(
    store_url, answer, logged
):
    job = run_job(
        store_url,
        ["I live in Porto."],
        identity=ALICE,
        script=["Hello!", "Nice."],
        extract=[answer],
    )
    assert_clean(job)  # the call ended within LiveKit's shutdown bound, cleanly
    assert logged in job["log"]
    store = memory.open_store(store_url)
    assert [e.user_text for e in await store.exchanges(ALICE)] == [
        "",
        "I live in Porto.",
    ]
    profile = await store.profile(ALICE)
    assert profile.facts == () and len(profile.summaries) == 1
    await store.close()


async def test_closing_waits_for_a_model_that_never_answers_at_most_the_flush_bound(
    store,
):
    model = ScriptedLLM(
        ["Hello!", "Nice."], extract=[Slow(60, facts_json(("city", "Porto", 1)))]
    )
    async with call(store, ALICE, model) as (session, memory_call):
        await session.run(user_input="I live in Porto.")
        started = time.monotonic()
    assert time.monotonic() - started < memory.FLUSH_TIMEOUT + 1.0
    assert len(model.extractions) == 1 and memory_call.extracted == []
    assert [e.user_text for e in await store.exchanges(ALICE)] == [
        "",
        "I live in Porto.",
    ]


async def test_a_full_disk_that_uses_the_end_of_the_call_is_named_not_extraction(
    store, caplog
):
    full = Failing(store, "save", error=OSError(28, "No space left on device"))
    model = ScriptedLLM(
        ["Hello!", "Nice.", "Sure."], extract=[facts_json(("city", "Porto", 1))]
    )
    with caplog.at_level(logging.WARNING, logger="memory"):
        async with call(full, ALICE, model) as (session, memory_call):
            await session.run(user_input="I live in Porto.")
            await session.run(user_input="And I have a dog.")
            # the end of the call, with a short bound: every save fails until it is over
            # (the greeting, the call's opening, and the two turns)
            assert await memory_call.aclose("participant hung up", timeout=0.4) == 3
    said = [r.getMessage() for r in caplog.records]
    assert not [line for line in said if "took too long" in line], said
    (line,) = [line for line in said if "no facts taken" in line]
    assert "saving the call's exchanges used" in line and "of the 0.4 s" in line, line
    assert "the store refused 3 of them" in line, line
    assert model.extractions == []  # no time left: the model was not asked (nor billed)


async def test_facts_that_cite_no_exchange_of_the_call_or_were_never_said_are_dropped(
    store,
):
    await store.save(
        memory.Exchange(
            "k0",
            ALICE,
            "call-0",
            "My dog Rex is ill.",
            "Sorry to hear.",
            created_at=1.0,
        )
    )
    model = ScriptedLLM(
        ["Hello!", "Lovely."],
        extract=[
            facts_json(
                ("city", "Porto", 1),
                (
                    "pet",
                    "a dog called Rex",
                    0,
                ),  # an earlier call's words: not sent, not citable
                ("pet", "Rex", 7),  # no exchange 7 in this call
                ("job", "pilot", 1),  # cites this call, but the caller never said it
                ("", "nothing", 1),  # no kind
            )
        ],
    )
    async with call(store, ALICE, model) as (session, _):
        await session.run(user_input="I live in Porto.")
    (request,) = model.extractions
    assert "Rex" not in request.items[1].text_content
    assert stored((await store.profile(ALICE)).facts) == [("home_city", "Porto")]


async def test_a_reworded_kind_replaces_the_value_on_file_and_keeps_it_as_history(
    store,
):
    await store.remember(ALICE, memory.Fact.of("home city", "Lisbon", 1000.0))
    model = ScriptedLLM(
        ["Hello!", "Congratulations!"],
        extract=[facts_json(("where I live", "Porto", 1))],
    )
    async with call(store, ALICE, model) as (session, memory_call):
        await session.run(user_input="I moved to Porto last month.")
    assert [
        (r.outcome, r.fact.kind, r.old and r.old.value) for r in memory_call.extracted
    ] == [("replaced", "home_city", "Lisbon")]
    assert stored((await store.profile(ALICE)).facts) == [("home_city", "Porto")]
    assert [f.value for f in await store.history(ALICE)] == ["Lisbon"]


async def test_a_kind_with_many_values_gains_the_new_one_and_confirms_the_known_one(
    store,
):
    await store.remember(ALICE, memory.Fact.of("allergy", "peanuts", 1000.0))
    model = ScriptedLLM(
        ["Hello!", "Noted."],
        extract=[facts_json(("allergies", "shellfish", 1), ("allergy", "Peanuts", 1))],
    )
    async with call(store, ALICE, model) as (session, memory_call):
        await session.run(user_input="I'm allergic to shellfish, and still to peanuts.")
    assert [(r.outcome, r.fact.value) for r in memory_call.extracted] == [
        ("added", "shellfish"),
        ("confirmed", "peanuts"),
    ]
    facts = (await store.profile(ALICE)).facts
    assert stored(facts) == [("allergy", "peanuts"), ("allergy", "shellfish")]
    peanuts = next(f for f in facts if f.value == "peanuts")
    assert (
        peanuts.learned_at == 1000.0 and peanuts.updated_at > 1000.0
    )  # confirmed, not added


async def test_every_n_turns_extracts_finished_exchanges_in_the_background(store):
    model = ScriptedLLM(
        ["Hello!", "Hi Maria.", "Nice.", "Bye."],
        extract=[facts_json(("name", "Maria", 1)), facts_json(("pet", "Miso", 3))],
    )
    async with call(store, ALICE, model, extract_every=2) as (session, memory_call):
        await session.run(user_input="I'm Maria.")
        await session.run(user_input="Just calling to chat.")
        await session.run(user_input="My cat Miso says hi.")
    first, last = (r.items[1].text_content for r in model.extractions)
    assert (
        first.startswith("[1] Caller: I'm Maria.")
        and "[2]" in first
        and "[3]" not in first
    )
    assert last.startswith("[3] Caller: My cat Miso says hi.")
    assert stored((await store.profile(ALICE)).facts) == [
        ("name", "Maria"),
        ("pet", "Miso"),
    ]
    assert len(memory_call.extracted) == 2


async def test_extraction_off_sends_no_request(store, monkeypatch):
    monkeypatch.setenv("MEMORY_EXTRACT_FACTS", "off")
    model = ScriptedLLM(["Hello!", "Nice."], extract=[facts_json(("city", "Porto", 1))])
    async with call(store, ALICE, model) as (session, _):
        await session.run(user_input="I live in Porto.")
    assert model.extractions == [] and (await store.profile(ALICE)).facts == ()
