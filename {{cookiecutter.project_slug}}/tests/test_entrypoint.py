"""The real entrypoint, prewarm and shutdown path, run by livekit-agents' own job
machinery (tests/livekit_job.py: the console's mock room and text input, the thread
job executor, the worker's shutdown calling every shutdown callback with its reason).
Only the providers are stand-ins: the scripted model, and offline speech-to-text and
text-to-speech (agent.new_stt, new_tts), so a job touches no network. These tests
build nothing by hand: whatever class and wiring agent.py's entrypoint uses is what
runs."""

from __future__ import annotations

import pytest

import memory
from tests.conftest import call
from tests.livekit_job import run_job
from tests.scripted_llm import ScriptedLLM

SCRIPT = [
    "Hello!",
    {"tool": "remember", "arguments": {"kind": "name", "value": "Maria"}},
    "Nice to meet you, Maria.",
    "Noted.",
    "Bye!",
]


def blocks(request: list[list[str]]) -> list[str]:
    return [
        text
        for role, text in request
        if role == "system"
        and text.startswith(
            (memory.BLOCK_HEADER, memory.NOTHING_KNOWN, memory.MEMORY_UNAVAILABLE)
        )
    ]


def assert_clean(job: dict) -> None:
    assert job["returncode"] == 0, job["log"][-4000:]
    for trouble in (
        "Traceback",
        "error while shutting down",
        "unhandled exception",
        "TypeError",
        "tried to reach",  # the network (tests/livekit_job.py refuses it)
        "LiveKit Inference",  # a provider's connection failing
    ):
        assert trouble not in job["log"], job["log"][-4000:]


@pytest.mark.smoke  # the kit runs it for every backend x recipe
async def test_a_real_call_saves_its_exchanges_and_summary_and_the_next_call_hears_them(
    store_url,
):
    first = run_job(
        store_url,
        ["Hi, I'm Maria.", "My sister Ana is vegetarian.", "Thanks, bye."],
        identity="maria@example.com",
        script=SCRIPT,
    )
    assert_clean(first)
    store = memory.open_store(store_url)
    saved = await store.exchanges("maria@example.com")
    assert [(e.user_text, e.assistant_text) for e in saved] == [
        ("", "Hello!"),  # the greeting Maria answered: the call's opening
        ("Hi, I'm Maria.", "Nice to meet you, Maria."),
        ("My sister Ana is vegetarian.", "Noted."),
        ("Thanks, bye.", "Bye!"),
    ]
    profile = await store.profile("maria@example.com")
    # The shutdown callback ran with LiveKit's reason argument and saved the summary.
    assert [s.call_id for s in profile.summaries] == [first["job_id"]]
    assert "My sister Ana is vegetarian." in profile.summaries[0].text
    assert [(f.kind, f.value) for f in profile.facts] == [("name", "Maria")]
    await store.close()

    second = run_job(
        store_url,
        ["What does my sister eat?"],
        identity="maria@example.com",
        script=["Hi Maria!"],
    )
    assert_clean(second)
    greeting, answer = second["requests"][0], second["requests"][-1]
    assert 'name: "Maria"' in blocks(greeting)[0]
    (block,) = blocks(answer)
    assert "vegetarian" in block
    assert answer[-1] == ["user", "What does my sister eat?"]


async def test_a_long_call_through_the_real_entrypoint_stays_offline_with_a_clean_log(
    store_url,
):
    # Many turns give a speech provider time to fail and reconnect ("STT stream
    # ended... recreating"); the job's STT and TTS are offline stand-ins, so none does.
    turns = [f"Here is thing number {n}." for n in range(20)]
    job = run_job(
        store_url, turns, script=["Hello!"] + [f"Got {n}." for n in range(20)]
    )
    assert_clean(job)
    assert job["history"][-1] == ["assistant", "Got 19."]
    assert len(job["requests"]) == 21  # the greeting and one reply per turn


async def test_a_sip_caller_is_remembered_by_their_number(store_url):
    job = run_job(
        store_url,
        ["Please call me back tomorrow."],
        identity="sip_caller",
        sip_number="+1 (555) 010-0200",
    )
    assert_clean(job)
    store = memory.open_store(store_url)
    assert [e.user_text for e in await store.exchanges("+15550100200")] == [
        "",  # the opening (the greeting)
        "Please call me back tomorrow.",
    ]
    assert await store.exchanges("sip_caller") == []
    await store.close()


