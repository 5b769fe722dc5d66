"""Recipe tool_only: no automatic recall; the model looks memory up with a tool.

When to use it: long calls where most turns need no memory, or models billed per
prompt token. Fewest tokens per turn: the caller's profile (facts, latest call
summaries) goes into the instructions once at call start, and the model calls
`recall_memory` only when it needs what was said before.

What changes against agent.py: no `llm_node` override (no per-turn recall, no block
in each request); `on_enter` puts the profile into the instructions before the
greeting; a `recall_memory` tool. Capture, facts, caller id and the end-of-call
flush are the same. Trade-off: the model must decide to look things up; a model that
does not will answer without what it was told in earlier calls.

Copy it into your agent: put this file, memory.py and your backend's store file
(`<backend>_store.py`) next to your agent file. Your agent needs agent.py's
memory wiring: the store opened once per process in `prewarm` (`memory.open_store()`
reads MEMORY_URL), then per call what `build_agent` does (a `memory.CallMemory` given
to the Agent as `self.call`, its preload, `start_capture(session, call)`) and
`call.on_shutdown` as a shutdown callback. Then build your Agent on this file's
`Assistant` (tests/test_recipes.py does exactly that), or copy its
`on_enter`, the `recall_memory` and `remember` tools and the instructions into your
own Agent.

Run: `uv run -m livekit.agents download-files` once, then `lk agent console` (or
`lk agent dev`; `uv run agent.py start` in production); a worker joins only rooms
that dispatch it by name (README.md, "Quick start").
"""

import json
import logging
from pathlib import Path
from typing import Any

from dotenv import load_dotenv
from livekit import rtc
from livekit.agents import (
    Agent,
    AgentServer,
    AgentSession,
    ConversationItemAddedEvent,
    JobContext,
    JobProcess,
    RunContext,
    SpeechCreatedEvent,
    cli,
    function_tool,
    inference,
    llm,
    room_io,
    stt,
    tts,
)
from livekit.agents.telemetry import tracer
from livekit.agents.voice.agent_activity import _SpeechHandleContextVar as _SPEECH
from livekit.plugins import silero

import memory

logger = logging.getLogger("agent")

# Next to this file, not the working directory, so `uv run` works from anywhere.
load_dotenv(Path(__file__).with_name(".env.local"))

AGENT_NAME = "memory-agent"
LLM_MODEL = "openai/gpt-4.1-mini"
STT_MODEL = "deepgram/nova-3"
TTS_MODEL = "cartesia/sonic-3"
# Where memory is kept: MEMORY_URL in the environment or .env.local (see .env.example);
# unset or empty means the backend this project was generated with, at its default.

INSTRUCTIONS = """\
You are a friendly voice assistant who remembers the people who call you.
Keep answers short and speakable: no lists, markdown or emojis.
When the caller refers to something from an earlier call, look it up with the
recall_memory tool before answering; never claim to remember anything you have not
been told or found. When the caller tells you something lasting about themselves
(their name, where they live, a preference), save it with the remember tool."""


def new_llm() -> llm.LLM:
    """The model provider (tests swap this one function for a scripted model)."""
    return inference.LLM(model=LLM_MODEL)


def new_stt() -> stt.STT:
    """Speech-to-text (tests swap it for an offline stand-in, as they swap new_llm)."""
    return inference.STT(model=STT_MODEL)


def new_tts() -> tts.TTS:
    """Text-to-speech (tests swap it for an offline stand-in, as they swap new_llm)."""
    return inference.TTS(model=TTS_MODEL)


