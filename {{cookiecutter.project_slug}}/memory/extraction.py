"""Fact extraction: after a call (or every few turns), the agent's model lists the
lasting facts the caller stated; each must cite an exchange whose words hold it.

The request and its parsing are plain code (no I/O); ``FactExtraction`` runs them for
one call within the end-of-call bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from .errors import FAIL_OPEN, InvalidFactError
from .facts import FACT_KINDS, Fact, Remembered
from .limits import WRITE_TIMEOUT
from .pairing import TurnPairing
from .privacy import mask_sensitive
from .records import Exchange
from .store import MemoryStore
from .text import clip
from .words import STOPWORDS, stem

EXTRACT_TIMEOUT = 2.5
"""Seconds the model may take to answer the extraction request; never more than is
left of the end-of-call bound (``CallMemory.aclose``'s timeout)."""
EXTRACT_MAX_CHARS = 6000
"""Size cap of the transcript sent for extraction (~1,500 tokens): the call's latest
exchanges that fit, the caller's words clipped to 600 characters, the agent's to 200."""
EXTRACT_MAX_FACTS = 12
"""Facts taken from one extraction at most."""

EXTRACT_INSTRUCTIONS = f"""\
You read the transcript of a phone call and list the lasting facts the caller stated
about themselves: who they are, where they live, family, pets, health, work, open
issues they called about. Each exchange is numbered [N].
Answer with JSON only, no other text:
{{"facts": [{{"kind": "...", "value": "...", "exchange": N}}]}}
- kind: one of {", ".join(k.name.replace("_", " ") for k in FACT_KINDS)}, or a few
  words of your own for anything else.
- value: the fact in a few of the caller's own words.
- exchange: the number of the exchange in which the caller said it.
Only what the caller said in this call: nothing the agent said, nothing guessed,
nothing passing (moods, what they want right now). No facts: {{"facts": []}}"""
"""The extraction request's instructions; the transcript follows as the user message."""


@dataclass(frozen=True)
class Extracted:
    """A fact the model extracted and the exchange of this call it cites."""

    fact: Fact
    exchange: Exchange


def extraction_transcript(
    exchanges: Sequence[Exchange], first: int = 1
) -> tuple[str, list[int]]:
    """The extraction request's text: the exchanges numbered from ``first`` in call
    order ("[3] Caller: ... / Agent: ..."), the latest that fit in
    ``EXTRACT_MAX_CHARS``. Returns (text, the numbers sent)."""
    lines: list[str] = []
    numbers: list[int] = []
    used = 0
    for n in range(len(exchanges) - 1, -1, -1):
        e = exchanges[n]
        line = f"[{first + n}] Caller: {clip(e.user_text, 600)}"
        if e.assistant_text:
            line += f"\nAgent: {clip(e.assistant_text, 200)}"
        if used + len(line) + 1 > EXTRACT_MAX_CHARS:
            break
        lines.append(line)
        numbers.append(first + n)
        used += len(line) + 1
    return "\n".join(reversed(lines)), sorted(numbers)


def parse_extracted(
    answer: str, exchanges: Sequence[Exchange], numbers: Sequence[int], first: int = 1
) -> list[Extracted]:
    """The facts in the model's ``answer`` (``EXTRACT_INSTRUCTIONS``'s JSON, maybe
    fenced in markdown or followed by chatter), at most ``EXTRACT_MAX_FACTS``. A
    fact is dropped, so the model cannot invent one, when it cites no exchange in
    ``numbers`` (those sent), when any content word of its value (stop words aside,
    compared by stem) is not in the caller's words of the exchange it cites, when
    the caller denied it there ("my name is not Maria"), or when its kind or value
    is empty or too long (``Fact.of``). A list value gives one fact per item; any
    other value that is not text or a number is dropped. Of values of one kind that
    say the same ("peanuts", "peanut allergy": one's content stems hold the
    other's), the shorter is kept.

    Raises ValueError when the answer holds no JSON object with a list of facts."""
    facts = _facts_list(_first_object(answer or ""))
    if facts is None:
        raise ValueError('the answer has no "facts" list')
    found: list[Extracted] = []
    for item in facts:
        if not isinstance(item, dict):
            continue
        n = item.get("exchange")
        if isinstance(n, str) and n.strip().isdigit():
            n = int(n)
        if not isinstance(n, int) or isinstance(n, bool) or n not in numbers:
            continue
        said = exchanges[n - first]
        for value in _values(item.get("value")):
            try:
                fact = Fact.of(str(item.get("kind") or ""), value)
            except InvalidFactError:
                continue
            if _said(fact.value, said.user_text):
                found = _kept(found, Extracted(fact, said))
    return found[:EXTRACT_MAX_FACTS]


def _first_object(text: str) -> object:
    # The first JSON object in the answer, whatever comes after it (a closing
    # remark with a brace of its own once made the whole answer unreadable).
    decoder = json.JSONDecoder()
    at = text.find("{")
    for _ in range(20):
        if at < 0:
            break
        try:
            data, _end = decoder.raw_decode(text, at)
        except ValueError:
            at = text.find("{", at + 1)
            continue
        if isinstance(data, dict):
            return data
        at = text.find("{", at + 1)
    raise ValueError(f"no JSON object in the answer: {clip(text, 80)!r}")


def _values(value: object) -> list[str]:
    # text or a number as it reads; a list, item by item; a dict or anything else:
    # nothing (str() of it is Python's repr, never the caller's words)
    items = value if isinstance(value, list) else [value]
    return [
        str(v)
        for v in items
        if isinstance(v, (str, int, float)) and not isinstance(v, bool)
    ]


def _facts_list(data: object) -> list[object] | None:
    facts = data.get("facts") if isinstance(data, dict) else None
    return facts if isinstance(facts, list) else None


_NEGATIONS = frozenset(
    stem(w)
    for w in ("not", "no", "never", "t", "neither", "nor", "none", "nobody", "nothing")
)
"""Words (as stems) that deny what follows ("isn't" is "isn", "t" as words)."""


def _tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text.casefold())


