"""Turn pairing: which reply answers which of the caller's turns (plain code, no
I/O). ``TurnPairing.add`` takes one chat message and returns the exchanges it
changed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .records import Exchange, exchange_key
from .text import clean_text


@dataclass
class _Reply:
    at: float
    item_id: str
    text: str
    interrupted: bool
    speech_id: str | None = None


@dataclass
class _Turn:
    """The exchange being built: one user message and the replies to it."""

    user_item_id: str
    at: float
    user_text: str
    replies: list[_Reply] = field(default_factory=list)
    speech_id: str | None = None  # the reply (speech) that added this message, if any

    def exchange(self, caller_id: str, call_id: str) -> Exchange:
        replies = sorted(self.replies, key=lambda r: r.at)
        return Exchange(
            key=exchange_key(caller_id, self.user_item_id),
            caller_id=caller_id,
            call_id=call_id,
            user_text=self.user_text,
            assistant_text="\n".join(dict.fromkeys(r.text for r in replies)),
            interrupted=any(r.interrupted for r in replies),
            # (an opening's key is its first reply's id: listed once)
            item_ids=tuple(
                dict.fromkeys((self.user_item_id, *(r.item_id for r in replies)))
            ),
            created_at=self.at,
        )


class TurnPairing:
    """Pairs a call's messages into exchanges: which reply answers which user turn.

    Plain code (no store, no tasks): ``add`` takes one message and returns the
    exchanges it changed, to be saved. The caller's words are never dropped nor
    paired with a reply they did not prompt:
    - an item id seen before is ignored, so duplicate events change nothing;
    - each user message opens an exchange; one that gets no reply (the caller barged
      in before the first audio frame, or hung up) stays a user-only exchange;
    - by speech, when the framework says which reply added a message (``speech_id``,
      LiveKit's ``SpeechHandle.id``: one reply, with every step of its tool loop, that
      adds the user message it answers before its own text): every assistant message
      of that speech answers that user message, whatever order or times they arrive
      with. A speech made by another one's work (``speech_within``: a tool's
      ``say``, the next agent's greeting after a handoff) answers what that one
      answers. A speech that added no user message and was made by none (the
      greeting, an app's ``generate_reply`` without ``user_input``) answers none of
      those: its text is not saved as the answer to a turn another speech answers;
    - by time (``created_at``) otherwise: for messages without a speech id (realtime
      transcripts, items the app hands over itself) and for replies of a speech that
      added no user message. Such a reply joins the latest turn that began before it
      if that turn has no speech of its own, so several replies to one turn make one
      exchange, and a reply already under way when the caller spoke again stays with
      the turn it answered; a caller's transcript that arrives after the reply it
      prompted (realtime providers do this) takes that reply over;
    - the replies said before the caller's first words that answer nothing (the
      greeting) are what that first turn answers: when it arrives they become the
      call's opening, an exchange of the agent's words alone (``user_text`` empty), so
      "Yes, it went fine" keeps what it answered. They are never the caller's words,
      and a call in which the caller never speaks saves nothing. A greeting still
      being said when the caller's first turn arrives is nobody's answer;
    - an empty text counts as no reply, and the same text is kept once.
    """

    def __init__(
        self, caller_id: str, call_id: str, clock: Callable[[], float] = time.time
    ):
        self.caller_id = caller_id
        self.call_id = call_id
        self._clock = clock
        # Messages from before this memory began (history replayed into a new
        # session of the call) are complete exchanges: new replies never join them.
        self._began = clock()
        self._seen: set[str] = set()
        self.turns: list[_Turn] = []  # by when each began
        self._unpaired: list[
            _Reply
        ] = []  # replies of no turn (greeting, late transcript)
        self.opening: _Turn | None = None  # the greeting the first turn answered
        self._by_speech: dict[str, _Turn] = {}  # speech id -> the turn it added
        self._within: dict[str, str] = {}  # speech id -> the speech whose work made it

    def speech_within(self, speech_id: str, parent_speech_id: str) -> None:
        """Speech ``speech_id`` was created by the work of ``parent_speech_id`` (a
        tool's ``say`` or ``generate_reply``, the next agent's greeting after a
        handoff): unless it adds a user message of its own, its text answers what
        the parent's answers."""
        if speech_id != parent_speech_id:
            self._within[speech_id] = parent_speech_id

    def _answers(self, speech_id: str | None) -> _Turn | None:
        """The turn a speech's replies answer: the one it added, else its parent's."""
        for _ in range(20):  # a chain of handoffs and tools, never a cycle
            if speech_id is None:
                return None
            if speech_id in self._by_speech:
                return self._by_speech[speech_id]
            speech_id = self._within.get(speech_id)
        return None

    def add(
        self,
        role: str,
        item_id: str,
        text: str | None,
        *,
        interrupted: bool = False,
        created_at: float | None = None,
        speech_id: str | None = None,
    ) -> list[Exchange]:
        """Take one message; returns the exchanges to (re)save, oldest first."""
        if item_id in self._seen:
            return []
        self._seen.add(item_id)
        text = clean_text(text or "").strip()
        at = (
            created_at
            if created_at is not None and math.isfinite(created_at)
            else self._clock()
        )
        changed: list[_Turn] = []
        if role == "user" and text:
            turn = _Turn(item_id, at, text, speech_id=speech_id)
            if speech_id is not None:
                # Its speech's replies, wherever they were put before it came.
                self._by_speech[speech_id] = turn
                changed += self._take(
                    turn, lambda r: self._answers(r.speech_id) is turn
                )
            else:
                before = next(
                    (t for t in reversed(self.turns) if self._precedes(t.at, at)), None
                )
                # a late transcript takes the replies of no speech's turn made after it
                changed += self._take(
                    turn,
                    lambda r: (
                        r.at >= at
                        and self._replayed(r.at) == self._replayed(at)
                        and self._answers(r.speech_id) is None
                    ),
                    only=[before]
                    if before is not None and before.speech_id is None
                    else [],
                )
            if not self._era(at):
                changed += self._open(at)  # the first turn of this session
            self.turns.append(turn)
            self.turns.sort(key=lambda t: t.at)
            changed.append(turn)
        elif role == "assistant" and text:
            reply = _Reply(at, item_id, text, interrupted, speech_id)
            owner = self._answers(speech_id)
            if owner is None:
                latest = next(
                    (t for t in reversed(self.turns) if self._precedes(t.at, at)), None
                )
                # a turn another speech answers is not this reply's
                owner = (
                    latest if latest is not None and latest.speech_id is None else None
                )
            if owner is None:
                # the greeting, a reply whose caller transcript is still to come, or
                # one that answers nothing the caller said
                self._unpaired = [*self._unpaired[-9:], reply]
                return []
            # (the same text twice, e.g. one interrupted reply reported under two ids,
            # is kept once in the exchange; see _Turn.exchange)
            owner.replies.append(reply)
            changed.append(owner)
        return [
            t.exchange(self.caller_id, self.call_id) for t in _oldest_first(changed)
        ]

    def _open(self, first_turn_at: float) -> list[_Turn]:
        # Kept apart from self.turns: the opening is no turn of the caller's, so the
        # summary, extraction's numbering and the turn count stay the caller's own.
        said = [
            r
            for r in self._unpaired
            if r.at < first_turn_at
            and self._replayed(r.at) == self._replayed(first_turn_at)
            and self._answers(r.speech_id) is None
        ]
        if not said:
            return []
        self._unpaired = [r for r in self._unpaired if r not in said]
        self.opening = _Turn(said[0].item_id, said[0].at, "", replies=said)
        return [self.opening]

    def _replayed(self, at: float) -> bool:
        return at < self._began

    def _precedes(self, turn_at: float, at: float) -> bool:
        # a turn began before a message at ``at``, in the same session of the call
        return turn_at <= at and self._replayed(turn_at) == self._replayed(at)

    def _era(self, at: float) -> list[_Turn]:
        return [t for t in self.turns if self._replayed(t.at) == self._replayed(at)]

    def _take(
        self,
        turn: _Turn,
        mine: Callable[[_Reply], bool],
        only: list[_Turn] | None = None,
    ) -> list[_Turn]:
        """Move the replies ``mine`` picks to ``turn``, from the unpaired ones and from
        the turns ``only`` names (all turns when None); returns the turns it changed."""
        taken = [r for r in self._unpaired if mine(r)]
        self._unpaired = [r for r in self._unpaired if not mine(r)]
        changed = []
        for other in self.turns if only is None else only:
            moved = [r for r in other.replies if mine(r)]
            if moved:
                other.replies = [r for r in other.replies if not mine(r)]
                taken += moved
                changed.append(other)
        turn.replies = sorted(turn.replies + taken, key=lambda r: r.at)
        return changed

    def exchanges(self) -> list[Exchange]:
        """Every exchange of the call so far, oldest first."""
        return [t.exchange(self.caller_id, self.call_id) for t in self.turns]

    def drop_before(self, at: float) -> int:
        """Drop the turns (and replies of none) begun at or before ``at`` (seconds
        since the epoch: an erasure of the caller made while this call went on);
        returns how many of the caller's turns went. Later turns stay as they are."""
        kept = [t for t in self.turns if t.at > at]
        dropped = len(self.turns) - len(kept)
        self.turns = kept
        if self.opening is not None and self.opening.at <= at:
            self.opening = None
        self._unpaired = [r for r in self._unpaired if r.at > at]
        self._by_speech = {s: t for s, t in self._by_speech.items() if t.at > at}
        return dropped

    def rewrite(self, edit: Callable[[str], str]) -> list[Exchange]:
        """Apply ``edit`` to every text the call holds (the caller's turns, the
        replies, the opening: a fact forgotten during the call); returns the
        exchanges that changed, to be saved again."""
        changed = []
        for turn in [*([self.opening] if self.opening else []), *self.turns]:
            before = (turn.user_text, [r.text for r in turn.replies])
            turn.user_text = edit(turn.user_text)
            for r in turn.replies:
                r.text = edit(r.text)
            if (turn.user_text, [r.text for r in turn.replies]) != before:
                changed.append(turn.exchange(self.caller_id, self.call_id))
        for r in self._unpaired:
            r.text = edit(r.text)
        return changed

    def clear(self) -> None:
        """Drop what was paired (the caller had this call forgotten); ids stay seen."""
        self.turns.clear()
        self.opening = None
        self._unpaired.clear()
        self._by_speech.clear()
        self._within.clear()


def _oldest_first(turns: list[_Turn]) -> list[_Turn]:
    return sorted({id(t): t for t in turns}.values(), key=lambda t: t.at)
