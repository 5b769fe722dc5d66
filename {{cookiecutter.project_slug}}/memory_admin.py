"""The operator's command for caller memory, for every backend (through memory.MemoryStore).

    uv run memory_admin.py stats                      # how much is stored
    uv run memory_admin.py callers [--after ID] [--limit N]
    uv run memory_admin.py show CALLER_ID             # one caller's memory, readable
    uv run memory_admin.py export CALLER_ID [--out FILE]   # the same as JSON (portability)
    uv run memory_admin.py forget CALLER_ID --yes     # erase everything about a caller
    uv run memory_admin.py purge                      # apply the retention settings now
    uv run memory_admin.py purge --what exchanges --older-than-days 90
    uv run memory_admin.py upgrade                    # a SQLite file of an older version

`show` and `export` list facts newest first (as the memory block does), and call
summaries and exchanges oldest first, so a caller's calls read in the order they
happened; `show` marks a reply the caller cut short "(interrupted)".

It opens the store MEMORY_URL names (the environment or .env.local), as the worker does;
no command creates a store: one that does not exist (a SQLite file not there) is
refused, so a mistyped path is not taken for an empty store, nor a forget in a new
file for an erasure. It prints one caller's data only when given that caller's id,
never another's. Exit status: 0 done, 1 the store failed (the message says why), 2 a
bad command or caller id, 3 `show`, `export` or `forget` of a caller of whom nothing
is stored (the message says whether they were forgotten, and when; a forget still
records the erasure). A phone number may be given in any form the agent accepts
("5550100200", "+1 (555) 010-0200"): it is read as the E.164 number memory keeps it
under, as the dispatch's ``caller_id`` is.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import io
import json
import os
import re
import sys
import time
import unicodedata
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dotenv import load_dotenv

import memory
from memory.errors import FAIL_OPEN
from memory.places import default_url, project_dir

# The project's .env.local, where the agent reads it: in the project root (beside
# pyproject.toml), also when this file sits in src/ beside a starter's agent.py.
load_dotenv(project_dir() / ".env.local")

DAY = 86_400.0


class UsageError(Exception):
    """A command that cannot run as given (exit status 2)."""


class NotStoredError(Exception):
    """``show``, ``export`` or ``forget`` of a caller of whom nothing is stored (exit 3):
    a mistyped id must not look like a forgotten caller."""


async def _nothing_stored(
    store: memory.MemoryStore, caller_id: str, *, forgot: bool = False
) -> str:
    erased = await store.erased_at(caller_id)
    if erased and not forgot:
        return f"nothing is stored for {caller_id}: forgotten {_day(erased)}"
    return (
        f"nothing is stored for {caller_id} (check the id: `callers` lists those "
        "with memory)"
    )


async def export(store: memory.MemoryStore, caller_id: str) -> dict[str, Any]:
    """Everything stored about one caller as JSON-ready data: {"caller_id", "exported_at"
    (seconds since the epoch), "facts" (newest first), "fact_history" (replaced values),
    "summaries" and "exchanges" (both oldest first)}."""
    profile = await store.profile(caller_id)
    return {
        "caller_id": caller_id,
        "exported_at": time.time(),
        "facts": [asdict(f) for f in profile.facts],
        "fact_history": [asdict(f) for f in await store.history(caller_id)],
        # the store lists summaries newest first; a caller's calls read oldest first
        "summaries": [
            asdict(s)
            for s in sorted(
                await store.summaries(caller_id), key=lambda s: s.created_at
            )
        ],
        "exchanges": [asdict(e) for e in await store.exchanges(caller_id)],
    }


def show(data: dict[str, Any]) -> str:
    """One caller's export as lines an operator reads, in the export's order (call
    summaries and exchanges oldest first); dates are UTC. Every remembered text (fact
    values, summaries, what was said) is one JSON string, so none can fake a line or
    send control characters to the operator's terminal."""
    lines = [f"caller {data['caller_id']}"]
    lines.append(f"facts ({len(data['facts'])}):")
    lines += [
        f"  {memory.facts.fact_label(f['kind'])}: {_said(f['value'])} (learned {_day(f['learned_at'])})"
        for f in data["facts"]
    ]
    history = data.get("fact_history", [])
    lines.append(f"replaced facts ({len(history)}):")
    lines += [
        f"  {memory.facts.fact_label(f['kind'])}: {_said(f['value'])} (replaced {_day(f['replaced_at'])})"
        for f in history
    ]
    lines.append(f"call summaries ({len(data['summaries'])}):")
    lines += [
        f"  {_day(s['created_at'])} {_id(s['call_id'])}: {_said(s['text'])}"
        for s in data["summaries"]
    ]
    lines.append(f"exchanges ({len(data['exchanges'])}):")
    for e in data["exchanges"]:
        if e["user_text"]:  # (none in a call's opening: the greeting alone)
            lines.append(f"  {_day(e['created_at'])} caller: {_said(e['user_text'])}")
        if e["assistant_text"]:
            # under the caller's line, "agent:" lines up with "caller:"
            when = " " * len(_day(0.0)) if e["user_text"] else _day(e["created_at"])
            cut = (
                " (interrupted)" if e.get("interrupted") else ""
            )  # the caller barged in
            lines.append(f"  {when} agent:  {_said(e['assistant_text'])}{cut}")
    return "\n".join(lines)


