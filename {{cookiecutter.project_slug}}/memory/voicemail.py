"""Voicemail: an outbound call answered by a machine is no callee to remember.

On an outbound call a voicemail greeting ("Hi, you've reached Dana, leave a message
after the tone") arrives as the callee's first words: kept, its name would be
extracted as the callee's and read back to them on the next call. LiveKit's
answering-machine detection (``livekit.agents.AMD``, livekit-agents 1.8 and later:
an LLM classifier on the call's first utterance, after ``sip.callStatus`` is
"active") is the strong signal: on ``result.is_machine`` call
``CallMemory.not_a_person``. Without it, ``CallMemory.screens_voicemail`` applies the
conservative rule here to the first turn of the call: plain text, no I/O.
"""

from __future__ import annotations

import re

VOICEMAIL_PHRASES = (
    r"you(?:'ve| have) reached",
    r"(?:leave|record) (?:me |us )?(?:a |your )?(?:brief |short )?message",
    r"(?:after|at) the (?:tone|beep)",
    r"voice ?mail",
    r"mailbox",
    r"(?:is|am|are) (?:not|unable to) (?:available|take your call)",
    r"(?:can't|cannot|can not) (?:come to|answer|take) (?:the phone|your call)",
    r"the (?:person|number|subscriber) you (?:are|have) call(?:ing|ed)",
)
"""What voicemail greetings say and a person answering a call does not: common
greeting wording (carriers' default greetings, personal ones). Extend it by
assigning a tuple with yours (``voicemail.VOICEMAIL_PHRASES = (*..., r"...")``)."""
MAX_GREETING_CHARS = 1000
"""Only the first this many characters of a turn are read (the rule is linear)."""


def is_voicemail_greeting(text: str) -> bool:
    """Whether ``text`` (the first words of an outbound call's callee) reads as a
    voicemail greeting: at least two different ``VOICEMAIL_PHRASES`` in it. One is
    not enough (a person may answer "Hi, I got your voicemail"): the rule errs on
    the side of a person, whose call is then remembered as usual."""
    head = " ".join(text[:MAX_GREETING_CHARS].replace("\u2019", "'").split())
    found = {
        n
        for n, phrase in enumerate(VOICEMAIL_PHRASES)
        if re.search(phrase, head, re.IGNORECASE)  # (re caches compiled patterns)
    }
    return len(found) >= 2
