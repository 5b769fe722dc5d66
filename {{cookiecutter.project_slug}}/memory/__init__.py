"""Long-term memory of each caller for LiveKit voice agents: this folder is the whole
of it, the same in every project; copy it into an agent you already have.

What an agent uses (agent.py shows all of it in use):

- ``open_store()``: the store ``MEMORY_URL`` names (unset: SQLite in ``data/``),
  once per worker process;
- ``CallMemory``: one call's memory: ``block_for`` (recall), ``capture``,
  ``remember``, ``forget``, ``aclose`` / ``on_shutdown``; ``CallMemory()`` is memory
  turned off, for a caller without a stable id and for tests;
- ``livekit_adapter`` (``from memory import livekit_adapter``): the LiveKit wiring:
  the caller id from the room, capture on the session, recall into a copy of the
  chat context. The only module that imports LiveKit.

The map (one concern per module; only ``livekit_adapter`` imports livekit; the
stores import only the modules below the store interface):

- ``call`` (CallMemory), ``recall`` (budget and cache), ``pairing`` (which reply
  answers which turn), ``intake`` (a captured message masked, paired and
  queued), ``writer`` (background saves), ``ending`` (the end of a
  call), ``erasure`` (an erasure made during a call reaches it), ``voicemail`` (an
  outbound call answered by voicemail keeps nothing), ``tools`` (what
  the remember and forget tools do), ``speech`` (the
  wiring self-check), ``figures`` (trace spans, the call's log line), ``health`` (a
  store known to be down);
- ``block`` (the block and every sentence the model reads), ``facts`` (kinds and
  reconciliation), ``extraction`` (facts from a call's transcript), ``words``
  (search words, languages, stems), ``dates`` (time zones), ``callers`` (caller
  ids, withheld numbers), ``privacy`` (masking), ``retention`` (how long memory is kept), ``text``,
  ``records`` (what memory holds), ``limits`` (every limit), ``errors``;
- ``store`` (the ``MemoryStore`` Protocol and ``open_store``), ``places`` (the
  data folder); backends: ``sqlite_store`` (+ ``sqlite_file``: connections and
  upgrades, ``sqlite_schema``: migrations, ``sqlite_index``: what the turn index
  holds, ``sqlite_search``: FTS5 terms and ranking, ``sqlite_queries``: each
  operation's SQL, ``sqlite_erase``: the erasure after a forget, in steps),
  ``postgres_store`` (+ ``postgres_pool``: how work reaches the server,
  ``postgres_schema``: what a URL names and the upgrade, ``postgres_migrations``:
  each version's step, ``postgres_search``, ``postgres_admin``: the operator's
  command), and over HTTP ``hosted`` (+ ``hosted_http``, ``hosted_delivery``,
  ``hosted_merge``) and ``outbox`` (+ ``outbox_items``, ``outbox_ledger``,
  ``outbox_erase``: its forgetting, ``outbox_threads``: its threads and group
  commit, ``outbox_file``: the file deleted or replaced in use) with ``supermemory_store``, ``mem0_store``, ``zep_store``; ``spool``
  (what a call saves is on the worker's disk first: the outbox and its delivery,
  for the SQLite and PostgreSQL stores; a hosted store's outbox is its spool; +
  ``spool_target``: the store written through, and forgotten again).

Units: times are seconds, sizes are characters.
"""

from .block import (
    AGENT_CLAIMS_TITLE,
    BLOCK_HEADER,
    MEMORY_UNAVAILABLE,
    NOTHING_KNOWN,
    NOTHING_MATCHED,
    STYLE_PREFIX,
    STYLE_TITLE,
    format_block,
)
from .call import CallMemory
from .callers import normalise_caller_id, normalise_phone_number, validate_caller_id
from .errors import (
    InvalidCallerIdError,
    InvalidFactError,
    InvalidStoreUrlError,
    MemoryStoreError,
    SchemaMismatchError,
    StoreUnavailableError,
    WithheldCallerIdError,
)
from .facts import FACT_KINDS, Fact, FactKind, Remembered, reconcile
from .figures import Trace
from .limits import (
    FLUSH_TIMEOUT,
    MAX_BLOCK_CHARS,
    RECALL_BUDGET,
    RECALL_EXCHANGES,
    RECENT_SUMMARIES,
    WRITE_TIMEOUT,
    switched_off,
)
from .pairing import TurnPairing
from .privacy import SENSITIVE_NUMBERS, SensitiveNumber, mask_sensitive
from .records import Exchange, Recall, Summary, exchange_key
from .retention import PURGEABLE, Retention, purge_expired
from .store import MemoryStore, open_store, redact_url

__all__ = [
    "AGENT_CLAIMS_TITLE",
    "BLOCK_HEADER",
    "FACT_KINDS",
    "FLUSH_TIMEOUT",
    "MAX_BLOCK_CHARS",
    "MEMORY_UNAVAILABLE",
    "NOTHING_KNOWN",
    "NOTHING_MATCHED",
    "PURGEABLE",
    "RECALL_BUDGET",
    "RECALL_EXCHANGES",
    "RECENT_SUMMARIES",
    "SENSITIVE_NUMBERS",
    "STYLE_PREFIX",
    "STYLE_TITLE",
    "WRITE_TIMEOUT",
    "CallMemory",
    "Exchange",
    "Fact",
    "FactKind",
    "InvalidCallerIdError",
    "InvalidFactError",
    "InvalidStoreUrlError",
    "MemoryStore",
    "MemoryStoreError",
    "Recall",
    "Remembered",
    "Retention",
    "SchemaMismatchError",
    "SensitiveNumber",
    "StoreUnavailableError",
    "Summary",
    "Trace",
    "TurnPairing",
    "WithheldCallerIdError",
    "exchange_key",
    "format_block",
    "mask_sensitive",
    "normalise_caller_id",
    "normalise_phone_number",
    "open_store",
    "purge_expired",
    "reconcile",
    "redact_url",
    "switched_off",
    "validate_caller_id",
]
