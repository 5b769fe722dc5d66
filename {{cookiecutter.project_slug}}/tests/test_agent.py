"""The agent's memory behaviours, through the real livekit-agents AgentSession.

The only stand-in is the model provider (tests/scripted_llm.py): it records the chat
context of every request, which is exactly what the model would have been shown.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest
from livekit import rtc
from livekit.agents import ConversationItemAddedEvent, llm
from livekit.rtc._proto import handle_pb2, participant_pb2

import memory
from memory import livekit_adapter
from tests.conftest import call
from tests.doubles import Counting, Failing, Slow, StoreWrapper, make_exchange
from tests.scripted_llm import ScriptedLLM, ToolCall, memory_blocks

ALICE = "alice@example.com"
BOB = "+15550100200"


async def say(session, text: str, *, deadline: float = 10.0):
    """One typed user turn; fails (instead of hanging) if no reply comes in time."""
    return await asyncio.wait_for(session.run(user_input=text), deadline)


def last_block_of(chat_ctx: llm.ChatContext) -> str:
    blocks = memory_blocks(chat_ctx)
    assert len(blocks) == 1, f"expected one memory block, got {len(blocks)}: {blocks}"
    return blocks[0]


def last_block(model: ScriptedLLM) -> str:
    return last_block_of(model.replies[-1])


def history_text(session) -> str:
    return "\n".join(
        i.text_content or "" for i in session.history.items if i.type == "message"
    )


async def test_call_two_hears_what_call_one_said(store_url):
    first = memory.open_store(store_url)
    async with call(first, ALICE, ScriptedLLM(["Hello!", "Lisbon is lovely."])) as (
        session,
        _,
    ):
        await say(session, "My sister Ana just moved to Lisbon.")
    await first.close()

    # A new process: the store is opened again from the same file.
    second = memory.open_store(store_url)
    model = ScriptedLLM(["Welcome back!", "She lives in Lisbon."])
    async with call(second, ALICE, model, call_id="call-2") as (session, _):
        result = await say(session, "Where does my sister live now?")
        result.expect.next_event().is_message(role="assistant")
        block = last_block(model)
        assert "Lisbon" in block and "sister" in block
        # The block reached the model but never the conversation record.
        assert "Ana just moved" not in history_text(session)
        assert memory.BLOCK_HEADER not in history_text(session)
    await second.close()


async def test_a_call_at_8_30_pm_in_los_angeles_on_29_november_is_dated_29_november(
    store, monkeypatch
):
    monkeypatch.setenv(memory.dates.TIMEZONE_SETTING, "America/Los_Angeles")
    la_evening = 1796013000.0  # 2026-11-29 20:30 in Los Angeles = 2026-11-30 04:30 UTC
    await store.save(
        make_exchange(1, ALICE, "I booked the dentist for Tuesday", at=la_evening)
    )
    two_days_later = la_evening + 2 * 86400
    model = ScriptedLLM()
    async with call(
        store, ALICE, model, call_id="call-2", clock=lambda: two_days_later
    ) as (
        session,
        _,
    ):
        await say(session, "When did I book the dentist?")
    block = last_block(model)
    assert '- 2026-11-29 caller: "I booked the dentist for Tuesday"' in block
    assert "2026-11-30" not in block
    assert "Now: Tuesday, 1 December 2026, 20:30 America/Los_Angeles time" in block


async def test_a_fact_the_caller_asks_about_is_never_dropped_for_newer_ones(store):
    now = time.time()
    allergy = "penicillin, found after a bad reaction in 2019; avoid every penicillin"
    await store.remember(ALICE, memory.Fact("allergy", allergy, now - 1000))
    for n in range(40):  # 41 facts in all, newer ones more than fill the facts' share
        await store.remember(ALICE, memory.Fact(f"note {n:02d}", "x" * 40, now - n))
    model = ScriptedLLM()
    async with call(store, ALICE, model) as (session, _):
        await say(session, "Which medicine am I allergic to?")
    assert allergy not in last_block_of(
        model.requests[0]
    )  # the greeting's, no question
    assert allergy in last_block(model)


async def test_the_agents_past_claim_is_never_presented_as_the_callers_words(store):
    model = ScriptedLLM(
        [
            "Hi!",
            "Since you're allergic to peanuts, I'll ask for a nut-free table.",
            "Noted.",
        ]
    )
    async with call(store, ALICE, model) as (session, _):
        await say(session, "Can you book me a table at Luigi's for Friday?")
        await say(session, "I'm allergic to shellfish, by the way.")
    model = ScriptedLLM()
    async with call(store, ALICE, model, call_id="call-2") as (session, _):
        await say(session, "What am I allergic to?")
    block = last_block(model)
    exchanges, _, claims = block.partition(memory.AGENT_CLAIMS_TITLE)
    assert 'caller: "I\'m allergic to shellfish, by the way."' in exchanges
    assert "peanuts" not in exchanges
    assert "you: \"Since you're allergic to peanuts" in claims


async def test_the_block_sits_just_before_the_callers_latest_words(store):
    await store.remember(ALICE, memory.Fact.of("name", "Alice"))
    model = ScriptedLLM()
    async with call(store, ALICE, model) as (session, _):
        await say(session, "What's my name?")
    items = [i for i in model.replies[-1].items if i.type == "message"]
    assert items[-1].role == "user" and items[-1].text_content == "What's my name?"
    assert items[-2].role == "system" and 'name: "Alice"' in (
        items[-2].text_content or ""
    )


async def test_another_caller_hears_nothing_of_it(store):
    async with call(store, ALICE, ScriptedLLM()) as (session, _):
        await say(session, "My locker code is 4417 and my dog is called Biscuit.")
    model = ScriptedLLM()
    async with call(store, BOB, model, call_id="call-2") as (session, _):
        await say(session, "What is my locker code and my dog's name?")
    assert last_block(model).splitlines()[0] == memory.NOTHING_KNOWN
    # the messages' words only: str(items) holds timestamps, where "4417" can occur
    said = [
        i.text_content or ""
        for r in model.replies
        for i in r.items
        if i.type == "message"
    ]
    assert not any("4417" in text or "Biscuit" in text for text in said)


async def test_a_new_caller_gets_the_one_sentence_nothing_known_block(store):
    model = ScriptedLLM()
    async with call(store, ALICE, model) as (session, _):
        await say(session, "Do you remember me?")
    assert last_block(model).splitlines()[0] == memory.NOTHING_KNOWN
    assert memory.NOTHING_KNOWN.count(".") <= 2  # short: one statement, one instruction


async def test_the_greeting_uses_the_preloaded_profile(store):
    await store.remember(ALICE, memory.Fact.of("name", "Alice"))
    model = ScriptedLLM(["Hi Alice!"])
    async with call(store, ALICE, model) as (session, _):
        await say(session, "Hi")
    greeting = model.replies[0]
    assert 'name: "Alice"' in last_block_of(greeting)
    # the request still ends with what the reply answers: the greeting instruction
    assert (
        greeting.items[-1].role == "system"
        and "Greet the caller" in greeting.items[-1].text_content
    )
    assert greeting.items[-2].extra.get("memory_block")


async def test_the_next_call_starts_with_a_summary_of_the_last(store):
    async with call(store, ALICE, ScriptedLLM()) as (session, _):
        await say(session, "I'm calling about my broken washing machine.")
    (summary,) = (await store.profile(ALICE)).summaries
    assert summary.call_id == "call-1" and summary.text
    model = ScriptedLLM(["Hi again!"])
    async with call(store, ALICE, model, call_id="call-2"):
        pass
    greeting_block = last_block_of(model.replies[0])
    assert "Latest calls:" in greeting_block and summary.text in greeting_block


async def test_the_short_summary_is_the_callers_first_words(store):
    call_memory = memory.CallMemory(store, ALICE, "call-1")
    call_memory.capture("user", "u1", "I'm calling about my broken washing machine.")
    call_memory.capture("assistant", "a1", "Sorry to hear that.")
    call_memory.capture("user", "u2", "It leaks.")
    assert call_memory.summary() == (
        "The caller talked about: I'm calling about my broken washing machine. It leaks."
    )
    await call_memory.aclose()


async def test_a_slow_store_still_gets_a_reply_without_memory(store):
    gate = asyncio.Event()  # never set during the call: recall hangs
    await store.remember(ALICE, memory.Fact.of("name", "Alice"))
    store = Slow(store, "recall", gate=gate)
    model = ScriptedLLM(["Hi!", "Sure."])
    async with call(store, ALICE, model, recall_budget=0.05) as (session, _):
        result = await say(session, "What's my name?")
        result.expect.next_event().is_message(role="assistant")
    block = last_block(model)
    # The profile preloaded at call start is still used; the rest is said to be missing.
    assert 'name: "Alice"' in block and memory.MEMORY_UNAVAILABLE in block
    gate.set()


async def test_a_failing_store_still_gets_a_reply_and_warns_once(store, caplog):
    store = Failing(store, "recall", "profile")
    model = ScriptedLLM()
    with caplog.at_level(logging.WARNING, logger="memory"):
        async with call(store, ALICE, model) as (session, _):
            await say(session, "First question?")
            await say(session, "Second question?")
    assert last_block(model).splitlines()[0] == memory.MEMORY_UNAVAILABLE
    assert memory.NOTHING_KNOWN not in str(model.replies[-1].items)
    # once: the store is known to be down after the first failure, so later turns
    # do not ask it (the preload may fail first, and then no recall fails at all)
    down = [r for r in caplog.records if "store is unavailable" in r.getMessage()]
    failed = [r for r in caplog.records if "recall failed" in r.getMessage()]
    assert len(down) == 1 and len(failed) <= 1
    # Capture does not depend on recall: the turns were still saved.
    assert [e.user_text for e in await store.exchanges(ALICE)] == [
        "",  # the call's opening: the greeting the caller answered
        "First question?",
        "Second question?",
    ]


async def test_while_the_store_is_down_replies_skip_recall_until_a_probe_finds_it_back(
    store, caplog
):
    down = Counting(Failing(store, "recall"))
    model = ScriptedLLM()
    outcomes: list[str] = []

    def trace(name, started, ended, attributes):
        if name == "memory.recall":
            outcomes.append(attributes["memory.outcome"])

    with caplog.at_level(logging.INFO, logger="memory"):
        async with call(down, ALICE, model, trace=trace) as (session, call_memory):
            # The greeting's recall fails: the store is known to be down, and the
            # turns after it do not ask it (nor wait the recall budget for it).
            for n in range(4):
                await say(session, f"Question {n}?")
                assert last_block(model).splitlines()[0] == memory.MEMORY_UNAVAILABLE
            assert down.calls["recall"] == 1
            assert outcomes == ["unavailable"] + ["skipped"] * 4
            # The store is back. Once SKIP_DOWN_STORE_FOR is over, a turn's recall
            # goes to the store in the background; the reply does not wait for it.
            down.inner.methods.clear()
            call_memory.health.probe_at = 0.0
            await say(session, "Question 4?")
            assert down.calls["recall"] == 2 and outcomes[-1] == "skipped"
            assert call_memory.recaller._probe is not None
            await asyncio.wait_for(call_memory.recaller._probe, 5)
            await say(session, "Question 5?")
            assert down.calls["recall"] == 3 and outcomes[-1] == "nothing known"
            assert memory.MEMORY_UNAVAILABLE not in last_block(model)
    said = [
        r.getMessage() for r in caplog.records if "memory: the store" in r.getMessage()
    ]
    assert len(said) == 2, said
    assert "store is unavailable" in said[0] and "answers again" in said[1]
    # nothing was lost meanwhile: every turn was saved (and the greeting, the opening)
    assert len(await store.exchanges(ALICE)) == 1 + 6


async def test_a_save_that_works_after_failed_saves_ends_the_skipping(store):
    broken = [True]
    down = Counting(Failing(store, "save", when=lambda _: broken[0]))
    async with call(down, ALICE, ScriptedLLM()) as (session, call_memory):
        await say(session, "First question?")
        await call_memory.flush()  # its save fails every attempt: parked, store down
        assert call_memory.health.down
        recalls = down.calls["recall"]
        broken[0] = False
        await say(session, "Second question?")  # recall skipped; its save works
        await call_memory.flush()
        assert down.calls["recall"] == recalls and not call_memory.health.down
        await say(session, "Third question?")
        assert down.calls["recall"] == recalls + 1
    assert len(await store.exchanges(ALICE)) == 1 + 3  # none lost (1: the greeting)


class Unshowable(StoreWrapper):
    """Returns what the store holds with one row no block can show: a date stored as
    text (SQLite keeps whatever type a hand edit or another program wrote)."""

    async def around(self, name, method, args, kwargs):
        got = await method(*args, **kwargs)
        if name in ("recall", "profile"):
            bad = memory.Summary("call-0", "An old call.", "yesterday")
            return memory.Recall(got.facts, (bad, *got.summaries), got.exchanges)
        return got


async def test_a_row_the_block_cannot_show_is_left_out_and_costs_no_reply(
    store, caplog
):
    # A malformed row once raised out of block_for, inside llm_node: no greeting, no
    # reply, and the session's error ended the call.
    await store.remember(ALICE, memory.Fact.of("name", "Alice"))
    model = ScriptedLLM(["Hi!", "Sure."])
    with caplog.at_level(logging.WARNING, logger="memory"):
        async with call(Unshowable(store), ALICE, model) as (session, _):
            result = await say(session, "What's my name?")
            result.expect.next_event().is_message(role="assistant")
            await say(session, "And again?")
        said = [i.text_content for i in session.history.items if i.type == "message"]
    assert said == ["Hi!", "What's my name?", "Sure.", "And again?", "OK."]
    # the rest of what memory holds is still shown, every time
    for request in model.replies:
        (block,) = memory_blocks(request)
        assert 'name: "Alice"' in block and "An old call" not in block
        assert memory.MEMORY_UNAVAILABLE not in block
    warnings = [
        r for r in caplog.records if "could not show a remembered row" in r.getMessage()
    ]
    assert len(warnings) == 1
    assert [e.user_text for e in await store.exchanges(ALICE)] == [
        "",
        "What's my name?",
        "And again?",
    ]


async def test_memory_never_enters_session_history_or_the_agent_context(store):
    await store.remember(ALICE, memory.Fact.of("favourite colour", "green"))
    model = ScriptedLLM()
    async with call(store, ALICE, model) as (session, _):
        for n in range(5):
            await say(session, f"Question number {n} about colours?")
        agent_ctx = session.current_agent.chat_ctx
        for ctx in (session.history, agent_ctx):
            assert "green" not in str([i for i in ctx.items if i.type == "message"])
    # every request carried exactly one block, however long the call got
    assert all(len(memory_blocks(r)) == 1 for r in model.replies)


async def test_a_tool_call_reply_recalls_once(store):
    store = Counting(store)
    model = ScriptedLLM(
        [
            "Hi!",
            ToolCall("remember", {"kind": "home city", "value": "Porto"}),
            "Got it.",
        ]
    )
    async with call(store, ALICE, model) as (session, _):
        before = store.calls["recall"]
        result = await say(session, "I live in Porto now.")
        result.expect.next_event().is_function_call(name="remember")
        result.expect.next_event().is_function_call_output()
        result.expect.next_event().is_message(role="assistant")
        assert store.calls["recall"] - before == 1
    # both LLM steps of the turn saw exactly one block
    assert [len(memory_blocks(r)) for r in model.replies[1:]] == [1, 1]
    assert (await store.profile(ALICE)).facts[0].value == "Porto"


async def test_remember_replaces_an_older_value_of_the_same_kind(store):
    model = ScriptedLLM(
        [
            "Hi!",
            ToolCall("remember", {"kind": "Home City", "value": "Lisbon"}),
            "Noted.",
            ToolCall("remember", {"kind": "home city", "value": "Porto"}),
            "Noted.",
        ]
    )
    async with call(store, ALICE, model) as (session, _):
        await say(session, "I live in Lisbon.")
        await say(session, "Actually I moved to Porto.")
    facts = (await store.profile(ALICE)).facts
    assert [(f.kind, f.value) for f in facts] == [("home_city", "Porto")]
    # the model was told what the second save replaced (read from the turn's own
    # request: a recipe may send one more request when the call ends, e.g. call_summary)
    turn = next(
        r
        for r in reversed(model.requests)
        if r.items[-1].type == "function_call_output"
    )
    outputs = [i.output for i in turn.items if i.type == "function_call_output"]
    assert (
        outputs[-1]
        == "Saved: home city = Porto. It replaces Lisbon, which is kept only as history."
    )
    assert [f.value for f in await store.history(ALICE)] == ["Lisbon"]


async def test_a_bad_fact_comes_back_to_the_model_as_a_sentence(store):
    model = ScriptedLLM(
        ["Hi!", ToolCall("remember", {"kind": "", "value": "x" * 5000}), "Sorry."]
    )
    async with call(store, ALICE, model) as (session, _):
        result = await say(session, "Remember this.")
        result.expect.next_event().is_function_call(name="remember")
        result.expect.next_event().is_function_call_output(is_error=False)
    output = next(
        i for i in model.replies[-1].items if i.type == "function_call_output"
    )
    assert output.output.startswith("Not saved:")


async def test_duplicate_item_events_save_once(store):
    async with call(store, ALICE, ScriptedLLM(["Hi!", "Noted."])) as (
        session,
        _call_memory,
    ):
        await say(session, "My flight is on Friday.")
        # LiveKit can report the same item again (reconnects, handoffs): replay them all.
        for item in [i for i in session.history.items if i.type == "message"]:
            session.emit(
                "conversation_item_added", ConversationItemAddedEvent(item=item)
            )
        await asyncio.sleep(0)
    opening, exchange = await store.exchanges(ALICE)
    assert opening.user_text == "" and exchange.assistant_text == "Noted."
    assert len(exchange.item_ids) == len(set(exchange.item_ids)) == 2


async def test_an_interrupted_reply_is_saved_as_said_and_marked(store):
    long_reply = "one two three four five six seven eight nine ten eleven twelve"
    model = ScriptedLLM(["Hi!", long_reply], chunk_delay=0.1)  # 1.2 s to say it all
    async with call(store, ALICE, model) as (session, _):
        run = session.run(user_input="Count to twelve for me.")
        await asyncio.sleep(0.45)  # a few words in, far from the end
        await session.interrupt()
        await asyncio.wait_for(run, 5)
    _opening, exchange = await store.exchanges(ALICE)
    assert exchange.user_text == "Count to twelve for me."
    assert exchange.interrupted
    assert exchange.assistant_text and long_reply.startswith(exchange.assistant_text)
    assert exchange.assistant_text != long_reply


async def test_pending_saves_are_flushed_when_the_session_closes(store_url):
    store = Slow(memory.open_store(store_url), "save", seconds=0.2)
    async with call(store, ALICE, ScriptedLLM()) as (session, call_memory):
        for n in range(3):
            await say(session, f"Note number {n}.")
        assert call_memory.pending > 0  # still writing when the caller hangs up
    assert call_memory.pending == 0
    await store.close()
    reopened = memory.open_store(store_url)
    assert [e.user_text for e in await reopened.exchanges(ALICE)] == [
        "",  # the opening
        *(f"Note number {n}." for n in range(3)),
    ]
    await reopened.close()


async def test_unsaved_exchanges_are_reported_not_silently_lost(store, caplog):
    store = Failing(store, "save", error=OSError("disk I/O error"))
    with caplog.at_level(logging.ERROR, logger="memory"):
        call_memory = memory.CallMemory(store, ALICE, "call-1")
        call_memory.capture("user", "item_1", "Please keep this.")
        assert await call_memory.aclose(timeout=0.5) == 1
    assert any("1 exchange(s)" in r.getMessage() for r in caplog.records)


async def test_without_a_caller_id_memory_is_off_and_the_agent_still_works(store):
    model = ScriptedLLM(["Hi!", "Sure."])
    async with call(store, None, model) as (session, _):
        result = await say(session, "Hello?")
        result.expect.next_event().is_message(role="assistant")
    assert all(memory_blocks(r) == [] for r in model.replies)
    assert await store.exchanges(ALICE) == []


async def test_the_block_is_capped_however_much_is_known(store):
    for n in range(40):
        await store.remember(
            ALICE, memory.Fact.of(f"detail {n}", "something long to remember " * 8)
        )
    huge = "Tell me about the garden. " * 4000  # an oversized turn (~100k characters)
    model = ScriptedLLM()
    async with call(store, ALICE, model, max_block_chars=1500) as (session, _):
        await say(session, huge)
        await say(session, "And the garden again?")
    assert len(last_block(model)) <= 1500
    # the oversized turn itself was kept whole
    assert (await store.exchanges(ALICE))[
        1
    ].user_text == huge.strip()  # ([0]: the greeting)


def test_livekit_joins_text_parts_as_capture_expects():
    # Capture relies on text_content joining text parts and skipping others.
    msg = llm.ChatMessage(role="user", content=["part one", "part two"])
    assert msg.text_content == "part one\npart two"
    assert (
        llm.ChatMessage(
            role="user", content=[llm.ImageContent(image="https://x/y.png")]
        ).text_content
        is None
    )


def participant(
    identity: str, *, sip_number: str | None = None
) -> rtc.RemoteParticipant:
    """A real rtc.RemoteParticipant, built from the protocol message the SDK gets from a
    LiveKit server when someone joins the room."""
    info = participant_pb2.ParticipantInfo(identity=identity)
    if sip_number is not None:
        info.kind = participant_pb2.ParticipantKind.PARTICIPANT_KIND_SIP
        info.attributes["sip.phoneNumber"] = sip_number
    return rtc.RemoteParticipant(
        participant_pb2.OwnedParticipant(
            handle=handle_pb2.FfiOwnedHandle(id=0), info=info
        )
    )


def test_the_caller_is_the_participant_identity():
    assert (
        livekit_adapter.caller_id_for(participant("alice@example.com"), {})
        == "alice@example.com"
    )


def test_dispatch_metadata_names_the_caller_before_the_identity():
    dispatch = livekit_adapter.dispatch_metadata(
        json.dumps({"caller_id": "customer-42"})
    )
    assert (
        livekit_adapter.caller_id_for(participant("web-session-9f3"), dispatch)
        == "customer-42"
    )


def test_a_sip_caller_is_their_normalised_phone_number():
    assert (
        livekit_adapter.caller_id_for(
            participant("sip_abc", sip_number="+1 (555) 010-0200"), {}
        )
        == "+15550100200"
    )


def test_dispatch_metadata_can_name_which_participant_is_the_caller():
    dispatch = livekit_adapter.dispatch_metadata(
        json.dumps({"caller_identity": "sip_+15550100200"})
    )
    assert dispatch["caller_identity"] == "sip_+15550100200"


@pytest.mark.parametrize(
    ("who", "metadata", "reason"),
    [
        (participant("bad id with spaces"), "", "characters outside"),
        (participant("alice"), json.dumps({"caller_id": "x" * 500}), "limit is 128"),
        (participant("sip_abc", sip_number="anonymous"), "", "withheld number"),
        (participant("sip_abc", sip_number=""), "", "E.164"),
    ],
)
def test_an_unusable_caller_id_is_refused_with_the_reason(who, metadata, reason):
    with pytest.raises(memory.InvalidCallerIdError, match=reason):
        livekit_adapter.caller_id_for(who, livekit_adapter.dispatch_metadata(metadata))


def test_one_number_is_one_caller_from_the_dispatch_or_from_sip():
    by_dispatch = livekit_adapter.caller_id_for(
        participant("web-session-9f3"),
        livekit_adapter.dispatch_metadata('{"caller_id": "15550100200"}'),
    )
    by_sip = livekit_adapter.caller_id_for(
        participant("sip_abc", sip_number="+15550100200"), {}
    )
    by_other_digits = livekit_adapter.caller_id_for(
        participant("sip_x", sip_number="+1555\u0660100200"), {}
    )
    assert by_dispatch == by_sip == by_other_digits == "+15550100200"


@pytest.mark.parametrize(
    ("who", "metadata"),
    [
        (participant("alice"), '{"caller_id": 15550100200}'),
        (participant("alice"), '{"caller_id": ["a", "list"]}'),
        (participant("alice"), '{"caller_id": {"an": "object"}}'),
        (participant("alice"), '{"caller_id": "\u0661\u0662"}'),
        (participant("alice"), '{"caller_id": "+999 1234 5678"}'),
        (participant("sip_abc", sip_number="+1555\u0660\u0660"), ""),
        (participant("sip_abc", sip_number="+1555010020000000"), ""),
        (participant("caf\u00e9"), ""),
        (participant(""), ""),
    ],
)
def test_no_caller_id_of_any_kind_fails_the_call_it_only_turns_memory_off(
    who, metadata, caplog
):
    with caplog.at_level(logging.WARNING, logger="agent"):
        assert (
            livekit_adapter.caller_or_none(
                who, livekit_adapter.dispatch_metadata(metadata)
            )
            is None
        )
    assert len([r for r in caplog.records if "memory is off" in r.getMessage()]) == 1


def test_a_caller_without_a_usable_id_gets_no_memory_and_the_log_says_why(caplog):
    with caplog.at_level(logging.WARNING, logger="agent"):
        assert livekit_adapter.caller_or_none(participant("web user 7"), {}) is None
    assert (
        "memory is off for this call: caller id 'web user 7' has characters outside"
        in caplog.text
    )
    assert livekit_adapter.caller_or_none(participant("alice"), {}) == "alice"


@pytest.mark.parametrize(
    ("who", "metadata"),
    [
        (participant("sip_a", sip_number="+266696687"), ""),  # Twilio: ANONYMOUS
        (participant("sip_b", sip_number="+8656696"), ""),  # UNKNOWN
        (participant("sip_c", sip_number="+86282452253"), ""),  # UNAVAILABLE
        (participant("sip_d", sip_number="+7378742833"), ""),  # RESTRICTED
        (participant("sip_e", sip_number="Restricted"), ""),
        (participant("sip_f", sip_number="PRIVATE"), ""),
        (participant("sip_g", sip_number="anonymous@anonymous.invalid"), ""),
        (participant("unknown"), ""),
        (participant("alice"), '{"caller_id": "anonymous"}'),
        (participant("alice"), '{"caller_id": "266-696-687"}'),
    ],
)
def test_a_withheld_number_gets_no_memory_and_one_log_line(who, metadata, caplog):
    with caplog.at_level(logging.WARNING, logger="agent"):
        got = livekit_adapter.caller_or_none(
            who, livekit_adapter.dispatch_metadata(metadata)
        )
    assert got is None
    (line,) = [
        r.getMessage() for r in caplog.records if "memory is off" in r.getMessage()
    ]
    assert "stands for a withheld number" in line


def test_the_withheld_list_is_extended_by_a_setting(monkeypatch):
    carrier = participant("sip_x", sip_number="+15559999999")
    assert livekit_adapter.caller_or_none(carrier, {}) == "+15559999999"
    monkeypatch.setenv("MEMORY_WITHHELD_CALLER_IDS", "+1 555 999 9999, nobody")
    assert livekit_adapter.caller_or_none(carrier, {}) is None
    assert livekit_adapter.caller_or_none(participant("nobody"), {}) is None
    assert livekit_adapter.caller_or_none(participant("alice"), {}) == "alice"


def test_a_web_caller_whose_identity_is_a_number_is_not_that_phone_caller():
    web = livekit_adapter.caller_id_for(participant("+15550100200"), {})
    phone = livekit_adapter.caller_id_for(
        participant("sip_abc", sip_number="+1 555 010 0200"), {}
    )
    assert phone == "+15550100200" and web == "identity:+15550100200"
    # the dispatch's caller_id is how an app joins the two, on purpose
    joined = livekit_adapter.caller_id_for(
        participant("+15550100200"),
        livekit_adapter.dispatch_metadata('{"caller_id": "+15550100200"}'),
    )
    assert joined == phone


@pytest.mark.parametrize("metadata", ["", "{not json", '["a list"]', "42", "null"])
def test_missing_or_malformed_job_metadata_falls_back_to_the_identity(metadata):
    assert livekit_adapter.dispatch_metadata(metadata) == {}
    assert (
        livekit_adapter.caller_id_for(
            participant("alice"), livekit_adapter.dispatch_metadata(metadata)
        )
        == "alice"
    )
