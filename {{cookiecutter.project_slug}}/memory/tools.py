"""What memory's tools do for the model during a call: remember a fact the caller
gave, and forget at the caller's request (a fact, this call, or everything about
the caller). Each returns one sentence for the model and never raises.

An erasure of the call or of everything stops capture first, so nothing said before
it is saved after it. What each backend's ``forget`` deletes (rows, index entries,
file bytes) is in its docstring; an operator's erasure is ``memory_admin.py forget``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .block import remembered_sentence
from .erasure import forget_fact_words
from .errors import FAIL_OPEN, InvalidFactError
from .facts import Fact, fact_label, kind_takes_many, matching_facts, normalise_fact
from .limits import MAX_FACT_KIND_CHARS, MAX_FACT_VALUE_CHARS, WRITE_TIMEOUT
from .privacy import mask_sensitive

if TYPE_CHECKING:
    from .call import CallMemory


async def forget(
    call: CallMemory, what: str, kind: str | None = None, value: str | None = None
) -> str:
    """Forget at the caller's request; returns a short sentence for the model
    (never raises). ``what``: "fact" (every value of ``kind``, or with ``value``
    only that one, e.g. one of several allergies), "everything" (every fact,
    summary and exchange of the caller, this call's included, and nothing more is
    saved in this call) or "this_call" (this call's exchanges, and nothing more of
    it is saved)."""
    if call.caller_id is None:
        return "Memory is off for this call; nothing is stored to forget."
    if what == "fact" and not kind:
        return "Not forgotten: say which fact (its kind)."
    if what not in ("fact", "everything", "this_call"):
        return "Not forgotten: what must be 'fact', 'everything' or 'this_call'."
    gone: str | None = None
    values: list[str] = []  # the forgotten fact's values, to take out of texts
    if what == "fact":
        try:
            gone = normalise_fact(kind or "", "x")[0]
        except InvalidFactError as exc:
            return f"Not forgotten: {exc}."
        values = await _values_of(call, gone, value or None)
    else:
        # Stop first, so nothing still to come brings anything back: the writer
        # drops what is no longer pending, and a save already running finishes
        # before the delete below (stores apply one caller's writes in order).
        call.capturing = False
        call.forgotten = True
        call.writer.drop_all()
        call.pairing.clear()
    try:
        n = await call.store.forget(
            call.caller_id,
            kind=gone,
            value=value or None if gone else None,
            call_id=call.call_id if what == "this_call" else None,
        )
    except FAIL_OPEN as exc:
        call.warn("forget", "could not forget: %r", exc)
        return "Forgetting failed; tell the caller it could not be done right now."
    call.recaller.forgotten(gone, value or None, everything=what == "everything")
    if gone is not None:  # and from the texts that said it (erasure.py)
        await forget_fact_words(call, gone, value or None, values)
    if what == "fact":
        said = f"{fact_label(gone or '')} = {value}" if value else str(kind)
        return f"Forgotten: {said}." if n else f"Nothing was stored as {said}."
    return "Forgotten, and nothing more from this call will be kept."


async def _values_of(call: CallMemory, kind: str, value: str | None) -> list[str]:
    # Every value of the kind on file (history too), read before the delete; the
    # value asked for in any case, also when the store could not be read.
    assert call.caller_id is not None
    found = [value] if value else []
    try:
        held = [*(await call.store.profile(call.caller_id)).facts]
        held += await call.store.history(call.caller_id)
    except FAIL_OPEN as exc:
        call.warn("forget", "could not read the facts to forget: %r", exc)
        return found
    return found + [f.value for f in matching_facts(held, kind, value)]


async def remember(
    call: CallMemory, kind: str, value: str, *, always: bool = False
) -> str:
    """Save a fact for the caller; returns a short sentence for the model (never
    raises). Refused while capture is off (the caller has not consented, or asked
    to be forgotten), unless ``always`` (for the consent answer itself). When it
    says the save failed, the fact was not saved and will not be later."""
    if call.caller_id is None:
        return "Memory is off for this call, so this was not saved."
    if call.forgotten:
        return "Not saved: the caller asked not to be remembered in this call."
    if not (call.capturing or always):
        return "Not saved: this call is not being remembered."
    kind, value = str(kind or ""), str(value or "")
    if len(kind) > MAX_FACT_KIND_CHARS or len(value) > MAX_FACT_VALUE_CHARS:
        # before any pass over it: a huge value must not hold the event loop
        return (
            f"Not saved: a fact's kind is at most {MAX_FACT_KIND_CHARS} characters "
            f"and its value at most {MAX_FACT_VALUE_CHARS}; save a shorter one."
        )
    if call.masking:
        kind, value = (
            mask_sensitive(str(kind or "")),
            mask_sensitive(str(value or "")),
        )
    if await call.erasure.said_before(value, WRITE_TIMEOUT / 2):
        # another process forgot the caller meanwhile (an operator, another call)
        return (
            "Not saved: the caller's memory was erased during this call, and this "
            "was said before that; it is kept only if the caller says it again."
        )
    try:
        done = await call.store.remember(call.caller_id, Fact.of(kind, value))
    except InvalidFactError as exc:
        return f"Not saved: {exc}."
    except FAIL_OPEN as exc:
        call.warn("remember", "could not save a fact: %r", exc)
        return (
            "Saving that failed; tell the caller it could not be remembered this time."
        )
    # The cached recall of this turn is kept: the model already has the fact in
    # the tool call, and a reply that loops through tools recalls only once.
    others = call.recaller.remembered(done.fact)
    return remembered_sentence(done, others if kind_takes_many(done.fact.kind) else ())
