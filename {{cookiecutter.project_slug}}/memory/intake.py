"""How a captured message reaches the call's exchanges: masked, paired with its
turn, queued for saving. A message longer than ``INLINE_TEXT_CHARS`` is masked on a
thread (``Backlog``), and every message captured after it waits its turn, so the
event loop is never held by a long one and the order of the conversation holds.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import TYPE_CHECKING, Any

from .errors import FAIL_OPEN
from .limits import INLINE_TEXT_CHARS, MAX_TURN_CHARS
from .privacy import mask_sensitive
from .voicemail import screened

if TYPE_CHECKING:
    from .call import CallMemory

Message = tuple[Any, ...]
"""(role, item_id, text, interrupted, created_at, speech_id), as ``capture`` got it."""


def accept(call: CallMemory, message: Message) -> None:
    """Take a message ``CallMemory.capture`` accepted: bounded to ``MAX_TURN_CHARS``
    before any pass over it (logged once per call), then taken at once, or masked on
    a thread first when it is long or others wait already."""
    role, item_id, text, interrupted, created_at, speech_id = message
    if text and len(text) > MAX_TURN_CHARS:
        call.warn(
            "long",
            "a message of %d characters is kept to its first %d (MAX_TURN_CHARS)",
            len(text),
            MAX_TURN_CHARS,
        )
        text = text[:MAX_TURN_CHARS]
    if role == "user" and screened(call, text):  # an outbound call's voicemail
        return
    message = (role, item_id, text, interrupted, created_at, speech_id)
    if call.backlog or (call.masking and len(text or "") > INLINE_TEXT_CHARS):
        call.backlog.put(message)
    else:
        take(call, message, masked=False)


def take(call: CallMemory, message: Message, *, masked: bool) -> None:
    """Mask (unless ``masked``), pair and queue one message; never raises."""
    role, item_id, text, interrupted, created_at, speech_id = message
    try:
        if call.masking and text and not masked:
            text = mask_sensitive(text)
        changed = call.pairing.add(
            role,
            item_id,
            text,
            interrupted=interrupted,
            created_at=created_at,
            speech_id=speech_id,
        )
    except FAIL_OPEN as exc:  # never into LiveKit's event emitter
        call.warn("capture", "could not take a message: %r", exc)
        return
    for exchange in changed:
        call.writer.put(exchange)
    if role == "user":
        call.extraction.after_turn()


class Backlog:
    """The messages of a call waiting behind a long one that is being masked on a
    thread (where the GIL hands the loop back every 5 ms), taken in order."""

    def __init__(self, call: CallMemory) -> None:
        self.call = call
        self.waiting: collections.deque[Message] = collections.deque()
        self.task: asyncio.Task[None] | None = None

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def put(self, message: Message) -> None:
        role, item_id, text, interrupted, created_at, speech_id = message
        if created_at is None:  # the time it came, not the time it is taken
            created_at = self.call.clock()
        self.waiting.append((role, item_id, text, interrupted, created_at, speech_id))
        if self.task is None:
            self.task = asyncio.create_task(self._run(), name="memory-mask")

    async def _run(self) -> None:
        try:
            while self.waiting:
                role, item_id, text, *rest = self.waiting[0]
                masked = self.call.masking and len(text or "") > INLINE_TEXT_CHARS
                try:
                    if masked:
                        text = await asyncio.to_thread(mask_sensitive, text)
                except FAIL_OPEN as exc:
                    self.call.warn("capture", "could not take a message: %r", exc)
                    self.waiting.popleft()
                    continue
                self.waiting.popleft()
                if self.call.capturing:  # not if the caller had it forgotten since
                    take(self.call, (role, item_id, text, *rest), masked=masked)
        finally:
            self.task = None

    async def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for every waiting message to be taken."""
        if self.task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.task), timeout)