def _content(text: str) -> set[str]:
    words = _tokens(text)
    content = {stem(w) for w in words if len(w) > 2 and w not in STOPWORDS}
    return content or {stem(w) for w in words}


def _said(value: str, turn: str) -> bool:
    """Every content word of ``value`` is in ``turn``, and not right after a denial
    there (within the three words before it)."""
    wanted = _content(value)
    words = [stem(w) for w in _tokens(turn)]
    if not wanted or not wanted <= set(words):
        return False
    for word in wanted:
        places = [i for i, w in enumerate(words) if w == word]
        if all(_NEGATIONS & set(words[max(0, i - 3) : i]) for i in places):
            return False
    return True


def _kept(found: list[Extracted], new: Extracted) -> list[Extracted]:
    # one value of a kind said in other words is one fact: the shorter wording
    ours = _content(new.fact.value)
    for i, old in enumerate(found):
        if old.fact.kind != new.fact.kind:
            continue
        theirs = _content(old.fact.value)
        if ours <= theirs or theirs <= ours:
            if len(new.fact.value) < len(old.fact.value):
                found = [*found[:i], new, *found[i + 1 :]]
            return found
    return [*found, new]


class FactExtraction:
    """Runs extraction for one call: every ``every`` caller turns in the background
    (0: only when the call ends) and for the rest when it ends, remembering what the
    model found, all within the end-of-call bound. Never raises.

    ``ask(instructions, text)`` is one request to the agent's model outside the
    conversation (the LiveKit adapter's ``model_asker``); None: no extraction.
    ``capturing()`` says whether the call may still be remembered (an erasure or a
    withdrawn consent stops saving what is found); ``masking()`` whether to mask what
    the model writes out."""

    def __init__(
        self,
        store: MemoryStore,
        caller_id: str,
        pairing: TurnPairing,
        *,
        capturing: Callable[[], bool],
        masking: Callable[[], bool],
        warn: Callable[..., None],
    ) -> None:
        self.store = store
        self.caller_id = caller_id
        self.pairing = pairing
        self.capturing = capturing
        self.warn = warn
        self.ask: Callable[[str, str], Awaitable[str]] | None = None
        self.every = 0
        self.masking = masking
        self.extracted: list[Remembered] = []  # what extraction remembered, in order
        self.upto = 0  # exchanges (by turn) already sent for extraction
        self.task: asyncio.Task[None] | None = None
        # (seconds the end-of-call flush took, exchanges it left unsaved, the call
        # end's bound), to say what used the time when extraction gets none
        self.flushed: tuple[float, int, float] | None = None

    def after_turn(self) -> None:
        """A caller turn arrived: extract the finished exchanges before it (its reply
        is still to come) if ``every`` turns have passed, off the reply's path."""
        done = len(self.pairing.turns) - 1
        busy = self.task is not None and not self.task.done()
        if self.ask is None or self.every <= 0 or busy or done - self.upto < self.every:
            return
        deadline = time.monotonic() + EXTRACT_TIMEOUT + WRITE_TIMEOUT
        self.task = asyncio.create_task(
            self.upto_turn(done, deadline), name="memory-extract"
        )

    async def rest(self, deadline: float) -> None:
        """At the call's end: wait for a running extraction, then extract the rest,
        all by ``deadline`` (``time.monotonic()``)."""
        if self.task is not None and not self.task.done():
            with contextlib.suppress(Exception, TimeoutError):
                left = max(0.0, deadline - time.monotonic())
                await asyncio.wait_for(asyncio.shield(self.task), left)
        await self.upto_turn(len(self.pairing.turns), deadline)

    async def upto_turn(self, end: int, deadline: float) -> None:
        """Extract the facts of exchanges ``upto`` to ``end`` (by turn) and remember
        them, all by ``deadline`` (``time.monotonic()``)."""
        first = self.upto
        exchanges = self.pairing.exchanges()[first:end]
        self.upto = max(self.upto, end)
        if not exchanges or self.ask is None:
            return
        text, numbers = extraction_transcript(exchanges, first + 1)
        left = min(EXTRACT_TIMEOUT, deadline - time.monotonic())
        if left <= 0:  # nothing to wait for: the model is not even asked
            self._had_no_time(left)
            return
        try:
            answer = await asyncio.wait_for(self.ask(EXTRACT_INSTRUCTIONS, text), left)
            found = parse_extracted(answer, exchanges, numbers, first + 1)
        except TimeoutError:
            self._had_no_time(left)
            return
        except FAIL_OPEN as exc:
            self.warn("extract", "fact extraction failed; no facts taken: %r", exc)
            return
        for got in found:
            left = deadline - time.monotonic()
            if left <= 0 or not self.capturing():
                return
            fact = got.fact
            if self.masking():  # the model read masked text, but may write a number out
                fact = replace(fact, value=mask_sensitive(fact.value))
            try:
                timeout = min(WRITE_TIMEOUT, left)
                done = await self.store.remember(self.caller_id, fact, timeout=timeout)
            except FAIL_OPEN as exc:
                self.warn("extract-save", "could not save an extracted fact: %r", exc)
                continue
            self.extracted.append(done)

    def _had_no_time(self, given: float) -> None:
        # Say what used the time: the model, or (at the end of a call) the flush of
        # exchanges the store kept refusing, which leaves extraction none.
        flushed = self.flushed
        if flushed is not None and flushed[1] and given < EXTRACT_TIMEOUT:
            self.warn(
                "extract",
                "no facts taken: saving the call's exchanges used %.2f s of the %.1f s "
                "the end of a call may take (the store refused %d of them), leaving "
                "fact extraction %.2f s",
                flushed[0],
                flushed[2],
                flushed[1],
                max(0.0, given),
            )
        else:
            self.warn("extract", "fact extraction took too long; no facts taken")
