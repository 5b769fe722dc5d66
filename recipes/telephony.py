"""Recipe telephony: phone callers, known by their number, recorded only with consent.

When to use it: SIP trunks (LiveKit telephony). The caller is their phone number in
E.164 form, from the SIP participant's `sip.phoneNumber` attribute; a number never
seen before starts a new profile; a withheld number turns memory off for the call.
Before anything is captured the agent asks for consent to remember the call, and
stores the answer (a fact, "recording_consent"), so it asks each number only once.
Caller ID can be spoofed: a number says who the line claims to be, not who is
speaking. Do not read out private facts to a caller known only by their number;
verify them first (a PIN, a callback) or set `caller_id` in the dispatch metadata
once your own check has passed.

What changes against agent.py: `on_enter` (consent check, greeting that asks), a
`record_consent` tool, capture switched off until consent (`CallMemory.capturing`),
the entrypoint waits for a SIP participant, and it can place outbound calls: a
dispatch with `{"dial": "+15550100200"}` in its metadata rings that number through
`SIP_OUTBOUND_TRUNK_ID` (`dial`); a call nobody answers ends there, before any
memory is read or written, and one answered by voicemail keeps nothing (its greeting
is not the callee's words: `CallMemory.screens_voicemail`, memory/voicemail.py, which
also says how to use LiveKit's answering-machine detection instead). Recall is the
same as agent.py's.

Copy it into your agent: copy `memory/` and make agent.py's three touch points
first (livekit-memory-kit's docs/add-memory-to-your-agent.md); then copy `on_enter`, `record_consent`, `dial`, the consent
instructions and `capturing = False` in `__init__` into your own Agent. Or build
your Agent on this file's `Assistant` (tests/test_recipes.py does).

Run: `uv run -m livekit.agents download-files` once, then `lk agent dev` (or
`uv run agent.py start`) with a SIP dispatch rule that names the agent, and call it
through your SIP trunk (`console` has no SIP participant, so the agent would wait
for one).
"""

import logging
import os
import textwrap
from pathlib import Path

from dotenv import load_dotenv
from livekit import api, rtc
from livekit.agents import (
    Agent,
    AgentServer,
    AgentSession,
    JobContext,
    JobProcess,
    RunContext,
    cli,
    function_tool,
    inference,
    llm,
    room_io,
    stt,
    tts,
)
from livekit.plugins import noise_cancellation, silero

import memory
from memory.livekit_adapter import (
    dispatch_metadata,
    start_call_memory,
    wait_for_caller,
    with_memory,
)

logger = logging.getLogger("agent")

# Next to this file, not the working directory, so `uv run` works from anywhere.
load_dotenv(Path(__file__).with_name(".env.local"))

AGENT_NAME = "memory-agent"
LLM_MODEL = "openai/gpt-4.1-mini"
STT_MODEL = "deepgram/nova-3"
TTS_MODEL = "cartesia/sonic-3"
# Where memory is kept: MEMORY_URL in the environment or .env.local (.env.example
# lists every setting); unset, the embedded default, a file in data/ here.

INSTRUCTIONS = textwrap.dedent(
    """\
    You are a friendly voice assistant who remembers the people who call you.
    Keep answers short and speakable: no lists, markdown or emojis.
    Before each reply you may get a block of background about the caller from
    earlier calls; use it when it helps, and never claim to remember anything that
    is not in it. When the caller tells you something lasting about themselves
    (their name, where they live, a preference), save it with the remember tool.
    If you are told to ask for consent to remember the call, ask once, plainly, and
    record the answer with the record_consent tool before anything else."""
)
CONSENT = "recording_consent"  # fact kind; value "yes" or "no"
OUTBOUND_TRUNK_ID = os.getenv("SIP_OUTBOUND_TRUNK_ID", "")  # for dispatches that dial


def new_llm() -> llm.LLM:
    """The model provider (tests swap this one function for a scripted model)."""
    return inference.LLM(model=LLM_MODEL)


def new_stt() -> stt.STT:
    """Speech-to-text (tests swap it for an offline stand-in, as they swap new_llm)."""
    return inference.STT(model=STT_MODEL, language="multi")


def new_tts() -> tts.TTS:
    """Text-to-speech (tests swap it for an offline stand-in, as they swap new_llm)."""
    return inference.TTS(model=TTS_MODEL)