class Assistant(Agent):
    def __init__(self, call: memory.CallMemory, *, model: llm.LLM | None = None) -> None:
        super().__init__(instructions=INSTRUCTIONS, llm=model or new_llm())
        self.call = call

    async def on_enter(self) -> None:
        # The profile goes into the instructions once, so every reply of the call has
        # it without a per-turn lookup. block_for is bounded and never raises.
        profile = await self.call.block_for("")
        if profile:
            await self.update_instructions(f"{INSTRUCTIONS}\n\n{profile}")
        self.session.generate_reply(instructions="Greet the caller, by name if you know it.")

    async def on_exit(self) -> None:
        # Runs when the session closes or hands off to another agent: write what is
        # pending now, while the process surely lives. (Bounded: FLUSH_TIMEOUT.)
        await self.call.flush()

    @function_tool
    async def recall_memory(self, context: RunContext, query: str) -> str:
        """Look up what the caller said in earlier calls.

        Args:
            query: What to look for, in the caller's words, e.g. "sister's restaurant".
        """
        return await self.call.lookup(query)

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
        return await self.call.remember(kind, value)


async def build_agent(
    session: AgentSession,
    store: memory.MemoryStore,
    caller_id: str | None,
    call_id: str,
    *,
    model: llm.LLM | None = None,
) -> Assistant:
    """Everything memory needs for one call, wired once: the entrypoint, the demo, the
    tests and the benchmarks all build the agent here. Starts preloading the caller's
    profile, captures the session's conversation, and returns the Assistant; its
    `call` must be closed when the call ends (`await agent.call.aclose()`; the
    entrypoint registers it as a shutdown callback). `caller_id=None`: no memory."""
    call = memory.CallMemory(store, caller_id, call_id)
    call.trace = trace_memory  # recall and save as spans in LiveKit's traces
    call.start()  # preload facts and call summaries while the session starts
    start_capture(session, call)
    return Assistant(call, model=model)


def start_capture(session: AgentSession, call: memory.CallMemory) -> None:
    """Capture: hand each user or assistant message to the call's memory, which pairs
    them into exchanges and saves them in the background. Tool calls never come
    through this event; agent handoff items do and are skipped.

    Each message goes with the id of the LiveKit speech that added it (one reply,
    every step of its tool loop included, which adds the user message it answers
    before its own text), so a reply pairs with the turn it answers whatever order
    the items come in: a greeting still being said when the first turn arrives is
    nobody's answer.

    Items the app adds itself with `agent.update_chat_ctx(...)` raise no
    `conversation_item_added` and are not remembered; to remember one, hand it over
    too: `call.capture(msg.role, msg.id, msg.text_content, created_at=msg.created_at)`
    (a `generate_reply()` that follows then pairs with it). Either way they never
    shift the pairing of the turns LiveKit adds."""

    @session.on("speech_created")
    def _on_speech(ev: SpeechCreatedEvent) -> None:
        # made by another reply's work (a tool, a handoff's greeting): it answers the
        # same turn (no wiring self-check here: memory is asked by a tool, not before each reply)
        call.speech_created(ev.speech_handle.id, within=current_speech_id())

    @session.on("conversation_item_added")
    def _on_item(ev: ConversationItemAddedEvent) -> None:
        item = ev.item
        if item.type == "message" and item.role in ("user", "assistant"):
            # text_content joins text parts and drops images and expressive markup;
            # an interrupted reply holds only what was said before the barge-in.
            call.capture(
                item.role,
                item.id,
                item.text_content,
                interrupted=item.interrupted,
                created_at=item.created_at,
                speech_id=current_speech_id(),
            )


def current_speech_id() -> str | None:
    """The id of the LiveKit speech whose task is running now (None outside one).

    LiveKit runs each reply's work (adding its user message, its text, its tool loop)
    in tasks that carry the SpeechHandle in a context variable, the one it reads
    itself to tie tools and tasks to their speech (livekit-agents 1.8.9,
    voice/agent_activity.py `_create_speech_task`); no public accessor exists yet."""
    handle = _SPEECH.get(None)
    return handle.id if handle is not None else None


def trace_memory(name: str, start_ns: int, end_ns: int, attributes: dict[str, Any]) -> None:
    """memory.Trace: each recall and save as a span in livekit-agents' own tracer, under
    the span of the reply or turn it served, so memory shows in LiveKit's traces (set
    an exporter with livekit.agents.telemetry.set_tracer_provider; LiveKit Cloud
    records them when observability is on). Attributes hold figures, never text."""
    span = tracer.start_span(name, start_time=start_ns, attributes=attributes)
    span.end(end_time=end_ns)


