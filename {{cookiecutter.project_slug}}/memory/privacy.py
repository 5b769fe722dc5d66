"""Masking of sensitive numbers: what a caller says is masked before it is kept.

Card numbers, national ids (US SSN), bank accounts and IBANs are replaced by a label
such as "[card number]" before anything is saved, shown to the model or logged.
Retention (how long memory is kept) is in ``retention.py``; erasure is each store's
``forget`` (``tools.forget`` during a call).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from stdnum import luhn
from stdnum.iso7064 import mod_97_10
from stdnum.us import ssn

from .limits import switched_off

_DIGIT_WORDS = {
    "zero": "0", "oh": "0", "one": "1", "two": "2", "three": "3", "four": "4",
    "five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9",
}  # fmt: skip
# A run of digits as a transcript writes them: "4111 1111 1111 1111", "123-45-6789",
# "4 1 1 1 ...", "four one one one ...". Digits of any script count (str.isdigit).
_NUMBER_TOKEN = r"(?:\d+|" + "|".join(_DIGIT_WORDS) + r")"
_NUMBER_RUN = re.compile(
    rf"\b{_NUMBER_TOKEN}\b(?:[\s\-./,]{{1,3}}\b{_NUMBER_TOKEN}\b)*", re.IGNORECASE
)
_IBAN = re.compile(r"\b[A-Z]{2}[0-9]{2}(?:[ \-]?[A-Z0-9]){11,30}\b", re.IGNORECASE)


SSN_WORDS = r"social|ssn|security number"
"""Words that, said just before nine digits, name them a social security number."""


def _card(digits: str, groups: tuple[int, ...], before: str) -> bool:
    # ISO/IEC 7812: 13 to 19 digits, issuers' numbers start 2-6, Luhn-checked
    return 13 <= len(digits) <= 19 and digits[0] in "23456" and luhn.is_valid(digits)


def _us_ssn(digits: str, groups: tuple[int, ...], before: str) -> bool:
    # python-stdnum checks the SSA's rules (never area 000, 666 or 9xx, group 00,
    # serial 0000, nor the numbers the SSA voided). Written 3-2-4 it is one anywhere;
    # other groupings only after words that name it.
    if len(digits) != 9 or not ssn.is_valid(digits):
        return False
    return groups == (3, 2, 4) or re.search(SSN_WORDS, before) is not None


def _bank_account(digits: str, groups: tuple[int, ...], before: str) -> bool:
    # No checksum to go by: 6 to 17 digits right after words that name a bank account
    # or routing number (US ABA accounts are at most 17 digits).
    return 6 <= len(digits) <= 17 and (
        re.search(r"bank|routing|sort code|checking|savings|account and", before)
        is not None
    )


@dataclass(frozen=True)
class SensitiveNumber:
    """One kind of number masked before anything is kept. ``label`` replaces it;
    ``matches(digits, groups, before)`` says whether a run of digits is one:
    ``digits`` the ASCII digits, ``groups`` how many were said together (e.g.
    ``(3, 2, 4)``), ``before`` the 40 characters before it, lower-cased."""

    label: str
    matches: Callable[[str, tuple[int, ...], str], bool]


SENSITIVE_NUMBERS: list[SensitiveNumber] = [
    SensitiveNumber("[card number]", _card),
    SensitiveNumber("[SSN]", _us_ssn),
    SensitiveNumber("[bank account number]", _bank_account),
]
"""What ``mask_sensitive`` masks besides IBANs (ISO 13616's check digits, computed by python-stdnum),
first match wins. Append a ``SensitiveNumber`` for another national id."""


def mask_sensitive(text: str) -> str:
    """``text`` with payment card numbers, national ids and bank accounts
    (``SENSITIVE_NUMBERS``) and IBANs replaced by a label such as "[card number]",
    however they were written or transcribed: "4111 1111 1111 1111", "4111-1111-...",
    "4 1 1 1 ...", "four one one one ...". Everything else is left as it was."""
    text = _IBAN.sub(_mask_iban, text)
    return _NUMBER_RUN.sub(_mask_run, text)


def masking_on() -> bool:
    """``MEMORY_MASK_SENSITIVE`` (default on; "0", "false", "no" or "off" turns
    masking off): whether CallMemory masks what it keeps with ``mask_sensitive``."""
    return not switched_off("MEMORY_MASK_SENSITIVE")


def _mask_iban(match: re.Match[str]) -> str:
    parts = re.split(r"([ \-])", match.group())
    while parts:  # a greedy match may have taken the next word too: drop words
        if _iban_checksum("".join(parts)):
            return "[IBAN]" + match.group()[len("".join(parts)) :]
        parts = parts[:-2]
    return match.group()


def _iban_checksum(said: str) -> bool:
    # ISO 13616's check digits (ISO 7064 MOD 97-10, from python-stdnum), for any
    # country: stdnum's full IBAN check also wants the country and the bank in its
    # registry, and a caller's real IBAN must be masked even where it has neither.
    number = said.replace(" ", "").replace("-", "").upper()
    if not 15 <= len(number) <= 34 or not number.isascii() or not number.isalnum():
        return False
    return bool(mod_97_10.is_valid(number[4:] + number[:4]))


def _mask_run(match: re.Match[str]) -> str:
    run = match.group()
    tokens = [
        (t.start(), t.end(), _digits_of(t.group()))
        for t in re.finditer(_NUMBER_TOKEN, run, re.IGNORECASE)
    ]
    if sum(len(d) for _, _, d in tokens) < 6:
        return run
    context = match.string[max(0, match.start() - 40) : match.start()].lower()
    out, at, i = [], 0, 0
    while i < len(tokens):
        for j in range(min(len(tokens) - 1, i + 18), i - 1, -1):  # 19 digits at most
            digits = "".join(d for _, _, d in tokens[i : j + 1])
            if not 6 <= len(digits) <= 19:
                continue
            groups = tuple(len(d) for _, _, d in tokens[i : j + 1])
            before = (context + run[: tokens[i][0]].lower())[-40:]
            kind = next(
                (k for k in SENSITIVE_NUMBERS if k.matches(digits, groups, before)),
                None,
            )
            if kind is not None:
                out += [run[at : tokens[i][0]], kind.label]
                at, i = tokens[j][1], j
                break
        i += 1
    return "".join([*out, run[at:]])


def _digits_of(token: str) -> str:
    word = _DIGIT_WORDS.get(token.lower())
    return word if word is not None else "".join(str(int(c)) for c in token)
