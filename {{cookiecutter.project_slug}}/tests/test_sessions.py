"""A call that goes on in a new session (a reconnect, a resumed call): the history
replayed into it keeps what it was, and the new session's words pair among
themselves."""

from __future__ import annotations

import time

import memory

ALICE = "alice@example.com"


async def test_history_replayed_into_a_new_session_keeps_its_reply_not_the_new_greeting(
    store,
):
    # The replayed turn took the new session's greeting as its reply and overwrote
    # the stored exchange ("Noted.\nHi again!").
    first = memory.CallMemory(store, ALICE, "call-1")
    said_at = time.time() - 60
    first.capture("user", "u1", "My name is Ana.", created_at=said_at)
    first.capture("assistant", "a1", "Noted.", created_at=said_at + 1)
    await first.aclose()
    again = memory.CallMemory(store, ALICE, "call-1")  # the same call, a new session
    again.capture("user", "u1", "My name is Ana.", created_at=said_at)  # replayed
    again.capture("assistant", "a1", "Noted.", created_at=said_at + 1)
    again.speech_created("greeting")
    again.capture("assistant", "g2", "Hi again!", speech_id="greeting")
    again.capture("user", "u2", "Where were we?")
    again.capture("assistant", "a2", "Your name.")
    await again.aclose()
    saved = await store.exchanges(ALICE, call_id="call-1")
    assert [(e.user_text, e.assistant_text) for e in saved] == [
        ("My name is Ana.", "Noted."),
        ("", "Hi again!"),  # the new session's opening
        ("Where were we?", "Your name."),
    ]


def test_replayed_messages_pair_among_themselves():
    now = [1000.0]
    pairing = memory.TurnPairing(ALICE, "call-1", clock=lambda: now[0])
    assert pairing.add("assistant", "g1", "Hello!", created_at=900.0) == []
    pairing.add("user", "u1", "Hi, I'm Ana.", created_at=901.0)
    pairing.add("assistant", "a1", "Hi Ana.", created_at=902.0)
    assert pairing.add("assistant", "g2", "Welcome back!", created_at=1001.0) == []
    changed = pairing.add("user", "u2", "Thanks.", created_at=1002.0)
    assert [(e.user_text, e.assistant_text) for e in changed] == [
        ("", "Welcome back!"),
        ("Thanks.", ""),
    ]
    assert [(e.user_text, e.assistant_text) for e in pairing.exchanges()] == [
        ("Hi, I'm Ana.", "Hi Ana."),
        ("Thanks.", ""),
    ]
