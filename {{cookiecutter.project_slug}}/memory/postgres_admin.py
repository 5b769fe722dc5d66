"""The operator's command for the PostgreSQL store, run as ``uv run -m
memory.postgres_store status|sql|upgrade|check|vacuum`` (``main``): the schema's
version against this code's, the SQL an upgrade would run (or a login role held to
one tenant), the upgrade itself, whether tenant isolation is in force, and a vacuum
that removes from the files what forget and purge deleted. Synchronous: it runs outside any call.
"""

from __future__ import annotations

import argparse
import re
import sys
import time

# psycopg is installed only where this backend is used (``psycopg[binary,pool]``);
# elsewhere a type checker reads these names as Any instead of failing the folder.
import psycopg  # type: ignore[import-not-found, unused-ignore]

from .errors import InvalidStoreUrlError, SchemaMismatchError
from .places import project_dir
from .postgres_schema import (
    COUNTS,
    MARKS,
    SCHEMA_VERSION,
    TABLES,
    Target,
    one_row,
    read_version,
    upgrade,
    upgrade_sql,
)
from .store import redact_url

DEFAULT_URL = "postgresql://"
"""libpq's defaults: the PG* environment variables (PGHOST, PGDATABASE, PGUSER...)."""


def app_role_sql(schema: str, role: str, tenant: str) -> str:
    """SQL (for the schema's owner) that makes ``role`` a login role held to
    ``tenant`` by row-level security: no superuser, no BYPASSRLS, not the owner, and
    unable to change which tenant it is bound to. Raises InvalidStoreUrlError for a bad name."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", role):
        raise InvalidStoreUrlError(f"role {role!r}: use a-z, 0-9 and _ (63 at most)")
    return f"""-- A role for workers of tenant '{tenant}'; set its password with \\password {role}
CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE
    ON {schema}.exchanges, {schema}.facts, {schema}.summaries TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON {", ".join(f"{schema}.{t}" for t in COUNTS)} TO {role};
