"""The end of a call: the last writes flushed, the call summary saved and the rest of
the facts extracted, all within one bound (``FLUSH_TIMEOUT``), and one log line of
the call's memory figures.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING

from .errors import FAIL_OPEN
from .privacy import mask_sensitive
from .text import clean_text, clip

if TYPE_CHECKING:
    from .call import CallMemory

logger = logging.getLogger("memory")


def extractive_summary(call: CallMemory) -> str | None:
    """A one-line summary of the call for the next call's greeting: the first words
    of the caller's first three turns, each cut after its last whole word within 80
    characters (no model call). None when the caller said nothing."""
    said = [t.user_text for t in call.pairing.turns[:3]]
    if not said:
        return None
    text = clip(said[0], 80, at_word=True)
    for part in (clip(t, 80, at_word=True) for t in said[1:]):
        # a turn that ends a sentence needs no "; " after it ("job. My sister")
        text += (" " if text.endswith((".", "!", "?", "…")) else "; ") + part
    return "The caller talked about: " + text


async def close(call: CallMemory, reason: str, timeout: float) -> int:
    """Flush, then the summary and the rest of extraction, all within ``timeout``
    seconds; logs the figures (and, at ERROR, what is still unsaved). Returns how
    many exchanges are still unsaved."""
    started = time.monotonic()
    deadline = started + timeout
    await call.backlog.wait(timeout / 4)  # long messages still being masked
    writer = call.writer
    pending = writer.unsaved
    unsaved = await writer.flush(timeout / 2)
    if unsaved:  # one more round for what failed in the first half
        unsaved = await writer.flush(max(0.0, deadline - time.monotonic()))
    writer.stop()
    call.extraction.flushed = (time.monotonic() - started, unsaved, timeout)
    if call.capturing and call.enabled:  # the caller forgotten meanwhile (erasure.py)
        await call.erasure.apply(max(0.0, deadline - time.monotonic()) / 4)
    ending = []
    if call.capturing and call.pairing.turns and not unsaved:
        ending.append(save_summary(call, deadline))
    if call.capturing and call.extract_with is not None:
        ending.append(call.extraction.rest(deadline))
    await asyncio.gather(*ending)
    if call.enabled:
        figures = call.figures.line(pending, unsaved)
        logger.info("memory: call %s: %s", call.call_id, figures)
    if unsaved:
        left = writer.unsaved_exchanges()
        logger.error(
            "memory: %d exchange(s) of caller %s not saved before the call closed "
            "(%s); keys: %s",
            unsaved,
            call.caller_id,
            reason or "call ended",
            json.dumps([e.key for e in left]),
        )
        logger.debug(
            "memory: unsaved exchanges: %s",
            json.dumps([e.__dict__ for e in left], default=str),
        )
    return unsaved


async def save_summary(call: CallMemory, deadline: float) -> None:
    """Save the call's summary by ``deadline`` (``time.monotonic()``): the model's
    (``CallMemory.summarize``, given at most half of what is left) or the extractive
    one; never raises."""
    summary = extractive_summary(call)
    if summary is None or call.caller_id is None:
        return
    if call.summarize is not None:
        try:  # at most half of what is left, so the extractive one still fits
            left = (deadline - time.monotonic()) / 2
            written = await asyncio.wait_for(call.summarize(call.exchanges), left)
            summary = " ".join(str(written).split()) or summary
        except FAIL_OPEN as exc:
            call.warn(
                "summarize", "call summary failed, keeping the short one: %r", exc
            )
    summary = clean_text(summary)  # a model's summary: storable by every backend
    if call.masking:  # a model may write out a number the caller said
        summary = mask_sensitive(summary)
    try:
        await asyncio.wait_for(
            call.store.save_summary(call.caller_id, call.call_id, summary),
            max(0.0, deadline - time.monotonic()),
        )
    except FAIL_OPEN as exc:
        call.warn("summary", "could not save the call summary: %r", exc)
