"""Which reply answers which turn, however the app drives the real AgentSession.

Every reply here is triggered the way an app triggers it (on_enter's greeting,
`session.run(user_input=...)`, `generate_reply` with or without instructions or
user_input, a tool loop, `update_chat_ctx` + `generate_reply`), and LiveKit itself
decides the order its items are added in. Capture must pair each reply with the
turn it answers, and store a reply that answers no turn as nobody's answer.
"""

from __future__ import annotations

import asyncio

from livekit.agents import llm

import memory
from tests.conftest import call
from tests.scripted_llm import Reply, ScriptedLLM, Slow, ToolCall

CALLER = "caller-1"
GREETING = "Hello and welcome to Acme Travel, how can I help today?"
OPENING = ("", "Hi!")  # the greeting, saved as the agent's words once the caller speaks


async def saved(store, caller=CALLER) -> list[tuple[str, str]]:
    return [(e.user_text, e.assistant_text) for e in await store.exchanges(caller)]


async def test_a_greeting_still_being_generated_when_the_first_turn_arrives_is_nobodys_answer(
    store,
):
    # The caller types before the on_enter greeting is out: LiveKit adds the caller's
    # message first and the greeting after it.
    def answer(chat_ctx: llm.ChatContext) -> Reply:
        last = chat_ctx.items[-1]
        said = last.text_content or "" if isinstance(last, llm.ChatMessage) else ""
        if said.startswith("Greet the caller"):  # the on_enter greeting's instructions
            return Slow(0.3, GREETING)
        return "Thanks Maria, let me look up order 5521."

    model = ScriptedLLM(answer)
    async with call(store, CALLER, model, greets=False) as (session, _):
        await session.run(user_input="Hi, this is Maria calling about order 5521.")
        # The run waits for its own reply, not for the greeting's speech, which a busy
        # machine can finish later: wait for the greeting to be in the history too.
        for _ in range(200):
            said = [
                i.text_content for i in session.history.items if i.type == "message"
            ]
            if GREETING in said:
                break
            await asyncio.sleep(0.05)
        assert said.index("Hi, this is Maria calling about order 5521.") < said.index(
            GREETING
        )
    assert await saved(store) == [
        (
            "Hi, this is Maria calling about order 5521.",
            "Thanks Maria, let me look up order 5521.",
        )
    ]
    # and the next call's block never shows the greeting as the caller's answer
    recall = await store.recall(CALLER, "order 5521")
    assert GREETING not in memory.format_block(recall)


async def test_generate_reply_with_user_input_pairs_with_that_input(store):
    async with call(store, CALLER, ScriptedLLM(["Hi!", "Your seat is 14C."])) as (
        session,
        _,
    ):
        await session.generate_reply(user_input="Which seat do I have?")
    assert await saved(store) == [
        OPENING,
        ("Which seat do I have?", "Your seat is 14C."),
    ]


async def test_a_generate_reply_with_only_instructions_is_not_the_last_turns_answer(
    store,
):
    model = ScriptedLLM(
        ["Hi!", "Booked for Tuesday.", "By the way, your flight is on time."]
    )
    async with call(store, CALLER, model) as (session, _):
        await session.run(user_input="Book my flight for Tuesday.")
        await session.generate_reply(instructions="Tell the caller the flight status.")
    assert await saved(store) == [
        OPENING,
        ("Book my flight for Tuesday.", "Booked for Tuesday."),
    ]


async def test_a_tool_loop_without_words_before_the_tool_is_one_exchange(store):
    model = ScriptedLLM(
        [
            "Hi!",
            ToolCall("remember", {"kind": "name", "value": "Maria"}),
            "Nice to meet you.",
        ]
    )
    async with call(store, CALLER, model) as (session, _):
        await session.run(user_input="I'm Maria.")
        await session.run(user_input="What's the weather?")
    assert await saved(store) == [
        OPENING,
        ("I'm Maria.", "Nice to meet you."),
        ("What's the weather?", "OK."),
    ]


async def test_a_user_message_the_app_inserts_does_not_take_the_earlier_turns_reply(
    store,
):
    model = ScriptedLLM(["Hi!", "Booked for Tuesday.", "Your new address is saved."])
    async with call(store, CALLER, model) as (session, _):
        await session.run(user_input="Book my flight for Tuesday.")
        agent = session.current_agent
        ctx = agent.chat_ctx.copy()
        ctx.add_message(role="user", content="My new address is 5 Rua Augusta.")
        await agent.update_chat_ctx(ctx)
        await session.generate_reply()
    # not handed to memory: not remembered, and the earlier turn keeps its own reply
    assert await saved(store) == [
        OPENING,
        ("Book my flight for Tuesday.", "Booked for Tuesday."),
    ]


async def test_a_user_message_the_app_inserts_and_hands_to_capture_is_remembered(store):
    model = ScriptedLLM(["Hi!", "Booked for Tuesday.", "Your new address is saved."])
    async with call(store, CALLER, model) as (session, assistant_call):
        await session.run(user_input="Book my flight for Tuesday.")
        agent = session.current_agent
        ctx = agent.chat_ctx.copy()
        msg = ctx.add_message(role="user", content="My new address is 5 Rua Augusta.")
        await agent.update_chat_ctx(ctx)
        # the documented way (livekit_adapter.capture): hand the inserted item over too
        assistant_call.capture(
            msg.role, msg.id, msg.text_content, created_at=msg.created_at
        )
        await session.generate_reply()
    assert await saved(store) == [
        OPENING,
        ("Book my flight for Tuesday.", "Booked for Tuesday."),
        ("My new address is 5 Rua Augusta.", "Your new address is saved."),
    ]


async def test_a_reply_interrupted_by_the_next_typed_turn_stays_with_its_own_turn(
    store,
):
    model = ScriptedLLM(
        [
            "Hi!",
            "Our opening hours are nine to five on weekdays",
            "On Sundays we are closed.",
        ],
        chunk_delay=0.05,
    )
    async with call(store, CALLER, model) as (session, _):
        first = session.generate_reply(user_input="When are you open?")
        await asyncio.sleep(0.15)
        session.interrupt()
        await first
        await session.run(user_input="And on Sundays?")
    exchanges = await store.exchanges(CALLER)
    assert [e.user_text for e in exchanges] == [
        "",
        "When are you open?",
        "And on Sundays?",
    ]
    assert exchanges[2].assistant_text == "On Sundays we are closed."
    assert "Sundays" not in exchanges[1].assistant_text