SHOWN_AS_ESCAPES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
"""Unicode categories ``show`` prints as ``\\uXXXX`` escapes: controls (C0 and C1,
whose one-byte CSI U+009B starts a terminal escape sequence, and NEL U+0085), format
characters (bidirectional overrides that reorder what is shown), line and paragraph
separators (U+2028, U+2029, which some terminals and viewers break lines at),
surrogates, private-use and unassigned code points."""


def _said(text: str) -> str:
    # one JSON string: the same double quotes whatever the text holds (repr switched
    # to single quotes unless the text had one), and a line break cannot fake a line;
    # json.dumps escapes only C0 controls, so the rest is escaped here (still JSON)
    return "".join(
        f"\\u{ord(c):04x}"
        if ord(c) > 0x7E and unicodedata.category(c) in SHOWN_AS_ESCAPES
        else c
        for c in json.dumps(text, ensure_ascii=False)
    )


def _id(call_id: str) -> str:
    # a call id (LiveKit's job or room id) as it is; any other, as one JSON string
    return call_id if re.fullmatch(r"[\w.:@+-]+", call_id, re.ASCII) else _said(call_id)


def _day(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))


async def run(args: argparse.Namespace, out: Any) -> None:
    caller = None
    if getattr(args, "caller_id", None) is not None:
        try:
            # the form the agent keys a caller by: "5550100200" and "+1 (555) 010-0200"
            # are the SIP caller +15550100200, as the dispatch's caller_id would be
            caller = memory.normalise_caller_id(args.caller_id)
        except memory.InvalidCallerIdError as exc:
            raise UsageError(str(exc)) from None
        if caller != args.caller_id:
            print(f"{args.caller_id} is kept as {caller}", file=sys.stderr)
    if args.command == "forget" and not args.yes:
        raise UsageError(f"forget erases everything about {caller}; add --yes to do it")
    if args.command == "purge" and args.what and args.older_than_days is None:
        raise UsageError("--what needs --older-than-days")
    if args.command == "upgrade":
        print(await upgrade(), file=out)
        return
    # A store that is not there (a mistyped path) is an error, not zeros, and no
    # command creates one: a forget "done" in a new empty file erased nothing.
    store = memory.open_store(create=False)
    try:
        if args.command == "stats":
            print(json.dumps(await store.stats(), indent=2), file=out)
        elif args.command == "callers":
            for found in await store.callers(after=args.after, limit=args.limit):
                print(found, file=out)
        elif args.command in ("show", "export"):
            assert caller is not None
            data = await export(store, caller)
            if not any(
                data[k] for k in ("facts", "fact_history", "summaries", "exchanges")
            ):
                raise NotStoredError(await _nothing_stored(store, caller))
            if args.command == "show":
                print(show(data), file=out)
            elif args.out:
                # JSON is UTF-8 (RFC 8259), not the locale's encoding (cp1252 on Windows)
                text = json.dumps(data, indent=2, ensure_ascii=False)
                Path(args.out).write_text(text, encoding="utf-8")
                print(f"exported {caller} to {args.out}", file=out)
            else:
                # where the output's encoding cannot hold every character (a C locale
                # without UTF-8 mode, cp1252), \u escapes keep the JSON whole and valid
                plain = codecs.lookup(getattr(out, "encoding", None) or "utf-8").name
                print(
                    json.dumps(data, indent=2, ensure_ascii=plain != "utf-8"), file=out
                )
        elif args.command == "forget":
            assert caller is not None
            n = await store.forget(caller, timeout=60.0)
            print(f"forgot {caller}: {n} rows deleted", file=out)
            if not n:
                # the erasure is recorded all the same (a live call of theirs keeps
                # nothing said before now), but a mistyped id must not look erased
                raise NotStoredError(await _nothing_stored(store, caller, forgot=True))

        elif args.command == "purge":
            if args.what:
                days: dict[str, float | None] = dict.fromkeys(memory.PURGEABLE)
                days[args.what] = args.older_than_days
                retention = memory.Retention(
                    **{f"{k}_days": v for k, v in days.items()}
                )
            else:
                retention = memory.Retention.from_env()
            if not retention.any:
                raise UsageError(
                    "nothing to purge: set MEMORY_KEEP_EXCHANGES_DAYS (or _SUMMARIES_, "
                    "_FACTS_) or give --what and --older-than-days"
                )
            deleted = await memory.purge_expired(store, retention)
            print(json.dumps(deleted), file=out)
    finally:
        await store.close()


