"""Live evals: the real model behind LiveKit Inference, with the real memory.

Deselected by default (pyproject addopts `-m 'not live'`); run with
`uv run pytest -m live` once LIVEKIT_API_KEY and LIVEKIT_API_SECRET are set.
"""

import os

import pytest
from livekit.agents import inference

import agent
from tests.conftest import call

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not (os.getenv("LIVEKIT_API_KEY") and os.getenv("LIVEKIT_API_SECRET")),
        reason="needs LIVEKIT_API_KEY and LIVEKIT_API_SECRET",
    ),
]


async def test_the_real_model_answers_from_memory_in_the_next_call(store):
    async with call(store, "live-caller", inference.LLM(model=agent.LLM_MODEL)) as (
        session,
        _,
    ):
        await session.run(
            user_input="Hi, my name is Maria and my sister Ana is vegetarian."
        )
    async with call(
        store, "live-caller", inference.LLM(model=agent.LLM_MODEL), call_id="call-2"
    ) as (session, _):
        result = await session.run(user_input="What does my sister not eat?")
    reply = next(e.item.text_content for e in result.events if e.type == "message")
    assert "meat" in reply.lower() or "vegetarian" in reply.lower(), reply


async def test_the_real_model_says_it_does_not_know_a_new_caller(store):
    async with call(store, "live-new-caller", inference.LLM(model=agent.LLM_MODEL)) as (
        session,
        _,
    ):
        result = await session.run(user_input="What's my sister's name?")
    reply = next(e.item.text_content for e in result.events if e.type == "message")
    assert "ana" not in reply.lower(), reply