class Assistant(Agent):
    """Your agent, with memory. ``call``: the call's memory (none, as in tests or
    for a caller without a stable id: memory is off and no store is opened)."""

    def __init__(
        self,
        call: memory.CallMemory | None = None,
        *,
        instructions: str = INSTRUCTIONS,
        model: llm.LLM | None = None,
    ) -> None:
        super().__init__(instructions=instructions, llm=model or new_llm())
        self.memory = call or memory.CallMemory()
        self.memory.capturing = False  # until on_enter knows the caller's consent

    async def on_enter(self) -> None:
        # Nothing is captured until the caller has said yes, in this call or before.
        consent = (await self.memory.facts()).get(CONSENT)
        self.memory.capturing = consent == "yes"
        if consent is None and self.memory.enabled:
            instructions = (
                "Greet the caller and ask whether you may remember this call to help "
                "them next time. Then record their answer with record_consent."
            )
        else:
            instructions = "Greet the caller, by name if you know it."
        self.session.generate_reply(instructions=instructions)

    async def llm_node(self, chat_ctx, tools, model_settings):
        # 1. Recall: this reply's memory block, in a copy of the chat context.
        chat_ctx = await with_memory(self.memory, chat_ctx)
        async for chunk in Agent.default.llm_node(
            self, chat_ctx, tools, model_settings
        ):
            yield chunk

    @function_tool
    async def remember(self, context: RunContext, kind: str, value: str) -> str:
        """Save a lasting fact about the caller for future calls. A newer value of the
        same kind replaces the old one, except for kinds a caller has several of (child,
        pet, allergy, medication, open issue); the answer says what it replaced or that
        it was already known.

        Args:
            kind: What the fact is about, in a few words, e.g. "name", "home city".
            value: The fact itself, e.g. "Maria", "Lisbon".
        """
        return await self.memory.remember(kind, value)

    @function_tool
    async def record_consent(self, context: RunContext, agreed: bool) -> str:
        """Record whether the caller agreed that you remember this call.

        Args:
            agreed: True if the caller said yes, False if they said no.
        """
        answer = "yes" if agreed else "no"
        saved = await self.memory.remember(CONSENT, answer, always=True)
        if not saved.startswith("Saved"):
            return saved  # not stored: keep capture off and say so
        self.memory.capturing = agreed
        if agreed:
            return "Recorded: this call will be remembered."
        return "Recorded: nothing will be kept."


async def build_agent(
    session: AgentSession,
    store: memory.MemoryStore,
    caller_id: str | None,
    call_id: str,
    *,
    model: llm.LLM | None = None,
) -> Assistant:
    """One call's agent with its memory: the entrypoint, the demo, the tests and the
    benchmarks all build it here. ``caller_id=None``: memory off for the call."""
    # 2. Capture: each exchange is saved after its reply (the profile preloads now).
    call = start_call_memory(session, store, caller_id, call_id)
    return Assistant(call, model=model)


async def dial(lkapi: api.LiveKitAPI, room_name: str, number: str) -> bool:
    """Ring ``number`` into the room and wait until it is answered (True) or not: no
    answer, busy, rejected or a bad number (False, logged). Never raises for a
    failed call; LiveKit bounds the ringing time."""
    try:
        await lkapi.sip.create_sip_participant(
            api.CreateSIPParticipantRequest(
                room_name=room_name,
                sip_trunk_id=OUTBOUND_TRUNK_ID,
                sip_call_to=number,
                participant_identity=f"sip_{number}",
                wait_until_answered=True,
            )
        )
    except api.ServerError as exc:
        logger.info("outbound call to %s did not connect: %s", number, exc)
        return False
    return True


server = AgentServer()


def prewarm(proc: JobProcess) -> None:
    proc.userdata["vad"] = silero.VAD.load()
    # One store per worker process, shared by the calls it runs; one it cannot open
    # is logged (ERROR) and the calls go on without memory.
    proc.userdata["memory"] = memory.open_store(fail_open=True)


server.setup_fnc = prewarm


@server.rtc_session(agent_name=AGENT_NAME)
async def entrypoint(ctx: JobContext) -> None:
    ctx.log_context_fields = {"room": ctx.room.name}
    # Joined first, so the worker is in the room while the callee's phone rings
    # (LiveKit warns of a job that has not connected within 10 s).
    await ctx.connect()
    number = dispatch_metadata(ctx.job.metadata).get("dial")
    if number and not await dial(ctx.api, ctx.room.name, number):
        ctx.shutdown(reason="outbound call not answered")
        return
    # Memory is kept under the caller's number, so find the caller before the session
    # starts: the SIP participant (a supervisor who joins from the web never is).
    caller = await wait_for_caller(ctx, kind=rtc.ParticipantKind.PARTICIPANT_KIND_SIP)
    session: AgentSession = AgentSession(
        stt=new_stt(),
        tts=new_tts(),
        vad=ctx.proc.userdata["vad"],
        # LiveKit's turn detector (its local model ships with livekit-agents)
        turn_handling={"turn_detection": inference.TurnDetector()},
        # preemptive generation is on by default; recall in llm_node keeps it useful
    )
    assistant = await build_agent(
        session, ctx.proc.userdata["memory"], caller.id, ctx.job.id
    )
    # A call we placed may reach voicemail: its greeting is not the callee's words.
    assistant.memory.screens_voicemail = bool(number)
    # 3. Close: the last writes and the call summary land before the job ends.
    ctx.add_shutdown_callback(assistant.memory.on_shutdown)
    await session.start(
        agent=assistant,
        room=ctx.room,
        room_options=room_io.RoomOptions(
            # the session follows the participant memory is kept for
            participant_identity=caller.identity,
            # LiveKit's noise cancellation, tuned for phone audio on SIP calls
            audio_input=room_io.AudioInputOptions(
                noise_cancellation=lambda params: (
                    noise_cancellation.BVCTelephony()
                    if params.participant.kind
                    == rtc.ParticipantKind.PARTICIPANT_KIND_SIP
                    else noise_cancellation.BVC()
                ),
            ),
        ),
    )


if __name__ == "__main__":
    cli.run_app(server)
