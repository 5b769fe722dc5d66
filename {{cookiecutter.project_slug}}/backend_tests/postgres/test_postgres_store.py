"""What only the PostgreSQL backend does: search with PostgreSQL's own tools, explicit
migrations, tenant isolation, worker processes on one server, a server restart, a
server or a pool that cannot serve. The store contract (tests/test_store_contract.py)
covers what every backend does. Every test runs against a real server: the shared
one, in a schema of the test's own, or, to stop and restart one, a throwaway cluster
of the test's own on another port."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import logging
import multiprocessing
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

import memory
from memory import (
    postgres_pool,
    postgres_schema,
    postgres_search,
    postgres_store,
    words,
)
from tests.doubles import make_exchange
from tests.livekit_job import run_job
from tests.store_fixtures import own_schema, server_or_skip, with_params

ALICE = "alice@example.com"


def admin() -> psycopg.Connection:
    return psycopg.connect(server_or_skip(), autocommit=True)


def schema_of(url: str) -> str:
    return postgres_store.Target(url).schema


def store_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "memory.postgres"]


# -- search ---------------------------------------------------------------------------


async def test_recall_matches_other_word_forms(store):
    await store.save(make_exchange(1, text="We went hiking in the Alps."))
    recall = await store.recall(ALICE, "Do you remember where I hiked?")
    assert [e.user_text for e in recall.exchanges] == ["We went hiking in the Alps."]


async def test_a_question_of_only_function_words_recalls_no_exchanges(store):
    await store.save(make_exchange(1, text="what did you do"))
    assert (await store.recall(ALICE, "what did you do?")).exchanges == ()
    assert postgres_search.query_lexemes("p", "what did you ... do?") == []


@pytest.mark.parametrize(
    "said",
    ["a & b | !c <-> (d:*)", "'quoted' \\ \"x\"", "don't_stop", "café 4417 ☎", "::"],
)
async def test_tsquery_syntax_in_what_the_caller_says_is_only_words(store, said):
    await store.save(make_exchange(1, text="café near stop 4417"))
    recall = await store.recall(ALICE, said)  # never a syntax error
    prefix = postgres_search.caller_prefix("default", ALICE)
    for lexeme in postgres_search.query_lexemes(prefix, said):
        assert lexeme.startswith(prefix) and re.fullmatch(r"[^\W_]+", lexeme), lexeme
    assert all(e.caller_id == ALICE for e in recall.exchanges)


def ranking_plan(url: str, caller: str, said: str) -> str:
    """EXPLAIN of the SQL that ranks ``caller``'s turns for ``said``, as recall runs it."""
    prefix = postgres_search.caller_prefix("default", caller)
    lexemes = postgres_search.query_lexemes(prefix, said)
    sql = postgres_search.search_sql(schema_of(url), len(lexemes))
    args = {"t": "default", "c": caller, "x": None, "n": 24}
    with admin() as conn:
        conn.execute("SET enable_seqscan = off")  # as on a large table
        explain = conn.execute(
            f"EXPLAIN ANALYZE {sql}", args | postgres_search.search_args(lexemes)
        )
        return "\n".join(r[0] for r in explain)


async def test_recall_ranks_single_turns_and_reads_only_the_callers_gin_lists(
    store, store_url
):
    for n in range(30):
        await store.save(
            make_exchange(n, text=f"filler note {n} about the weather", at=1000.0 + n)
        )
    await store.save(
        make_exchange(
            99,
            text="lanterns lanterns: paper lanterns for the lantern festival",
            call_id="call-2",
            at=5000.0,
        )
    )
    await store.save(make_exchange(98, text="one paper lantern", call_id="call-3"))
    await store.save(make_exchange(97, caller="bob", text="bob's lantern festival"))
    recall = await store.recall(ALICE, "the lantern festival")
    assert [e.user_text[:7] for e in recall.exchanges] == ["lantern", "one pap"]
    assert recall.sides == ("both", "both")  # each side holds or neighbours the words
    plan = ranking_plan(store_url, ALICE, "the lantern festival")
    # the GIN lists of alice's lexemes (her prefix), not every caller's matches
    # (4: both turns of two exchanges; bob's lantern festival is not in her lists)
    assert re.search(r"Bitmap Index Scan on turns_search .*rows=4 ", plan), plan


async def test_a_question_of_words_in_most_turns_ranks_only_the_newest_that_hold_them(
    store, store_url, monkeypatch
):
    # A caller with thousands of exchanges who says "coffee" in most: the search
    # ranks a bounded number of turns (MAX_RANKED, here 4), the newest, found by
    # walking the caller's turns back in time, not every match.
    monkeypatch.setattr(postgres_search, "MAX_RANKED", 4)
    postgres_search.search_sql.cache_clear()
    for n in range(10):
        await store.save(
            make_exchange(n, text=f"coffee number {n}", call_id=f"c{n}", at=1000.0 + n)
        )
    recall = await store.recall(ALICE, "coffee?")
    # 4 turns: the newest two exchanges' (each side holds or neighbours the word)
    assert [e.user_text for e in recall.exchanges] == [
        f"coffee number {n}" for n in (9, 8)
    ]
    plan = ranking_plan(store_url, ALICE, "coffee?")
    assert "Index Scan Backward using turns_by_seq" in plan
    assert "Bitmap Index Scan on turns_search" in plan and "(never executed)" in plan
    postgres_search.search_sql.cache_clear()


async def test_the_answer_to_a_question_is_found_by_the_question_s_words(store):
    # The reply's turn holds its exchange's other side as context (weight 0.5): the
    # caller asked about the dentist, the answer said when; and the next exchange
    # of the call holds both (what the caller said next goes on about it).
    await store.save(
        make_exchange(
            1, text="When is my dentist appointment?", reply="Tuesday at nine.", at=1.0
        )
    )
    await store.save(make_exchange(2, text="Can I move it?", reply="Yes.", at=2.0))
    await store.save(make_exchange(3, text="Unrelated chat", call_id="call-2", at=3.0))
    recall = await store.recall(ALICE, "dentist")
    assert [e.user_text for e in recall.exchanges] == [
        "When is my dentist appointment?",
        "Can I move it?",
    ]


