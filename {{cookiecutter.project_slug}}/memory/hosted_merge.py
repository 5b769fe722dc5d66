"""How a hosted store's reads merge the outbox with the service: the newest copy of
an item wins, what was forgotten stays hidden (``Tombstones``), and recall takes the
caller's freshest exchanges from the outbox (the services make writes searchable
seconds to minutes later) before the service's own ranking, the same words once.
"""

from __future__ import annotations

import re
import time

from .limits import RECENT_SUMMARIES
from .outbox import LAG_WINDOW
from .outbox_items import Item, Row, Tombstones
from .records import Exchange, Recall


def merged(
    listed: list[Item] | None,
    rows: list[Row],
    marks: Tombstones,
    kinds: tuple[str, ...],
) -> dict[str, Item]:
    """The caller's items of ``kinds`` by id: what the service ``listed`` (None: it
    cannot list) less what ``marks`` hides, and the outbox's ``rows`` over it."""
    # a service may hold two copies of an item (two workers wrote it): the newest wins
    ordered = sorted(listed or [], key=lambda i: i.at)
    items = {i.id: i for i in ordered if not marks.hides(i)}
    # the outbox's copy is the newest
    items.update({r.item.id: r.item for r in rows if r.item.kind in kinds})
    return items


def recalled(
    items: dict[str, Item],
    rows: list[Row],
    found: list[Item],
    query: str,
    limit: int,
    exclude_call_id: str | None,
) -> Recall:
    """What recall returns: the profile of ``items`` with the facts a service derived
    itself, and the ``limit`` exchanges that best match ``query``: the outbox's
    fresh ones (``rows``) first, then the service's hits (``found``), leaving out
    those of ``exclude_call_id``."""
    now = time.time()
    # Write lag: what the service may not have indexed yet comes from the outbox.
    fresh = [
        r.item
        for r in rows
        if r.item.kind == "exchange"
        and (r.pending or (r.delivered_at or 0) > now - LAG_WINDOW)
    ]
    ranked = [
        *rank(fresh, query_words(query)),
        *(i for i in found if i.kind == "exchange"),
    ]
    exchanges: dict[str, Exchange] = {}
    outbox = {r.item.id: r.item for r in rows}
    said: set[tuple[str, str]] = set()  # the same words twice (a fixed greeting) once
    for hit in ranked:
        item = outbox.get(hit.id, hit)
        if item.call_id != exclude_call_id and hit.id not in exchanges:
            e = item.exchange()
            if (e.user_text, e.assistant_text) not in said:
                said.add((e.user_text, e.assistant_text))
                exchanges[hit.id] = e
    profile = profile_of(items)
    # Facts a service derived itself (Zep's graph) follow the caller's own facts.
    kinds = {f.kind for f in profile.facts}
    derived = [
        f
        for f in (i.fact() for i in found if i.kind == "fact")
        if f.kind not in kinds and f.replaced_at is None
    ]
    return Recall(
        (*profile.facts, *derived),
        profile.summaries,
        tuple(exchanges.values())[:limit],
    )


def profile_of(items: dict[str, Item]) -> Recall:
    """The current facts (newest first) and the latest call summaries among ``items``."""
    facts = sorted(
        (
            f
            for f in (i.fact() for i in items.values() if i.kind == "fact")
            if f.replaced_at is None
        ),
        key=lambda f: -f.updated_at,
    )
    summaries = sorted(
        (i.summary() for i in items.values() if i.kind == "summary"),
        key=lambda s: -s.created_at,
    )
    return Recall(tuple(facts), tuple(summaries[:RECENT_SUMMARIES]))


_WORD = re.compile(r"\w+")


def query_words(text: str) -> set[str]:
    """Content words of what the caller said: 4+ letters or a number, lower-case, as
    plain words (never search syntax)."""
    return {w for w in _WORD.findall(text.lower()) if len(w) > 3 or w.isdigit()}


def rank(items: list[Item], words: set[str]) -> list[Item]:
    """Exchanges that share words with the query, most shared first, then newest."""
    scored = []
    for item in items:
        said = set(_WORD.findall(Item.text(item).lower()))
        if shared := len(words & said):
            scored.append((-shared, -item.at, item))
    return [item for *_, item in sorted(scored, key=lambda s: s[:2])]
