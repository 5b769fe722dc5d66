"""Every limit memory keeps, in one place: times in seconds, sizes in characters.

Also how an on/off setting is read from the environment (``switched_off``).
"""

from __future__ import annotations

import os

RECALL_BUDGET = 0.25
"""Seconds a reply may wait for recall. Past it the reply goes ahead without memory.
A pipeline reply already waits ~0.3-0.8 s for the LLM's first token; a quarter of a
second more is the most we add in the worst case (SQLite answers in ~1 ms)."""

FLUSH_TIMEOUT = 3.0
"""Seconds the end of a call may wait for pending writes. Well below LiveKit's
``shutdown_process_timeout`` (10 s in livekit-agents 1.8.9), so the flush finishes
before the worker kills the job process."""

WRITE_TIMEOUT = 2.0
"""Seconds one fact or forget write may take. A store applies it within this time or
not at all, so what the model is told ("saved", "failed") stays true."""

MAX_BLOCK_CHARS = 3000
"""Size cap of the memory block, in characters (~750 tokens)."""
MIN_BLOCK_CHARS = 400
"""The smallest cap allowed: room for the header, the unavailable sentence and a
fact."""

MAX_TURN_CHARS = 200_000
"""Characters memory keeps of one message (a caller's turn or a reply); the rest is
left out, and the log says so once per call. About 35,000 words, hours of speech:
no spoken turn comes near it, but a typed one can (LiveKit's text streams have no
size limit), and it bounds the work one message costs."""
INLINE_TEXT_CHARS = 2000
"""A message up to this long is masked on the event loop as it is captured (at
most ~6 ms: masking costs ~3 µs a character at worst, a text of spaced digits);
a longer one on a thread, and the messages after it wait their turn, so no message
holds the loop more than 20 ms (benchmarks/event_loop.py)."""
PIECE_CHARS = 10_000
"""Characters one pass of a regular expression reads at a time over a long text
(masking, search words): Python's ``re`` holds the GIL for a whole call, about
0.15 µs a character, so a 200,000-character turn read in one call on the writer or
masking thread held the event loop 30 ms; a piece holds it about 1.5 ms
(``text.spans``; benchmarks/event_loop.py)."""
MAX_QUERY_CHARS = 1000
"""Characters of the caller's latest words a recall searches for: their end (what
was said last), so a huge turn costs the search and the block no more than this;
the block ranks each remembered text by its first this many characters too."""
MAX_CALLER_ID_CHARS = 128
MAX_FACT_KIND_CHARS = 40
MAX_FACT_VALUE_CHARS = 500
RECALL_EXCHANGES = 24
"""Past exchanges a recall returns at most (the block shows those that fit)."""
RECENT_SUMMARIES = 3
"""Latest call summaries in the profile."""
SAVE_ATTEMPTS = 3
"""Tries of one exchange's save before it is parked (``ExchangeWriter``)."""
SKIP_DOWN_STORE_FOR = 5.0
"""Seconds replies skip a store that has just failed with ``StoreUnavailableError``
(server down, file gone): recall answers at once that memory could not be read,
instead of every reply waiting the whole RECALL_BUDGET. Then one recall goes to the
store in the background (a probe; the reply does not wait for it) and the skipping
goes on until it, or a save after a failed save, succeeds; each failure waits this
long again. Saves never skip (the ExchangeWriter keeps retrying)."""
RECALL_HUNG_AFTER = 2.0
"""Seconds after which a recall that has not answered, while no other recall on the
store answered since it started, counts as the store failing (a store that hangs
instead of raising): replies then skip it as for SKIP_DOWN_STORE_FOR. Eight
RECALL_BUDGETs: far past a slow query (SQLite ~1 ms, PostgreSQL ~10 ms), well
before a whole call's replies have each waited the budget."""
RETRY_PARKED_AFTER = (1.0, 5.0, 15.0, 30.0)
"""Seconds after which exchanges that failed SAVE_ATTEMPTS times are tried again
(then every 30 s); a successful save of another exchange retries them at once."""

OFF = ("0", "false", "no", "off")
"""What turns an on/off setting off (any case, spaces around ignored)."""


def switched_off(name: str) -> bool:
    """Whether the environment's on/off setting ``name`` (default on) says off: one
    of ``OFF``."""
    return os.getenv(name, "on").strip().lower() in OFF