def dispatch_metadata(job_metadata: str) -> dict:
    """The JSON object your dispatch put in the job metadata ({} if none or malformed).
    Keys read here: `caller_id` (whose memory to use) and `caller_identity` (which
    participant is the caller, e.g. when an observer may join the room first)."""
    try:
        metadata = json.loads(job_metadata) if job_metadata else {}
    except json.JSONDecodeError:
        return {}
    return metadata if isinstance(metadata, dict) else {}


def caller_id_for(participant: rtc.RemoteParticipant, dispatch: dict) -> str:
    """The stable id memory is kept under: `caller_id` from the dispatch metadata,
    else the SIP caller's phone number, else the participant identity from the access
    token. Never the room name, which names the call, not the caller. A phone number
    is kept in E.164 form whichever way it arrives (memory.normalise_caller_id).

    Only the first is verified, if your backend sets it after verifying the caller:
    a SIP number (caller ID) can be spoofed by whoever places the call, and an
    identity is whatever your token server put in the token. See the README.

    Raises memory.InvalidCallerId with the reason when the id is unusable.
    """
    if dispatch.get("caller_id"):
        return memory.normalise_caller_id(dispatch["caller_id"])
    if participant.kind == rtc.ParticipantKind.PARTICIPANT_KIND_SIP:
        return memory.normalise_phone_number(participant.attributes.get("sip.phoneNumber", ""))
    return memory.validate_caller_id(participant.identity)


def caller_or_none(participant: rtc.RemoteParticipant, dispatch: dict) -> str | None:
    """`caller_id_for`, or None with the reason in the log: a caller without a stable
    id (anonymous web user, withheld number) gets the agent, just without memory.
    Never raises: nothing about an id may end the call (the id it returns is one
    memory.CallMemory accepts)."""
    try:
        return memory.validate_caller_id(caller_id_for(participant, dispatch))
    except Exception as exc:  # every kind of bad id, not only the ones foreseen
        logger.warning("memory is off for this call: %s", exc)
        return None


server = AgentServer()


def prewarm(proc: JobProcess) -> None:
    proc.userdata["vad"] = silero.VAD.load()
    # One store per worker process, shared by the calls it runs.
    proc.userdata["memory"] = memory.open_store()


server.setup_fnc = prewarm


@server.rtc_session(agent_name=AGENT_NAME)
async def entrypoint(ctx: JobContext) -> None:
    ctx.log_context_fields = {"room": ctx.room.name}
    dispatch = dispatch_metadata(ctx.job.metadata)
    await ctx.connect()
    # The caller is the participant the dispatch names, else the first SIP or
    # standard participant to join (LiveKit's own rule for linking a session);
    # observers should join hidden, or be excluded by naming the caller.
    participant = await ctx.wait_for_participant(identity=dispatch.get("caller_identity"))
    caller_id = caller_or_none(participant, dispatch)

    session: AgentSession = AgentSession(
        stt=new_stt(),
        tts=new_tts(),
        vad=ctx.proc.userdata["vad"],
        # preemptive generation is on by default; no per-turn recall here to wait for
    )
    assistant = await build_agent(session, ctx.proc.userdata["memory"], caller_id, ctx.job.id)
    # A hang-up closes the session and then the job; the job waits for shutdown
    # callbacks (up to shutdown_process_timeout), so the last writes land here.
    # LiveKit calls a shutdown callback that takes an argument with the reason (a str).
    ctx.add_shutdown_callback(assistant.call.on_shutdown)
    await session.start(
        agent=assistant,
        room=ctx.room,
        # Link the session to the participant memory is keyed to, so both follow the
        # same person (not whoever joins or speaks first).
        room_options=room_io.RoomOptions(participant_identity=participant.identity),
    )


if __name__ == "__main__":
    cli.run_app(server)
