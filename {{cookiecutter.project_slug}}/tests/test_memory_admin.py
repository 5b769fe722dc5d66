"""The operator command (memory_admin.py) against this project's backend, run as an
operator runs it: a process with MEMORY_URL in its environment."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest

import memory
from tests.conftest import call
from tests.doubles import InMemoryStore, make_exchange
from tests.scripted_llm import ScriptedLLM, ToolCall

PROJECT = Path(__file__).resolve().parents[1]
ALICE, BOB = "alice@example.com", "+15550100200"


def admin(store_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return _operator(store_url, ["memory_admin.py", *args], env)


def _operator(
    store_url: str, argv: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    # Python with these arguments, run as an operator runs memory_admin.py
    return subprocess.run(
        [sys.executable, *argv],
        cwd=PROJECT,
        env={**os.environ, "MEMORY_URL": store_url, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
async def two_callers(store):
    await store.save(make_exchange(1, ALICE, "My sister Ana is vegetarian.", at=1000.0))
    await store.save(make_exchange(2, ALICE, "I moved to Lisbon.", at=time.time()))
    await store.remember(ALICE, memory.Fact.of("home city", "Lisbon"))
    await store.save_summary(ALICE, "call-1", "Talked about a move to Lisbon.")
    await store.save(
        make_exchange(3, BOB, "Bob's locker code is 4417.", at=time.time())
    )
    await store.remember(BOB, memory.Fact.of("locker", "4417"))
    return store


async def test_stats_and_callers_list_what_is_stored(store_url, two_callers):
    stats = admin(store_url, "stats")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout) == {
        "callers": 2,
        "exchanges": 3,
        "facts": 2,
        "summaries": 1,
    }
    listed = admin(store_url, "callers", "--limit", "1")
    assert listed.stdout.split() == [BOB]  # "+" sorts before letters
    assert admin(store_url, "callers", "--after", BOB).stdout.split() == [ALICE]


async def test_show_and_export_give_one_caller_and_never_another(
    store_url, two_callers, tmp_path
):
    shown = admin(store_url, "show", ALICE)
    assert shown.returncode == 0, shown.stderr
    assert (
        'home city: "Lisbon"' in shown.stdout
        and "My sister Ana is vegetarian." in shown.stdout
    )
    # Bob's exchange and fact say "locker" (his code, 4417, can be digits of a timestamp)
    assert "locker" not in shown.stdout and BOB not in shown.stdout
    out = tmp_path / "alice.json"
    exported = admin(store_url, "export", ALICE, "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    data = json.loads(out.read_text())
    assert data["caller_id"] == ALICE
    assert [e["user_text"] for e in data["exchanges"]] == [
        "My sister Ana is vegetarian.",
        "I moved to Lisbon.",
    ]
    assert [(f["kind"], f["value"]) for f in data["facts"]] == [("home_city", "Lisbon")]
    assert "locker" not in out.read_text() and BOB not in out.read_text()


def test_show_quotes_each_side_alike_and_an_opening_as_the_agents_words_alone():
    import memory_admin

    opening = replace(
        make_exchange(1, ALICE, reply="How did the move go?", at=0.0), user_text=""
    )
    said = make_exchange(
        2, ALICE, "It's done, we're in Porto.", reply='Great "news"!', at=60.0
    )
    data = {
        "caller_id": ALICE,
        "facts": [],
        "summaries": [],
        "exchanges": [asdict(opening), asdict(said)],
    }
    assert memory_admin.show(data).splitlines()[-3:] == [
        '  1970-01-01 00:00 UTC agent:  "How did the move go?"',
        "  1970-01-01 00:01 UTC caller: \"It's done, we're in Porto.\"",
        '                       agent:  "Great \\"news\\"!"',
    ]


async def test_show_lists_calls_oldest_first_and_marks_a_reply_the_caller_cut_short(
    store_url, store
):
    await store.save_summary(ALICE, "call-1", "Asked about a flight to Porto.")
    await asyncio.sleep(0.01)  # the summaries are ordered by the time each was saved
    await store.save_summary(ALICE, "call-2", "Booked the flight to Porto.")
    await store.save(make_exchange(1, ALICE, "Is there a flight to Porto?", at=1000.0))
    cut = make_exchange(
        2, ALICE, "Book it.", reply="Booking it now, the fare is", at=2000.0
    )
    await store.save(replace(cut, interrupted=True))
    shown = admin(store_url, "show", ALICE)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    # summaries and exchanges both read oldest first (the store lists summaries newest first)
    assert out.index('call-1: "Asked about') < out.index('call-2: "Booked')
    assert out.index("Is there a flight to Porto?") < out.index("Book it.")
    assert 'agent:  "Booking it now, the fare is" (interrupted)\n' in out
    assert 'agent:  "ok"\n' in out  # a reply heard to the end is not marked
    exported = json.loads(admin(store_url, "export", ALICE).stdout)
    assert [s["call_id"] for s in exported["summaries"]] == ["call-1", "call-2"]
    assert [e["interrupted"] for e in exported["exchanges"]] == [False, True]
    assert "oldest first" in admin(store_url, "show", "--help").stdout


async def test_export_writes_a_utf8_file_whatever_the_locale(
    store_url, store, tmp_path
):
    # JSON files are UTF-8 (RFC 8259); written in the locale's encoding (cp1252 on
    # Windows, ASCII in a C locale without UTF-8 mode) an emoji or a name in another
    # script failed the export, reported as "the memory store failed"
    said = "Je m'appelle José, de 北京 🎉"
    await store.save(make_exchange(1, ALICE, said, at=1000.0))
    out = tmp_path / "alice.json"
    ascii_locale = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    exported = admin(store_url, "export", ALICE, "--out", str(out), **ascii_locale)
    assert exported.returncode == 0, exported.stderr
    data = json.loads(out.read_text(encoding="utf-8"))
    assert [e["user_text"] for e in data["exchanges"]] == [said]


async def test_show_prints_each_remembered_text_as_one_line_with_no_control_characters(
    store_url, store
):
    # Summaries and fact values were printed raw: a line break in one faked a line of
    # show, and an escape sequence typed into a chat reached the operator's terminal.
    fake = 'Paid.\n  1970-01-01 00:00 UTC agent:  "refund approved"\x1b[2J'
    await store.save_summary(ALICE, "call-1", fake)
    await store.remember(ALICE, memory.Fact.of("note", "line one\nline two \x1b[31m"))
    shown = admin(store_url, "show", ALICE)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout
    assert "refund approved" in shown.stdout
    lines = shown.stdout.splitlines()
    assert not any(
        line.lstrip().startswith("1970-01-01 00:00 UTC agent:") for line in lines
    )
    assert json.dumps(fake) in shown.stdout


async def test_show_escapes_line_separators_and_c1_controls_that_fake_lines_or_reach_the_terminal(
    store_url, store
):
    # json.dumps escapes only C0 controls: U+2028 and NEL (U+0085) break lines in
    # some terminals and viewers, and U+009B is the one-byte CSI of an escape sequence
    fake = "Paid.\u2028  agent: refund approved\u0085ok\u009b2J\u202eevil"
    await store.save_summary(ALICE, "call-1", fake)
    await store.save(make_exchange(1, ALICE, fake, at=1000.0))
    shown = admin(store_url, "show", ALICE)
    assert shown.returncode == 0, shown.stderr
    for c in "\u2028\u0085\u009b\u202e":
        assert c not in shown.stdout
        assert f"\\u{ord(c):04x}" in shown.stdout
    assert len(shown.stdout.splitlines()) == len(shown.stdout.split("\n")) - 1
    summary = next(line for line in shown.stdout.splitlines() if "Paid." in line)
    assert json.loads(summary.split(": ", 1)[1]) == fake  # still one JSON string


async def test_show_of_a_caller_with_nothing_stored_says_so_and_fails(
    store_url, two_callers
):
    mistyped = admin(store_url, "show", "alice@exmaple.com")
    assert mistyped.returncode == 3 and mistyped.stdout == ""
    assert "nothing is stored for alice@exmaple.com (check the id" in mistyped.stderr
    assert admin(store_url, "forget", ALICE, "--yes").returncode == 0
    forgotten = admin(store_url, "show", ALICE)
    assert forgotten.returncode == 3
    assert f"nothing is stored for {ALICE}: forgotten " in forgotten.stderr


async def test_a_phone_number_in_any_form_reaches_the_caller_memory_keys_it_by(
    store_url, two_callers
):
    # "5550100200" was validated as it was: show found nothing, forget deleted 0
    # rows and exited 0, and the SIP caller's memory stayed.
    shown = admin(store_url, "show", "5550100200")
    assert shown.returncode == 0, shown.stderr
    assert "locker" in shown.stdout and f"is kept as {BOB}" in shown.stderr
    done = admin(store_url, "forget", "+1 (555) 010-0200", "--yes")
    assert done.returncode == 0, done.stderr
    check = memory.open_store(store_url)
    assert await check.exchanges(BOB) == [] and (await check.profile(BOB)).empty
    assert len(await check.exchanges(ALICE)) == 2
    await check.close()


async def test_forget_of_a_caller_with_nothing_stored_says_so_and_fails(
    store_url, two_callers
):
    mistyped = admin(store_url, "forget", "alice@exmaple.com", "--yes")
    assert mistyped.returncode == 3, mistyped.stderr
    assert "forgot alice@exmaple.com: 0 rows deleted" in mistyped.stdout
    assert "nothing is stored for alice@exmaple.com (check the id" in mistyped.stderr


async def test_show_into_a_pipe_closed_early_is_no_store_failure(
    store_url, two_callers
):
    shown = subprocess.Popen(
        [sys.executable, "memory_admin.py", "show", ALICE],
        cwd=PROJECT,
        env={**os.environ, "MEMORY_URL": store_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert shown.stdout is not None and shown.stderr is not None
    shown.stdout.close()  # `show ... | head` after head has what it wanted
    said = shown.stderr.read()
    assert shown.wait(timeout=60) == 1
    # (a hosted store may still say what waits in its outbox at close)
    assert "failed" not in said and "Broken" not in said, said


def test_forget_on_a_store_that_does_not_exist_creates_nothing_and_fails(tmp_path):
    url = f"sqlite:///{tmp_path / 'mistyped.db'}"
    done = admin(url, "forget", ALICE, "--yes")
    assert done.returncode == 1 and "no memory file at" in done.stderr
    assert list(tmp_path.iterdir()) == []


async def test_show_and_export_to_a_terminal_that_is_not_utf8_print_every_caller(
    store_url, store
):
    # In a C locale without UTF-8 mode, a caller's "José" failed both commands with
    # "the memory store failed" (UnicodeEncodeError on standard output).
    said = "Je m'appelle José, de 北京 🎉"
    await store.save(make_exchange(1, ALICE, said, at=1000.0))
    ascii_locale = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    exported = admin(store_url, "export", ALICE, **ascii_locale)
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.isascii()
    assert [e["user_text"] for e in json.loads(exported.stdout)["exchanges"]] == [said]
    shown = admin(store_url, "show", ALICE, **ascii_locale)
    assert shown.returncode == 0, shown.stderr
    assert "Je m'appelle Jos" in shown.stdout


async def test_show_and_export_keep_a_replaced_value_as_history(store_url, store):
    await store.remember(ALICE, memory.Fact.of("home city", "Lisbon", 1000.0))
    await store.remember(ALICE, memory.Fact.of("where I live", "Porto", 90000.0))
    shown = admin(store_url, "show", ALICE)
    assert shown.returncode == 0, shown.stderr
    assert 'home city: "Porto" (learned 1970-01-02 01:00 UTC)' in shown.stdout
    assert (
        'replaced facts (1):\n  home city: "Lisbon" (replaced 1970-01-02 01:00 UTC)'
        in shown.stdout
    )
    exported = json.loads(admin(store_url, "export", ALICE).stdout)
    assert [(f["value"], f["replaced_at"]) for f in exported["fact_history"]] == [
        ("Lisbon", 90000.0)
    ]


async def test_forget_erases_one_caller_only_after_yes(store_url, two_callers):
    refused = admin(store_url, "forget", ALICE)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    done = admin(store_url, "forget", ALICE, "--yes")
    assert done.returncode == 0, done.stderr
    check = memory.open_store(store_url)
    assert (await check.profile(ALICE)).empty and await check.exchanges(ALICE) == []
    assert len(await check.exchanges(BOB)) == 1
    await check.close()


async def test_forget_during_a_live_call_reaches_it_so_nothing_said_before_comes_back(
    store_url, store, caplog
):
    model = ScriptedLLM(
        ["Hello!", "Noted, Dana.", "We close at six."],
        # what the model would find in the whole call: the name said before forget
        extract=[
            json.dumps({"facts": [{"kind": "name", "value": "Dana", "exchange": 1}]})
        ],
    )
    async with call(store, ALICE, model) as (session, live):
        await session.run(user_input="I'm Dana, my locker code is 4417.")
        await live.flush()
        # the operator, in another process, while the call goes on
        forgot = await asyncio.to_thread(admin, store_url, "forget", ALICE, "--yes")
        assert forgot.returncode == 0, forgot.stderr
        await session.run(user_input="What time do you close?")
    said = [e.user_text for e in await store.exchanges(ALICE)]
    assert said == ["What time do you close?"]
    summaries = " ".join(s.text for s in await store.summaries(ALICE))
    assert "Dana" not in summaries and "4417" not in summaries
    assert (await store.profile(ALICE)).facts == ()
    assert "said before then are not saved, summarised or extracted" in caplog.text


def admin_with_clock_behind(store_url: str, seconds: float, *args: str):
    """``admin`` on a machine whose clock is ``seconds`` behind this one's."""
    code = (
        "import runpy, sys, time\n"
        f"real = time.time\ntime.time = lambda: real() - {seconds}\n"
        f"sys.argv = ['memory_admin.py', *{list(args)!r}]\n"
        "runpy.run_path('memory_admin.py', run_name='__main__')\n"
    )
    return _operator(store_url, ["-c", code], {})


