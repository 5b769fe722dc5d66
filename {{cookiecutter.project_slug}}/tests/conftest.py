"""Fixtures: a real SQLite memory file and calls driven through the real AgentSession."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from livekit.agents import AgentSession

import agent
import memory
from tests.scripted_llm import ScriptedLLM, first_reply


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[memory.SQLiteMemory]:
    s = memory.open_store(db_path)
    yield s
    await s.close()


@contextlib.asynccontextmanager
async def call(
    store: memory.SQLiteMemory,
    caller_id: str | None,
    model: ScriptedLLM,
    *,
    call_id: str = "call-1",
    greets: bool = True,
    **call_options,
) -> AsyncIterator[tuple[AgentSession, memory.CallMemory]]:
    """One call, wired the way agent.py's entrypoint wires it: preload, capture on
    conversation_item_added, the Assistant's llm_node for recall, flush at close.
    The on_enter greeting takes the model's first reply; with ``greets`` (the
    default) the call begins once it has been said."""
    call_memory = memory.CallMemory(store, caller_id, call_id, **call_options)
    call_memory.start()
    async with AgentSession(llm=model) as session:
        agent.start_capture(session, call_memory)
        greeted = first_reply(session)
        await session.start(agent.Assistant(call_memory, model=model))
        if greets:
            # the on_enter greeting: let it finish, as a caller would hear it first
            await asyncio.wait_for(greeted.wait(), 10)
        yield session, call_memory
    # Leaving AgentSession closed it (Assistant.on_exit flushed); then, as the job's
    # shutdown callback does, end the call's memory.
    await call_memory.aclose()