class CountedWords(frozenset):
    """STOPWORDS that count how many words were looked up in them."""

    looked_up = 0

    def __contains__(self, word: object) -> bool:
        CountedWords.looked_up += 1
        return super().__contains__(word)


async def test_a_recall_reads_what_was_said_once_and_stops_at_the_last_query_word(
    store, monkeypatch
):
    # A 1 MB turn held the event loop 1.34 s: its words were read twice per recall,
    # each to the end, and each compared with every word kept so far (quadratic).
    await store.save(make_exchange(1, text="word00007 in a note"))
    counted = CountedWords(words.STOPWORDS)
    monkeypatch.setattr(words, "STOPWORDS", counted)
    # (and wherever the search reads them by a name of its own)
    monkeypatch.setattr(postgres_search, "STOPWORDS", counted, raising=False)
    said = " ".join(f"word{n:05d}" for n in range(20_000))  # all distinct
    recall = await store.recall(ALICE, said)
    assert [e.user_text for e in recall.exchanges] == ["word00007 in a note"]
    # one pass, up to the 24th content word (40,048 lookups before)
    assert CountedWords.looked_up <= 4 * words.MAX_QUERY_WORDS


async def test_a_rare_word_outranks_a_word_the_caller_says_all_the_time(store):
    # BM25 over the caller's own exchanges: "coffee" is in 10 of 11, "rent" in 1.
    # (ts_rank_cd alone scored each match alike and put the newest coffee first.)
    await store.save(make_exchange(0, text="Ann rang about the rent", at=1000.0))
    for n in range(1, 11):
        await store.save(make_exchange(n, text=f"coffee number {n}", at=1000.0 + n))
    recall = await store.recall(ALICE, "coffee and the rent?")
    assert recall.exchanges[0].user_text == "Ann rang about the rent"
    assert len(recall.exchanges) == min(11, memory.RECALL_EXCHANGES)


def counts_are_exact(conn: psycopg.Connection, s: str) -> list[tuple]:
    """caller_words and caller_sizes against a count made from the turns themselves,
    and the turns against the exchanges (they must be equal); returns the counted
    words, each without its caller's prefix."""
    words = (
        f"SELECT tenant, caller_id, w, count(*)::int FROM {s}.turns,"
        " unnest(tsvector_to_array(words)) w GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
    )
    sizes = (
        f"SELECT tenant, caller_id, count(*)::int, sum(size)::bigint"
        f" FROM {s}.turns GROUP BY 1, 2 ORDER BY 1, 2"
    )
    counted = conn.execute(words).fetchall()
    kept = f"SELECT * FROM {s}.caller_words ORDER BY 1, 2, 3"
    assert conn.execute(kept).fetchall() == counted
    kept = f"SELECT * FROM {s}.caller_sizes ORDER BY 1, 2"
    assert conn.execute(kept).fetchall() == conn.execute(sizes).fetchall()
    sides = (
        f"SELECT tenant, caller_id, key, 0 FROM {s}.exchanges UNION ALL SELECT tenant,"
        f" caller_id, key, 1 FROM {s}.exchanges WHERE assistant_text <> ''"
    )
    turns = f"SELECT tenant, caller_id, key, side FROM {s}.turns"
    assert sorted(conn.execute(turns)) == sorted(conn.execute(sides))
    cut = postgres_search.PREFIX_CHARS
    return [(t, c, w[cut:], n) for t, c, w, n in counted]


async def test_word_counts_follow_every_write_and_forget_leaves_none_of_the_callers_words(
    store, store_url
):
    s = schema_of(store_url)
    first = make_exchange(
        1, text="the lantern festival in Taipei", call_id="call-1", at=1000.0
    )
    await store.save(first)
    await store.save(
        make_exchange(2, text="下周二我要去上海出差", call_id="call-1", at=1001.0)
    )
    await store.save(
        make_exchange(3, text="lantern paper", call_id="call-2", at=5000.0)
    )
    await store.save(make_exchange(4, caller="bob", text="bob's lantern", at=1000.0))
    await store.save(first)  # a retry: no change
    with admin() as conn:
        # lantern: both turns of the first exchange and of the one after it in its
        # call (as context), and of call-2's
        assert ("default", ALICE, "lantern", 6) in counts_are_exact(conn, s)
        await store.save(
            memory.Exchange(**{**first.__dict__, "user_text": "a kite festival"})
        )
        assert ("default", ALICE, "kite", 2) in counts_are_exact(conn, s)
        await store.forget(ALICE, call_id="call-2")
        # (the next exchange's turns keep the context they were indexed with, as in
        # the SQLite store)
        assert ("default", ALICE, "lantern", 2) in counts_are_exact(conn, s)
        await store.purge(before=1000.5, what="exchanges")  # bob's, and alice's first
        counts_are_exact(conn, s)
        await store.forget(ALICE)
        assert counts_are_exact(conn, s) == []
        assert conn.execute(f"SELECT count(*) FROM {s}.caller_sizes").fetchone() == (0,)


async def test_character_pairs_are_lexemes_of_the_callers_turns(store, store_url):
    await store.save(make_exchange(1, text="下周二我要去上海出差"))
    recall = await store.recall(ALICE, "上海出差?")
    assert [e.user_text for e in recall.exchanges] == ["下周二我要去上海出差"]
    with admin() as conn:
        s = schema_of(store_url)
        stored = conn.execute(f"SELECT user_words::text FROM {s}.exchanges").fetchone()
    # the words of memory.words.search_words, behind the caller's prefix, at their
    # positions
    p = postgres_search.caller_prefix("default", ALICE)
    assert {f"'{p}下周':1", f"'{p}周二':2", f"'{p}上海':7", f"'{p}出差':9"} <= set(
        stored[0].split()
    )


# -- migrations -----------------------------------------------------------------------


