"""Recipe telephony: the phone number is the caller; nothing is kept without consent."""

from __future__ import annotations

import inspect
import logging

import pytest
from livekit import rtc
from livekit.rtc._proto import handle_pb2, participant_pb2

import agent
import memory
from memory import livekit_adapter
from tests.conftest import call
from tests.livekit_job import run_job
from tests.scripted_llm import ScriptedLLM, ToolCall

NUMBER = "+15550100200"


def sip_caller(number: str) -> rtc.RemoteParticipant:
    """A real rtc.RemoteParticipant as LiveKit's SIP service creates it."""
    info = participant_pb2.ParticipantInfo(
        identity=f"sip_{number}",
        kind=participant_pb2.ParticipantKind.PARTICIPANT_KIND_SIP,
    )
    info.attributes["sip.phoneNumber"] = number
    owned = participant_pb2.OwnedParticipant(
        handle=handle_pb2.FfiOwnedHandle(id=0), info=info
    )
    return rtc.RemoteParticipant(owned)


def test_the_caller_is_the_number_in_e164_form():
    assert livekit_adapter.caller_id_for(sip_caller("+1 (555) 010-0200"), {}) == NUMBER


@pytest.mark.parametrize("number", ["", "anonymous", "Restricted"])
def test_a_withheld_number_is_refused_so_memory_is_off(number):
    with pytest.raises(memory.InvalidCallerIdError):
        livekit_adapter.caller_id_for(sip_caller(number), {})


async def test_a_new_number_is_asked_for_consent_and_nothing_is_kept_before_yes(store):
    model = ScriptedLLM(
        [
            "Hello! May I remember this call to help you next time?",
            "Sorry, could you answer yes or no?",
            ToolCall("record_consent", {"agreed": True}),
            "Thank you.",
            "Noted.",
        ]
    )
    async with call(store, NUMBER, model) as (session, _):
        assert (
            "ask whether you may remember this call"
            in model.replies[0].items[-1].text_content
        )
        await session.run(user_input="My account number is 4417.")
        await session.run(user_input="Yes, you can.")
        await session.run(user_input="My new address is 1 Placeholder Street.")
    # the consent question and the turns before yes are not kept; the first reply
    # after yes ("Thank you.") comes before any captured caller words, so it is the
    # call's opening (the agent's words alone)
    saved = [(e.user_text, e.assistant_text) for e in await store.exchanges(NUMBER)]
    assert saved == [
        ("", "Thank you."),
        ("My new address is 1 Placeholder Street.", "Noted."),
    ]
    assert (await store.profile(NUMBER)).facts[0].value == "yes"


async def test_a_caller_who_said_no_is_not_asked_again_and_nothing_is_kept(store):
    model = ScriptedLLM(
        [
            "Hello! May I remember this call?",
            ToolCall("record_consent", {"agreed": False}),
            "Okay.",
        ]
    )
    async with call(store, NUMBER, model) as (session, _):
        await session.run(user_input="No, please don't.")
    model = ScriptedLLM(["Hello!", "Sure."])
    async with call(store, NUMBER, model, call_id="call-2") as (session, _):
        await session.run(user_input="My PIN hint is marmalade.")
    assert "ask whether you may remember" not in model.replies[0].items[-1].text_content
    assert await store.exchanges(NUMBER) == []
    assert [(f.kind, f.value) for f in (await store.profile(NUMBER)).facts] == [
        ("recording_consent", "no")
    ]


async def test_no_fact_is_kept_from_a_caller_who_said_no(store):
    model = ScriptedLLM(
        [
            "Hello! May I remember this call?",
            ToolCall("record_consent", {"agreed": False}),
            "Okay.",
            ToolCall(
                "remember", {"kind": "home address", "value": "1 Placeholder Street"}
            ),
            "Noted.",
        ]
    )
    async with call(store, NUMBER, model) as (session, _):
        await session.run(user_input="No.")
        await session.run(user_input="My address is 1 Placeholder Street.")
    assert [(f.kind, f.value) for f in (await store.profile(NUMBER)).facts] == [
        ("recording_consent", "no")
    ]


async def test_a_caller_who_agreed_before_is_captured_from_the_start(store):
    await store.remember(NUMBER, memory.Fact.of("recording_consent", "yes"))
    model = ScriptedLLM(["Hello again!", "Noted."])
    async with call(store, NUMBER, model) as (session, _):
        await session.run(user_input="My flight is on Friday.")
    assert [(e.user_text, e.assistant_text) for e in await store.exchanges(NUMBER)] == [
        ("", "Hello again!"),  # captured from the greeting on: the call's opening
        ("My flight is on Friday.", "Noted."),
    ]
    assert "ask whether" not in model.replies[0].items[-1].text_content