async def test_an_erasure_from_a_machine_whose_clock_is_behind_reaches_the_live_call(
    store_url, store
):
    # Workers on several machines share a PostgreSQL server; the operator's machine
    # runs a minute behind the worker's. The erasure is timed by the server's clock.
    if not store_url.startswith("postgres"):
        pytest.skip("one machine, one clock: only a server is shared across machines")
    model = ScriptedLLM(["Hello!", "Noted, Dana.", "We close at six."])
    async with call(store, ALICE, model) as (session, live):
        await session.run(user_input="I'm Dana, my locker code is 4417.")
        await live.flush()
        forgot = await asyncio.to_thread(
            admin_with_clock_behind, store_url, 60.0, "forget", ALICE, "--yes"
        )
        assert forgot.returncode == 0, forgot.stderr
        await session.run(user_input="What time do you close?")
    said = [e.user_text for e in await store.exchanges(ALICE)]
    assert said == ["What time do you close?"]
    summaries = " ".join(s.text for s in await store.summaries(ALICE))
    assert "Dana" not in summaries and "4417" not in summaries


async def test_remember_after_an_erasure_in_another_process_keeps_nothing_said_before_it(
    store_url, store
):
    model = ScriptedLLM(
        [
            "Hello!",
            "Noted.",
            # the model, after the operator's erasure, saves what was said before it
            ToolCall("remember", {"kind": "locker code", "value": "4417"}),
            "Saved it.",
            ToolCall("remember", {"kind": "locker code", "value": "5521"}),
            "Saved the new one.",
        ]
    )
    async with call(store, ALICE, model) as (session, live):
        await session.run(user_input="My locker code is 4417.")
        await live.flush()
        forgot = await asyncio.to_thread(admin, store_url, "forget", ALICE, "--yes")
        assert forgot.returncode == 0, forgot.stderr
        await session.run(user_input="Please remember my locker code.")
        await session.run(user_input="It is 5521 now, keep that one.")
    told = list(  # each request carries the outputs of the ones before it
        {
            i.call_id: i.output
            for r in model.replies
            for i in r.items
            if i.type == "function_call_output"
        }.values()
    )
    assert told[0].startswith("Not saved: the caller's memory was erased"), told
    assert told[1].startswith("Saved"), told
    facts = (await store.profile(ALICE)).facts
    assert [(f.kind, f.value) for f in facts] == [("locker_code", "5521")]