async def upgrade() -> str:
    """Upgrade the SQLite file MEMORY_URL names to this code's schema version, of any
    size, before returning (a worker's prewarm upgrades only small ones); what was
    done, as one line. Raises UsageError for another backend."""
    url = os.getenv("MEMORY_URL", "").strip() or default_url()
    if not url.startswith("sqlite:"):
        raise UsageError(
            "upgrade is for a SQLite file; PostgreSQL: uv run -m memory.postgres_store "
            "upgrade; a hosted service keeps its own schema"
        )
    from memory.sqlite_schema import SCHEMA_VERSION, rows_to_upgrade
    from memory.sqlite_store import BUSY_TIMEOUT, SQLiteStore, path_of

    path = path_of(url)
    if not path.is_file():
        raise memory.StoreUnavailableError(f"no memory file at {path}")
    rows = rows_to_upgrade(path, BUSY_TIMEOUT)
    store = SQLiteStore.open(path, upgrade_rows=float("inf"))
    await store.close()
    if rows_to_upgrade(path, BUSY_TIMEOUT):  # another process held it past the wait
        raise memory.StoreUnavailableError(
            f"{path} could not be upgraded now (another process is writing it or "
            "upgrading it); try again"
        )
    if not rows:
        return f"{path} is at schema version {SCHEMA_VERSION}: nothing to do"
    return f"upgraded {path} ({rows} exchanges) to schema version {SCHEMA_VERSION}"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="memory_admin.py", description=__doc__.splitlines()[0]
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("stats", help="counts of callers, exchanges, facts and summaries")
    callers = sub.add_parser("callers", help="caller ids, in order, a page at a time")
    callers.add_argument("--after", default="", help="list the ids after this one")
    callers.add_argument("--limit", type=int, default=100)
    for name, text in [
        (
            "show",
            "one caller's memory: facts, then call summaries and exchanges oldest first",
        ),
        ("export", "one caller's memory as JSON, in the same order"),
    ]:
        command = sub.add_parser(name, help=text, description=text)
        command.add_argument("caller_id")
        if name == "export":
            command.add_argument(
                "--out", help="write to this file instead of standard output"
            )
    forget = sub.add_parser("forget", help="erase everything about one caller")
    forget.add_argument("caller_id")
    forget.add_argument("--yes", action="store_true", help="really erase")
    purge = sub.add_parser(
        "purge", help="delete what is older than the retention settings"
    )
    purge.add_argument("--what", choices=memory.PURGEABLE)
    purge.add_argument("--older-than-days", type=float)
    sub.add_parser(
        "upgrade", help="upgrade a SQLite file of an older version now, of any size"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):
        # show's words in a terminal that cannot print them come out escaped, instead
        # of the command failing as "the memory store failed"
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        asyncio.run(run(args, sys.stdout))
        sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
    except UsageError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    except NotStoredError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 3
    except BrokenPipeError:
        # `show ... | head` closed the pipe: not a store failure. Python's own advice
        # (the signal module's notes on SIGPIPE): point stdout at devnull and exit 1.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (
        memory.StoreUnavailableError
    ) as exc:  # its message says where and what to check
        print(f"ERROR: the memory store failed: {exc}", file=sys.stderr)
        return 1
    except FAIL_OPEN as exc:  # a driver's own error too: one line, not a traceback
        print(f"ERROR: the memory store failed: {exc!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