def command(*args: str) -> tuple[int, str]:
    """``uv run -m memory.postgres_store ARGS``, as an operator runs it: (exit code,
    output)."""
    done = subprocess.run(
        [sys.executable, "-m", "memory.postgres_store", *args],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_the_schema_is_made_only_by_the_upgrade_command_and_status_says_what_to_run():
    with own_schema(upgraded=False) as url:
        code, out = command("status", "--url", url)
        assert code == 1 and "missing: run upgrade" in out
        code, sql = command("sql", "--url", url)
        assert code == 0 and f"CREATE SCHEMA IF NOT EXISTS {schema_of(url)};" in sql
        assert (
            "CREATE INDEX exchanges_search" in sql
            and "ENABLE ROW LEVEL SECURITY" in sql
        )
        assert "-- then, in Python (_index_pairs): Fill the pairs column" in sql
        with admin() as conn:  # printing the SQL ran none of it
            assert (
                conn.execute("SELECT to_regnamespace(%s)", [schema_of(url)]).fetchone()[
                    0
                ]
                is None
            )
        assert command("upgrade", "--url", url) == (
            0,
            f"{postgres_store.Target(url).where}: version 0 -> {postgres_store.SCHEMA_VERSION}\n",
        )
        assert command("status", "--url", url)[1].endswith(": up to date\n")
        assert "nothing to do" in command("upgrade", "--url", url)[1]


def test_upgrades_started_together_apply_the_migrations_once():
    with own_schema(upgraded=False) as url:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(4) as pool:
            results = pool.map(postgres_store.upgrade, [url] * 4)
        now = postgres_store.SCHEMA_VERSION
        assert sorted(results) == [(0, now), (now, now), (now, now), (now, now)]


def test_migrations_are_applied_in_order_from_an_older_schema(monkeypatch, store_url):
    async def remember() -> None:
        # closed in the loop that opened its pool: a pool left open there kept
        # asyncio.run waiting for its tasks at the loop's end (a hung CI run)
        store = memory.open_store(store_url)
        try:
            await store.remember(ALICE, memory.Fact.of("name", "Alice"))
        finally:
            await store.close()

    asyncio.run(remember())
    later = "ALTER TABLE {s}.facts ADD COLUMN source text;"
    monkeypatch.setattr(
        postgres_schema, "MIGRATIONS", [*postgres_schema.MIGRATIONS, later]
    )
    now = len(postgres_schema.MIGRATIONS)
    monkeypatch.setattr(postgres_schema, "SCHEMA_VERSION", now)
    assert postgres_schema.upgrade_sql(schema_of(store_url), now - 1).endswith(
        f"version = {now};"
    )
    assert postgres_schema.upgrade(store_url) == (now - 1, now)
    with admin() as conn:
        s = schema_of(store_url)
        assert conn.execute(f"SELECT version FROM {s}.schema_version").fetchone() == (
            now,
        )
        assert conn.execute(f"SELECT value, source FROM {s}.facts").fetchall() == [
            ("Alice", None)
        ]


def rows(conn: psycopg.Connection, sql: str) -> tuple[list[str], list[tuple]]:
    """(column names, rows in order) of a query."""
    found = conn.execute(sql + " ORDER BY 1, 2, 3")
    return [c.name for c in found.description or []], found.fetchall()


@pytest.mark.parametrize("version", range(1, postgres_store.SCHEMA_VERSION))
def test_a_schema_at_any_older_version_upgrades_keeping_every_row(monkeypatch, version):
    # Rows as the code of that version wrote them: Chinese, Japanese, Korean, Thai and
    # English exchanges of two tenants, facts, summaries.
    said = {
        "zh": "下周二我要去上海出差",
        "ja": "来週の火曜日に大阪へ出張します",
        "ko": "다음 주에 부산에 가요",
        "th": "พรุ่งนี้ฉันจะไปเชียงใหม่",
        "en": "We went hiking in the Alps.",
    }
    asked = {
        "zh": "我上海出差的事情你还记得吗",
        "ja": "大阪出張のこと覚えてる？",  # noqa: RUF001
        "ko": "부산 여행 기억나요?",
        "th": "เรื่องเชียงใหม่คุณจำได้ไหม",
        "en": "Where did I hike?",
    }
    with own_schema(upgraded=False) as url:
        monkeypatch.setattr(postgres_schema, "SCHEMA_VERSION", version)
        assert postgres_store.upgrade(url) == (0, version)
        s = schema_of(url)
        with admin() as conn:
            for tenant in ("default", "acme"):
                for n, text in enumerate(said.values()):
                    conn.execute(
                        f"INSERT INTO {s}.exchanges (tenant, caller_id, key, call_id, user_text,"
                        " assistant_text, interrupted, item_ids, created_at)"
                        " VALUES (%s, %s, %s, %s, %s, 'OK', false, '{}', %s)",
                        [tenant, ALICE, f"k{n}", f"call-{n}", text, 1000 + n],
                    )
                    if version >= 5:  # its writes filled the turns' word columns
                        words = postgres_search.exchange_words(
                            tenant,
                            memory.Exchange(
                                f"k{n}",
                                ALICE,
                                f"call-{n}",
                                text,
                                "OK",
                                False,
                                (),
                                1000 + n,
                            ),
                        )
                        conn.execute(
                            f"UPDATE {s}.exchanges SET user_words = %(uw)s::tsvector,"
                            " reply_words = %(rw)s::tsvector, day_words = %(dw)s::tsvector"
                            " WHERE tenant = %(tenant)s AND key = %(key)s",
                            {**words, "tenant": tenant, "key": f"k{n}"},
                        )
                    elif version >= 3:  # its writes filled the pairs
                        conn.execute(
                            f"UPDATE {s}.exchanges SET pairs = %s::tsvector WHERE key = %s",
                            [postgres_search.pair_vector(f"{text} OK"), f"k{n}"],
                        )
                conn.execute(
                    f"INSERT INTO {s}.facts (tenant, caller_id, kind, value, updated_at)"
                    " VALUES (%s, %s, 'name', 'Al', 1000)",
                    [tenant, ALICE],
                )
                conn.execute(
                    f"INSERT INTO {s}.summaries VALUES (%s, %s, 'call-1', 'a trip', 1000)",
                    [tenant, ALICE],
                )
            before = {
                t: rows(conn, f"SELECT * FROM {s}.{t}") for t in postgres_store.TABLES
            }
        monkeypatch.undo()
        assert postgres_store.upgrade(url) == (version, postgres_store.SCHEMA_VERSION)
        with admin() as conn:  # every row, with every column it had, as it was
            for table, (names, kept) in before.items():
                # (but the search columns, which version 5 replaced by the turns)
                gone = [n for n, c in enumerate(names) if c in ("search", "pairs")]
                names = [c for n, c in enumerate(names) if n not in gone]
                kept = [
                    tuple(v for n, v in enumerate(r) if n not in gone) for r in kept
                ]
                assert rows(conn, f"SELECT {', '.join(names)} FROM {s}.{table}") == (
                    names,
                    kept,
                )
            assert ("acme", ALICE, "上海", 2) in counts_are_exact(conn, s)

        async def found() -> dict[str, list[str]]:
            store = memory.open_store(url)
            try:
                return {
                    language: [
                        e.user_text for e in (await store.recall(ALICE, q)).exchanges
                    ]
                    for language, q in asked.items()
                }
            finally:
                await store.close()

        assert asyncio.run(found()) == {
            language: [text] for language, text in said.items()
        }


def test_facts_from_version_1_keep_their_value_and_are_dated_by_their_last_update(
    monkeypatch,
):
    with own_schema(upgraded=False) as url:
        monkeypatch.setattr(postgres_schema, "SCHEMA_VERSION", 1)
        assert postgres_store.upgrade(url) == (0, 1)
        s = schema_of(url)
        with admin() as conn:
            conn.execute(
                f"INSERT INTO {s}.facts VALUES ('default', %s, 'name', 'Al', 1000)",
                [ALICE],
            )
            conn.commit()
        monkeypatch.undo()
        assert postgres_store.upgrade(url) == (1, postgres_store.SCHEMA_VERSION)

        async def check() -> None:
            store = memory.open_store(url)
            try:  # closed even when an assert fails, or asyncio.run waits on its pool
                (fact,) = (await store.profile(ALICE)).facts
                assert (fact.value, fact.learned_at, fact.updated_at) == (
                    "Al",
                    1000.0,
                    1000.0,
                )
                assert (
                    await store.remember(ALICE, memory.Fact.of("name", "Alice"))
                ).outcome == "replaced"
            finally:
                await store.close()

        asyncio.run(check())


async def test_a_worker_without_the_schema_says_so_once_and_calls_go_on_without_memory(
    caplog, monkeypatch
):
    caplog.set_level(logging.INFO)
    with own_schema(upgraded=False) as url:
        store = memory.open_store(url)  # prewarm: no crash
        for n in range(3):  # three calls in this process
            call = memory.CallMemory(store, ALICE, f"call-{n}", recall_budget=0.5)
            assert str(await call.block_for("Where do I live?", turn=1)).startswith(
                memory.MEMORY_UNAVAILABLE
            )
            assert (await call.remember("city", "Porto")).startswith(
                "Saving that failed"
            )
            call.capture("user", "u1", "hello")
            await call.aclose()
        (said,) = store_log(caplog)
        assert (
            "no memory schema" in said
            and "uv run -m memory.postgres_store upgrade" in said
        )
        # The operator runs the upgrade; the worker finds it at its next look.
        postgres_store.upgrade(url)
        monkeypatch.setattr(store._pool, "_recheck_at", 0.0)
        call = memory.CallMemory(store, ALICE, "call-9")
        assert (await call.remember("city", "Porto")).startswith("Saved")
        await call.aclose()
        await store.close()


async def test_a_schema_at_another_version_is_named_with_what_to_do(caplog, store_url):
    with admin() as conn:
        conn.execute(f"UPDATE {schema_of(store_url)}.schema_version SET version = 99")
    store = memory.open_store(store_url)
    (said,) = store_log(caplog)
    assert (
        "version 99" in said
        and f"newer than this code's {postgres_store.SCHEMA_VERSION}" in said
        and "deploy the newer agent" in said
    )
    with pytest.raises(memory.SchemaMismatchError):
        await store.recall(ALICE, "anything")
    await store.close()
    code, out = command("upgrade", "--url", store_url)
    assert code == 2 and "newer than this code's" in out


def test_a_real_worker_without_the_schema_replies_and_logs_it_once():
    with own_schema(upgraded=False) as url:
        job = run_job(
            url, ["Hello?", "Do you know me?"], script=["Hi!", "Hello.", "Not yet."]
        )
    assert job["returncode"] == 0, job["log"][-3000:]
    assert job["history"][-1] == ["assistant", "Not yet."]
    lines = [
        line
        for line in job["log"].splitlines()
        if line.startswith("ERROR:memory.postgres:")
    ]
    assert len(lines) == 1 and "no memory schema" in lines[0], lines


def test_a_real_worker_whose_server_is_down_replies_and_logs_it_once():
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    job = run_job(
        f"postgresql://postgres@127.0.0.1:{port}/test",
        ["Hello?"],
        script=["Hi!", "Yes?"],
    )
    assert job["returncode"] == 0, job["log"][-3000:]
    assert job["history"][-1] == ["assistant", "Yes?"]
    lines = [
        line
        for line in job["log"].splitlines()
        if line.startswith("ERROR:memory.postgres:")
    ]
    assert len(lines) == 1 and "cannot reach PostgreSQL at 127.0.0.1" in lines[0], lines


async def test_once_the_server_is_found_down_later_replies_do_not_wait_for_it():
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = memory.open_store(f"postgresql://postgres@127.0.0.1:{port}/test")
    # the budget is the subject: the real one, not the tests' generous one
    call = memory.CallMemory(store, ALICE, "call-1", recall_budget=memory.RECALL_BUDGET)
    outcomes: list[str] = []
    call.trace = lambda name, started, ended, attrs: outcomes.append(
        attrs["memory.outcome"]
    )
    try:
        # The first reply waits the recall budget; the pool's "no connection" comes
        # after it, and marks the store down for every call of this process.
        assert memory.MEMORY_UNAVAILABLE in (
            await call.block_for("Hello?", turn=1) or ""
        )
        (first,) = call.recaller._recall_tasks.values()
        with contextlib.suppress(memory.StoreUnavailableError):
            await first
        assert call.health.down
        for turn in (2, 3, 4):
            block = await call.block_for(f"Question {turn}?", turn=turn)
            assert memory.MEMORY_UNAVAILABLE in (block or "")
        assert outcomes == ["timed out", "skipped", "skipped", "skipped"]
        assert call.recalls == 1
        other = memory.CallMemory(store, "bob", "call-2")
        await other.block_for("Hi?", turn=1)
        assert other.recalls == 0  # another call in this process knows it too
    finally:
        await call.aclose()
        await store.close()


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("postgresql://h/db?schema=Bad-Name", "schema="),
        ("postgresql://h/db?tenant=a%20b", "tenant="),
        ("postgresql://u:secret@h/db?nonsense=1", "nonsense"),
    ],
)
def test_a_bad_postgres_url_is_refused_by_name_without_its_password(url, reason):
    with pytest.raises(memory.InvalidStoreUrlError, match=reason) as refused:
        memory.open_store(url)
    assert "secret" not in str(refused.value)


