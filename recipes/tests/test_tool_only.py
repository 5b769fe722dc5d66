"""Recipe tool_only: the profile in the instructions, memory looked up by a tool."""

from __future__ import annotations

import pytest

import memory
from tests.conftest import call
from tests.doubles import Failing
from tests.livekit_job import run_job
from tests.scripted_llm import ScriptedLLM, ToolCall, memory_blocks

CALLER = "caller-1"


def tool_output(request) -> str:
    return next(
        i.output for i in reversed(request.items) if i.type == "function_call_output"
    )


async def test_no_request_carries_a_memory_block_and_the_profile_is_in_the_instructions(
    store,
):
    await store.remember(CALLER, memory.Fact.of("name", "Maria"))
    model = ScriptedLLM(["Hi Maria!", "Sure."])
    async with call(store, CALLER, model) as (session, _):
        await session.run(user_input="Can you help me?")
    assert all(memory_blocks(r) == [] for r in model.requests)
    for request in model.requests:
        assert 'name: "Maria"' in request.items[0].text_content


async def test_the_recall_tool_finds_what_an_earlier_call_said(store):
    async with call(store, CALLER, ScriptedLLM()) as (session, _):
        await session.run(user_input="My sister Ana is vegetarian.")
    model = ScriptedLLM(
        [
            "Hello!",
            ToolCall("recall_memory", {"query": "sister food"}),
            "She is vegetarian.",
        ]
    )
    async with call(store, CALLER, model, call_id="call-2") as (session, _):
        result = await session.run(user_input="What does my sister eat?")
        result.expect.next_event().is_function_call(name="recall_memory")
        result.expect.next_event().is_function_call_output()
    assert "My sister Ana is vegetarian." in tool_output(model.requests[-1])


async def test_a_failing_store_answers_the_tool_with_a_sentence(store):
    failing = Failing(store, "recall")
    model = ScriptedLLM(
        ["Hello!", ToolCall("recall_memory", {"query": "sister"}), "Sorry."]
    )
    async with call(failing, CALLER, model) as (session, _):
        result = await session.run(user_input="What does my sister eat?")
        result.expect.next_event().is_function_call(name="recall_memory")
        result.expect.next_event().is_function_call_output(is_error=False)
    assert tool_output(model.requests[-1]).startswith(memory.MEMORY_UNAVAILABLE)


async def test_exchanges_are_still_captured(store):
    async with call(store, CALLER, ScriptedLLM(["Hello!", "Noted."])) as (session, _):
        await session.run(user_input="My flight is on Friday.")
    assert [(e.user_text, e.assistant_text) for e in await store.exchanges(CALLER)] == [
        ("", "Hello!"),  # the call's opening: the greeting the first turn answered
        ("My flight is on Friday.", "Noted."),
    ]


@pytest.mark.smoke  # the kit runs it for every backend x recipe
async def test_the_real_entrypoint_keeps_the_profile_in_the_instructions_and_saves_the_call(
    store_url,
):
    # The entrypoint run by LiveKit's own job machinery (tests/livekit_job.py): prewarm,
    # the console's mock room, typed turns, and the shutdown callback at the hang-up.
    first = run_job(
        store_url,
        ["Hi, I'm Maria.", "My sister Ana is vegetarian."],
        script=[
            "Hello!",
            {"tool": "remember", "arguments": {"kind": "name", "value": "Maria"}},
            "Hi Maria.",
            "Noted.",
        ],
    )
    assert first["returncode"] == 0 and "Traceback" not in first["log"], first["log"][
        -3000:
    ]
    second = run_job(
        store_url,
        ["What does my sister eat?"],
        script=[
            "Welcome back, Maria!",
            {"tool": "recall_memory", "arguments": {"query": "sister eats"}},
            "Vegetarian.",
        ],
    )
    assert second["returncode"] == 0 and "Traceback" not in second["log"], second[
        "log"
    ][-3000:]
    instructions = second["requests"][0][0][1]
    assert 'name: "Maria"' in instructions  # the profile, put there by on_enter
    (found,) = [text for role, text in second["requests"][-1] if role == "tool"]
    assert "My sister Ana is vegetarian." in found
    store = memory.open_store(store_url)
    assert [e.user_text for e in await store.exchanges("alice")][
        -1
    ] == "What does my sister eat?"
    assert len((await store.profile("alice")).summaries) == 2
    await store.close()


async def test_the_recall_tool_finds_the_fact_asked_about_among_many(store):
    await store.remember(CALLER, memory.Fact("allergy", "penicillin", 1.0))
    for n in range(40):
        await store.remember(
            CALLER, memory.Fact(f"note {n}", f"detail number {n} " * 4, 2.0 + n)
        )
    model = ScriptedLLM(
        ["Hello!", ToolCall("recall_memory", {"query": "allergic medicine"}), "OK"]
    )
    async with call(store, CALLER, model) as (session, _):
        await session.run(user_input="Which medicine am I allergic to?")
    found = tool_output(model.requests[-1])
    assert 'allergy: "penicillin"' in found and "note 1" not in found


async def test_the_recall_tool_says_plainly_when_nothing_matched(store):
    await store.remember(CALLER, memory.Fact.of("name", "Maria"))
    async with call(store, CALLER, ScriptedLLM()) as (session, _):
        await session.run(user_input="My sister Ana is vegetarian.")
    model = ScriptedLLM(
        ["Hello!", ToolCall("recall_memory", {"query": "boat trip"}), "No."]
    )
    async with call(store, CALLER, model, call_id="call-2") as (session, _):
        await session.run(user_input="Remember my boat trip?")
    found = tool_output(model.requests[-1])
    assert found.startswith('Nothing from earlier calls matches "boat trip".')
    assert "Maria" not in found and "vegetarian" not in found
