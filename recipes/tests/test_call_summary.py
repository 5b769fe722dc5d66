"""Recipe call_summary: the model summarises the call; the next call greets with it."""

from __future__ import annotations

import agent
import memory
from tests.conftest import call
from tests.scripted_llm import ScriptedLLM, Slow, memory_blocks

CALLER = "caller-1"
SUMMARY = "Caller asked to move their dentist appointment to Friday; not yet confirmed."


def summarizing(summary) -> ScriptedLLM:
    """Answers the summary request with `summary`, everything else with a line."""

    def script(chat_ctx):
        if chat_ctx.items[0].text_content == agent.SUMMARY_INSTRUCTIONS:
            return summary
        return "OK."

    return ScriptedLLM(script)


async def test_the_next_call_greets_with_the_models_summary_of_the_last(store):
    model = summarizing(SUMMARY)
    async with call(store, CALLER, model) as (session, call_memory):
        await session.run(user_input="Can I move my dentist appointment to Friday?")
    summary_request = model.requests[-1]
    assert "Caller: Can I move my dentist appointment to Friday?" in str(summary_request.items)
    assert [s.text for s in (await store.profile(CALLER)).summaries] == [SUMMARY]

    model = summarizing(SUMMARY)
    async with call(store, CALLER, model, call_id="call-2"):
        pass
    greeting = model.requests[0]
    assert SUMMARY in memory_blocks(greeting)[0]
    assert "latest call" in greeting.items[-1].text_content


async def test_a_failing_summary_keeps_the_short_one_and_every_exchange(store):
    model = summarizing(RuntimeError("provider down"))
    async with call(store, CALLER, model) as (session, _):
        await session.run(user_input="My order number is 8812.")
    (summary,) = (await store.profile(CALLER)).summaries
    assert summary.text == "The caller talked about: My order number is 8812."
    assert [e.user_text for e in await store.exchanges(CALLER)] == ["My order number is 8812."]


async def test_a_slow_summary_cannot_hold_the_end_of_the_call_past_its_bound(store):
    model = summarizing(Slow(60, SUMMARY))
    call_memory = memory.CallMemory(store, CALLER, "call-1")
    assistant = agent.Assistant(call_memory, model=model)
    call_memory.capture("user", "u1", "My order number is 8812.")
    call_memory.capture("assistant", "a1", "Thanks.")
    assert assistant.call is call_memory and call_memory.summarize is not None
    # as the shutdown callback runs it, with a short bound to keep the test quick
    assert await call_memory.aclose(timeout=0.5) == 0
    (summary,) = (await store.profile(CALLER)).summaries
    assert summary.text.startswith("The caller talked about:")
    assert agent.SUMMARY_TIMEOUT < 10  # LiveKit's shutdown_process_timeout
