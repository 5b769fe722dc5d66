"""What the memory holds: exchanges, facts, call summaries, and what a recall
returns. Plain frozen dataclasses, shared by every backend.

Units: times are seconds since the epoch (UTC), sizes are characters.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

from .facts import Fact


@dataclass(frozen=True)
class Exchange:
    """The caller's words in one user turn and the agent's reply to them.

    ``key`` is deterministic (caller id + the LiveKit id of the turn's user
    message), so saving the same exchange again, after a retry or a reconnect,
    replaces it instead of adding a duplicate. ``assistant_text`` is empty when the
    caller hung up or barged in before any reply was spoken; ``interrupted`` marks a
    reply cut short (the text is what was actually said). ``created_at`` is seconds
    since the epoch (UTC)."""

    key: str
    caller_id: str
    call_id: str
    user_text: str
    assistant_text: str = ""
    interrupted: bool = False
    item_ids: tuple[str, ...] = ()
    created_at: float = field(default_factory=time.time)


@dataclass(frozen=True)
class Summary:
    """A short summary of one finished call; ``created_at`` in seconds since the epoch."""

    call_id: str
    text: str
    created_at: float


@dataclass(frozen=True)
class Recall:
    """What the store returned for one query: facts (newest first), latest call
    summaries (newest first) and the past exchanges most relevant to the query (best
    first).

    ``sides``, when given, has one entry per exchange: the side(s) of it that matched,
    ``"caller"``, ``"reply"`` or ``"both"``, and the block shows only those (a store
    that ranks single turns sets it). Empty: every exchange is shown whole."""

    facts: tuple[Fact, ...] = ()
    summaries: tuple[Summary, ...] = ()
    exchanges: tuple[Exchange, ...] = ()
    sides: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.facts or self.summaries or self.exchanges)


def exchange_key(caller_id: str, first_item_id: str) -> str:
    """The exchange's key: 32 hex digits of SHA-256 over the caller id and the id of
    the turn's user message, so a retried save replaces instead of doubling."""
    return hashlib.sha256(f"{caller_id}\n{first_item_id}".encode()).hexdigest()[:32]
