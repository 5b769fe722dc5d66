"""Recipe call_summary: the model summarises the call; the next call greets with it."""

from __future__ import annotations

import pytest
from livekit.agents import AgentSession

import agent
import memory
from tests.conftest import call
from tests.livekit_job import run_job
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
    async with call(store, CALLER, model) as (session, _):
        await session.run(user_input="Can I move my dentist appointment to Friday?")
    summary_request = model.requests[-1]
    assert "Caller: Can I move my dentist appointment to Friday?" in str(
        summary_request.items
    )
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
    # the call's opening (the greeting, the agent's words alone) is saved first
    assert [(e.user_text, e.assistant_text) for e in await store.exchanges(CALLER)] == [
        ("", "OK."),
        ("My order number is 8812.", "OK."),
    ]


async def test_a_slow_summary_cannot_hold_the_end_of_the_call_past_its_bound(store):
    model = summarizing(Slow(60, SUMMARY))
    session = AgentSession(llm=model)  # never started: the call ends before it begins
    assistant = await agent.build_agent(session, store, CALLER, "call-1", model=model)
    call_memory = assistant.memory
    call_memory.capture("user", "u1", "My order number is 8812.")
    call_memory.capture("assistant", "a1", "Thanks.")
    assert call_memory.summarize is not None
    # as the shutdown callback runs it (with LiveKit's reason), with a short bound to
    # keep the test quick
    assert await call_memory.aclose("participant hung up", timeout=0.5) == 0
    (summary,) = (await store.profile(CALLER)).summaries
    assert summary.text.startswith("The caller talked about:")
    assert agent.SUMMARY_TIMEOUT < 10  # LiveKit's shutdown_process_timeout


@pytest.mark.smoke  # the kit runs it for every backend x recipe
async def test_the_real_shutdown_path_saves_the_models_summary(store_url):
    # The entrypoint run by LiveKit's own job machinery (tests/livekit_job.py): at the
    # hang-up LiveKit calls the shutdown callback with the reason; it must end the call
    # with the summary bound, and the model's summary must be what is saved.
    job = run_job(
        store_url,
        ["Can I move my dentist appointment to Friday?"],
        script=["Hello!", "Let me check that for you.", SUMMARY],
    )
    assert job["returncode"] == 0 and "Traceback" not in job["log"], job["log"][-3000:]
    summary_request = job["requests"][-1]
    assert summary_request[0] == ["system", agent.SUMMARY_INSTRUCTIONS]
    store = memory.open_store(store_url)
    assert [s.text for s in (await store.profile("alice")).summaries] == [SUMMARY]
    await store.close()
