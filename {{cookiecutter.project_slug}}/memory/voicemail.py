"""Voicemail: an outbound call answered by a machine is no callee to remember.

On an outbound call a voicemail greeting ("Hi, you've reached Dana, leave a message
after the tone") arrives as the callee's first words: kept, its name would be
extracted as the callee's and read back to them on the next call. LiveKit's
answering-machine detection (``livekit.agents.AMD`` in livekit-agents 1.8.9, the
release this project pins: an LLM classifier of the call's first utterance, once
``sip.callStatus`` is "active") is the strong signal: when its ``result.is_machine``,
call ``not_a_person(call, reason)``. Without it, ``CallMemory.screens_voicemail``
applies the conservative rule here to the call's first turn: plain text, no I/O.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .call import CallMemory

logger = logging.getLogger("memory")

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


def screened(call: CallMemory, text: str | None) -> bool:
    """For a caller turn of ``call``: when ``call.screens_voicemail`` (an outbound
    call) and it is the call's first, and it reads as a voicemail greeting
    (``is_voicemail_greeting``), the call is not a person's (``not_a_person``);
    returns whether that happened."""
    if not call.screens_voicemail or call.pairing.turns:
        return False
    if not is_voicemail_greeting(text or ""):
        return False
    not_a_person(call, "its first words read as a voicemail greeting")
    return True


def not_a_person(call: CallMemory, reason: str) -> None:
    """``call`` was answered by a machine (voicemail, a menu), not by the caller
    memory is kept for: nothing of it is kept (what was queued is dropped, no
    summary, no extraction), with one log line giving ``reason``."""
    if not call.enabled:
        return
    call.capturing = False
    call.writer.drop_all()
    call.pairing.clear()
    logger.warning(
        "memory: call %s is not kept (%s): answered by a machine, not by %s",
        call.call_id,
        reason,
        call.caller_id,
    )
