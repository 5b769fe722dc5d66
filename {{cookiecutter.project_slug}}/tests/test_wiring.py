"""The wiring self-check: a reply that goes out without memory having been asked for
it (an llm_node overridden without the memory code) is named in the log, once per
call, with what to do; the agent as generated never trips it."""

from __future__ import annotations

import logging

from livekit.agents import Agent, AgentSession

import agent
import memory
from memory import livekit_adapter
from tests.conftest import call
from tests.scripted_llm import ScriptedLLM, ToolCall, memory_blocks

CALLER = "caller-1"
WARNING = "without memory being asked"


class SkipsMemory(agent.Assistant):
    """What the issue's app did: its own llm_node, straight to LiveKit's default."""

    async def llm_node(self, chat_ctx, tools, model_settings):
        async for chunk in Agent.default.llm_node(
            self, chat_ctx, tools, model_settings
        ):
            yield chunk


def wiring_warnings(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and WARNING in r.getMessage()
    ]


async def test_an_llm_node_that_skips_memory_is_named_in_the_log_once_per_call(
    store, caplog
):
    await store.remember(CALLER, memory.Fact.of("name", "Maria"))
    model = ScriptedLLM(["Hello!", "Sure.", "Done."])
    async with AgentSession(llm=model) as session:
        call_memory = memory.CallMemory(store, CALLER, "call-1")
        call_memory.start()
        livekit_adapter.capture(session, call_memory)
        await session.start(SkipsMemory(call_memory, model=model))
        await session.run(user_input="Can you book a table?")
        await session.run(user_input="For two, please.")
    await call_memory.aclose()
    assert not any(
        memory_blocks(r) for r in model.requests
    )  # recall was really skipped
    (warning,) = wiring_warnings(caplog)
    assert "super().llm_node" in warning


async def test_the_generated_assistant_never_trips_the_wiring_check(store, caplog):
    model = ScriptedLLM(
        [
            "Hello!",
            ToolCall("remember", {"kind": "name", "value": "Maria"}),
            "Noted.",
            "Bye!",
        ]
    )
    async with call(store, CALLER, model) as (session, _):
        await session.run(user_input="I'm Maria.")
        await session.generate_reply(instructions="Say goodbye.")
    assert all(memory_blocks(r) for r in model.replies)
    assert wiring_warnings(caplog) == []