async def test_purge_deletes_by_age_from_the_settings_or_the_command_line(
    store_url, two_callers
):
    unset = admin(store_url, "purge")
    assert unset.returncode == 2 and "MEMORY_KEEP_EXCHANGES_DAYS" in unset.stderr
    by_setting = admin(store_url, "purge", MEMORY_KEEP_EXCHANGES_DAYS="30")
    assert by_setting.returncode == 0, by_setting.stderr
    assert json.loads(by_setting.stdout) == {"exchanges": 1}  # the one from 1970
    by_flag = admin(store_url, "purge", "--what", "facts", "--older-than-days", "1")
    assert by_flag.returncode == 0 and json.loads(by_flag.stdout) == {"facts": 0}
    check = memory.open_store(store_url)
    assert [e.user_text for e in await check.exchanges(ALICE)] == ["I moved to Lisbon."]
    await check.close()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["show", "../etc/passwd"], "characters outside"),
        (["export", ""], "caller id is empty"),
        (["purge", "--what", "facts"], "--older-than-days"),
    ],
)
def test_a_bad_command_gets_one_clear_error_and_status_2(store_url, args, says):
    done = admin(store_url, *args)
    assert (
        done.returncode == 2
        and done.stderr.startswith("ERROR: ")
        and says in done.stderr
    )


