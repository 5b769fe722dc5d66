"""The event loop is the call's: every input is bounded before any pass over it, so
no input of any size holds the loop long (measured in benchmarks/event_loop.py; these
tests check the bounds, never the clock), and masking an IBAN takes an IBAN."""

from __future__ import annotations

import functools
import logging
import random
import string
import threading

import pytest

import memory
from memory import intake, limits, privacy, text, tools, words
from tests.doubles import StoreWrapper

ALICE = "alice@example.com"


async def test_a_huge_fact_is_refused_before_any_pass_over_it(store, monkeypatch):
    # 10 MB to the remember tool held the loop 7.6 s masking it before the refusal.
    masked: list[int] = []
    monkeypatch.setattr(tools, "mask_sensitive", lambda t: masked.append(len(t)) or t)
    call = memory.CallMemory(store, ALICE, "call-1")
    answer = await call.remember("note", "4 1 1 1 " * 1_250_000)
    assert answer.startswith("Not saved:") and "at most" in answer
    assert masked == []
    assert (await store.profile(ALICE)).facts == ()
    await call.aclose()


async def test_a_huge_turn_is_kept_to_its_first_max_turn_chars_and_the_log_says_so(
    store, caplog
):
    call = memory.CallMemory(store, ALICE, "call-1")
    with caplog.at_level(logging.WARNING, logger="memory"):
        call.capture("user", "u1", "My order is late. " + "4 1 1 1 0 9 " * 1_000_000)
        call.capture("assistant", "a1", "Noted. " + "x" * 1_000_000)
        assert await call.flush(60) == 0
    (exchange,) = call.exchanges
    assert exchange.user_text.startswith("My order is late.")
    assert len(exchange.user_text) <= limits.MAX_TURN_CHARS
    assert len(exchange.assistant_text) == limits.MAX_TURN_CHARS
    said = [
        r.getMessage() for r in caplog.records if "MAX_TURN_CHARS" in r.getMessage()
    ]
    assert len(said) == 1 and "kept to its first" in said[0]
    await call.aclose()


async def test_a_long_message_is_masked_on_a_thread_and_keeps_its_place(
    store, monkeypatch
):
    # A 10,000-character digit-heavy turn held the loop 0.92 s being masked.
    loop_thread = threading.get_ident()
    where: list[bool] = []
    real = intake.mask_sensitive

    def spy(text: str) -> str:
        where.append(threading.get_ident() == loop_thread)
        return real(text)

    monkeypatch.setattr(intake, "mask_sensitive", spy)
    call = memory.CallMemory(store, ALICE, "call-1")
    long = "My card is 4111 1111 1111 1111. " + "4 1 1 1 0 9 " * 1000
    call.capture("user", "u1", long)
    call.capture("assistant", "a1", "Noted.")  # at once: it waits its turn
    call.capture("user", "u2", "Thanks.")
    call.capture("assistant", "a2", "Bye!")
    assert await call.flush() == 0
    assert [(e.user_text[:24], e.assistant_text) for e in call.exchanges] == [
        ("My card is [card number]", "Noted."),
        ("Thanks.", "Bye!"),
    ]
    assert where[0] is False and all(where[1:])  # the long one off the loop
    await call.aclose()
    assert len(await store.exchanges(ALICE)) == 2


class Queries(StoreWrapper):
    """Records the query of every recall."""

    def __init__(self, inner):
        super().__init__(inner)
        self.queries: list[str] = []

    async def around(self, name, method, args, kwargs):
        if name == "recall":
            self.queries.append(args[1])
        return await method(*args, **kwargs)


async def test_a_huge_turn_searches_the_store_for_its_last_words_only(store):
    queries = Queries(store)
    call = memory.CallMemory(queries, ALICE, "call-1", recall_budget=30)
    said = "blah " * 200_000 + "what is my sister's name?"
    assert await call.block_for(said, turn=1)
    (query,) = queries.queries
    assert len(query) <= limits.MAX_QUERY_CHARS and query.endswith("sister's name?")
    await call.aclose()


