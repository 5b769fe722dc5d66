"""Recipe resume: the worker that takes a call over continues it."""

from __future__ import annotations

import asyncio
import logging

import pytest
from livekit.agents import AgentSession

import agent
import memory
from tests.doubles import Slow
from tests.livekit_job import run_job
from tests.scripted_llm import ScriptedLLM

CALLER = "caller-1"
ROOM_SID = "RM_4Xk2mQ9"


async def unstarted(store, caller_id: str | None, call_id: str) -> agent.Assistant:
    """The agent build_agent makes for a call, in a session that is never started."""
    model = ScriptedLLM()
    return await agent.build_agent(
        AgentSession(llm=model), store, caller_id, call_id, model=model
    )


async def first_worker(store) -> None:
    """Runs part of a call, then dies: no session close, no flush, no summary."""
    model = ScriptedLLM(["Hello!", "Which day suits you?"])
    session: AgentSession = AgentSession(llm=model)
    await session.start(
        await agent.build_agent(session, store, CALLER, ROOM_SID, model=model)
    )
    assert session.current_speech is not None  # the greeting
    await session.current_speech.wait_for_playout()
    await session.run(user_input="I need to move my appointment.")
    await asyncio.sleep(0.1)  # the background write lands; then the process is gone


async def test_the_next_worker_continues_the_call_instead_of_greeting(store):
    await first_worker(store)

    model = ScriptedLLM(
        ["Sorry, the line dropped. Which day suits you?", "Friday works."]
    )
    async with AgentSession(llm=model) as session:
        # same room, same call id
        assistant = await agent.build_agent(
            session, store, CALLER, ROOM_SID, model=model
        )
        assert assistant.resumed
        await session.start(assistant)
        await session.current_speech.wait_for_playout()
        await session.run(user_input="Friday, please.")
    await assistant.memory.aclose("participant hung up")

    first = model.replies[0]
    said = [(i.role, i.text_content) for i in first.items if i.type == "message"]
    assert ("user", "I need to move my appointment.") in said
    assert ("assistant", "Which day suits you?") in said
    # the first worker's opening (its greeting) comes back as the agent's words alone
    assert ("assistant", "Hello!") in said and ("user", "") not in said
    assert "Do not greet again" in first.items[-1].text_content
    # this call's own turns are in the chat context, so recall leaves them out.
    # Each worker's words before the caller's first turn there are an opening of the
    # agent's words alone: the first worker's greeting and the second's resumption.
    exchanges = await store.exchanges(CALLER, call_id=ROOM_SID)
    assert [(e.user_text, e.assistant_text) for e in exchanges] == [
        ("", "Hello!"),
        ("I need to move my appointment.", "Which day suits you?"),
        ("", "Sorry, the line dropped. Which day suits you?"),
        ("Friday, please.", "Friday works."),
    ]


async def test_a_new_call_in_a_new_room_starts_with_a_greeting(store):
    await first_worker(store)
    assistant = await unstarted(store, CALLER, "RM_other")
    assert not assistant.resumed
    assert [i for i in assistant.chat_ctx.items if i.type == "message"] == []
    await assistant.memory.aclose("participant hung up")


async def test_a_store_that_cannot_answer_starts_the_call_afresh(store):
    stuck = Slow(
        store, "exchanges", gate=asyncio.Event()
    )  # a gate never set: no answer
    assistant = await asyncio.wait_for(
        unstarted(stuck, CALLER, ROOM_SID), agent.RESUME_TIMEOUT + 2
    )
    assert not assistant.resumed
    await assistant.memory.aclose("participant hung up")


async def test_a_caller_without_memory_starts_afresh_without_a_warning(store, caplog):
    with caplog.at_level(logging.WARNING, logger="agent"):
        assistant = await unstarted(store, None, ROOM_SID)
    assert not assistant.resumed and not assistant.memory.enabled
    assert "saved turns" not in caplog.text
    await assistant.memory.aclose("participant hung up")


@pytest.mark.smoke  # the kit runs it for every backend x recipe
async def test_through_the_real_entrypoint_a_worker_that_takes_the_room_over_resumes(
    store_url,
):
    # LiveKit's own job machinery runs the entrypoint (tests/livekit_job.py); both jobs
    # are in the same room, as when a second worker gets the room after the first died.
    first = run_job(
        store_url,
        ["I need to move my appointment."],
        script=["Hello!", "Which day suits you?"],
    )
    assert first["returncode"] == 0 and "Traceback" not in first["log"], first["log"][
        -3000:
    ]
    store = memory.open_store(store_url)
    opening, saved = await store.exchanges("alice")
    assert (opening.user_text, opening.assistant_text) == ("", "Hello!")  # the greeting
    assert saved.user_text == "I need to move my appointment."
    assert saved.call_id.startswith("RM_")  # the room's sid names the call, not the job
    assert opening.call_id == saved.call_id
    await store.close()

    second = run_job(
        store_url, [], script=["Sorry, the line dropped. Which day suits you?"]
    )
    assert second["returncode"] == 0 and "Traceback" not in second["log"], second[
        "log"
    ][-3000:]
    greeting = second["requests"][0]
    assert ["assistant", "Hello!"] in greeting  # the opening: the agent's words alone
    assert ["user", "I need to move my appointment."] in greeting
    assert ["assistant", "Which day suits you?"] in greeting
    assert "Do not greet again" in greeting[-1][1]
