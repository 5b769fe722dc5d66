"""Caller ids: who memory is kept for, checked once, here.

A caller id is the key every row is stored under. It comes from authentication (the
dispatch's ``caller_id``, the SIP caller's number, the participant identity; see
``livekit_adapter.caller_id_for``), never from the model.
"""

from __future__ import annotations

import os
import re

import phonenumbers

from .errors import InvalidCallerIdError, WithheldCallerIdError
from .limits import MAX_CALLER_ID_CHARS
from .text import clip

_CALLER_ID_RE = re.compile(r"[A-Za-z0-9_.:@+\-]+")


def validate_caller_id(caller_id: object) -> str:
    """Return ``caller_id`` unchanged if it is usable, else raise ``InvalidCallerIdError``.

    Allowed: 1 to 128 characters from ASCII letters, digits and ``_ . : @ + -`` (enough
    for LiveKit identities, e-mail addresses, E.164 numbers and UUIDs; nothing that
    could be mistaken for a path, a wildcard or markup). Nothing is trimmed: " alice"
    and "alice" are different identities, so a space anywhere is refused, not dropped.
    """
    if not isinstance(caller_id, str):
        raise InvalidCallerIdError(
            f"caller id must be a string, got {type(caller_id).__name__}"
        )
    value = caller_id
    if not value.strip():
        raise InvalidCallerIdError("caller id is empty")
    if len(value) > MAX_CALLER_ID_CHARS:
        raise InvalidCallerIdError(
            f"caller id is {len(value)} characters long; the limit is {MAX_CALLER_ID_CHARS}"
        )
    if not _CALLER_ID_RE.fullmatch(value) or not value.isascii():
        bad = sorted(
            {c for c in value if not (c.isascii() and _CALLER_ID_RE.fullmatch(c))}
        )
        raise InvalidCallerIdError(
            f"caller id {value[:40]!r} has characters outside letters, digits and "
            f"'_.:@+-': {''.join(bad)!r}"
        )
    return value


PHONE_REGION = "US"
"""Where a phone number written without its country code is read as dialled from
(ISO 3166 code), unless ``MEMORY_PHONE_REGION`` says otherwise: "5550100200" and
"15550100200" are +15550100200 under "US"."""

_PHONE_LIKE = re.compile(r"\+?[\d\s\-.()]+")


def normalise_phone_number(number: str, region: str | None = None) -> str:
    """Return a phone number in E.164 form (``+`` and up to 15 ASCII digits), or raise
    ``InvalidCallerIdError``. Parsed by ``phonenumbers`` (Google's libphonenumber rules):
    spaces, dashes, dots and brackets are dropped, digits of any script are read as
    digits, a leading ``00`` is the international prefix, and a number without a
    country code is read as dialled from ``region`` (default: ``MEMORY_PHONE_REGION``,
    else ``PHONE_REGION``). A number no country could have (too short, too long, no
    such country code) is refused; whether it is in service is not checked."""
    text = str(number or "").strip()
    if text.startswith("00"):
        text = "+" + text[2:]
    region = (
        region or os.getenv("MEMORY_PHONE_REGION", "").strip().upper() or PHONE_REGION
    )
    try:
        parsed = phonenumbers.parse(text, region)
    except phonenumbers.NumberParseException:
        parsed = None
    if parsed is None or not phonenumbers.is_possible_number(parsed):
        if not text.startswith("+") and region not in phonenumbers.SUPPORTED_REGIONS:
            raise InvalidCallerIdError(
                f"MEMORY_PHONE_REGION={clip(region, 20)!r} is not a region code "
                "(ISO 3166, two letters: 'US', 'GB'), so a number without its "
                "country code cannot be read"
            )
        raise InvalidCallerIdError(
            f"{clip(text, 40)!r} is not a phone number in E.164 form"
        )
    return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)