def test_a_postcode_flight_number_or_number_plate_is_not_masked_as_an_iban():
    # One string in 97 passes the IBAN check digits alone: 2-3.4% of such sentences
    # became "[IBAN]". A country in the registry must also have its account format.
    rng = random.Random(21)
    upper, digits = string.ascii_uppercase, string.digits

    def pick(alphabet: str, n: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n))

    sentences = []
    for _ in range(3000):
        plate = f"{pick(upper, 2)}{pick(digits, 2)} {pick(upper, 3)}"
        postcode = (
            f"{pick(upper, 2)}{pick(digits, 2)} {pick(digits, 1)}{pick(upper, 2)}"
        )
        flight = f"{pick(upper, 2)}{pick(digits, 4)}"
        sentences += [
            f"My car {plate} is parked near {postcode} today",
            f"I land on {flight} at gate {pick(digits, 2)} then take {plate} home",
            f"Send it to {postcode} care of flat {pick(digits, 3)} please",
        ]
    masked = [s for s in sentences if "[IBAN]" in memory.mask_sensitive(s)]
    assert masked == []


def test_an_iban_of_a_country_outside_the_registry_is_masked_only_when_named():
    # Iran's IBAN: not in python-stdnum's registry, so its format cannot be checked.
    number = "IR06 2960 0000 0010 0324 2000 01"
    assert memory.mask_sensitive(f"my IBAN is {number}") == "my IBAN is [IBAN]"
    assert memory.mask_sensitive(f"the code {number}") == f"the code {number}"


class Reads:
    """A compiled pattern that records how many characters each call of it reads."""

    def __init__(self, pattern, read: list[int]):
        self.pattern, self.read = pattern, read

    def __getattr__(self, name):
        method = getattr(self.pattern, name)

        def reading(string, pos=0, endpos=None):
            end = len(string) if endpos is None else min(endpos, len(string))
            self.read.append(end - pos)
            return method(string, pos, len(string) if endpos is None else endpos)

        return reading


LONG_TURNS = {
    "spaced digits": "4 1 1 1 0 9 ",
    "card numbers": "4111 1111 1111 1111 and ",
    "accented words": "àéîõü çñ ßœ øå ",
    "words": "my sister ana is vegetarian and lives in lisbon ",
    "ibans": "GB82 WEST 1234 5698 7654 32 SW1A 1AA flight BA2490 ",
    "cjk and words": "我的名字是玛丽亚 我住在里斯本 ",
}


@pytest.mark.parametrize("unit", LONG_TURNS.values(), ids=LONG_TURNS.keys())
def test_masking_and_search_words_read_a_long_turn_a_piece_at_a_time(unit, monkeypatch):
    # Python's re holds the GIL for a whole call: one pass over a 200,000-character
    # turn on the writer or masking thread held the event loop 30-48 ms.
    said = (unit * (limits.MAX_TURN_CHARS // len(unit) + 1))[: limits.MAX_TURN_CHARS]
    whole = functools.partial(text.spans, size=len(said))
    with monkeypatch.context() as at_once:  # the same passes, each over the whole
        at_once.setattr(words, "spans", whole)
        at_once.setattr(privacy, "spans", whole)
        expected = memory.mask_sensitive(said), words.search_words(said)
    read: list[int] = []
    for module, name in [
        (privacy, "_IBAN"),
        (privacy, "_TOKEN"),
        (words, "_ASCII_WORD_RE"),
        (words, "_WORD_RE"),
        (words, "_CHARACTER_RE"),
    ]:
        monkeypatch.setattr(module, name, Reads(getattr(module, name), read))
    assert (memory.mask_sensitive(said), words.search_words(said)) == expected
    assert len(read) > 10
    assert max(read) <= limits.PIECE_CHARS + privacy.IBAN_MAX_CHARS + len(unit)
