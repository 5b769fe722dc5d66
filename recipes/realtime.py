"""Recipe realtime: memory for speech-to-speech models (OpenAI Realtime, Gemini Live).

When to use it: a realtime model instead of STT + LLM + TTS. Realtime models never
call `llm_node`, so agent.py's per-reply recall cannot work; what does:
- the profile (facts, latest call summaries) goes into the agent's instructions
  before the session starts, the one channel every provider accepts;
- a `recall_memory` tool for what was said in earlier calls: with server-side turn
  detection (the providers' default) the provider starts each reply itself and
  LiveKit never calls `on_user_turn_completed`; and where it does call it (LiveKit's
  own turn detection), livekit-agents 1.8.9 builds the realtime reply from the
  caller's input, not from the turn context edited there (voice/agent_activity.py),
  so a block added in that hook would be dropped silently. No hook is used;
- capture from the transcripts, through `conversation_item_added` as in agent.py.
  Input transcription must be on, or there are no user items at all: the model is
  built with it, and if it is off the agent says so in the log and saves nothing
  (never assistant-only memories). Providers deliver the caller's transcript after
  the reply it prompted; `CallMemory.capture` pairs them by when each began.

What changes against agent.py: the model (`new_llm` returns `REALTIME_MODEL` with
input transcription), no STT/TTS/VAD, an `Assistant` that takes the profile (which
`build_agent` waits for, at most `RECALL_BUDGET`), no `llm_node`, a `recall_memory`
tool, and the transcription check in `on_enter`.
Tested with a scripted realtime stand-in (the recipe's tests): profile in the
instructions, the recall tool, capture from late transcripts, the guard for missing
transcription. Not tested: a real provider's audio path.

Copy it into your agent: put this file, memory.py and your backend's store file
(`<backend>_store.py`) next to your agent file. Your agent needs agent.py's
memory wiring: the store opened once per process in `prewarm` (`memory.open_store()`
reads MEMORY_URL), then per call what `build_agent` does (a `memory.CallMemory` given
to the Agent as `self.call`, its preload, `start_capture(session, call)`) and
`call.on_shutdown` as a shutdown callback. Then build your Agent on this file's
`Assistant` (tests/test_recipes.py does exactly that), or copy the `profile`
argument, `on_enter`'s transcription check and the `recall_memory` tool into your
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
)
from livekit.agents.telemetry import tracer
from livekit.agents.voice.agent_activity import _SpeechHandleContextVar as _SPEECH
from openai.types.realtime import AudioTranscription

import memory

logger = logging.getLogger("agent")

# Next to this file, not the working directory, so `uv run` works from anywhere.
load_dotenv(Path(__file__).with_name(".env.local"))

AGENT_NAME = "memory-agent"
LLM_MODEL = "openai/gpt-4.1-mini"  # unused here: the realtime model below replies
REALTIME_MODEL = "openai/gpt-realtime"
TRANSCRIPTION_MODEL = "gpt-4o-mini-transcribe"  # the caller's words, for capture
STT_MODEL = "deepgram/nova-3"  # unused here, as LLM_MODEL
TTS_MODEL = "cartesia/sonic-3"  # unused here, as LLM_MODEL
# Where memory is kept: MEMORY_URL in the environment or .env.local (see .env.example);
# unset or empty means the backend this project was generated with, at its default.

INSTRUCTIONS = """\
You are a friendly voice assistant who remembers the people who call you.
Keep answers short and speakable: no lists, markdown or emojis.
Below may be background about the caller from earlier calls. When the caller refers
to something else from an earlier call, look it up with the recall_memory tool; never
claim to remember anything you have not been told or found. When the caller tells you
something lasting about themselves (their name, where they live, a preference), save
it with the remember tool."""


def new_llm() -> llm.RealtimeModel:
    """The model provider, here a realtime model that hears and speaks, with input
    transcription on (tests swap this one function for a scripted model)."""
    return inference.RealtimeModel(
        REALTIME_MODEL,
        input_audio_transcription=AudioTranscription(model=TRANSCRIPTION_MODEL),
    )


class Assistant(Agent):
    def __init__(
        self,
        call: memory.CallMemory,
        *,
        model: llm.LLM | llm.RealtimeModel | None = None,
        profile: str | None = None,
    ) -> None:
        instructions = f"{INSTRUCTIONS}\n\n{profile}" if profile else INSTRUCTIONS
        super().__init__(instructions=instructions, llm=model or new_llm())
        self.call = call

    async def on_enter(self) -> None:
        model = self.llm
        hears = not isinstance(model, llm.RealtimeModel) or model.capabilities.user_transcription
        if self.call.enabled and not hears:
            # No transcripts means no user items: saving would keep only the agent's side.
            logger.error(
                "memory capture is OFF for this call: the realtime model has no input "
                "audio transcription, so the caller's words never reach the agent"
            )
            self.call.capturing = False
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
    model: llm.LLM | llm.RealtimeModel | None = None,
) -> Assistant:
    """Everything memory needs for one call, wired once: the entrypoint, the demo, the
    tests and the benchmarks all build the agent here. Waits for the caller's profile
    (at most RECALL_BUDGET) and puts it into the Assistant's instructions, captures the
    session's conversation, and returns the Assistant; its `call` must be closed when
    the call ends (`await agent.call.aclose()`; the entrypoint registers it as a
    shutdown callback). `caller_id=None`: no memory."""
    call = memory.CallMemory(store, caller_id, call_id)
    call.trace = trace_memory  # recall and save as spans in LiveKit's traces
    call.start()  # preload facts and call summaries: the recall tool's fallback if slow
    profile = await call.block_for("")  # bounded by RECALL_BUDGET; None when memory is off
    start_capture(session, call)
    return Assistant(call, model=model, profile=profile)


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
        # same turn (no wiring self-check here: a realtime model never runs llm_node)
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

    session: AgentSession = AgentSession()  # the Assistant's realtime model hears and speaks
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
