"""Fixtures: a fresh store of this project's backend and calls driven through the real
AgentSession, built by agent.build_agent exactly as the entrypoint builds them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from livekit.agents import AgentSession

import memory
from tests.scripted_llm import ScriptedLLM, first_reply
from tests.store_fixtures import store_url  # noqa: F401  (the backend's fixture)

TEST_RECALL_BUDGET = 10.0
"""Seconds a reply waits for recall in these tests, instead of RECALL_BUDGET (0.25):
what recall found must not depend on how loaded the machine is. A test about the
budget itself gives its call a ``recall_budget`` (and a slow store)."""


@pytest.fixture(autouse=True)
def recall_has_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory.limits, "RECALL_BUDGET", TEST_RECALL_BUDGET)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[memory.MemoryStore]:  # noqa: F811
    s = memory.open_store(store_url)
    yield s
    await s.close()


@contextlib.asynccontextmanager
async def call(
    store: memory.MemoryStore,
    caller_id: str | None,
    model: ScriptedLLM,
    *,
    call_id: str = "call-1",
    greets: bool = True,
    **call_options,
) -> AsyncIterator[tuple[AgentSession, memory.CallMemory]]:
    """One call, built by agent.build_agent (preload, capture on
    conversation_item_added, the Assistant's llm_node for recall); ``call_options``
    set CallMemory attributes (e.g. ``recall_budget``). The on_enter greeting takes
    the model's first reply; with ``greets`` (the default) the call begins once it
    has been said. Leaving closes the session, then ends
    the call's memory as the job's shutdown callback does, with a reason."""
    import agent  # here, so the memory folder's own tests never import agent.py

    async with AgentSession(llm=model) as session:
        assistant = await agent.build_agent(
            session, store, caller_id, call_id, model=model
        )
        for name, value in call_options.items():
            setattr(assistant.memory, name, value)
        greeted = first_reply(session)
        await session.start(assistant)
        if greets:
            # the on_enter greeting: let it finish, as a caller would hear it first
            await asyncio.wait_for(greeted.wait(), 10)
        yield session, assistant.memory
    await assistant.memory.aclose("participant hung up")
