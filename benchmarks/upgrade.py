"""Upgrade benchmark: how long does opening a sqlite memory file of an older schema
version take, per exchange it holds?

Builds a file at schema version ``--from`` with the template's own MIGRATIONS (in a
temporary directory, thrown away), fills it with ``--exchanges`` exchanges of 1,000
callers (12 and 10 words per side, from a vocabulary of 17 everyday words), and times
``SQLiteStore.open`` with the upgrade made inside it (``UPGRADE_IN_OPEN_ROWS`` lifted),
which is what a job process's prewarm would pay. ``sqlite_store.UPGRADE_SECONDS_PER_ROW``
and ``UPGRADE_IN_OPEN_ROWS`` come from this figure.

Usage:
    uv run python benchmarks/upgrade.py [--exchanges 100000] [--from 3]
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "{{cookiecutter.project_slug}}"
sys.path[:0] = [str(TEMPLATE)]

from memory import sqlite_store  # noqa: E402

WORDS = [
    "garden",
    "lisbon",
    "hiking",
    "orchid",
    "cello",
    "recital",
    "vet",
    "lamp",
    "brass",
    "sister",
    "june",
    "saturday",
    "coffee",
    "train",
    "ticket",
    "doctor",
    "appointment",
]


def old_file(path: Path, version: int, exchanges: int) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    sqlite_store.apply_migrations(conn, 0, version)
    rng = random.Random(1)
    rows = []
    for i in range(exchanges):
        caller = f"caller-{i % 1000}"
        user = " ".join(rng.choice(WORDS) for _ in range(12))
        reply = " ".join(rng.choice(WORDS) for _ in range(10))
        rows.append(
            (
                f"k{i}",
                caller,
                sqlite_store.caller_key(caller),
                f"call-{i // 10}",
                user,
                reply,
                1.7e9 + i,
                sqlite_store.indexed_words(caller, user),
                sqlite_store.indexed_words(caller, reply),
            )
        )
    conn.executemany(
        "INSERT INTO exchanges (key, caller_id, caller_key, call_id, user_text, assistant_text,"
        " item_ids, created_at, user_words, reply_words) VALUES (?, ?, ?, ?, ?, ?, '[]', ?, ?, ?)",
        rows,
    )
    conn.execute("COMMIT")
    conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exchanges", type=int, default=100_000)
    parser.add_argument("--from", dest="version", type=int, default=3, help="schema version")
    args = parser.parse_args()
    if not 2 <= args.version < sqlite_store.SCHEMA_VERSION:
        raise SystemExit(f"--from must be 2 to {sqlite_store.SCHEMA_VERSION - 1}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "old.db"
        old_file(path, args.version, args.exchanges)
        sqlite_store.UPGRADE_IN_OPEN_ROWS = args.exchanges  # upgrade inside open, timed
        started = time.perf_counter()
        store = sqlite_store.SQLiteStore.open(path)
        took = time.perf_counter() - started
        del store
    print(
        f"{args.exchanges} exchanges, schema {args.version} -> {sqlite_store.SCHEMA_VERSION}: "
        f"{took:.2f} s ({1e6 * took / args.exchanges:.0f} us per exchange); "
        f"load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
