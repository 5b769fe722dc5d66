"""Capture under the item orders LiveKit really produces.

Some orders (barge-ins before the first audio frame, duplicate reports, multi-part
content) cannot be produced on demand through typed turns, so these tests feed the
exact sequence of `conversation_item_added` events into a real AgentSession: the
same handler agent.py registers takes them.
"""

from __future__ import annotations

import asyncio
import time

from livekit.agents import ConversationItemAddedEvent, llm

import memory
from tests.conftest import call
from tests.scripted_llm import ScriptedLLM, ToolCall

CALLER = "caller-1"
OPENING = (
    "",
    "OK.",
    False,
)  # the greeting (the scripted "OK."), saved once the caller speaks


class Feed:
    """Emits chat items as LiveKit does, with created_at moving forward."""

    def __init__(self, session) -> None:
        self.session = session
        self.clock = time.time()

    def item(self, item: llm.ChatMessage) -> llm.ChatMessage:
        self.session.emit(
            "conversation_item_added", ConversationItemAddedEvent(item=item)
        )
        return item

    def message(
        self,
        role: llm.ChatRole,
        content,
        *,
        id: str,  # noqa: A002 (as LiveKit names a message's id)
        interrupted: bool = False,
        at: float | None = None,
    ):
        self.clock += 1.0
        return self.item(
            llm.ChatMessage(
                id=id,
                role=role,
                content=content if isinstance(content, list) else [content],
                interrupted=interrupted,
                created_at=self.clock if at is None else at,
            )
        )


async def saved(store, caller=CALLER) -> list[tuple[str, str, bool]]:
    return [
        (e.user_text, e.assistant_text, e.interrupted)
        for e in await store.exchanges(caller)
    ]


async def test_the_same_interrupted_reply_under_two_ids_is_saved_once(store):
    async with call(store, CALLER, ScriptedLLM()) as (session, _):
        feed = Feed(session)
        feed.message("user", "Tell me about the museum hours.", id="u1")
        feed.message("assistant", "The museum opens at", id="a1", interrupted=True)
        feed.message(
            "assistant", "The museum opens at", id="a1-retry", interrupted=True
        )
        feed.message("assistant", "The museum opens at", id="a1")  # an id seen before
    assert await saved(store) == [
        OPENING,
        ("Tell me about the museum hours.", "The museum opens at", True),
    ]


async def test_a_reply_never_pairs_with_a_turn_it_did_not_answer(store):
    # U1 barged in on before any audio: no A1. Then U2 and A2.
    async with call(store, CALLER, ScriptedLLM()) as (session, _):
        feed = Feed(session)
        feed.message("user", "Book the usual table.", id="u1")
        feed.message(
            "assistant", "", id="a1-empty", interrupted=True
        )  # empty: no reply
        feed.message("user", "Actually, make it for four people.", id="u2")
        feed.message("assistant", "A table for four, done.", id="a2")
    assert await saved(store) == [
        OPENING,
        ("Book the usual table.", "", False),
        ("Actually, make it for four people.", "A table for four, done.", False),
    ]


async def test_a_turn_without_a_reply_is_kept_and_recalled_next_call(store):
    async with call(store, CALLER, ScriptedLLM()) as (session, _):
        feed = Feed(session)
        feed.message("user", "My parking spot is number 31.", id="u1")
        feed.message("user", "And my locker is 12.", id="u2")
        feed.message("assistant", "Got both.", id="a2")
    recall = await store.recall(CALLER, "parking spot locker")
    assert {e.user_text for e in recall.exchanges} == {
        "My parking spot is number 31.",
        "And my locker is 12.",
    }


async def test_a_reply_already_under_way_when_the_caller_spoke_stays_with_its_turn(
    store,
):
    async with call(store, CALLER, ScriptedLLM()) as (session, _):
        feed = Feed(session)
        feed.message("user", "What time do you close?", id="u1")
        started = feed.clock + 0.5
        feed.message("user", "Wait, and on Sundays?", id="u2")
        # A1 started before U2 but was added after it (the barge-in cut it short).
        feed.message(
            "assistant", "We close at nine", id="a1", interrupted=True, at=started
        )
        feed.message("assistant", "On Sundays at six.", id="a2")
    assert await saved(store) == [
        OPENING,
        ("What time do you close?", "We close at nine", True),
        ("Wait, and on Sundays?", "On Sundays at six.", False),
    ]


async def test_odd_message_content_never_breaks_capture(store):
    image = llm.ImageContent(image="https://example.com/photo.png")
    async with call(store, CALLER, ScriptedLLM()) as (session, _):
        feed = Feed(session)
        feed.message("user", [], id="u-empty")
        feed.message("user", [image], id="u-image")
        feed.message("user", [""], id="u-blank")
        feed.message("user", ["First part.", image, "Second part."], id="u-parts")
        feed.message("assistant", '<expr emotion="happy"/>Happy to help!', id="a1")
    assert await saved(store) == [
        OPENING,
        ("First part.\nSecond part.", "Happy to help!", False),
    ]


