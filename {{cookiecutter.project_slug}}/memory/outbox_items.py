"""What the outbox of the hosted backends holds: an ``Item`` (one exchange, fact or
call summary, as the outbox and a service see it), a ``Row`` (an item with what the
outbox knows of its delivery) and ``Tombstones`` (what was forgotten).

Units: seconds since the epoch.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any

from .facts import Fact, fact_label, kind_takes_many, value_key
from .records import Exchange, Summary

KINDS = ("exchange", "fact", "summary")
KIND_OF = {"exchanges": "exchange", "facts": "fact", "summaries": "summary"}
"""PURGEABLE's names -> Item kinds."""


def short_hash(*parts: str) -> str:
    """24 hex digits of SHA-256 over ``parts``: ids for facts and summaries."""
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Item:
    """One exchange, fact or call summary, as the outbox and a Service see it.

    ``id`` is stable per caller: the exchange key, ``fact-<hash of kind>`` (a newer
    fact of the same kind replaces the item; for a kind that takes many values, one
    item per value: ``fact-<hash of kind and value>``; a replaced value kept as
    history is an item of its own), ``summary-<hash of call id>``. ``at`` is
    the exchange's or summary's ``created_at``, the fact's ``updated_at`` (seconds
    since the epoch). ``data`` holds the memory type's fields; ``remote`` the
    service's own ids for it (what a Service returned from ``put``)."""

    id: str
    caller_id: str
    kind: str
    call_id: str
    at: float
    data: dict[str, Any]
    remote: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of_exchange(cls, e: Exchange) -> Item:
        data = {**e.__dict__, "item_ids": list(e.item_ids)}
        return cls(e.key, e.caller_id, "exchange", e.call_id, e.created_at, data)

    @classmethod
    def of_fact(cls, caller_id: str, f: Fact) -> Item:
        # replaced_at 0.0: a current value (metadata values cannot be null at Zep)
        data = {
            "kind": f.kind,
            "value": f.value,
            "updated_at": f.updated_at,
            "learned_at": f.learned_at,
            "replaced_at": f.replaced_at or 0.0,
        }
        if f.replaced_at is not None:
            item_id = short_hash(f.kind, value_key(f.value), repr(f.replaced_at))
        elif kind_takes_many(f.kind):
            item_id = short_hash(f.kind, value_key(f.value))
        else:
            item_id = short_hash(f.kind)
        return cls(f"fact-{item_id}", caller_id, "fact", "", f.updated_at, data)

    @classmethod
    def of_summary(cls, caller_id: str, s: Summary) -> Item:
        data = {"call_id": s.call_id, "text": s.text, "created_at": s.created_at}
        item_id = f"summary-{short_hash(s.call_id)}"
        return cls(item_id, caller_id, "summary", s.call_id, s.created_at, data)

    def exchange(self) -> Exchange:
        return Exchange(**{**self.data, "item_ids": tuple(self.data["item_ids"])})

    def fact(self) -> Fact:
        d = self.data  # items written before dates were kept have no learned_at
        return Fact(
            d["kind"],
            d["value"],
            d["updated_at"],
            d.get("learned_at") or 0.0,
            d.get("replaced_at") or None,
        )

    def summary(self) -> Summary:
        return Summary(self.data["call_id"], self.data["text"], self.data["created_at"])

    def text(self) -> str:
        """What the service reads: words, not JSON (it extracts and indexes them)."""
        d = self.data
        if self.kind == "fact" and d.get("replaced_at"):  # history, not true now
            return f"{fact_label(d['kind'])} (no longer current): {d['value']}"
        if self.kind == "fact":
            return f"{fact_label(d['kind'])}: {d['value']}"
        if self.kind == "summary":
            return f"Summary of an earlier call: {d['text']}"
        # (an empty caller side: the call's opening, the agent's greeting alone)
        said = [f"Caller: {d['user_text']}"] if d["user_text"] else []
        return "\n".join(
            said + ([f"Agent: {d['assistant_text']}"] if d["assistant_text"] else [])
        )

    def metadata(self) -> dict[str, Any]:
        """The item as flat metadata (str, number, bool, list of str; 10 keys at most,
        Zep's limit [ZEP-SDK3]), which the services store and return as given: how an
        item read back from a service is rebuilt exactly (``from_metadata``)."""
        return {
            "lkm_type": self.kind,
            "lkm_id": self.id,
            **{f"lkm_{k}": v for k, v in self.data.items()},
        }

    @classmethod
    def from_metadata(
        cls, caller_id: str, meta: Any, remote: dict[str, Any] | None = None
    ) -> Item | None:
        """The Item a service returned, or None for anything this kit did not write."""
        try:
            data = {k[4:]: v for k, v in meta.items() if k.startswith("lkm_")}
            kind, item_id = data.pop("type"), data.pop("id")
            if kind not in KINDS:
                return None
            item = cls(
                item_id,
                caller_id,
                kind,
                data.get("call_id", ""),
                0.0,
                data,
                remote or {},
            )
            # rebuilding the memory type checks every field is there
            at = {
                "exchange": lambda: item.exchange().created_at,
                "fact": lambda: item.fact().updated_at,
                "summary": lambda: item.summary().created_at,
            }[kind]()
            return replace(item, at=float(at))
        except (AttributeError, KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Row:
    """An item as the outbox holds it."""

    item: Item
    version: int
    delivered: int
    delivered_at: float | None
    attempts: int

    @property
    def pending(self) -> bool:
        return self.delivered < self.version


@dataclass(frozen=True)
class Tombstones:
    """What was forgotten: item ids, call ids, and a time before which everything of
    the caller is gone. ``hides`` tells whether an item the service returned is one."""

    items: frozenset[str] = frozenset()
    calls: frozenset[str] = frozenset()
    before: float = 0.0

    def hides(self, item: Item) -> bool:
        return (
            item.id in self.items
            or (item.kind != "fact" and item.call_id in self.calls)
            or item.at <= self.before
        )