def test_a_postgres_url_names_the_server_schema_and_tenant():
    target = postgres_store.Target(
        "postgres+psycopg://u:pw@db.internal:6432/mem?sslmode=require&tenant=acme"
    )
    assert (target.schema, target.tenant) == ("livekit_memory", "acme")
    assert target.conninfo == "postgresql://u:pw@db.internal:6432/mem?sslmode=require"
    assert target.where == "db.internal:6432/mem schema livekit_memory"


# -- tenants ---------------------------------------------------------------------------


async def test_tenants_sharing_a_schema_never_see_each_others_rows(store_url):
    acme = memory.open_store(with_params(store_url, tenant="acme"))
    globex = memory.open_store(with_params(store_url, tenant="globex"))
    await acme.save(make_exchange(1, text="acme order 5521"))
    await acme.remember(ALICE, memory.Fact.of("name", "Alice of Acme"))
    await globex.save_summary(ALICE, "call-1", "globex call")
    assert (await globex.recall(ALICE, "order 5521")).exchanges == ()
    assert [f.value for f in (await globex.profile(ALICE)).facts] == []
    assert await globex.stats() == {
        "callers": 1,
        "exchanges": 0,
        "facts": 0,
        "summaries": 1,
    }
    assert await globex.forget(ALICE) == 1
    assert await globex.purge(before=9e9, what="exchanges") == 0
    assert [e.user_text for e in await acme.exchanges(ALICE)] == ["acme order 5521"]
    assert await acme.callers() == [ALICE]
    await acme.close()
    await globex.close()