def normalise_caller_id(caller_id: object) -> str:
    """A caller id as your dispatch gives it (``caller_id`` in the job metadata), in
    the form memory keys it by, or ``InvalidCallerIdError``. One that looks like a phone
    number (a ``+`` and digits, or at least 10 digits, with only spaces, dashes,
    dots and brackets between) is one: ``normalise_phone_number``, so
    "15550100200" from your backend and "+15550100200" from SIP are one caller.
    Anything else must pass ``validate_caller_id`` as it is (give account ids that
    are only digits a prefix, e.g. "acct-1234567890", to keep them apart from numbers)."""
    if isinstance(caller_id, str) and _PHONE_LIKE.fullmatch(caller_id.strip()):
        digits = sum(c.isdigit() for c in caller_id)
        if caller_id.strip().startswith("+") or digits >= 10:
            return normalise_phone_number(caller_id)
    return validate_caller_id(caller_id)


WITHHELD_CALLER_IDS = (
    # Twilio's placeholders for a withheld caller ID (the words spelt on a keypad),
    # documented in Twilio's Voice API "Anonymous/Restricted/Unknown caller ID" notes
    "+266696687",  # ANONYMOUS
    "+8656696",  # UNKNOWN
    "+86282452253",  # UNAVAILABLE
    "+7378742833",  # RESTRICTED
    # the words carriers and SIP trunks send instead of a number
    "anonymous",
    "unknown",
    "unavailable",
    "restricted",
    "private",
    "withheld",
    "blocked",
    "unknown caller",
    "no caller id",
)
"""Caller ids that stand for a withheld number, not for a caller: every caller who
hides their number would share one memory under them. Compared without case, spaces
or punctuation, and numbers by their digits (``+266696687`` and ``266-696-687`` are
one). An id ``...@anonymous.invalid`` (RFC 3323's anonymous SIP URI) is one too. Add
your carrier's with ``MEMORY_WITHHELD_CALLER_IDS`` (comma-separated)."""
WITHHELD_SETTING = "MEMORY_WITHHELD_CALLER_IDS"


def _withheld_key(value: str) -> str:
    text = value.strip().casefold()
    if _PHONE_LIKE.fullmatch(text):
        return "".join(c for c in text if c.isdigit())
    return " ".join(re.sub(r"[^\w]+", " ", text).split())


def withheld(caller_id: object) -> bool:
    """Whether ``caller_id`` (as it arrived, or normalised) is a placeholder for a
    withheld number: one of ``WITHHELD_CALLER_IDS`` or of ``MEMORY_WITHHELD_CALLER_IDS``,
    or an ``@anonymous.invalid`` address."""
    if not isinstance(caller_id, str):
        return False
    if caller_id.strip().casefold().endswith("@anonymous.invalid"):
        return True
    extra = os.getenv(WITHHELD_SETTING, "").split(",")
    known = {_withheld_key(v) for v in (*WITHHELD_CALLER_IDS, *extra) if v.strip()}
    return _withheld_key(caller_id) in known


def refuse_withheld(caller_id: object) -> None:
    """Raise ``WithheldCallerIdError`` when ``caller_id`` is a placeholder for a
    withheld number (``withheld``): such a call runs with memory off."""
    if withheld(caller_id):
        raise WithheldCallerIdError(
            f"caller id {clip(str(caller_id), 40)!r} stands for a withheld number, "
            f"not a caller (memory.callers.WITHHELD_CALLER_IDS, {WITHHELD_SETTING})"
        )


IDENTITY_PREFIX = "identity:"
"""What a participant identity in the phone namespace is kept under (see
``identity_caller_id``)."""


def identity_caller_id(identity: object) -> str:
    """The caller id of a participant identity from your token server: the identity
    as it is, unless it begins with ``+`` (the phone namespace, which belongs to SIP
    callers' numbers and to numbers your dispatch gives), then ``identity:`` and the
    identity. So a web caller whose identity is "+15550100200" never reads or writes
    the memory of the phone caller +1 555 010 0200; to join the two on purpose, give
    the number as the dispatch's ``caller_id``. Raises ``InvalidCallerIdError``."""
    value = validate_caller_id(identity)
    if value.startswith("+"):
        return validate_caller_id(IDENTITY_PREFIX + value)
    return value