GRANT SELECT, INSERT, UPDATE ON {schema}.erasures TO {role};
GRANT SELECT ON {schema}.schema_version, {schema}.tenant_roles TO {role};
INSERT INTO {schema}.tenant_roles VALUES ('{role}', '{tenant}')
    ON CONFLICT (role_name) DO UPDATE SET tenant = excluded.tenant;"""


VACUUM_LOCK_TIMEOUT = "5s"
"""How long ``vacuum`` waits for each table's lock (a worker's transaction holding
it) before it gives up with an error, instead of queueing every worker behind it."""
VACUUM_TRIES = 10
"""Times ``vacuum`` writes a table anew, 1 s apart, while an older transaction (of
any client of the database) still sees the deleted rows, so they cannot go yet."""
_KEPT = re.compile(r"(\d+) dead row versions cannot be removed yet")


def vacuum(url: str) -> dict[str, int]:
    """Remove from the table and index files the bytes of what forget and purge
    deleted: VACUUM FULL of each table that holds a caller's words (a plain VACUUM
    only marks a deleted row's space as free, and its bytes stay in the file until a
    new row happens to reuse it). VACUUM FULL writes each table and its indexes
    anew and takes the table's ACCESS EXCLUSIVE lock while it does: workers' recalls
    on that table wait (they go on without memory after their budget) and their
    saves wait and are retried (see the README's "Privacy and operations" for the
    time it takes). Waits at most ``VACUUM_LOCK_TIMEOUT`` for each lock.

    A deleted row that a transaction begun before the delete can still see is kept
    by any vacuum; such a table is written again (``VACUUM_TRIES``). Returns
    {table: deleted rows still kept} for the tables where that did not end ({}:
    every one is gone). Raises psycopg errors (LockNotAvailable when a table stayed
    busy: run it again)."""
    target = Target(url)
    kept: dict[str, int] = {}
    with target.connect(autocommit=True) as conn:
        said: list[str] = []
        conn.add_notice_handler(lambda d: said.append(d.message_detail or ""))
        conn.execute(f"SET lock_timeout = '{VACUUM_LOCK_TIMEOUT}'")
        for table in (*TABLES, *COUNTS):
            for attempt in range(VACUUM_TRIES):
                said.clear()
                conn.execute(f"VACUUM (FULL, VERBOSE) {target.schema}.{table}")
                left = sum(int(m[1]) for d in said if (m := _KEPT.search(d)))
                if not left:
                    kept.pop(table, None)
                    break
                kept[table] = left
                if attempt + 1 < VACUUM_TRIES:
                    time.sleep(1.0)
    return kept


def _holders(url: str) -> list[str]:
    """The open transactions of the database that can hold deleted rows back."""
    with Target(url).connect(autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid, usename, xact_start FROM pg_stat_activity WHERE"
            " datname = current_database() AND backend_xmin IS NOT NULL AND"
            " pid <> pg_backend_pid() ORDER BY xact_start LIMIT 5"
        ).fetchall()
    return [
        f"pid {pid} ({user}, since {start:%Y-%m-%d %H:%M:%S})"
        for pid, user, start in rows
    ]


def isolation_report(url: str) -> list[tuple[bool, str]]:
    """Is tenant isolation in force for the URL's role? (ok, what was checked) pairs;
    it is when every one is ok. Raises psycopg errors."""
    target = Target(url)
    s, tenant = target.schema, target.tenant
    with target.connect() as conn:
        role, superuser, bypass = one_row(
            conn.execute(
                "SELECT rolname, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
        )
        rls_on, owner = one_row(
            conn.execute(
                """SELECT count(*) FILTER (WHERE relrowsecurity),
                      coalesce(bool_or(pg_has_role(current_user, relowner, 'USAGE')), false)
               FROM pg_class WHERE relnamespace = to_regnamespace(%s) AND relname = ANY(%s)""",
                [s, [*TABLES, *COUNTS, *MARKS]],
            ).fetchone()
        )
        bound = remap = None
        if read_version(conn, s) > 0:
            row = conn.execute(
                f"SELECT tenant FROM {s}.tenant_roles WHERE role_name = current_user"
            ).fetchone()
            bound = row[0] if row else None
            privilege = (
                "SELECT has_table_privilege(%s, 'INSERT, UPDATE, DELETE, TRUNCATE')"
            )
            remap = one_row(conn.execute(privilege, [f"{s}.tenant_roles"]).fetchone())[
                0
            ]
    return [
        (
            not superuser,
            (
                f"role {role} must not be a superuser (a superuser bypasses row-level "
                f"security): it {'is one' if superuser else 'is not'}"
            ),
        ),
        # Each line says what is required and what was found, so a FAIL never reads
        # as the opposite of the role's state.
        (
            not bypass,
            f"role {role} must not have BYPASSRLS: it {'has' if bypass else 'has not'}",
        ),
        (
            not owner,
            (
                f"role {role} must not own the tables (owners bypass row-level "
                f"security): it {'owns them' if owner else 'does not'}"
            ),
        ),
        (
            rls_on == len(TABLES) + len(COUNTS) + len(MARKS),
            (
                "row-level security must be on for "
                f"{', '.join((*TABLES, *COUNTS, *MARKS))} in schema {s}: it is on "
                f"for {rls_on} of {len(TABLES) + len(COUNTS) + len(MARKS)}"
            ),
        ),
        (
            bound == tenant,
            f"{s}.tenant_roles binds {role} to tenant {tenant!r} (found: {bound!r})",
        ),
        (
            remap is False,
            (
                f"role {role} must not be able to change {s}.tenant_roles: it "
                + ("can" if remap else "cannot" if remap is False else "has no table")
            ),
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    """The operator command. Exit codes: 0 fine, 1 something to do (status: upgrade
    needed; check: isolation not in force; vacuum: deleted rows an older transaction
    still sees), 2 the server or the URL could not be used."""
    import os

    from dotenv import load_dotenv

    parser = argparse.ArgumentParser(
        prog="python -m memory.postgres_store", description=main.__doc__
    )
    parser.add_argument(
        "command", choices=["status", "sql", "upgrade", "check", "vacuum"]
    )
    parser.add_argument(
        "--url", help="default: MEMORY_URL from the environment or .env.local"
    )
    parser.add_argument(
        "--app-role", metavar="NAME", help="sql: print a role held to this tenant"
    )
    args = parser.parse_args(argv)
    load_dotenv(project_dir() / ".env.local")
    url = args.url or os.getenv("MEMORY_URL") or DEFAULT_URL
    try:
        target = Target(url)
        if args.command == "sql" and args.app_role:
            print(app_role_sql(target.schema, args.app_role, target.tenant))
            return 0
        if args.command == "upgrade":
            before, after = upgrade(url)
            print(
                f"{target.where}: version {before} -> {after}"
                if before < after
                else f"{target.where}: already at version {after}; nothing to do"
            )
            return 0
        if args.command == "check":
            report = isolation_report(url)
            for ok, line in report:
                # each line states what isolation needs: "FAIL" marks one not met
                print(f"{'ok  ' if ok else 'FAIL'} {line}")
            enforced = all(ok for ok, _ in report)
            print(
                f"tenant isolation is {'' if enforced else 'NOT '}in force for {redact_url(url)}"
            )
            return 0 if enforced else 1
        if args.command == "vacuum":
            kept = vacuum(url)
            if kept:
                print(
                    f"{target.where}: deleted rows still kept in {kept}: a transaction"
                    " begun before the delete still sees them; run vacuum again when"
                    f" it has ended ({', '.join(_holders(url)) or 'none open now'})",
                    file=sys.stderr,
                )
                return 1
            print(f"{target.where}: vacuumed; the tables and indexes written anew")
            return 0
        with target.connect() as conn:
            found = read_version(conn, target.schema)
        if args.command == "sql":
            print(
                upgrade_sql(target.schema, found) or f"-- {target.where} is up to date"
            )
            return 0
        state = (
            "up to date"
            if found == SCHEMA_VERSION
            else "missing: run upgrade"
            if found == 0
            else "older: run upgrade"
            if found < SCHEMA_VERSION
            else "newer than this code"
        )
        print(f"{target.where}: version {found}, this code {SCHEMA_VERSION}: {state}")
        return 0 if found == SCHEMA_VERSION else 1
    except (psycopg.Error, InvalidStoreUrlError, SchemaMismatchError) as exc:
        print(f"error: {exc}".strip(), file=sys.stderr)
        return 2
