"""The PostgreSQL store's schema: what a URL names (server, schema, tenant), the
schema's version and tables, and the upgrade an operator runs (``uv run -m
memory.postgres_store upgrade``, see ``postgres_admin``) through the migrations
(``postgres_migrations``); workers never create or change the schema.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

# psycopg is installed only where this backend is used (``psycopg[binary,pool]``);
# elsewhere a type checker reads these names as Any instead of failing the folder.
import psycopg  # type: ignore[import-not-found, unused-ignore]
from psycopg.conninfo import (  # type: ignore[import-not-found, unused-ignore]
    conninfo_to_dict,
)

from .errors import InvalidStoreUrlError, SchemaMismatchError
from .postgres_migrations import MIGRATIONS, Step
from .store import redact_url

DEFAULT_SCHEMA = "livekit_memory"
DEFAULT_TENANT = "default"
CONNECT_TIMEOUT = 3  # seconds (libpq's least is 2)


class Target:
    """What a ``postgresql:`` URL names: ``conninfo`` for libpq (our parameters taken
    out), ``schema``, ``tenant``, and ``where`` to name it in messages (no password).
    Raises ``InvalidStoreUrlError``."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme.split("+")[0] not in ("postgresql", "postgres"):
            raise InvalidStoreUrlError(
                f"{redact_url(url)!r} is not a postgresql:// URL"
            )
        params = dict(parse_qsl(parts.query, keep_blank_values=True))
        self.schema = params.pop("schema", "") or DEFAULT_SCHEMA
        self.tenant = params.pop("tenant", "") or DEFAULT_TENANT
        # A lower-case name needs no quoting, so it goes into SQL as it is.
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", self.schema):
            raise InvalidStoreUrlError(
                f"schema={self.schema!r}: use a-z, 0-9 and _ (63 at most)"
            )
        if not re.fullmatch(r"[A-Za-z0-9_.:@+\-]{1,128}", self.tenant):
            raise InvalidStoreUrlError(
                f"tenant={self.tenant!r}: use letters, digits and _.:@+-"
            )
        # Not urlunsplit: it drops the "//" of a URL without a host
        # ("postgresql:///db", "postgresql://", libpq's defaults and PG* variables),
        # which libpq then reads as a key=value string.
        query = urlencode(params)
        self.conninfo = f"postgresql://{parts.netloc}{parts.path}" + (
            f"?{query}" if query else ""
        )
        try:
            info = conninfo_to_dict(self.conninfo)
        except psycopg.ProgrammingError as exc:  # libpq refused a parameter
            raise InvalidStoreUrlError(f"{redact_url(url)!r}: {exc}") from None
        self.where = (
            f"{info.get('host') or 'localhost'}:{info.get('port') or 5432}"
            f"/{info.get('dbname') or ''} schema {self.schema}"
        )

    def connect(self, **kwargs: Any) -> psycopg.Connection:
        """A synchronous connection (open_store's check, the operator commands)."""
        return psycopg.connect(self.conninfo, connect_timeout=CONNECT_TIMEOUT, **kwargs)


def read_version(conn: psycopg.Connection, schema: str) -> int:
    """The schema's version (0: none); raises psycopg errors."""
    if one_row(
        conn.execute("SELECT to_regclass(%s)", [f"{schema}.schema_version"]).fetchone()
    )[0]:
        return one_row(
            conn.execute(f"SELECT version FROM {schema}.schema_version").fetchone()
        )[0]
    return 0


# upgrade_steps reads MIGRATIONS and SCHEMA_VERSION here (a test adds a migration
# by patching both in this module).
SCHEMA_VERSION = len(MIGRATIONS)
TABLES = ("exchanges", "facts", "summaries")
COUNTS = ("turns", "caller_words", "caller_sizes")
"""Kept by triggers from exchanges: never written or deleted by this code itself."""
MARKS = ("erasures",)
"""When each caller was last erased (``PostgresStore.erased_at``): kept by forget and
purge, never deleted (it holds a caller id and a time, no words)."""
SEARCH_INDEXES = ("turns_search",)


def upgrade_steps(schema: str, from_version: int) -> list[tuple[str, Step | None]]:
    """What takes ``schema`` from ``from_version`` to ``SCHEMA_VERSION``, in order:
    (SQL, then a function (connection, schema) to run after it, or None)."""
    steps: list[tuple[str, Step | None]] = []
    if from_version == 0:
        steps.append((f"CREATE SCHEMA IF NOT EXISTS {schema};", None))
    for n in range(from_version, SCHEMA_VERSION):
        m = MIGRATIONS[n]
        then: Step | None = None
        after = ""
        if isinstance(m, str):
            sql = m
        elif len(m) == 2:
            sql, then = m
        else:
            sql, then, after = m
        steps.append(
            (f"-- version {n} -> {n + 1}\n{sql.format(s=schema).strip()}", then)
        )
        if after:
            steps.append((after.format(s=schema).strip(), None))
        steps.append((f"UPDATE {schema}.schema_version SET version = {n + 1};", None))
    return steps


def upgrade_sql(schema: str, from_version: int) -> str:
    """The SQL that takes ``schema`` from ``from_version`` to ``SCHEMA_VERSION``; a
    step done in Python is named in a comment (its docstring's first line)."""
    parts = []
    for sql, then in upgrade_steps(schema, from_version):
        parts.append(sql)
        if then is not None:
            said = (then.__doc__ or then.__name__).strip().splitlines()[0]
            parts.append(f"-- then, in Python ({then.__name__}): {said}")
    return "\n".join(parts)


def upgrade(url: str) -> tuple[int, int]:
    """Create or upgrade the URL's schema; returns (version before, version after).
    One transaction under an advisory lock: upgrades started together run one after
    the other (the later ones find nothing to do), and a failed one changes nothing.
    Raises SchemaMismatchError for a schema newer than this code, psycopg errors."""
    target = Target(url)
    with target.connect() as conn, conn.transaction():
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s))",
            [f"livekit-memory:{target.schema}"],
        )
        found = read_version(conn, target.schema)
        if found > SCHEMA_VERSION:
            raise SchemaMismatchError(
                f"{target.where} is at version {found}, newer than this code's {SCHEMA_VERSION}"
            )
        for sql, then in upgrade_steps(target.schema, found):
            conn.execute(sql.encode())
            if then is not None:
                then(conn, target.schema)
    return found, SCHEMA_VERSION


def one_row(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
    """The row of a query that always returns one."""
    assert row is not None
    return row
