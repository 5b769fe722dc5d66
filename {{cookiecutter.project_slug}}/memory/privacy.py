"""Masking of sensitive numbers: what a caller says is masked before it is kept.

Card numbers, national ids (US SSN), bank accounts and IBANs are replaced by a label
such as "[card number]" before anything is saved, shown to the model or logged.
Retention (how long memory is kept) is in ``retention.py``; erasure is each store's
``forget`` (``tools.forget`` during a call).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from stdnum import iban, luhn, numdb
from stdnum.iso7064 import mod_97_10
from stdnum.us import ssn

from .limits import switched_off
from .text import spans

_DIGIT_WORDS = {
    "zero": "0", "oh": "0", "one": "1", "two": "2", "three": "3", "four": "4",
    "five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9",
}  # fmt: skip
# A run of digits as a transcript writes them: "4111 1111 1111 1111", "123-45-6789",
# "4 1 1 1 ...", "four one one one ...". Digits of any script count (str.isdigit).
_NUMBER_TOKEN = r"(?:\d+|" + "|".join(_DIGIT_WORDS) + r")"
# A run is found token by token (a token, then 1 to 3 separators before the next):
# one regular expression over a run of 100,000 spaced digits held the GIL 30 ms.
_TOKEN = re.compile(rf"\b{_NUMBER_TOKEN}\b", re.IGNORECASE)
_SEPARATORS = re.compile(r"[\s\-./,]{1,3}")
_IBAN = re.compile(r"\b[A-Z]{2}[0-9]{2}(?:[ \-]?[A-Z0-9]){11,30}\b", re.IGNORECASE)
IBAN_MAX_CHARS = 64
"""The longest text ``_IBAN`` matches: 4 characters, then 30 of one or two."""
_NOT_WORD = re.compile(r"\W")  # where a long text is cut: no token spans one


SSN_WORDS = r"social|ssn|security number"
"""Words that, said just before nine digits, name them a social security number."""
_SSN_WORDS = re.compile(SSN_WORDS)


def _card(digits: str, groups: tuple[int, ...], before: str) -> bool:
    # ISO/IEC 7812: 13 to 19 digits, issuers' numbers start 2-6, Luhn-checked
    # (the cheap tests first: most spans fail them)
    return 13 <= len(digits) <= 19 and digits[0] in "23456" and luhn.is_valid(digits)


def _us_ssn(digits: str, groups: tuple[int, ...], before: str) -> bool:
    # python-stdnum checks the SSA's rules (never area 000, 666 or 9xx, group 00,
    # serial 0000, nor the numbers the SSA voided). Written 3-2-4 it is one anywhere;
    # other groupings only after words that name it.
    if len(digits) != 9:
        return False
    named = groups == (3, 2, 4) or _SSN_WORDS.search(before) is not None
    return named and ssn.is_valid(digits)


def _bank_account(digits: str, groups: tuple[int, ...], before: str) -> bool:
    # No checksum to go by: 6 to 17 digits right after words that name a bank account
    # or routing number (US ABA accounts are at most 17 digits).
    return 6 <= len(digits) <= 17 and _names_bank(before)


_BANK_WORDS = re.compile(r"bank|routing|sort code|checking|savings|account and")


@functools.lru_cache(maxsize=64)
def _names_bank(before: str) -> bool:
    # every span starting at one token has the same ``before``: searched once
    return _BANK_WORDS.search(before) is not None


@dataclass(frozen=True)
class SensitiveNumber:
    """One kind of number masked before anything is kept. ``label`` replaces it;
    ``matches(digits, groups, before)`` says whether a run of digits is one:
    ``digits`` the ASCII digits, ``groups`` how many were said together (e.g.
    ``(3, 2, 4)``), ``before`` the 40 characters before it, lower-cased."""

    label: str
    matches: Callable[[str, tuple[int, ...], str], bool]
    lengths: range = range(6, 20)
    """How many digits it can have (6 to 19 at most): ``matches`` is asked only
    about runs of digits of these lengths, which keeps masking cheap."""


SENSITIVE_NUMBERS: list[SensitiveNumber] = [
    SensitiveNumber("[card number]", _card, range(13, 20)),
    SensitiveNumber("[SSN]", _us_ssn, range(9, 10)),
    SensitiveNumber("[bank account number]", _bank_account, range(6, 18)),
]
"""What ``mask_sensitive`` masks besides IBANs (ISO 13616's check digits and, for a
country in its registry, the account's format, both checked by python-stdnum), first
match wins. Append a ``SensitiveNumber`` for another national id."""


def mask_sensitive(text: str) -> str:
    """``text`` with payment card numbers, national ids and bank accounts
    (``SENSITIVE_NUMBERS``) and IBANs replaced by a label such as "[card number]",
    however they were written or transcribed: "4111 1111 1111 1111", "4111-1111-...",
    "4 1 1 1 ...", "four one one one ...". Everything else is left as it was.

    Linear in the text's length (about 3 µs a character for a text of spaced
    digits, its worst case; benchmarks/event_loop.py): a caller of this on the event
    loop bounds the text first (``CallMemory.capture`` keeps ``MAX_TURN_CHARS``).
    Each pass reads a long text in pieces (``limits.PIECE_CHARS``), so on a thread
    it never holds the GIL long."""
    text = _replaced(text, _ibans(text))
    return _replaced(text, _number_runs(text))


def _replaced(text: str, found: Iterator[tuple[int, int, str]]) -> str:
    # ``text`` with each (start, end) span of ``found``, in order, replaced
    out, at = [], 0
    for start, end, new in found:
        out += [text[at:start], new]
        at = end
    return "".join([*out, text[at:]])


def _ibans(text: str) -> Iterator[tuple[int, int, str]]:
    # What _IBAN.sub(_mask_iban, text) replaces, found piece by piece: each piece is
    # read with IBAN_MAX_CHARS more after it, so a match starting in it is whole.
    at = 0
    for start, end in spans(text, _NOT_WORD):
        for match in _IBAN.finditer(text, max(start, at), end + IBAN_MAX_CHARS):
            if match.start() >= end:  # the next piece's (found again there)
                break
            at = match.end()
            yield match.start(), at, _mask_iban(match)


def _number_runs(text: str) -> Iterator[tuple[int, int, str]]:
    # The runs of number tokens (``_TOKEN``, 1 to 3 separators between two) and
    # what each is masked to; no token holds the \W where a piece ends.
    first = last = -1
    for start, end in spans(text, _NOT_WORD):
        for token in _TOKEN.finditer(text, start, end):
            if last < 0 or not _SEPARATORS.fullmatch(text, last, token.start()):
                if last >= 0:
                    yield first, last, _mask_run(text, first, last)
                first = token.start()
            last = token.end()
    if last >= 0:
        yield first, last, _mask_run(text, first, last)


def masking_on() -> bool:
    """``MEMORY_MASK_SENSITIVE`` (default on; "0", "false", "no" or "off" turns
    masking off): whether CallMemory masks what it keeps with ``mask_sensitive``."""
    return not switched_off("MEMORY_MASK_SENSITIVE")


def _mask_iban(match: re.Match[str]) -> str:
    before = match.string[max(0, match.start() - 40) : match.start()].lower()
    parts = re.split(r"([ \-])", match.group())
    while parts:  # a greedy match may have taken the next word too: drop words
        if _is_iban("".join(parts), before):
            return "[IBAN]" + match.group()[len("".join(parts)) :]
        parts = parts[:-2]
    return match.group()


def _is_iban(said: str, before: str) -> bool:
    # ISO 13616's check digits (ISO 7064 MOD 97-10, from python-stdnum) pass for one
    # string in 97, so a postcode, flight number or number plate followed by a few
    # words passed in 2-3% of sentences. A country in python-stdnum's IBAN registry
    # must also have its BBAN's length and format there (stdnum.iban, without the
    # national checks, which want the bank in a registry too); one outside it (a
    # country that joined later) is masked only after words that name an account.
    number = said.replace(" ", "").replace("-", "").upper()
    if not 15 <= len(number) <= 34 or not number.isascii() or not number.isalnum():
        return False
    if not mod_97_10.is_valid(number[4:] + number[:4]):
        return False
    if _IBAN_REGISTRY.info(number)[0][1]:
        return iban.is_valid(number, check_country=False)
    return _ACCOUNT_WORDS.search(before) is not None


_IBAN_REGISTRY = numdb.get("iban")
_ACCOUNT_WORDS = re.compile(r"iban|account|bank|transfer|wire")


def _mask_run(text: str, begin: int, stop: int) -> str:
    # ``text[begin:stop]``, a run of number tokens, masked. Linear in the run: at
    # each token, only the few spans of 6 to 19 digits that start there are tried
    # (found with a running count, longest first), and the 40 characters before a
    # span are sliced, never the whole run before it.
    run = text[begin:stop]
    tokens = [
        (t.start(), t.end(), _digits_of(t.group()))
        for t in re.finditer(_NUMBER_TOKEN, run, re.IGNORECASE)
    ]
    if sum(len(d) for _, _, d in tokens) < 6:
        return run
    context = text[max(0, begin - 40) : begin].lower()
    out, at, i = [], 0, 0
    while i < len(tokens):
        spans, digits, lengths = [], "", []
        for j in range(i, min(len(tokens), i + 19)):  # 19 digits at most
            digits += tokens[j][2]
            lengths.append(len(tokens[j][2]))
            if len(digits) > 19:
                break
            if len(digits) >= 6:
                spans.append((j, digits, tuple(lengths)))
        start = tokens[i][0]
        before = (context + run[max(0, start - 40) : start].lower())[-40:]
        for j, digits, groups in reversed(spans):
            kind = _first_kind(digits, groups, before)
            if kind is not None:
                out += [run[at:start], kind.label]
                at, i = tokens[j][1], j
                break
        i += 1
    return "".join([*out, run[at:]])


def _first_kind(
    digits: str, groups: tuple[int, ...], before: str
) -> SensitiveNumber | None:
    for kind in SENSITIVE_NUMBERS:
        if len(digits) in kind.lengths and kind.matches(digits, groups, before):
            return kind
    return None


def _digits_of(token: str) -> str:
    word = _DIGIT_WORDS.get(token.lower())
    if word is not None:
        return word
    # digits of other scripts as ASCII ones (a long ASCII run: as it is, at once)
    return token if token.isascii() else "".join(str(int(c)) for c in token)
