"""Two calls from the same caller through the real agent, offline: `uv run demo.py`.

Call 1: the caller tells the agent a few things. Call 2 (a new session, the memory
file opened again as a new worker process would): the script prints the memory
block the model received before answering. No room, microphone or key is needed:
the model is a scripted stand-in (tests/scripted_llm.py) unless LIVEKIT_API_KEY and
LIVEKIT_API_SECRET are set (in the environment or .env.local), in which case the
real model from agent.py answers through LiveKit Inference. The stand-in's replies
are fixed lines, printed as "agent (scripted)": what is real is what memory saved
and the block the model received.

Options: --url MEMORY_URL keeps the memory there (default: MEMORY_URL from the
environment, else a temporary SQLite file, removed after).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

from livekit.agents import AgentSession, RunResult, inference, llm

import agent
import memory
from tests.scripted_llm import ScriptedLLM, ToolCall, first_reply, memory_blocks

CALLER = "demo-caller"
CALL_ONE = [
    "Hi, I'm Maria. I just moved to Lisbon for a new job.",
    "My sister Ana is visiting next week. She's vegetarian, so I need dinner ideas.",
]
CALL_TWO = [
    "Can you remind me what my sister eats? I want to book a restaurant for her visit."
]

SCRIPT_ONE = [
    "Hello! How can I help you today?",
    ToolCall("remember", {"kind": "name", "value": "Maria"}),
    ToolCall("remember", {"kind": "home city", "value": "Lisbon"}),
    "Nice to meet you, Maria, and welcome to Lisbon!",
    "Lovely. I'll keep in mind that Ana is vegetarian.",
]
SCRIPT_TWO = [
    "Welcome back, Maria!",
    "Ana is vegetarian, so look for a place with good vegetarian dishes.",
]


def model_for(script: list) -> llm.LLM:
    if os.getenv("LIVEKIT_API_KEY") and os.getenv("LIVEKIT_API_SECRET"):
        return inference.LLM(model=agent.LLM_MODEL)
    return ScriptedLLM(script)


async def run_call(
    store: memory.MemoryStore, call_id: str, turns: list[str], script: list
) -> llm.LLM:
    model = model_for(script)
    async with AgentSession(llm=model) as session:
        # built exactly as this project's entrypoint builds it
        assistant = await agent.build_agent(
            session, store, CALLER, call_id, model=model
        )
        call = assistant.memory
        greeted = first_reply(session)
        await session.start(assistant)
        await asyncio.wait_for(greeted.wait(), 30)
        # the stand-in's lines are fixed in this file, not written from memory
        who = "agent (scripted)" if isinstance(model, ScriptedLLM) else "agent"
        print_replies(session.history.items, who)  # the greeting
        for text in turns:
            print(f"  caller: {text}")
            result: RunResult = await session.run(user_input=text)
            print_replies((event.item for event in result.events), who)
    await call.aclose(
        "demo call ended"
    )  # as the job's shutdown callback: flush, summary
    return model


def print_replies(items, who: str) -> None:
    for item in items:
        if item.type == "message" and item.role == "assistant":
            print(f"  {who}: {item.text_content}")
        elif item.type == "function_call":
            print(f"  (tool)  {item.name}({item.arguments})")


async def usable(url: str) -> None:
    """Open the store once and read from it; raises MemoryStoreError saying what to
    do (a missing key, a schema not yet made by `upgrade`) before any call starts."""
    store = memory.open_store(url)
    try:
        await store.profile(CALLER)
    finally:
        await store.close()


async def main(url: str) -> None:
    live = bool(os.getenv("LIVEKIT_API_KEY") and os.getenv("LIVEKIT_API_SECRET"))
    print(
        f"model: {agent.LLM_MODEL} (live)"
        if live
        else "model: scripted stand-in (no LiveKit keys)"
    )
    print(f"memory: {memory.redact_url(url)}")
    await usable(url)
    print("\n== call 1 ==")
    call_one, script_one = CALL_ONE, SCRIPT_ONE
    if hasattr(agent.Assistant, "record_consent"):
        # This recipe asks before remembering anything: the caller says yes first.
        call_one = ["Yes, you may remember this call.", *CALL_ONE]
        script_one = [
            SCRIPT_ONE[0],
            ToolCall("record_consent", {"agreed": True}),
            "Thank you.",
            *SCRIPT_ONE[1:],
        ]
    run = uuid.uuid4().hex[:8]  # call ids of this run, so runs on one --url differ
    store = memory.open_store(url)
    await run_call(store, f"{run}-call-1", call_one, script_one)
    print("\n== what call 1 saved, as a later call's model reads it ==")
    profile = await store.profile(CALLER)
    this_call = tuple(s for s in profile.summaries if s.call_id == f"{run}-call-1")
    exchanges = tuple(await store.exchanges(CALLER, call_id=f"{run}-call-1"))
    saved = memory.Recall(profile.facts, this_call, exchanges)
    print(textwrap.indent(memory.format_block(saved, max_chars=10_000), "  "))
    await store.close()

    print("\n== call 2 (new session, memory file opened again) ==")
    store = memory.open_store(url)
    model = await run_call(store, f"{run}-call-2", CALL_TWO, SCRIPT_TWO)
    await store.close()
    if isinstance(model, ScriptedLLM):
        request = model.replies[-1]
        if blocks := memory_blocks(request):
            print(
                "\n== the memory block call 2's model received with the caller's question =="
            )
            print(textwrap.indent(blocks[0], "  "))
        else:
            # recipes that recall by tool keep the profile in the instructions instead
            print(
                "\n== the memory call 2's model had: the profile in its instructions =="
            )
            first = request.items[0]
            said = (
                first.text_content or "" if isinstance(first, llm.ChatMessage) else ""
            )
            print(textwrap.indent(said[len(agent.INSTRUCTIONS) :].strip(), "  "))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url", help="MEMORY_URL to use and keep, e.g. sqlite:///demo.db"
    )
    args = parser.parse_args()
    url = args.url or os.getenv("MEMORY_URL")
    try:
        if url:
            asyncio.run(main(url))
        else:
            with tempfile.TemporaryDirectory() as tmp:
                # a throwaway SQLite file; to try another backend, set MEMORY_URL
                asyncio.run(main(f"sqlite:///{Path(tmp) / 'memory.db'}"))
    except memory.MemoryStoreError as exc:  # a setting to fix: one line, not a trace
        sys.exit(f"demo: memory cannot be used: {exc}")
