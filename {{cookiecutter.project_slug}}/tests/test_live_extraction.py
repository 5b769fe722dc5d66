"""Live eval of fact extraction: the real model behind LiveKit Inference reads a few
scripted calls when each ends (memory.extraction.EXTRACT_INSTRUCTIONS), and what it extracted is
scored against what the caller said.

Precision: extracted facts that are right (kind and value), over all extracted. Recall:
expected facts found, over all expected. The figures are printed (run with -s) for the
README. Deselected by default (pyproject addopts `-m 'not live'`); run with
`uv run pytest -m live -s tests/test_live_extraction.py` once LIVEKIT_API_KEY and
LIVEKIT_API_SECRET are set.
"""

import os

import pytest
from livekit.agents import inference

import agent
import memory
from tests.conftest import call

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not (os.getenv("LIVEKIT_API_KEY") and os.getenv("LIVEKIT_API_SECRET")),
        reason="needs LIVEKIT_API_KEY and LIVEKIT_API_SECRET",
    ),
]

# (what the caller says, turn by turn; the facts in it as (kind, a word of the value))
CALLS = [
    (
        [
            "Hi, this is Tomás.",
            "I just moved from Lisbon to Porto last month.",
            "I'm allergic to peanuts and to shellfish, by the way.",
        ],
        [
            ("name", "tomás"),
            ("home_city", "porto"),
            ("allergy", "peanuts"),
            ("allergy", "shellfish"),
        ],
    ),
    (
        [
            "I'm calling about my broken dishwasher again.",
            "I work night shifts as a nurse, so I'm only home after six.",
            "Please just call me Jo.",
        ],
        [("open_issue", "dishwasher"), ("job", "nurse"), ("preferred_name", "jo")],
    ),
    (
        ["What's the weather going to be like tomorrow?", "Okay, thanks, that's all."],
        [],
    ),
    (
        [
            "My daughters Ana and Rita start school next week.",
            "We have a dog called Bolt who hates the vacuum cleaner.",
        ],
        [("child", "ana"), ("child", "rita"), ("pet", "bolt")],
    ),
]


def right(fact: memory.Fact, expected: list[tuple[str, str]]) -> tuple[str, str] | None:
    words = set(memory.facts.value_key(fact.value).split())
    return next((e for e in expected if e[0] == fact.kind and e[1] in words), None)


async def test_extraction_precision_on_scripted_calls(store):
    extracted = correct = found = wanted = 0
    for n, (turns, expected) in enumerate(CALLS):
        model = inference.LLM(model=agent.LLM_MODEL)
        async with call(store, f"live-extract-{n}", model, call_id=f"call-{n}") as (
            session,
            mem,
        ):
            for text in turns:
                await session.run(user_input=text)
        facts = [r.fact for r in mem.extracted]
        hits = {right(f, expected) for f in facts} - {None}
        extracted += len(facts)
        correct += sum(1 for f in facts if right(f, expected))
        found += len(hits)
        wanted += len(expected)
        print(f"call {n}: {[(f.kind, f.value) for f in facts]}")
    precision = correct / extracted if extracted else 1.0
    recall = found / wanted
    print(
        f"extraction precision {precision:.2f} ({correct}/{extracted}), recall {recall:.2f}"
    )
    assert precision >= 0.8 and recall >= 0.6
