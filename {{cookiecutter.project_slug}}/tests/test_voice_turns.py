"""Spoken turns: preemptive generation, tool steps, handoffs, hang-ups.

These drive the real AgentSession's audio path (STT events, end-of-turn detection,
preemptive generation) with a scripted STT and a scripted LLM standing in for the
paid providers (tests/scripted_speech.py, tests/scripted_llm.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest
from livekit.agents import AgentSession, RunContext, function_tool, llm

import agent
import memory
from tests.doubles import Counting, Slow
from tests.scripted_llm import ScriptedLLM, ToolCall, memory_blocks
from tests.scripted_speech import ScriptedSTT, SilentMicrophone

CALLER = "caller-1"
INVALIDATED = "preemptive generation invalidated"


@pytest.fixture
async def counting_store(store):
    await store.remember(CALLER, memory.Fact.of("usual table", "by the window"))
    return Counting(store)


@contextlib.asynccontextmanager
async def voice_call(store, model):
    """A spoken call: preemptive generation on (LiveKit's default), the turn ending
    when the STT reports end of speech. The agent is built by agent.build_agent."""
    speech = ScriptedSTT()
    session = AgentSession(
        llm=model,
        stt=speech,
        # the endpointing delay leaves a preemptive reply time to reach the model,
        # even on a loaded machine
        turn_handling={
            "turn_detection": "stt",
            "endpointing": {"min_delay": 0.3, "max_delay": 1.0},
        },
    )
    session.input.audio = SilentMicrophone()
    assistant = await agent.build_agent(session, store, CALLER, "call-1", model=model)
    call = assistant.memory
    replies: asyncio.Queue[str] = asyncio.Queue()

    @session.on("conversation_item_added")
    def _reply(ev):
        if ev.item.type == "message" and ev.item.role == "assistant":
            replies.put_nowait(ev.item.text_content or "")

    await session.start(assistant)
    await asyncio.wait_for(replies.get(), 5)  # the greeting
    try:
        yield session, speech, replies, call
    finally:
        await session.aclose()
        await call.aclose()


def turn_requests(model: ScriptedLLM, before: int) -> list:
    return model.replies[before:]


async def test_preemptive_runs_recall_once_per_text_and_one_exchange_is_saved(
    counting_store,
):
    model = ScriptedLLM(["Hello!"] + ["A table for Friday, by the window."] * 3)
    async with voice_call(counting_store, model) as (_session, speech, replies, _call):
        before, recalls = len(model.replies), counting_store.calls["recall"]
        # The transcript firms up in steps; each preflight starts a preemptive reply
        # (0.2 s apart, so each reaches the model before the next supersedes it).
        await speech.say(
            "I'd like to book",
            "I'd like to book a table for Friday",
            "I'd like to book a table for Friday",
            pause=0.2,
        )
        assert (
            await asyncio.wait_for(replies.get(), 5)
            == "A table for Friday, by the window."
        )
        requests = turn_requests(model, before)
        assert len(requests) == 2  # one per distinct preflight; the second was adopted
        assert all(len(memory_blocks(r)) == 1 for r in requests)
        assert counting_store.calls["recall"] - recalls == 2  # one per distinct text
        # llm_node saved nothing: only the committed turn and the played reply are stored
    exchanges = await counting_store.exchanges(CALLER)
    assert [(e.user_text, e.assistant_text) for e in exchanges] == [
        ("", "Hello!"),  # the greeting, the call's opening
        ("I'd like to book a table for Friday", "A table for Friday, by the window."),
    ]


async def test_a_final_text_seen_before_in_the_turn_is_recalled_from_the_cache(
    counting_store,
):
    model = ScriptedLLM(["Hello!"] + ["Done."] * 3)
    async with voice_call(counting_store, model) as (_session, speech, replies, _call):
        before = len(counting_store.queries)
        # the transcript wavers back to an earlier text: its recall is reused
        await speech.say(
            "Book my usual table",
            "Book my usual table please",
            "Book my usual table",
            pause=0.3,
        )
        await asyncio.wait_for(replies.get(), 5)
        queries = counting_store.queries[before:]
    if not queries or "please" in queries[0]:
        # LiveKit starts a preemptive reply only when it can: on a starved machine the
        # first preflight may never reach llm_node, and nothing was cached to reuse
        pytest.skip(f"the first preflight was not recalled on this machine: {queries}")
    assert queries.count("Book my usual table") == 1, queries


async def test_a_memory_hit_costs_one_llm_request_per_turn(counting_store, caplog):
    model = ScriptedLLM(["Hello!", "Your usual table is by the window."])
    with caplog.at_level(logging.WARNING):
        async with voice_call(counting_store, model) as (
            _session,
            speech,
            replies,
            _call,
        ):
            before = len(model.replies)
            await speech.say("Where is my usual table?", "Where is my usual table?")
            await asyncio.wait_for(replies.get(), 5)
            requests = turn_requests(model, before)
    assert len(requests) == 1
    assert "by the window" in memory_blocks(requests[0])[0]
    assert INVALIDATED not in caplog.text


class HookInjectingAssistant(agent.Assistant):
    """Negative control: the peers' way, memory added in on_user_turn_completed."""

    async def on_user_turn_completed(self, turn_ctx, new_message):
        turn_ctx.add_message(role="system", content=["Usual table: by the window."])

    async def llm_node(self, chat_ctx, tools, model_settings):
        async for chunk in super(agent.Assistant, self).llm_node(
            chat_ctx, tools, model_settings
        ):
            yield chunk


async def test_injecting_in_on_user_turn_completed_costs_a_second_request(
    counting_store, caplog, monkeypatch
):
    # Why recall lives in llm_node: editing the turn in the hook throws away the
    # preemptive reply and LiveKit asks the model again (often both are billed).
    model = ScriptedLLM(["Hello!", "By the window.", "By the window."])
    monkeypatch.setattr(
        agent, "Assistant", HookInjectingAssistant
    )  # what build_agent makes
    with caplog.at_level(logging.WARNING):
        async with voice_call(counting_store, model) as (
            _session,
            speech,
            replies,
            _call,
        ):
            before = len(model.replies)
            await speech.say("Where is my usual table?", "Where is my usual table?")
            await asyncio.wait_for(replies.get(), 5)
            requests = turn_requests(model, before)
    assert len(requests) == 2
    assert INVALIDATED in caplog.text


async def test_every_request_of_a_long_call_carries_exactly_one_block(counting_store):
    script = ["Hello!"]
    for n in range(10):
        if n == 4:
            script += [
                ToolCall("remember", {"kind": "party size", "value": "four"}),
                "Noted.",
            ]
        else:
            script.append(f"Answer {n}.")
    model = ScriptedLLM(script)
    async with voice_call(counting_store, model) as (session, speech, replies, _call):
        for n in range(10):
            await speech.say(f"Question {n} about my usual table?")
            await asyncio.wait_for(replies.get(), 5)
        history = list(session.history.items)
        agent_ctx = list(session.current_agent.chat_ctx.items)
    assert len(model.replies) == 12  # greeting, ten turns, one post-tool step
    assert all(len(memory_blocks(r)) == 1 for r in model.replies)
    for items in (history, agent_ctx):
        assert not [
            i for i in items if i.type == "message" and i.extra.get("memory_block")
        ]
        assert "by the window" not in str([i for i in items if i.type == "message"])
    assert next(i for i in history if i.type == "message").text_content == "Hello!"
    # Each request is the instructions, one block and real conversation items only.
    history_ids = {i.id for i in history}
    for request in model.replies:
        extra = [
            i
            for i in request.items
            if i.id not in history_ids
            and not (i.type == "message" and i.role == "system")
            and i.type != "agent_config_update"
        ]
        assert extra == [], extra


class Reception(agent.Assistant):
    """Agent A: hands the caller over to agent B, which is built the same way."""

    @function_tool
    async def transfer_to_bookings(self, context: RunContext):
        """Transfer the caller to the bookings desk."""
        model = self.llm if isinstance(self.llm, llm.LLM) else None
        return Bookings(self.memory, model=model), "Transferring you to bookings."


class Bookings(agent.Assistant):
    async def on_enter(self) -> None:
        self.session.generate_reply(instructions="Say you are the bookings desk.")


def front_desk_script(chat_ctx) -> str | ToolCall:
    """Answers by what was asked, however many steps the handoff takes."""
    last = chat_ctx.items[-1]
    if last.type == "message" and last.extra.get("memory_block"):
        last = chat_ctx.items[-2]
    if last.type == "function_call_output":
        return "One moment."
    said = last.text_content or ""
    if "bookings desk" in said:  # agent B's on_enter instructions
        return "Bookings desk here."
    if "transfer me" in said:
        return ToolCall("transfer_to_bookings", {}, say="Let me transfer you.")
    if "usually sit" in said:
        return "Your usual table is by the window."
    return "Hello!"


async def test_after_a_handoff_the_next_agent_keeps_the_caller_and_the_memory(
    counting_store,
):
    model = ScriptedLLM(front_desk_script)
    async with AgentSession(llm=model) as session:
        front = await agent.build_agent(
            session, counting_store, CALLER, "call-1", model=model
        )
        call_memory = front.memory
        await session.start(Reception(call_memory, model=model))
        await session.current_speech.wait_for_playout()
        await session.run(user_input="I want to book, transfer me please.")
        assert isinstance(session.current_agent, Bookings)
        b_requests = len(model.replies)
        await session.run(user_input="Where do I usually sit?")
        # every request agent B made carries the caller's memory
        greeting = next(r for r in model.replies if "bookings desk" in str(r.items[-1]))
        for request in [greeting, *model.replies[b_requests:]]:
            (block,) = memory_blocks(request)
            assert "by the window" in block
    await call_memory.aclose()
    exchanges = await counting_store.exchanges(CALLER)
    assert [e.user_text for e in exchanges] == [
        "",  # the opening
        "I want to book, transfer me please.",
        "Where do I usually sit?",
    ]
    first, second = (e.assistant_text.split("\n") for e in exchanges[1:])
    assert first.count("Let me transfer you.") == 1 and "Bookings desk here." in first
    assert second == ["Your usual table is by the window."]


async def test_a_hang_up_during_the_reply_keeps_the_callers_words(store_url):
    store = memory.open_store(store_url)
    model = ScriptedLLM(
        ["Hello!", "Thanks, I have updated your address to the new one."],
        chunk_delay=0.1,
    )
    async with AgentSession(llm=model) as session:
        assistant = await agent.build_agent(
            session, store, CALLER, "call-1", model=model
        )
        call = assistant.memory
        await session.start(assistant)
        await session.current_speech.wait_for_playout()
        session.run(user_input="My new address is 1 Placeholder Street.")
        await asyncio.sleep(0.5)
        # the caller hangs up: the session closes mid-reply, then the job shuts down
    assert await asyncio.wait_for(call.aclose(), memory.FLUSH_TIMEOUT + 1) == 0
    await store.close()
    reopened = memory.open_store(store_url)
    _opening, exchange = await reopened.exchanges(CALLER)
    assert exchange.user_text == "My new address is 1 Placeholder Street."
    if exchange.assistant_text:  # whatever was said before the hang-up, marked
        assert exchange.interrupted
        assert "Thanks, I have updated your address".startswith(
            exchange.assistant_text[:10]
        )
    await reopened.close()


async def test_a_store_that_never_answers_cannot_hold_the_job_past_the_flush_bound(
    store,
):
    store = Slow(store, "save", gate=asyncio.Event())  # never set
    call = memory.CallMemory(store, CALLER, "call-1")
    call.capture("user", "u1", "Please remember this.")
    # the bound sits below LiveKit's shutdown_process_timeout (10 s in 1.8.9)
    assert memory.FLUSH_TIMEOUT < 10
    assert await asyncio.wait_for(call.aclose(timeout=0.2), 5) == 1