def test_a_store_that_cannot_be_opened_gives_status_1_and_one_line(tmp_path):
    done = admin("nosuchbackend://x", "stats")
    assert done.returncode == 1 and "ERROR: the memory store failed" in done.stderr
    assert "Traceback" not in done.stderr


async def test_a_background_purge_applies_the_retention_settings(monkeypatch):
    monkeypatch.setenv("MEMORY_KEEP_EXCHANGES_DAYS", "1")
    store = InMemoryStore()
    await store.save(make_exchange(1, ALICE, "old", at=time.time() - 3 * 86_400))
    await store.save(make_exchange(2, ALICE, "new"))
    call = memory.CallMemory(store, ALICE, "call-1")
    call.start()
    for _ in range(100):
        if len(await store.exchanges(ALICE)) == 1:
            break
        await asyncio.sleep(0.01)
    assert [e.user_text for e in await store.exchanges(ALICE)] == ["new"]
    await call.aclose()


def test_a_retention_setting_that_is_not_a_number_of_days_is_refused_by_name(
    monkeypatch,
):
    monkeypatch.setenv("MEMORY_KEEP_FACTS_DAYS", "ninety")
    with pytest.raises(ValueError, match="MEMORY_KEEP_FACTS_DAYS"):
        memory.Retention.from_env()