@contextlib.contextmanager
def app_role(
    store_url: str,
    tenant: str,
    *,
    bypassrls: bool = False,
    before_version_4: bool = False,
) -> Iterator[str]:
    """A login role made by `sql --app-role` for ``tenant`` (``before_version_4``: as
    that command made it before version 4); the URL it connects with."""
    role = f"memory_test_{uuid.uuid4().hex[:10]}"
    parts = urlsplit(with_params(store_url, tenant=tenant))
    url = urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rsplit('@', 1)[-1]}"))
    code, sql = command("sql", "--url", url, "--app-role", role)
    assert code == 0, sql
    if before_version_4:
        # (nor the grant of version 5's erasures, which the upgrade gives)
        sql = "\n".join(
            line
            for line in sql.splitlines()
            if "caller_words" not in line and "erasures" not in line
        )
    with admin() as conn:
        conn.execute(sql.encode())
        if bypassrls:
            conn.execute(f"ALTER ROLE {role} BYPASSRLS")
    try:
        yield url
    finally:
        with admin() as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


async def test_an_application_role_is_held_to_its_tenant_by_row_level_security(
    store_url,
):
    owner = memory.open_store(with_params(store_url, tenant="globex"))
    await owner.save(make_exchange(1, text="globex secret 7781"))
    with app_role(store_url, "acme") as url:
        store = memory.open_store(url)
        await store.save(make_exchange(2, text="acme note"))
        assert [e.user_text for e in await store.exchanges(ALICE)] == ["acme note"]
        s = schema_of(store_url)
        with psycopg.connect(
            postgres_store.Target(url).conninfo, autocommit=True
        ) as conn:
            # Even SQL that forgets the tenant sees only this role's rows ...
            assert conn.execute(f"SELECT user_text FROM {s}.exchanges").fetchall() == [
                ("acme note",)
            ]
            # ... cannot write another tenant's, nor rebind itself to another tenant.
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(
                    f"INSERT INTO {s}.facts VALUES ('globex', 'x', 'k', 'v', 0)"
                )
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(f"UPDATE {s}.tenant_roles SET tenant = 'globex'")
            # The word counts its saves keep are held to its tenant too.
            assert conn.execute(
                f"SELECT DISTINCT tenant FROM {s}.caller_words"
            ).fetchall() == [("acme",)]
        code, out = command("check", "--url", url)
        assert code == 0 and "tenant isolation is in force" in out, out
        await store.close()
    await owner.close()


async def test_a_role_made_before_version_4_saves_and_recalls_after_the_upgrade(
    monkeypatch,
):
    # Its saves now write the word counts (through the triggers): upgrade grants them.
    with own_schema(upgraded=False) as url:
        monkeypatch.setattr(postgres_schema, "SCHEMA_VERSION", 3)
        postgres_store.upgrade(url)
        monkeypatch.undo()
        with app_role(url, "acme", before_version_4=True) as role_url:
            postgres_store.upgrade(url)
            store = memory.open_store(role_url)
            await store.save(make_exchange(1, text="the lantern festival"))
            recall = await store.recall(ALICE, "lantern")
            assert [e.user_text for e in recall.exchanges] == ["the lantern festival"]
            await store.close()


def test_the_check_flags_a_superuser_a_bypassrls_role_and_an_unbound_tenant(store_url):
    code, out = command("check", "--url", store_url)  # the tests' own role, a superuser
    assert code == 1 and "tenant isolation is NOT in force" in out
    assert re.search(r"^FAIL role \w+ must not be a superuser", out, re.MULTILINE), out
    with app_role(store_url, "acme", bypassrls=True) as url:
        role = urlsplit(url).username
        code, out = command("check", "--url", url)
        assert code == 1 and f"FAIL role {role} must not have BYPASSRLS: it has" in out
        assert f"ok   role {role} must not own the tables" in out, out
        code, out = command("check", "--url", with_params(url, tenant="globex"))
        assert (
            code == 1 and f"binds {role} to tenant 'globex' (found: 'acme')" in out
        ), out


# -- forget --------------------------------------------------------------------------


