"""Privacy through the real AgentSession (tests/conftest.py `call`, this project's
store, a scripted model): what a caller says is masked before it is kept, shown, or
answered, no log line above DEBUG carries it, and a forged agent line stays one
quoted caller line in the next call's block."""

from __future__ import annotations

import asyncio
import json
import logging

from tests.conftest import call
from tests.doubles import Failing
from tests.scripted_llm import ScriptedLLM, ToolCall, memory_blocks
from tests.test_privacy import ALICE, CARD, FORGED, block_lines, json_strings


async def say(session, text: str):
    """One typed user turn; fails (instead of hanging) if no reply comes in time."""
    return await asyncio.wait_for(session.run(user_input=text), 10)


async def test_numbers_said_in_a_call_are_masked_in_what_is_kept_shown_and_answered(
    store,
):
    model = ScriptedLLM(
        [
            "Hello!",
            ToolCall("remember", {"kind": "card number", "value": CARD}),
            "Saved your card.",
            "Thanks.",
        ]
    )
    async with call(store, ALICE, model) as (session, _):
        await say(session, f"My card number is {CARD}, please keep it.")
        await say(session, "And my social is 123-45-6789.")
    # what the remember tool answered the model
    tool_output = next(
        i for i in model.replies[2].items if i.type == "function_call_output"
    )
    assert "4111" not in tool_output.output
    assert tool_output.output == "Saved: card number = [card number]."

    kept = [
        *[(e.user_text, e.assistant_text) for e in await store.exchanges(ALICE)],
        *[s.text for s in await store.summaries(ALICE)],
        *[f.value for f in (await store.profile(ALICE)).facts],
    ]
    assert "[card number]" in str(kept) and "[SSN]" in str(kept)
    for number in ("4111", "6789"):
        assert number not in str(kept)

    model2 = ScriptedLLM(["Hi again!", "It ends in nothing I can read out."])
    async with call(store, ALICE, model2, call_id="call-2") as (session, _):
        await say(session, "What card did I give you?")
    blocks = [b for r in model2.replies for b in memory_blocks(r)]
    assert blocks and all("4111" not in b and "6789" not in b for b in blocks)


async def test_masking_is_one_setting_and_can_be_turned_off(store, monkeypatch):
    monkeypatch.setenv("MEMORY_MASK_SENSITIVE", "0")
    async with call(store, ALICE, ScriptedLLM(["Hello!", "Noted."])) as (session, _):
        await say(session, f"Card {CARD}.")
    assert [e.user_text for e in await store.exchanges(ALICE)] == ["", f"Card {CARD}."]


async def test_no_log_line_above_debug_carries_what_the_caller_said(store, caplog):
    # The store takes nothing: every path that logs a failure runs (save, retries,
    # the summary, the unsaved exchanges at the end of the call).
    down = Failing(store, "save", "save_summary", "remember", "recall", "profile")
    marker = "Zanzibarquux"
    model = ScriptedLLM(
        ["Hello!", ToolCall("remember", {"kind": "secret", "value": marker}), "Noted."]
    )
    with caplog.at_level(logging.DEBUG):
        async with call(down, ALICE, model) as (session, _):
            await say(session, f"My code word is {marker}.")
    above_debug = [r.getMessage() for r in caplog.records if r.levelno > logging.DEBUG]
    assert any("not saved before the call closed" in line for line in above_debug)
    assert all(marker not in line for line in above_debug)
    # the full text is there for whoever turns DEBUG on, to recover it by hand
    assert any(
        marker in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG
    )


async def test_a_forged_agent_line_said_in_call_one_is_one_quoted_caller_line_in_call_two(
    store,
):
    async with call(
        store, ALICE, ScriptedLLM(["Hello!", "Nice to meet you, Sam."])
    ) as (s, _):
        await say(s, FORGED)
    model = ScriptedLLM(["Hi again!", "You are a caller."])
    async with call(store, ALICE, model, call_id="call-2") as (s, _):
        await say(s, "Am I an administrator?")
    block = memory_blocks(model.replies[-1])[0]
    # the exchange's line, and the call summary's when it quotes the caller (a recipe's
    # model may write the summary in its own words): each one line of quoted data
    lines = [line for line in block_lines(block) if "administrator" in line]
    first = [s.text for s in await store.summaries(ALICE) if s.call_id == "call-1"]
    exchange = [FORGED, "Nice to meet you, Sam."]
    assert exchange in [json_strings(line) for line in lines]
    assert all(
        line.startswith("- ") and json_strings(line) in (exchange, first)
        for line in lines
    )


def extracted(*facts: tuple[str, str, int]) -> str:
    """The model's extraction answer: (kind, value, number of the exchange cited)."""
    return json.dumps(
        {"facts": [{"kind": k, "value": v, "exchange": n} for k, v, n in facts]}
    )


async def test_a_forgotten_fact_is_not_extracted_again_nor_read_back_from_summaries(
    store,
):
    # call 1 keeps the allergy three ways: the fact, the summary, the exchange
    model = ScriptedLLM(
        ["Hello!", "Noted."], extract=[extracted(("allergy", "peanuts", 1))]
    )
    async with call(store, ALICE, model) as (session, _):
        await say(session, "I'm allergic to peanuts, and I live in Porto.")
    summaries = [s.text for s in await store.summaries(ALICE)]
    assert "peanuts" in str(summaries)
    # call 2: the caller says it again, then asks for it to be forgotten
    model2 = ScriptedLLM(
        ["Hi again!", "Right.", "Done."],
        extract=[extracted(("allergy", "peanuts", 1), ("home city", "Porto", 1))],
    )
    async with call(store, ALICE, model2, call_id="call-2") as (session, live):
        await say(session, "As I said, peanuts make me ill, here in Porto.")
        assert "Forgotten" in await live.forget("fact", "allergy", "peanuts")
        await say(session, "Thanks, that's all.")
    profile = await store.profile(ALICE)
    assert [(f.kind, f.value) for f in profile.facts] == [("home_city", "Porto")]
    kept = [
        *[s.text for s in await store.summaries(ALICE)],
        *[(e.user_text, e.assistant_text) for e in await store.exchanges(ALICE)],
    ]
    assert "peanuts" not in str(kept).lower()
    assert "[forgotten]" in str(kept) and "Porto" in str(kept)
    # call 3 reads nothing of it back
    model3 = ScriptedLLM(["Hello!", "I don't know of any allergy."])
    async with call(store, ALICE, model3, call_id="call-3") as (session, _):
        await say(session, "Do I have any allergy, peanuts maybe?")
    blocks = [b for r in model3.replies for b in memory_blocks(r)]
    assert blocks and all("peanuts" not in b.lower() for b in blocks)
