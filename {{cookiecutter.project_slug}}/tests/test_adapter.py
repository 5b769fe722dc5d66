"""The LiveKit adapter (memory/livekit_adapter.py) on its own, through the real
AgentSession, with an agent written the way a user adds memory to their own: the three
touch points and nothing of agent.py. This file and the other tests of the memory
folder (test_memory.py, test_privacy.py, test_store_contract.py) are what the kit runs
on the oldest and the newest livekit-agents it supports."""

from __future__ import annotations

import asyncio
import logging

from livekit import rtc
from livekit.agents import Agent, AgentSession, RunContext, function_tool, llm

import memory
from memory import livekit_adapter
from memory.livekit_adapter import start_call_memory, with_memory
from tests.scripted_llm import ScriptedLLM, ToolCall, first_reply, memory_blocks

CALLER = "caller-1"


class UsersAgent(Agent):
    """An app's own agent, its own instructions, with memory's touch point 1."""

    def __init__(self, call: memory.CallMemory, model: llm.LLM) -> None:
        super().__init__(
            instructions="You are the front desk of a small hotel.", llm=model
        )
        self.memory = call

    async def llm_node(self, chat_ctx, tools, model_settings):
        chat_ctx = await with_memory(self.memory, chat_ctx)
        async for chunk in Agent.default.llm_node(
            self, chat_ctx, tools, model_settings
        ):
            yield chunk


class UsersAgentWithATool(UsersAgent):
    @function_tool
    async def remember(self, context: RunContext, kind: str, value: str) -> str:
        """Save a lasting fact about the caller.

        Args:
            kind: What the fact is about.
            value: The fact.
        """
        return await self.memory.remember(kind, value)


async def one_call(
    store, turns: list[str], script: list, call_id: str, agent=UsersAgent
) -> ScriptedLLM:
    model = ScriptedLLM(script)
    async with AgentSession(llm=model) as session:
        call = start_call_memory(session, store, CALLER, call_id)  # touch point 2
        await session.start(agent(call, model))
        for text in turns:
            await session.run(user_input=text)
        assert memory_blocks(session.history) == []  # never in the session history
    await call.on_shutdown("participant hung up")  # touch point 3, as LiveKit calls it
    return model


async def test_a_users_own_agent_recalls_what_its_last_call_captured(store):
    await one_call(store, ["My sister Ana is vegetarian."], ["Noted."], "call-1")
    model = await one_call(
        store, ["What does my sister eat?"], ["Vegetables."], "call-2"
    )
    request = model.replies[-1]
    (block,) = memory_blocks(request)
    assert "vegetarian" in block
    # the block is just before the caller's latest words, which end the request
    said = [i for i in request.items if i.type == "message"]
    assert said[-1].text_content == "What does my sister eat?"
    assert said[-2].extra.get("memory_block")


async def test_an_agent_with_no_memory_works_and_opens_no_store():
    model = ScriptedLLM(["Hello there."])
    async with AgentSession(llm=model) as session:
        off = memory.CallMemory()  # a caller without a stable id, or a test
        await session.start(UsersAgent(off, model))
        result = await session.run(user_input="Hi.")
        result.expect.next_event().is_message(role="assistant")
    assert off.enabled is False and off.pending == 0
    assert not any(memory_blocks(r) for r in model.requests)


async def test_without_livekits_speech_variable_capture_pairs_by_time_and_says_so(
    store, monkeypatch, caplog
):
    # A livekit-agents release without the private name: one WARNING naming the
    # version, and every exchange is still saved with the reply it got.
    livekit_adapter._speech_variable.cache_clear()
    module, _ = livekit_adapter.SPEECH_VARIABLE
    monkeypatch.setattr(livekit_adapter, "SPEECH_VARIABLE", (module, "_GoneInARelease"))
    try:
        script = [
            "One.",
            ToolCall("remember", {"kind": "name", "value": "Maria"}),
            "Hi.",
        ]
        with caplog.at_level(logging.WARNING, logger="memory"):
            await one_call(
                store, ["First.", "I'm Maria."], script, "call-1", UsersAgentWithATool
            )
        saved = [(e.user_text, e.assistant_text) for e in await store.exchanges(CALLER)]
        # the reply after a tool call still answers the turn that asked for it
        assert saved == [("First.", "One."), ("I'm Maria.", "Hi.")]
        (warning,) = [
            r.getMessage() for r in caplog.records if "paired" in r.getMessage()
        ]
        assert livekit_adapter.livekit_agents_version in warning
    finally:
        livekit_adapter._speech_variable.cache_clear()


async def test_the_greeting_gets_the_preloaded_profile_before_the_caller_speaks(store):
    await store.remember(CALLER, memory.Fact.of("name", "Maria"))
    model = ScriptedLLM(["Hello Maria!"])
    async with AgentSession(llm=model) as session:
        call = start_call_memory(session, store, CALLER, "call-1")
        greeted = first_reply(session)
        await session.start(UsersAgent(call, model))
        session.generate_reply(instructions="Greet the caller by name.")
        await asyncio.wait_for(greeted.wait(), 10)
    await call.aclose()
    request = model.replies[0]
    (block,) = memory_blocks(request)
    assert 'name: "Maria"' in block
    said = [i.text_content for i in request.items if i.type == "message"]
    if said[-1] == "Greet the caller by name.":
        # the reply's instructions end the request: the block is just before them
        assert said[-2] == block
    else:  # livekit-agents before 1.5.17 merges them into the system prompt
        assert said[-1] == block and "Greet the caller by name." in said[0]


async def test_facts_are_extracted_with_the_agents_own_model_when_the_call_ends(store):
    answer = '{"facts": [{"kind": "home city", "value": "Porto", "exchange": 1}]}'
    model = ScriptedLLM(["Nice."], extract=[answer])
    async with AgentSession(llm=model) as session:
        call = start_call_memory(session, store, CALLER, "call-1")
        await session.start(UsersAgent(call, model))
        await session.run(user_input="I live in Porto.")
    await call.aclose()
    assert len(model.extractions) == 1
    facts = [(f.kind, f.value) for f in (await store.profile(CALLER)).facts]
    assert facts == [("home_city", "Porto")]


async def test_the_caller_is_waited_for_by_the_kind_asked_for_standard_included():
    # ParticipantKind.STANDARD is 0: asked for, it must still reach LiveKit's wait.
    asked: list[dict] = []

    class Job:
        metadata = '{"caller_identity": "web-user"}'

    class Ctx:
        job = Job()

        async def connect(self) -> None:
            return None

        async def wait_for_participant(self, **kwargs):
            asked.append(kwargs)
            return Participant()

    class Participant:
        def __init__(self) -> None:
            self.identity = "web-user"
            self.kind = rtc.ParticipantKind.PARTICIPANT_KIND_STANDARD
            self.attributes: dict[str, str] = {}

    standard = rtc.ParticipantKind.PARTICIPANT_KIND_STANDARD
    caller = await livekit_adapter.wait_for_caller(Ctx(), kind=standard)
    assert asked == [{"identity": "web-user", "kind": standard}]
    assert (caller.identity, caller.id) == ("web-user", "web-user")
