"""Memory in LiveKit's traces: each recall and save is a span in livekit-agents' own
tracer (read here from OpenTelemetry's in-memory exporter, set the way an application
sets one: livekit.agents.telemetry.set_tracer_provider), and each call ends with one
log line of its memory figures. Calls run through the real AgentSession."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator

import pytest
from livekit.agents import telemetry
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import memory
from tests.conftest import call
from tests.doubles import Failing, Slow
from tests.scripted_llm import ScriptedLLM

ALICE = "alice@example.com"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.set_tracer_provider(provider)
    yield exporter
    telemetry.set_tracer_provider(trace.get_tracer_provider())  # the global one again
    provider.shutdown()


def memory_spans(exporter: InMemorySpanExporter, name: str) -> list:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def say(session, text: str):
    return await asyncio.wait_for(session.run(user_input=text), 10)


async def test_recall_and_save_are_spans_in_livekits_traces(store, spans):
    await store.remember(ALICE, memory.Fact.of("name", "Alice"))
    async with call(store, ALICE, ScriptedLLM(["Hi Alice!", "Noted."])) as (session, _):
        await say(session, "My flight is on Friday.")
    recalls = memory_spans(spans, "memory.recall")
    assert len(recalls) == 2  # the greeting's and the turn's
    by_id = {s.context.span_id: s for s in spans.get_finished_spans()}
    for span in recalls:
        attributes = dict(span.attributes)
        assert attributes["memory.outcome"] == "hit" and attributes["memory.rows"] == 1
        assert attributes["memory.budget_ms"] == memory.limits.RECALL_BUDGET * 1000
        lasted_ms = (span.end_time - span.start_time) / 1e6
        assert attributes["memory.duration_ms"] == pytest.approx(lasted_ms, abs=0.001)
        # under the LiveKit span of the reply it served
        assert span.parent is not None and by_id[span.parent.span_id].name == "llm_node"
    # the greeting (the call's opening) when the caller's words arrive; the exchange
    # then, and again with the reply (those waiting at once: one span, their count)
    saves = [dict(s.attributes) for s in memory_spans(spans, "memory.save")]
    assert 2 <= sum(a["memory.rows"] for a in saves) <= 3
    assert all(a["memory.outcome"] == "saved" and a["memory.rows"] >= 1 for a in saves)
    assert "Friday" not in str(
        [
            dict(s.attributes)
            for s in spans.get_finished_spans()
            if s.name.startswith("memory.")
        ]
    )


async def test_a_span_says_nothing_known_unavailable_or_timed_out(store, spans):
    async with call(store, ALICE, ScriptedLLM(["Hello!", "Hi."])) as (session, _):
        await say(session, "Hello there.")
    down = Failing(store, "recall", "save")
    async with call(down, "bob", ScriptedLLM(["Hello!", "Hi."]), call_id="c2") as (
        session,
        _,
    ):
        await say(session, "Hello there.")
    slow = Slow(store, "recall", seconds=1.0)
    async with call(
        slow, "carol", ScriptedLLM(["Hello!", "Hi."]), call_id="c3", recall_budget=0.05
    ) as (session, _):
        await say(session, "Hello there.")
    outcomes = [
        dict(s.attributes)["memory.outcome"]
        for s in memory_spans(spans, "memory.recall")
    ]
    # after the first failure the store is known to be down: the next recall is skipped;
    # one that timed out is still in flight, so the next reply goes without recall
    assert outcomes == ["nothing known"] * 2 + ["unavailable", "skipped"] + [
        "timed out",
        "skipped",
    ]
    saves = [
        dict(s.attributes)["memory.outcome"] for s in memory_spans(spans, "memory.save")
    ]
    assert "saved" in saves and "unavailable" in saves


async def test_each_call_ends_with_one_log_line_of_its_memory_figures(store, caplog):
    with caplog.at_level(logging.INFO, logger="memory"):
        async with call(store, ALICE, ScriptedLLM(["Hi!", "One.", "Two."])) as (
            session,
            _,
        ):
            await say(session, "First thing.")
            await say(session, "Second thing.")
    (line,) = [
        r.getMessage() for r in caplog.records if "recalls, p50" in r.getMessage()
    ]
    assert line.startswith("memory: call call-1: 3 recalls, p50 ")
    assert (
        "p95 " in line and f"(budget {memory.limits.RECALL_BUDGET * 1000:g} ms)" in line
    )
    # the greeting and 2 turns; pending: those still being written when the call ended
    assert re.search(r"exchanges saved 3, pending \d, lost 0$", line), line