def in_files(conn: psycopg.Connection, schema: str, word: str) -> dict[str, bool]:
    """Whether ``word`` is in the files of the exchanges table, its search indexes
    and the word counts' key."""
    conn.execute("CHECKPOINT")  # what is in shared buffers goes to the files
    found = "SELECT position(%s::bytea IN pg_read_binary_file(pg_relation_filepath(%s))) > 0"
    return {
        rel: conn.execute(found, [word.encode(), f"{schema}.{rel}"]).fetchone()
        == (True,)
        for rel in ("exchanges", *postgres_store.SEARCH_INDEXES, "caller_words_pkey")
    }


async def test_forget_erases_rows_index_entries_and_word_counts_and_vacuum_the_index_bytes(
    store, store_url
):
    await store.save(make_exchange(1, text="my password hint is xylophonequartz"))
    await store.save(
        make_exchange(3, text="我的密码提示是紫水晶")
    )  # "amethyst": pairs 紫水, 水晶
    await store.save(make_exchange(2, caller="bob", text="bob's quartz"))
    s = schema_of(store_url)
    with admin() as conn:
        assert in_files(conn, s, "xylophonequartz") == {
            "exchanges": True,
            "turns_search": True,
            "caller_words_pkey": True,
        }
        assert in_files(conn, s, "紫水") == dict.fromkeys(
            in_files(conn, s, "紫水"), True
        )
        assert await store.forget(ALICE) == 2
        conn.execute("SET enable_seqscan = off")  # ask the index itself
        found = f"SELECT count(*) FROM {s}.turns WHERE words @@ CAST(%s AS tsquery)"
        for caller, left in ((ALICE, (0,)), ("bob", (2,))):  # bob's turn and reply
            p = postgres_search.caller_prefix("default", caller)
            for word in ("xylophonequartz", "quartz"):
                if caller == ALICE or word == "quartz":
                    assert conn.execute(found, [f"'{p}{word}'"]).fetchone() == left
        words = f"SELECT DISTINCT caller_id FROM {s}.caller_words"
        assert conn.execute(words).fetchall() == [("bob",)]
        # What the backend's docs say an operator must run to wipe the indexes' bytes
        # too (a table page keeps a deleted row's bytes until a new row reuses them):
        assert command("vacuum", "--url", store_url)[0] == 0
        indexes = (*postgres_store.SEARCH_INDEXES, "caller_words_pkey")
        for word in ("xylophonequartz", "紫水"):
            assert not any(in_files(conn, s, word)[i] for i in indexes)


def in_relation_files(conn: psycopg.Connection, schema: str, word: str) -> list[str]:
    """The relations of ``schema`` (tables, their TOAST tables, indexes) whose files
    on disk hold ``word``'s bytes, read from the data directory as the server keeps
    them (pg_relation_filepath; every 1 GB segment)."""
    conn.execute("CHECKPOINT")  # what is in shared buffers goes to the files
    rows = conn.execute(
        """SELECT c.oid::regclass::text, pg_relation_filepath(c.oid)
           FROM pg_class c LEFT JOIN pg_class t ON t.reltoastrelid = c.oid
           WHERE c.relnamespace = to_regnamespace(%s) AND c.relkind IN ('r', 'i', 't')
              OR t.relnamespace = to_regnamespace(%s)
              OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid IN
                  (SELECT reltoastrelid FROM pg_class
                   WHERE relnamespace = to_regnamespace(%s)))""",
        [schema, schema, schema],
    ).fetchall()
    (data,) = postgres_schema.one_row(conn.execute("SHOW data_directory").fetchone())
    if not os.access(data, os.R_OK | os.X_OK):
        pytest.skip(f"the server's data directory {data} is not readable here")
    found = []
    for name, path in rows:
        for segment in [Path(data, path), *Path(data).glob(f"{path}.[0-9]*")]:
            if segment.is_file() and word.encode() in segment.read_bytes():
                found.append(name)
    return found


async def test_vacuum_after_forget_leaves_no_forgotten_word_in_any_table_or_index_file(
    store, store_url
):
    # After forget and a plain VACUUM the words stayed in the exchanges and
    # caller_words files as dead tuples (41 and 7 copies); only VACUUM FULL removed them.
    for n in range(40):
        await store.save(make_exchange(n, text=f"hint {n}: xylophonequartz"))
    await store.save_summary(ALICE, "call-1", "spoke of xylophonequartz")
    await store.remember(ALICE, memory.Fact.of("password hint", "xylophonequartz"))
    await store.save(make_exchange(99, caller="bob", text="bob's quartz"))
    s = schema_of(store_url)
    with admin() as conn:
        assert "exchanges" in " ".join(in_relation_files(conn, s, "xylophonequartz"))
        assert await store.forget(ALICE) == 42
        code, out = command("vacuum", "--url", store_url)
        assert code == 0, out
        assert in_relation_files(conn, s, "xylophonequartz") == []
        assert in_relation_files(conn, s, "quartz")  # bob's is still there
    assert [e.user_text for e in await store.exchanges("bob")] == ["bob's quartz"]


async def test_vacuum_says_so_when_an_older_transaction_still_holds_forgotten_rows(
    store, store_url, monkeypatch, capsys
):
    # VACUUM FULL keeps a deleted row that an open transaction begun before the
    # delete can still see: the command must not report the words gone.
    from memory import postgres_admin

    await store.save(make_exchange(1, text="my password hint is xylophonequartz"))
    with admin() as older:
        older.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        older.execute("SELECT 1")  # its snapshot: taken before the forget
        await store.forget(ALICE)
        monkeypatch.setattr(postgres_admin, "VACUUM_TRIES", 1)
        code = await asyncio.to_thread(
            postgres_admin.main, ["vacuum", "--url", store_url]
        )
        err = capsys.readouterr().err
        assert code == 1 and "deleted rows still kept in {'exchanges'" in err, err
        assert "run vacuum again when it has ended (pid " in err
        older.execute("ROLLBACK")
    assert (
        await asyncio.to_thread(postgres_admin.main, ["vacuum", "--url", store_url])
        == 0
    )
    with admin() as conn:
        assert in_relation_files(conn, schema_of(store_url), "xylophonequartz") == []


# -- writes, time bounds, faults ------------------------------------------------------


