"""The wiring self-check: a reply that should have asked memory for its block (it
runs the agent's ``llm_node``) but went out without asking is named in the log, once
per call, with what to do. Catches an ``llm_node`` override that skips memory.
"""

from __future__ import annotations

from collections.abc import Callable

WIRING_WARNING = (
    "a reply went out without memory being asked for it, so it had no memory block: "
    "the agent's llm_node must call CallMemory.block_for before each reply (an "
    "llm_node override should delegate with "
    "`async for chunk in super().llm_node(chat_ctx, tools, model_settings)`, not call "
    "Agent.default.llm_node itself)"
)


class ReplyCheck:
    """Counts ``block_for`` calls (``asked``) and, for each reply that should ask,
    compares the count when it was created with the count when its text arrives."""

    def __init__(self, warn: Callable[..., None]) -> None:
        self.warn = warn
        self.asked = 0
        self._at_start: dict[str, int] = {}  # speech id -> asked then

    def created(self, speech_id: str) -> None:
        """A reply that runs ``llm_node`` was created."""
        self._at_start[speech_id] = self.asked
        while len(self._at_start) > 50:  # speeches that never said anything
            del self._at_start[next(iter(self._at_start))]

    def said(self, speech_id: str) -> None:
        """The reply's text arrived: warn (once) if nothing asked memory since."""
        asked = self._at_start.pop(speech_id, None)
        if asked is not None and asked == self.asked:
            self.warn("wiring", WIRING_WARNING)
