"""What the extraction step keeps of the model's answer: only facts the caller said,
once each, as text (tests/test_extraction.py runs the whole step in a call)."""

from __future__ import annotations

import json

import memory
from tests.doubles import make_exchange

ALICE = "alice@example.com"


def parse(answer: str, *turns: str) -> list[tuple[str, str]]:
    said = [make_exchange(n, ALICE, text) for n, text in enumerate(turns, 1)]
    found = memory.extraction.parse_extracted(
        answer, said, list(range(1, len(said) + 1))
    )
    return [(e.fact.kind, e.fact.value) for e in found]


def answer(*facts: tuple[str, object, int]) -> str:
    return json.dumps(
        {"facts": [{"kind": k, "value": v, "exchange": n} for k, v, n in facts]}
    )


def test_a_list_value_gives_one_fact_per_item_and_a_dict_value_none():
    # They were stored as Python's repr: "['peanuts', 'shellfish']".
    got = parse(
        answer(
            ("allergy", ["peanuts", "shellfish"], 1),
            ("home city", {"city": "Porto"}, 1),
        ),
        "I'm allergic to peanuts and shellfish, and I live in Porto.",
    )
    assert got == [("allergy", "peanuts"), ("allergy", "shellfish")]


def test_valid_json_followed_by_chatter_with_a_brace_keeps_its_facts():
    text = answer(("home city", "Porto", 1)) + "\nHope that helps {happy to redo it}."
    assert parse(text, "I live in Porto.") == [("home_city", "Porto")]


def test_a_value_needs_every_content_word_said_not_one_of_them():
    # "daughter Sofia" passed on "daughter", "the pilot" on "the".
    got = parse(
        answer(("child", "daughter Sofia", 1), ("job", "the pilot", 1)),
        "My daughter is called Ana and the flight was fine.",
    )
    assert got == []
    got = parse(answer(("child", "daughters Ana", 1)), "My daughter Ana is five.")
    assert got == [("child", "daughters Ana")]  # compared by stem


def test_a_value_the_caller_denied_is_not_taken_as_said():
    assert parse(answer(("name", "Maria", 1)), "My name is not Maria, it's Ana.") == []
    assert parse(answer(("name", "Ana", 1)), "My name is not Maria, it's Ana.") == [
        ("name", "Ana")
    ]


def test_one_value_said_in_two_wordings_is_one_fact():
    got = parse(
        answer(("allergy", "peanut allergy", 1), ("allergy", "peanuts", 1)),
        "I have a peanut allergy, so no peanuts please.",
    )
    assert got == [("allergy", "peanuts")]