async def test_an_outbound_call_answered_by_voicemail_keeps_nothing_of_the_greeting(
    store, caplog
):
    # The greeting became the callee's words, a name was extracted from it and the
    # next call read it back.
    await store.remember(NUMBER, memory.Fact.of("recording_consent", "yes"))
    greeting = (
        "Hi, you've reached Dana Whitfield. I can't take your call right now, "
        "please leave a message after the tone."
    )
    model = ScriptedLLM(
        ["Hello, this is the clinic calling.", "Hi Dana, please call us back."],
        extract=[
            '{"facts": [{"kind": "name", "value": "Dana Whitfield", "exchange": 1}]}'
        ],
    )
    async with call(store, NUMBER, model, screens_voicemail=True) as (session, _):
        await session.run(user_input=greeting)
    assert await store.exchanges(NUMBER) == []
    assert await store.summaries(NUMBER) == []
    assert [f.kind for f in (await store.profile(NUMBER)).facts] == [
        "recording_consent"
    ]
    assert "answered by a machine" in caplog.text
    # a person who answers the same way is remembered as usual
    async with call(
        store,
        NUMBER,
        ScriptedLLM(["Hello!", "Noted."]),
        call_id="call-2",
        screens_voicemail=True,
    ) as (session, _):
        await session.run(user_input="Hi, it's Dana. I got your voicemail.")
    said = [e.user_text for e in await store.exchanges(NUMBER)]
    assert said == ["", "Hi, it's Dana. I got your voicemail."]


def test_the_entrypoint_screens_the_calls_it_places_for_voicemail():
    source = inspect.getsource(agent.entrypoint)
    assert "screens_voicemail = bool(number)" in source


# -- outbound calls --------------------------------------------------------------------
# A fake of LiveKit's server API (Twirp over HTTP, as livekit-api speaks it), on
# localhost: CreateSIPParticipant answers with the SIP participant when the number
# picks up, and with a Twirp error carrying the SIP status when nobody answers.

ANSWERS = "+15550100200"
NO_ANSWER = "+15550100999"


@pytest.fixture
async def livekit_api():
    from aiohttp import web
    from livekit import api
    from livekit.protocol import sip

    dialed: list[sip.CreateSIPParticipantRequest] = []

    async def create_sip_participant(request: web.Request) -> web.Response:
        create = sip.CreateSIPParticipantRequest.FromString(await request.read())
        dialed.append(create)
        if create.sip_call_to == NO_ANSWER:
            return web.json_response(
                {
                    "code": "deadline_exceeded",
                    "msg": "no answer",
                    "meta": {
                        "sip_status_code": "480",
                        "sip_status": "Temporarily Unavailable",
                    },
                },
                status=408,
            )
        info = sip.SIPParticipantInfo(
            participant_id="PA_1",
            participant_identity=create.participant_identity,
            room_name=create.room_name,
            sip_call_id="SCL_1",
        )
        return web.Response(
            body=info.SerializeToString(), content_type="application/protobuf"
        )

    app = web.Application()
    app.router.add_post(
        "/twirp/livekit.SIP/CreateSIPParticipant", create_sip_participant
    )
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    lkapi = api.LiveKitAPI(
        f"http://127.0.0.1:{port}", "devkey", "devsecret-devsecret-devsecret-0000"
    )
    yield lkapi, dialed
    await lkapi.aclose()
    await runner.cleanup()


async def test_an_outbound_call_that_is_answered_goes_ahead(livekit_api):
    lkapi, dialed = livekit_api
    assert await agent.dial(lkapi, "room-1", ANSWERS) is True
    assert dialed[-1].sip_call_to == ANSWERS and dialed[-1].wait_until_answered


async def test_an_outbound_call_nobody_answers_ends_before_memory_is_touched(
    livekit_api, caplog
):
    lkapi, _ = livekit_api
    with caplog.at_level(logging.INFO, logger="agent"):
        assert await agent.dial(lkapi, "room-1", NO_ANSWER) is False
    assert "did not connect" in caplog.text
    # the entrypoint returns right after a False dial, before build_agent touches memory
    source = inspect.getsource(agent.entrypoint)
    assert source.index("await dial(") < source.index("build_agent(")
    # and in the room before the phone rings (LiveKit warns of a job not connected
    # within 10 s)
    assert source.index("await ctx.connect()") < source.index("await dial(")


@pytest.mark.smoke  # the kit runs it for every backend x recipe
async def test_through_the_real_entrypoint_a_sip_caller_is_remembered_by_number_after_yes(
    store_url,
):
    # LiveKit's own job machinery runs the entrypoint (tests/livekit_job.py) with a SIP
    # participant in the room, as LiveKit's SIP service adds the caller.
    job = run_job(
        store_url,
        ["Yes, you may.", "My flight is on Friday."],
        identity=f"sip_{NUMBER}",
        sip_number="+1 (555) 010-0200",
        script=[
            "Hello! May I remember this call to help you next time?",
            {"tool": "record_consent", "arguments": {"agreed": True}},
            "Thank you.",
            "Noted.",
        ],
    )
    assert job["returncode"] == 0 and "Traceback" not in job["log"], job["log"][-3000:]
    assert "ask whether you may remember this call" in job["requests"][0][-1][1]
    store = memory.open_store(store_url)
    # not the consent question nor the yes: the first reply after yes is the opening
    assert [(e.user_text, e.assistant_text) for e in await store.exchanges(NUMBER)] == [
        ("", "Thank you."),
        ("My flight is on Friday.", "Noted."),
    ]
    assert [(f.kind, f.value) for f in (await store.profile(NUMBER)).facts] == [
        ("recording_consent", "yes")
    ]
    await store.close()
