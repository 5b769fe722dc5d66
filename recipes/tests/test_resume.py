"""Recipe resume: the worker that takes a call over continues it."""

from __future__ import annotations

import asyncio

from livekit.agents import AgentSession

import agent
import memory
from tests.scripted_llm import ScriptedLLM

CALLER = "caller-1"
ROOM_SID = "RM_4Xk2mQ9"


async def first_worker(store) -> None:
    """Runs part of a call, then dies: no session close, no flush, no summary."""
    call = memory.CallMemory(store, CALLER, ROOM_SID)
    model = ScriptedLLM(["Hello!", "Which day suits you?"])
    session = AgentSession(llm=model)
    agent.start_capture(session, call)
    await session.start(await agent.resumed_assistant(call, model=model))
    await session.current_speech.wait_for_playout()
    await session.run(user_input="I need to move my appointment.")
    await asyncio.sleep(0.1)  # the background write lands; then the process is gone


async def test_the_next_worker_continues_the_call_instead_of_greeting(store):
    await first_worker(store)

    call = memory.CallMemory(store, CALLER, ROOM_SID)  # same room, same call id
    model = ScriptedLLM(["Sorry, the line dropped. Which day suits you?", "Friday works."])
    async with AgentSession(llm=model) as session:
        agent.start_capture(session, call)
        assistant = await agent.resumed_assistant(call, model=model)
        await session.start(assistant)
        await session.current_speech.wait_for_playout()
        await session.run(user_input="Friday, please.")
    await call.aclose()

    first = model.replies[0]
    said = [(i.role, i.text_content) for i in first.items if i.type == "message"]
    assert ("user", "I need to move my appointment.") in said
    assert ("assistant", "Which day suits you?") in said
    assert "Do not greet again" in first.items[-1].text_content
    # this call's own turns are in the chat context, so recall leaves them out
    exchanges = await store.exchanges(CALLER, call_id=ROOM_SID)
    assert [e.user_text for e in exchanges] == ["I need to move my appointment.", "Friday, please."]


async def test_a_new_call_in_a_new_room_starts_with_a_greeting(store):
    await first_worker(store)
    call = memory.CallMemory(store, CALLER, "RM_other")
    assistant = await agent.resumed_assistant(call, model=ScriptedLLM())
    assert not assistant.resumed
    assert [i for i in assistant.chat_ctx.items if i.type == "message"] == []
    await call.aclose()


async def test_a_store_that_cannot_answer_starts_the_call_afresh(db_path):
    class StuckStore(memory.SQLiteMemory):
        async def exchanges(self, *args, **kwargs):
            await asyncio.Event().wait()

    store = StuckStore.open(db_path)
    call = memory.CallMemory(store, CALLER, ROOM_SID)
    assistant = await asyncio.wait_for(
        agent.resumed_assistant(call, model=ScriptedLLM()), agent.RESUME_TIMEOUT + 2
    )
    assert not assistant.resumed
    await store.close()