async def test_a_fact_reported_as_failed_is_never_written_later(store, store_url):
    s = schema_of(store_url)
    with admin() as blocker:  # e.g. an operator's long transaction holding the table
        blocker.execute("BEGIN")
        blocker.execute(f"LOCK TABLE {s}.facts IN SHARE MODE")
        started = time.monotonic()
        with pytest.raises(
            (memory.StoreUnavailableError, psycopg.errors.QueryCanceled)
        ):
            await store.remember(ALICE, memory.Fact.of("name", "Alice"), timeout=0.3)
        assert time.monotonic() - started < 0.6
        blocker.execute("ROLLBACK")  # the row frees: nothing of ours may land now
        await asyncio.sleep(0.5)
        assert (await store.profile(ALICE)).facts == ()


async def test_a_read_stuck_on_the_server_is_abandoned_there_too(store, store_url):
    s = schema_of(store_url)
    with admin() as blocker:
        blocker.execute("BEGIN")
        blocker.execute(
            f"LOCK TABLE {s}.facts IN ACCESS EXCLUSIVE MODE"
        )  # e.g. a migration
        call = memory.CallMemory(
            store, ALICE, "call-1", recall_budget=memory.RECALL_BUDGET
        )
        started = time.monotonic()
        assert str(await call.block_for("hello there", turn=1)).startswith(
            memory.MEMORY_UNAVAILABLE
        )
        assert time.monotonic() - started < memory.RECALL_BUDGET + 0.1
        await asyncio.sleep(postgres_store.READ_TIMEOUT + 0.5)
        waiting = blocker.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'livekit-memory'"
            " AND state = 'active' AND wait_event_type = 'Lock'"
        ).fetchone()[0]
        blocker.execute("ROLLBACK")
    assert waiting == 0
    await call.aclose()


async def test_a_forget_is_never_overtaken_by_a_save_made_before_it(store):
    for n in range(20):
        # said before the forget (make_exchange's default time is n ms ahead)
        said = make_exchange(n, text=f"note {n}", at=time.time())
        saving = asyncio.ensure_future(store.save(said))
        await asyncio.sleep(0)  # the save is under way, as ExchangeWriter's would be
        await store.forget(ALICE)
        await saving
        assert (
            await store.exchanges(ALICE) == []
        )  # it landed before the forget, not after


async def test_an_exhausted_pool_is_logged_once_and_calls_go_on(
    store, store_url, caplog, monkeypatch
):
    monkeypatch.setattr(postgres_pool, "READ_TIMEOUT", 0.4)
    await store.remember(ALICE, memory.Fact.of("name", "Alice"))
    with admin() as blocker:
        # Writes stuck behind a lock hold every connection of the pool.
        blocker.execute("BEGIN")
        blocker.execute(f"LOCK TABLE {schema_of(store_url)}.facts IN EXCLUSIVE MODE")
        stuck = [
            asyncio.ensure_future(
                store.remember(f"caller-{n}", memory.Fact.of("a", "b"), timeout=3)
            )
            for n in range(postgres_store.POOL_SIZE)
        ]
        await asyncio.sleep(0.3)
        for n in range(3):
            call = memory.CallMemory(store, ALICE, f"call-{n}")
            started = time.monotonic()
            assert memory.MEMORY_UNAVAILABLE in await call.block_for(
                "What is my name?", turn=1
            )
            assert time.monotonic() - started < memory.RECALL_BUDGET + 0.1
            await asyncio.sleep(
                0.2
            )  # the call goes on; its recall gives up on the pool
            await call.aclose()
        assert store_log(caplog) == [
            f"memory: all {postgres_store.POOL_SIZE} connections to"
            f" {store.target.where} are busy; calls go on without memory"
        ]
        blocker.execute("ROLLBACK")
    await asyncio.gather(*stuck)
    # The calls' recalls marked the store down in this process (memory.health.StoreHealth):
    # once SKIP_DOWN_STORE_FOR is over, a recall probes it in the background.
    call = memory.CallMemory(store, ALICE, "call-9")
    call.health.probe_at = 0.0
    assert memory.MEMORY_UNAVAILABLE in await call.block_for("What is my name?", turn=1)
    assert call.recaller._probe is not None
    await asyncio.wait_for(call.recaller._probe, 5)
    assert 'name: "Alice"' in await call.block_for("What is my name?", turn=2)
    assert store_log(caplog)[-1].endswith("works again")
    await call.aclose()


def _take_calls(url: str, worker: int, calls: int, turns: int) -> int:
    """One worker process: ``calls`` calls at once, each ``turns`` exchanges long, with
    every capture event sent twice (as a reconnect can), and every caller's facts
    written by every worker at once. Returns the exchanges left unsaved."""

    async def one_call(store: memory.MemoryStore, n: int) -> int:
        call = memory.CallMemory(store, f"caller-{n}", f"call-{worker}-{n}")
        for t in range(turns):
            for _ in range(2):
                call.capture(
                    "user",
                    f"u-{worker}-{n}-{t}",
                    f"worker {worker} call {n} turn {t}",
                    created_at=1000.0 + t,
                )
                call.capture(
                    "assistant",
                    f"a-{worker}-{n}-{t}",
                    f"reply {t}",
                    created_at=1000.5 + t,
                )
            await call.remember("last worker", str(worker))
            await asyncio.sleep(0.001)
        return await call.aclose()

    async def main() -> int:
        store = memory.open_store(url)
        left = await asyncio.gather(*(one_call(store, n) for n in range(calls)))
        await store.close()
        return sum(left)

    return asyncio.run(main())


def test_several_worker_processes_taking_many_calls_at_once_lose_and_double_nothing(
    store_url,
):
    workers, calls, turns = 4, 10, 10
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers) as pool:
        unsaved = pool.starmap(
            _take_calls, [(store_url, w, calls, turns) for w in range(workers)]
        )
    assert unsaved == [0] * workers
    s = schema_of(store_url)
    with admin() as conn:
        count = f"SELECT count(*), count(DISTINCT key) FROM {s}.exchanges"
        assert conn.execute(count).fetchone() == (workers * calls * turns,) * 2
        assert conn.execute(
            f"SELECT count(*) FROM {s}.exchanges"
            " WHERE assistant_text = 'reply ' || (created_at - 1000)::int"
        ).fetchone() == (workers * calls * turns,)
        current = f"SELECT count(*) FROM {s}.facts WHERE replaced_at IS NULL"
        assert conn.execute(current).fetchone() == (calls,)
        assert conn.execute(f"SELECT count(*) FROM {s}.summaries").fetchone() == (
            workers * calls,
        )


