"""Recipe caller_style: style notes shape replies, apart from the facts."""

from __future__ import annotations

import memory
from tests.conftest import call
from tests.scripted_llm import ScriptedLLM, ToolCall, memory_blocks

CALLER = "caller-1"


async def test_a_style_note_reaches_the_next_call_as_guidance_not_as_a_fact(store):
    model = ScriptedLLM(
        [
            "Hello!",
            ToolCall(
                "note_style",
                {"aspect": "length", "note": "Keep answers to one sentence"},
            ),
            "Understood.",
        ]
    )
    async with call(store, CALLER, model) as (session, _):
        await session.run(
            user_input="Please keep it short with me, I'm always in a hurry."
        )
    await store.remember(CALLER, memory.Fact.of("name", "Maria"))

    model = ScriptedLLM()
    async with call(store, CALLER, model, call_id="call-2") as (session, _):
        await session.run(user_input="What's the weather like for my trip?")
    block = memory_blocks(model.replies[-1])[0]
    style, _, rest = block.partition(memory.STYLE_TITLE)[2].partition(
        "Facts the caller gave:"
    )
    assert '- "Keep answers to one sentence' in style
    assert 'name: "Maria"' in rest and "one sentence" not in rest


async def test_a_newer_note_on_the_same_aspect_replaces_the_old_one(store):
    model = ScriptedLLM(
        [
            "Hello!",
            ToolCall("note_style", {"aspect": "pace", "note": "Speak slowly"}),
            "Sure.",
            ToolCall("note_style", {"aspect": "pace", "note": "Normal pace is fine"}),
            "Sure.",
        ]
    )
    async with call(store, CALLER, model) as (session, _):
        await session.run(user_input="Can you slow down?")
        await session.run(user_input="Actually, normal speed is fine.")
    facts = (await store.profile(CALLER)).facts
    assert [(f.kind, f.value) for f in facts] == [("style_pace", "Normal pace is fine")]


async def test_the_instructions_say_never_to_read_the_notes_out(store):
    model = ScriptedLLM()
    async with call(store, CALLER, model):
        pass
    instructions = " ".join(model.replies[0].items[0].text_content.split())
    assert "never read them out or mention them" in instructions


async def test_an_aspect_outside_the_closed_set_is_refused_with_the_accepted_ones(
    store,
):
    model = ScriptedLLM(
        [
            "Hello!",
            ToolCall("note_style", {"aspect": "vibes", "note": "Be chill"}),
            "Okay.",
        ]
    )
    async with call(store, CALLER, model) as (session, _):
        result = await session.run(user_input="Just keep the vibes chill.")
        result.expect.next_event().is_function_call(name="note_style")
        refused = (
            result.expect.next_event().is_function_call_output().event().item.output
        )
    assert (
        refused
        == "Not saved: the aspect must be one of length, pace, order, tone, language."
    )
    assert (await store.profile(CALLER)).facts == ()
