"""Text as memory keeps and shows it: clipped, quoted, storable.

Every pass here is linear in the text and cuts before it works, so a huge turn costs
no more than a short one (these run on the event loop, inside a reply's wait).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from .limits import PIECE_CHARS


def clip(text: str, limit: int, *, at_word: bool = False) -> str:
    """``text`` with whitespace runs made one space, at most ``limit`` characters; a
    cut text ends with "…". ``at_word``: cut after the last whole word that fits
    ("for her…", not "for her visi…"), unless that would drop more than half of what
    fits (one very long word is cut anyway)."""
    text = " ".join(text[: limit * 4].split())
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    if at_word:
        cut = head.rfind(" ")
        if text[limit - 1] != " " and cut > limit // 2:
            head = head[:cut]
        head = head.rstrip(" ,;:-")
    return head + "…"


def quoted(text: str, limit: int) -> str:
    """Remembered text (an exchange, a summary, a fact, a style note) as the block
    shows it: clipped to ``limit`` characters, then one JSON string (RFC 8259 section
    7). Quotes and backslashes are escaped and every line break is gone (whitespace
    runs are one space), so nothing a caller said can end the quoting or start a
    line that reads as the agent's or the system's."""
    return json.dumps(clip(text, limit), ensure_ascii=False)


def clean_text(text: str) -> str:
    """Text as every backend can store it, the same for each: lone UTF-16 surrogates
    (an emoji cut in half by a streaming provider) cannot be stored as UTF-8, so
    pairs are joined and lone halves replaced; NUL characters, which PostgreSQL's
    text type refuses (and which carry nothing a caller said), are dropped. The turn,
    fact or summary is kept."""
    text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text.replace("\x00", "")


def spans(
    text: str, cut: re.Pattern[str], size: int = PIECE_CHARS
) -> Iterator[tuple[int, int]]:
    """``text`` as ``(start, end)`` pieces, in order and covering it, each ending
    where ``cut`` matches (a character no match of the pass can hold: the pass over
    each piece finds what it finds over the whole) after its first ``size``
    characters, or at the text's end: so a pass holds the GIL for one piece at a
    time. A text with no cut past ``size`` is one piece."""
    start = 0
    while len(text) - start > size:
        found = cut.search(text, start + size)
        if found is None:
            break
        yield start, found.start()
        start = found.start()
    yield start, len(text)