async def test_a_reply_around_a_tool_call_is_one_exchange_without_tool_output(store):
    # "Let me check." + tool call + the answer: LiveKit adds two assistant messages;
    # tool calls and outputs go to history without conversation_item_added.
    model = ScriptedLLM(
        [
            "Hi!",
            ToolCall(
                "remember",
                {"kind": "dentist", "value": "Friday 3 pm"},
                say="Let me check.",
            ),
            "You have the dentist on Friday at 3 pm.",
        ]
    )
    async with call(store, CALLER, model) as (session, _):
        await session.run(user_input="Note my dentist appointment, Friday at 3 pm.")
        Feed(session).item(llm.AgentHandoff(id="h1", new_agent_id="other"))
    assert await saved(store) == [
        ("", "Hi!", False),
        (
            "Note my dentist appointment, Friday at 3 pm.",
            "Let me check.\nYou have the dentist on Friday at 3 pm.",
            False,
        ),
    ]
    assert "Saved:" not in str(await store.exchanges(CALLER))  # the tool's output


async def test_a_greeting_the_caller_never_answers_is_not_saved(store):
    async with call(store, CALLER, ScriptedLLM(["Hello, how can I help?"])) as (
        _session,
        _,
    ):
        await asyncio.sleep(0)
    assert await saved(store) == []


async def test_the_greeting_the_caller_answers_is_kept_as_the_agents_words(store):
    # "It went fine" means nothing without what it answered: the greeting is the
    # call's opening, saved as the agent's words alone, never as the caller's.
    model = ScriptedLLM(["How did the move to Porto go?", "Glad to hear it."])
    async with call(store, CALLER, model) as (session, _):
        await session.run(user_input="It went fine, the flat is lovely.")
    assert await saved(store) == [
        ("", "How did the move to Porto go?", False),
        ("It went fine, the flat is lovely.", "Glad to hear it.", False),
    ]
    block = memory.format_block(
        await store.recall(CALLER, "my move to Porto"), query="my move to Porto"
    )
    assert (
        'you: "How did the move to Porto go?"'
        in block.split(memory.AGENT_CLAIMS_TITLE)[1]
    )
    assert 'caller: ""' not in block


async def test_two_calls_in_one_process_keep_their_own_state(store):
    # Per-call state (open exchange, recall cache, caller) lives on CallMemory,
    # never at module level: two concurrent calls do not mix.
    model_a, model_b = ScriptedLLM(), ScriptedLLM()
    async with (
        call(store, "caller-a", model_a, call_id="a") as (session_a, _),
        call(store, "caller-b", model_b, call_id="b") as (session_b, _),
    ):
        await asyncio.gather(
            session_a.run(user_input="Caller A talks about apples."),
            session_b.run(user_input="Caller B talks about bicycles."),
        )
    assert await saved(store, "caller-a") == [
        OPENING,
        ("Caller A talks about apples.", "OK.", False),
    ]
    assert await saved(store, "caller-b") == [
        OPENING,
        ("Caller B talks about bicycles.", "OK.", False),
    ]


async def test_a_transcript_that_arrives_after_its_reply_still_pairs_with_it(store):
    # Realtime providers may deliver the caller's final transcript after the reply it
    # prompted; LiveKit stamps it with when the caller started speaking.
    async with call(store, CALLER, ScriptedLLM()) as (session, _):
        feed = Feed(session)
        feed.message("user", "Is the pool open today?", id="u1")
        feed.message("assistant", "Yes, until eight.", id="a1")
        spoke = feed.clock + 1.0
        feed.message("assistant", "The gym closes at ten.", id="a2", at=spoke + 1.5)
        feed.message("user", "And the gym?", id="u2", at=spoke)  # arrives last
    assert await saved(store) == [
        OPENING,
        ("Is the pool open today?", "Yes, until eight.", False),
        ("And the gym?", "The gym closes at ten.", False),
    ]


async def test_a_first_reply_that_arrives_before_its_transcript_is_kept(store):
    async with call(store, CALLER, ScriptedLLM()) as (session, _):
        feed = Feed(session)
        spoke = feed.clock + 1.0
        feed.message("assistant", "Good morning to you too!", id="a1", at=spoke + 1.0)
        feed.message("user", "Good morning!", id="u1", at=spoke)
    assert await saved(store) == [
        OPENING,
        ("Good morning!", "Good morning to you too!", False),
    ]


async def test_a_repeated_short_reply_still_moves_to_the_turn_it_answered(store):
    async with call(store, CALLER, ScriptedLLM()) as (session, _):
        feed = Feed(session)
        t = feed.clock + 1
        feed.message("user", "Is the shop open today?", id="u1", at=t)
        feed.message("assistant", "Yes.", id="a1", at=t + 1)
        feed.message("assistant", "Yes.", id="a2", at=t + 3)  # before its transcript
        feed.message("user", "And on Sunday?", id="u2", at=t + 2)
    assert await saved(store) == [
        OPENING,
        ("Is the shop open today?", "Yes.", False),
        ("And on Sunday?", "Yes.", False),
    ]


async def test_replies_that_arrive_out_of_order_are_joined_in_time_order(store):
    async with call(store, CALLER, ScriptedLLM()) as (session, _):
        feed = Feed(session)
        t = feed.clock + 1
        feed.message("user", "What's on today?", id="u1", at=t)
        feed.message("assistant", "Then lunch at one.", id="a2", at=t + 3)
        feed.message("assistant", "First a call at ten.", id="a1", at=t + 2)
    assert await saved(store) == [
        OPENING,
        ("What's on today?", "First a call at ten.\nThen lunch at one.", False),
    ]