async def test_a_sip_number_in_other_digits_is_the_same_caller_and_never_ends_the_job(
    store_url,
):
    # "+1555\u0660100200": an Arabic-Indic zero once passed one check and failed the
    # next, outside the entrypoint's guard, and the job died before the session.
    job = run_job(
        store_url,
        ["Is my parcel here?"],
        identity="sip_caller",
        sip_number="+1555\u0660100200",
    )
    assert_clean(job)
    assert job["history"][-1][0] == "assistant"
    store = memory.open_store(store_url)
    assert [e.user_text for e in await store.exchanges("+15550100200")] == [
        "",
        "Is my parcel here?",
    ]
    await store.close()


async def test_the_dispatch_metadata_names_the_caller(store_url):
    job = run_job(
        store_url,
        ["My order is 5521."],
        identity="web-session-9f3",
        metadata={"caller_id": "customer-42"},
    )
    assert_clean(job)
    store = memory.open_store(store_url)
    assert [e.user_text for e in await store.exchanges("customer-42")] == [
        "",
        "My order is 5521.",
    ]
    await store.close()


async def test_a_caller_without_a_usable_id_still_gets_replies_without_memory(
    store_url,
):
    # (every other unusable-id path is a unit test of caller_or_none in test_agent.py)
    job = run_job(store_url, ["Hello?"], identity="web user 7", script=["Hi!", "Yes?"])
    assert_clean(job)
    assert job["history"][-1] == ["assistant", "Yes?"]
    assert all(blocks(r) == [] for r in job["requests"])
    assert "memory is off for this call" in job["log"]


async def test_the_tests_build_the_agent_class_the_entrypoint_runs(store_url, store):
    # The in-process tests build their agent with agent.build_agent (tests/conftest.py);
    # an entrypoint that starts another class would leave it untested.
    job = run_job(store_url, ["Hello."])
    assert_clean(job)
    async with call(store, "alice", ScriptedLLM()) as (session, _):
        built = type(session.current_agent)
    assert job["agent_class"] == f"{built.__module__}.{built.__qualname__}", (
        "the entrypoint runs another agent class than agent.build_agent builds: build it "
        "in build_agent, so the tests run what production runs"
    )
    assert "without memory being asked" not in job["log"]


@pytest.mark.parametrize(
    ("memory_url", "named"),
    [
        ("not-a-database", "file is not a database"),  # a file another tool overwrote
        ("nosuch://db.example.com/memory", "no backend for 'nosuch'"),
        ("sqlite://relative-host/memory.db", "is not a sqlite URL"),
        # no driver installed (a sqlite project), or no server listening (postgres)
        ("postgresql://127.0.0.1:1/memory", "127.0.0.1:1"),
    ],
)
async def test_a_store_that_cannot_be_opened_costs_memory_not_the_call(
    tmp_path, memory_url, named
):
    # prewarm runs in every job process: a store it cannot open once took every
    # call's agent away. Now the call is answered without memory, one ERROR says why.
    if memory_url == "not-a-database":
        broken = tmp_path / "memory.db"
        broken.write_bytes(b"saved by another tool, not SQLite " * 200)
        memory_url = f"sqlite:///{broken}"
    job = run_job(memory_url, ["Hello?"], script=["Hi!", "Yes?"])
    assert job["returncode"] == 0, job["log"][-4000:]
    assert job["history"][-1] == ["assistant", "Yes?"]
    assert "Traceback" not in job["log"], job["log"][-4000:]
    errors = [
        line
        for line in job["log"].splitlines()
        if line.startswith("ERROR")
        # (a PostgreSQL store that opens while its server is down keeps the call's
        # exchanges to retry, and says at the end which were not saved: that report
        # is the write path's, not the opening's)
        and "not saved before the call closed" not in line
    ]
    assert len(errors) == 1 and named in errors[0], job["log"][-4000:]
    (block,) = blocks(job["requests"][-1])
    assert block.startswith(memory.MEMORY_UNAVAILABLE)