class Throwaway:
    """A PostgreSQL cluster of the test's own, on a free port of 127.0.0.1, that the
    test may stop and restart (the shared server stays up for everyone). Debian's
    server packages provide initdb and pg_ctl; as root they run as the postgres user."""

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version) or [
            shutil.which("initdb") or ""
        ]
        if not found[-1]:
            reason = "no initdb to make a throwaway PostgreSQL cluster (apt-get install postgresql)"
            if os.environ.get("MEMORY_REQUIRE_POSTGRES") == "1":
                pytest.fail(reason)
            pytest.skip(reason)
        self.bin = Path(found[-1]).parent
        self.dir = Path(tempfile.mkdtemp(prefix="memory-pg-"))
        self.as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_owner:
            shutil.chown(self.dir, "postgres")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._run(
            "initdb",
            "-D",
            str(self.dir / "data"),
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
        )

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self.as_owner, str(self.bin / tool), *args],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def pg_ctl(self, action: str, settings: str = "") -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} {settings}"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.dir / "data"),
            "-l",
            str(self.dir / "log"),
            "-o",
            options,
            "-m",
            "fast",
            "-w",
            action,
        )

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.pg_ctl("stop")
        shutil.rmtree(self.dir, ignore_errors=True)


def _version(path: str) -> float:
    return float(Path(path).parent.parent.name)


@pytest.fixture
def throwaway() -> Iterator[Throwaway]:
    server = Throwaway()
    server.pg_ctl("start")
    yield server
    server.remove()


async def test_a_server_restart_mid_call_loses_nothing_accepted_and_replies_stay_on_time(
    throwaway,
):
    url = throwaway.url + "?schema=livekit_memory"
    postgres_store.upgrade(url)
    store = memory.open_store(url)
    calls = [  # the budget is the subject: the real one
        memory.CallMemory(
            store, f"caller-{n}", f"call-{n}", recall_budget=memory.RECALL_BUDGET
        )
        for n in range(3)
    ]
    waits: list[float] = []

    async def turn(call: memory.CallMemory, t: int) -> None:
        started = time.perf_counter()
        await call.block_for(f"question {t} about lanterns", turn=t + 1)
        waits.append(time.perf_counter() - started)
        call.capture(
            "user", f"u{t}", f"question {t} about lanterns", created_at=1000.0 + t
        )
        call.capture("assistant", f"a{t}", f"answer {t}", created_at=1000.5 + t)

    restart = None
    for t in range(30):
        if t == 5:  # mid-call: the server goes down and comes back (~1 s)
            restart = asyncio.ensure_future(
                asyncio.to_thread(throwaway.pg_ctl, "restart")
            )
        await asyncio.gather(*(turn(call, t) for call in calls))
        await asyncio.sleep(0.1)
    await restart
    assert [await call.aclose() for call in calls] == [0, 0, 0]
    assert max(waits) < memory.RECALL_BUDGET + 0.1
    with psycopg.connect(throwaway.url) as conn:
        assert conn.execute(
            "SELECT count(*), count(DISTINCT key) FROM livekit_memory.exchanges"
            " WHERE assistant_text <> ''"
        ).fetchone() == (90, 90)
    await store.close()


async def test_a_server_down_at_start_up_is_logged_once_and_calls_go_on(
    throwaway, caplog
):
    url = throwaway.url + "?schema=livekit_memory"
    postgres_store.upgrade(url)
    throwaway.pg_ctl("stop")
    started = time.monotonic()
    store = memory.open_store(url)  # prewarm
    assert time.monotonic() - started < postgres_store.CONNECT_TIMEOUT + 1
    for n in range(3):
        call = memory.CallMemory(store, ALICE, f"call-{n}")
        assert str(await call.block_for("hello", turn=1)).startswith(
            memory.MEMORY_UNAVAILABLE
        )
        await call.aclose(timeout=0.5)
    (said,) = store_log(caplog)
    assert said.startswith(
        f"memory: cannot reach PostgreSQL at 127.0.0.1:{throwaway.port}/postgres"
    )
    throwaway.pg_ctl("start")  # memory comes back by itself, within a few seconds
    call = memory.CallMemory(store, ALICE, "call-9")
    for _ in range(20):
        if (await call.remember("name", "Alice")).startswith("Saved"):
            break
        await asyncio.sleep(0.5)
    assert [f.value for f in (await store.profile(ALICE)).facts] == ["Alice"]
    assert store_log(caplog)[-1].endswith("works again")
    await call.aclose()
    await store.close()


def test_a_server_out_of_connection_slots_at_start_up_is_logged_once_and_calls_go_on(
    caplog,
):
    server = Throwaway()
    server.pg_ctl("start", "-c max_connections=3 -c superuser_reserved_connections=0")
    try:
        url = server.url + "?schema=livekit_memory"
        postgres_store.upgrade(url)
        others = [psycopg.connect(server.url) for _ in range(3)]  # every slot taken
        store = memory.open_store(url)  # prewarm

        async def calls() -> None:
            for n in range(3):
                call = memory.CallMemory(store, ALICE, f"call-{n}")
                assert str(await call.block_for("hello", turn=1)).startswith(
                    memory.MEMORY_UNAVAILABLE
                )
                await asyncio.sleep(postgres_store.READ_TIMEOUT)
                await call.aclose(timeout=0.2)
            for conn in others:
                conn.close()
            for _ in range(20):  # memory comes back by itself
                with contextlib.suppress(memory.StoreUnavailableError):
                    await store.remember(ALICE, memory.Fact.of("name", "Alice"))
                    break
                await asyncio.sleep(0.5)
            assert [f.value for f in (await store.profile(ALICE)).facts] == ["Alice"]
            await store.close()

        asyncio.run(calls())
    finally:
        server.remove()
    said = store_log(caplog)
    assert (
        len(said) == 2
        and "too many clients" in said[0]
        and said[1].endswith("works again")
    )
