"""Availability: a slow, hanging or broken store costs memory, never a reply, and
one caller's trouble never costs another caller's calls in the same worker process.
(The outage skip itself, for a store that raises, is tested in test_agent.py.)"""

from __future__ import annotations

import asyncio
import logging

import memory
from memory.health import StoreHealth
from tests.doubles import Counting, Slow

ALICE = "alice@example.com"
BOB = "+15550100200"


async def until(condition, seconds: float = 10.0) -> None:
    """Wait for ``condition()`` (polled), failing after ``seconds`` instead of hanging."""

    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), seconds)


async def test_a_caller_whose_recall_hangs_holds_one_store_recall_not_one_per_turn(
    store,
):
    # Each recall that missed its budget kept its reader; every turn (and every
    # preflight transcript of one turn) started another, until the caller held every
    # reader thread of the process. Now one recall per call is in flight at most.
    gate = asyncio.Event()  # never set during the call: the store does not answer
    hanging = Counting(Slow(store, "recall", gate=gate))
    call_memory = memory.CallMemory(hanging, ALICE, "call-1", recall_budget=0.02)
    for turn in range(1, 5):
        block = await call_memory.block_for(f"Question {turn}?", turn=turn)
        assert block is not None and memory.MEMORY_UNAVAILABLE in block
    for heard in ("Could", "Could you", "Could you book", "Could you book a table?"):
        block = await call_memory.block_for(heard, turn=5)  # preflight transcripts
        assert block is not None and memory.MEMORY_UNAVAILABLE in block
    assert hanging.calls["recall"] == 1
    gate.set()
    await call_memory.aclose()


async def test_a_turns_later_transcript_shares_the_recall_of_its_earlier_one(store):
    await store.remember(ALICE, memory.Fact.of("name", "Alice"))
    gate = asyncio.Event()
    slow = Counting(Slow(store, "recall", gate=gate))
    call_memory = memory.CallMemory(slow, ALICE, "call-1", recall_budget=30)
    early = asyncio.create_task(call_memory.block_for("What is", turn=1))
    await until(lambda: slow.calls["recall"] == 1)
    final = asyncio.create_task(call_memory.block_for("What is my name?", turn=1))
    gate.set()
    assert 'name: "Alice"' in await final and 'name: "Alice"' in await early
    assert slow.calls["recall"] == 1
    await call_memory.aclose()


async def test_a_store_that_hangs_is_skipped_like_one_that_fails(store, monkeypatch):
    # The outage skip started only on StoreUnavailableError: a store that hung cost
    # every reply of every call its whole budget.
    monkeypatch.setattr(memory.recall, "RECALL_HUNG_AFTER", 0.05)
    gate = asyncio.Event()
    hanging = Counting(Slow(store, "recall", gate=gate))
    first = memory.CallMemory(hanging, ALICE, "call-1", recall_budget=0.01)
    await first.block_for("Hello?", turn=1)
    await until(lambda: first.health.down)
    second = memory.CallMemory(hanging, BOB, "call-2", recall_budget=30)
    block = await second.block_for("Hello?", turn=1)  # at once: no 30 s wait
    assert block is not None and block.startswith(memory.MEMORY_UNAVAILABLE)
    assert hanging.calls["recall"] == 1 and second.health.skipped == 1
    gate.set()  # the store answers again: the skipping ends with that answer
    await until(lambda: not first.health.down)
    await first.aclose()
    await second.aclose()


async def test_one_slow_query_is_not_taken_for_a_hanging_store_while_others_answer():
    now = [100.0]
    health = StoreHealth(clock=lambda: now[0])
    answered: asyncio.Future[memory.Recall] = asyncio.get_running_loop().create_future()
    answered.set_result(memory.Recall())
    started = now[0]  # a query of one caller starts and does not answer ...
    now[0] += 1
    health.watch(answered)  # ... while another one answers
    now[0] += 1
    health.hung(started, 2.0)
    assert not health.down
    health.hung(now[0], 2.0)  # one that started after the last answer: a hang
    assert health.down


async def test_a_nul_in_what_a_caller_says_is_dropped_and_the_turns_after_it_are_saved(
    store,
):
    # PostgreSQL's text refuses NUL: the exchange could never be stored there, and
    # those queued behind it were lost too. Every backend now gets the same clean text.
    call = memory.CallMemory(store, ALICE, "call-1")
    call.capture("user", "u1", "My code is A\x00B.")
    call.capture("assistant", "a1", "Got it\x00.")
    call.capture("user", "u2", "And my name is Ana.")
    call.capture("assistant", "a2", "Thanks, Ana.")
    assert await call.flush() == 0
    await call.aclose()
    saved = await store.exchanges(ALICE, call_id="call-1")
    assert [(e.user_text, e.assistant_text) for e in saved] == [
        ("My code is AB.", "Got it."),
        ("And my name is Ana.", "Thanks, Ana."),
    ]


async def test_a_fact_from_a_broken_transcript_is_saved_and_the_answer_says_so(store):
    # A lone surrogate (half an emoji) was refused by SQLite: the model was told
    # "failed this time" and the fact was lost.
    call = memory.CallMemory(store, ALICE, "call-1")
    answer = await call.remember("name", "Mar\ud83dia")
    assert "failed" not in answer and answer.startswith("Saved")
    answer = await call.remember("pet", "a cat\x00 called Tom")
    assert "failed" not in answer and answer.startswith("Saved")
    facts = {f.kind: f.value for f in (await store.profile(ALICE)).facts}
    assert facts["name"] == "Mar\ufffdia" and facts["pet"] == "a cat called Tom"
    await call.aclose()


async def test_a_call_summary_from_a_model_is_stored_clean(store):
    call = memory.CallMemory(store, ALICE, "call-1")

    async def summarize(exchanges):
        return "Ana asked about her order\x00 and \ud83d left."

    call.summarize = summarize
    call.capture("user", "u1", "Where is my order?")
    call.capture("assistant", "a1", "On its way.")
    await call.aclose()
    (summary,) = (await store.profile(ALICE)).summaries
    assert summary.text == "Ana asked about her order and \ufffd left."


async def test_a_message_after_the_call_closed_is_not_kept_and_the_log_says_so(
    store, caplog
):
    call = memory.CallMemory(store, ALICE, "call-1")
    await call.aclose()
    with caplog.at_level(logging.WARNING, logger="memory"):
        call.capture("user", "u1", "One more thing: my name is Ana.")
        call.capture("assistant", "a1", "Noted.")
    said = [
        r.getMessage() for r in caplog.records if "after the call" in r.getMessage()
    ]
    assert len(said) == 1 and "not kept" in said[0]
    assert await store.exchanges(ALICE) == []


async def test_what_recall_finds_in_these_tests_does_not_depend_on_the_machines_speed(
    store,
):
    # A loaded machine made a recall take longer than RECALL_BUDGET (0.25 s), and a
    # test of what recall found failed. The suite gives recall room (conftest.py);
    # a recall 0.4 s slow here stands for that machine.
    await store.remember(ALICE, memory.Fact.of("name", "Alice"))
    call = memory.CallMemory(Slow(store, "recall", seconds=0.4), ALICE, "call-1")
    block = await call.block_for("What is my name?", turn=1)
    assert block is not None and memory.MEMORY_UNAVAILABLE not in block
    assert 'name: "Alice"' in block
    await call.aclose()
