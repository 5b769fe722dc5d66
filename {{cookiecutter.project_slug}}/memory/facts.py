"""Facts: the vocabulary of kinds, how a fact is cleaned, and how a new value is
reconciled with the ones held (confirm, replace keeping history, add).

Every backend applies ``reconcile``'s decision in one transaction, so all of them
reconcile alike.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import InvalidFactError
from .limits import MAX_FACT_KIND_CHARS, MAX_FACT_VALUE_CHARS
from .text import clean_text


@dataclass(frozen=True)
class Fact:
    """A durable fact about the caller: ``kind`` (lower-case words joined by ``_``,
    at most 40 characters, aliases resolved by ``FACT_KINDS``) and ``value`` (at most
    500 characters). Build one with ``Fact.of``, which checks and cleans both.

    Times are seconds since the epoch: ``learned_at`` when this value was first heard,
    ``updated_at`` when it was last heard (learned or confirmed: ``confirmed_at``);
    ``replaced_at`` is set only on history, a value a newer one replaced (see
    ``MemoryStore.history``). A ``learned_at`` of 0 (a fact stored before dates were
    kept) reads as ``updated_at``."""

    kind: str
    value: str
    updated_at: float = 0.0
    learned_at: float = 0.0
    replaced_at: float | None = None

    def __post_init__(self) -> None:
        if not self.learned_at:
            object.__setattr__(self, "learned_at", self.updated_at)

    @property
    def confirmed_at(self) -> float:
        """When the caller last said it (the same as ``updated_at``)."""
        return self.updated_at

    @classmethod
    def of(cls, kind: str, value: str, updated_at: float | None = None) -> Fact:
        """Raises ``InvalidFactError`` for an empty or too long kind or value."""
        k, v = normalise_fact(kind, value)
        at = time.time() if updated_at is None else updated_at
        return cls(k, v, at, at)


def normalise_fact(kind: str, value: str) -> tuple[str, str]:
    """Return ``(kind, value)`` cleaned, or raise ``InvalidFactError``. The kind is
    lower-case words joined by ``_`` ("Home City" -> "home_city"), then an alias is
    replaced by its kind (``FACT_KINDS``: "city", "where I live" -> "home_city"), so a
    newer value of the same kind replaces the old one however the model words it."""
    k = "_".join(re.findall(r"\w+", str(kind or "").lower()))
    k = _ALIASES.get(k, k)
    v = " ".join(clean_text(str(value or "")).split())  # storable by every backend
    if not k or len(k) > MAX_FACT_KIND_CHARS:
        raise InvalidFactError(
            f"a fact kind must have 1 to {MAX_FACT_KIND_CHARS} characters"
        )
    if not v or len(v) > MAX_FACT_VALUE_CHARS:
        raise InvalidFactError(
            f"a fact value must have 1 to {MAX_FACT_VALUE_CHARS} characters"
        )
    return k, v


@dataclass(frozen=True)
class FactKind:
    """One kind of the fact vocabulary: its ``name`` (as stored), the other ways a
    model or a caller words it (``aliases``), and whether a caller has several values
    at once (``many``: children, allergies) or one that a newer value replaces."""

    name: str
    aliases: tuple[str, ...] = ()
    many: bool = False


FACT_KINDS: tuple[FactKind, ...] = (
    FactKind("name", ("full name", "first name", "my name", "caller name")),
    FactKind("preferred_name", ("nickname", "call me", "goes by")),
    FactKind(
        "home_city",
        (
            "city",
            "home town",
            "hometown",
            "where i live",
            "lives in",
            "town",
            "residence",
        ),
    ),
    FactKind("home_address", ("address", "street address", "postal address")),
    FactKind("email", ("email address", "e mail", "e mail address")),
    FactKind("language", ("preferred language", "speaks")),
    FactKind("job", ("occupation", "profession", "job title", "work", "works as")),
    FactKind("employer", ("company", "works at", "works for")),
    FactKind("birthday", ("date of birth", "birth date", "dob")),
    FactKind("partner", ("spouse", "wife", "husband")),
    FactKind("child", ("children", "kid", "kids"), many=True),
    FactKind("pet", ("pets",), many=True),
    FactKind("allergy", ("allergies", "allergic to"), many=True),
    FactKind("medication", ("medications", "medicine", "medicines"), many=True),
    FactKind(
        "open_issue", ("issue", "issues", "open issues", "problem", "ticket"), many=True
    ),
)
"""The fact vocabulary, the one place to extend it. A kind outside it is kept as the
model words it and holds one value."""

_KINDS = {k.name: k for k in FACT_KINDS}
_ALIASES = {
    "_".join(re.findall(r"\w+", alias.lower())): k.name
    for k in FACT_KINDS
    for alias in k.aliases
}


def kind_takes_many(kind: str) -> bool:
    """True for a kind (normalised) whose values add up instead of replacing each other."""
    known = _KINDS.get(kind)
    return bool(known and known.many)


def value_key(value: str) -> str:
    """What two values must share to be the same fact: their words, lower-case
    ("Lisbon." and "lisbon" match; "Lisbon" and "Porto" do not)."""
    return " ".join(re.findall(r"\w+", value.casefold())) or value.casefold()


@dataclass(frozen=True)
class Remembered:
    """What ``MemoryStore.remember`` did. ``outcome``: "added" (a new value),
    "replaced" (``old`` is the value it replaced, now history) or "confirmed" (the
    value was known already: its ``updated_at`` moved on, nothing was added).
    ``fact``: the fact as stored now (a confirmed fact keeps its ``learned_at``)."""

    outcome: str
    fact: Fact
    old: Fact | None = None


@dataclass(frozen=True)
class FactChange:
    """How a store applies one ``remember`` (from ``reconcile``): ``retire`` the
    held values that become history (``replaced_at`` = the new fact's time), set
    ``confirm``'s ``updated_at`` (a held value, matched by kind and value), insert
    ``add``."""

    remembered: Remembered
    retire: tuple[Fact, ...] = ()
    confirm: Fact | None = None
    add: Fact | None = None


def reconcile(held: Sequence[Fact], new: Fact) -> FactChange:
    """Decide what remembering ``new`` does, given ``held``: the caller's current
    values of ``new.kind`` (every store reads them and applies the result in one
    transaction, so all backends reconcile alike).

    A value already held (``value_key``) is confirmed, never added twice; for a kind
    that takes one value (``kind_takes_many``) a different value replaces the held one,
    which becomes history; a kind that takes many gains the value."""
    same = next((f for f in held if value_key(f.value) == value_key(new.value)), None)
    many = kind_takes_many(new.kind)
    others = () if many else tuple(f for f in held if f is not same)
    if same is not None:
        confirmed = Fact(
            same.kind, same.value, max(new.updated_at, same.updated_at), same.learned_at
        )
        return FactChange(Remembered("confirmed", confirmed), others, confirmed)
    if others:
        old = max(others, key=lambda f: f.updated_at)
        return FactChange(Remembered("replaced", new, old), others, add=new)
    return FactChange(Remembered("added", new), add=new)


def matching_facts(facts: Sequence[Fact], kind: str, value: str | None) -> list[Fact]:
    """The facts ``forget(kind=..., value=...)`` deletes: every value of ``kind``
    (history included), or those equal to ``value`` (``value_key``)."""
    key = None if value is None else value_key(value)
    return [f for f in facts if f.kind == kind and key in (None, value_key(f.value))]


def fact_label(kind: str) -> str:
    """A fact's kind as the model reads it: "home_city" -> "home city"."""
    return kind.replace("_", " ")


def shown_kind(kind: str) -> str:
    """A fact's kind as the memory block shows it: a kind of ``FACT_KINDS`` as its
    words ("home city"), any other as one JSON string (``"favourite team"``). Those
    are the model's own words, which a caller can steer ("ignore previous
    instructions"), so they are quoted data like every remembered text."""
    label = fact_label(kind)[:MAX_FACT_KIND_CHARS]
    return label if kind in _KINDS else json.dumps(label, ensure_ascii=False)
