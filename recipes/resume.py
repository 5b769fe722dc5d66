"""Recipe resume: a call survives the death of the worker running it.

When to use it: long calls, deploys during business hours, workers on spot machines.
If a worker process dies mid-call, LiveKit dispatches the room to another worker;
without this recipe the new agent greets the caller as if the call had just begun.
Here it continues from the saved turns of this call instead.

What changes against agent.py: the call id is the room's sid (the same for the
worker that takes the room over, unlike the job id); `build_agent` returns
`resumed_assistant`, which reads this call's saved exchanges (bounded by
`RESUME_TIMEOUT`) into the new agent's chat context; `on_enter` then picks the
conversation up instead of greeting. Capture
saves every turn as it happens (agent.py already does), so what the caller said
before the crash is there. The reply being spoken at the crash is saved as far as
LiveKit had added it; a reply never added is lost with the process.

Copy it into your agent: put this file, memory.py and your backend's store file
(`<backend>_store.py`) next to your agent file. Your agent needs agent.py's
memory wiring: the store opened once per process in `prewarm` (`memory.open_store()`
reads MEMORY_URL), then per call what `build_agent` does (a `memory.CallMemory` given
to the Agent as `self.call`, its preload, `start_capture(session, call)`) and
`call.on_shutdown` as a shutdown callback. Then build your Agent on this file's
`Assistant` (tests/test_recipes.py does exactly that), or copy
`resumed_assistant`, the `history` argument, `on_enter` and the room-sid call id
into your own Agent and entrypoint.

Run: `uv run -m livekit.agents download-files` once, then `lk agent console` (or
`lk agent dev`; `uv run agent.py start` in production); a worker joins only rooms
that dispatch it by name (README.md, "Quick start").
"""

import asyncio
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
RESUME_TIMEOUT = 1.0
"""Seconds to wait for this call's saved turns; past it the call starts afresh."""

INSTRUCTIONS = """\
You are a friendly voice assistant who remembers the people who call you.
Keep answers short and speakable: no lists, markdown or emojis.
Before each reply you may get a block of background about the caller from earlier
calls; use it when it helps, and never claim to remember anything that is not in it.
When the caller tells you something lasting about themselves (their name, where they
live, a preference), save it with the remember tool."""


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
    def __init__(
        self,
        call: memory.CallMemory,
        *,
        model: llm.LLM | None = None,
        history: llm.ChatContext | None = None,
    ) -> None:
        super().__init__(
            instructions=INSTRUCTIONS,
            llm=model or new_llm(),
            chat_ctx=history,
        )
        self.call = call
        self.resumed = history is not None

    async def on_enter(self) -> None:
        if self.resumed:
            # The caller heard the call drop: no second greeting, just pick it up.
            self.session.generate_reply(
                instructions="The line dropped for a moment and you are back. Say so in a "
                "few words and continue where the conversation left off. Do not greet again."
            )
            return
        # llm_node runs for this reply too, so the greeting sees the preloaded profile.
        self.session.generate_reply(instructions="Greet the caller, by name if you know it.")

    async def on_exit(self) -> None:
        # Runs when the session closes or hands off to another agent: write what is
        # pending now, while the process surely lives. (Bounded: FLUSH_TIMEOUT.)
        await self.call.flush()

    async def llm_node(self, chat_ctx, tools, model_settings):
        # Recall here, not in on_user_turn_completed: editing the turn there discards
        # LiveKit's preemptive generation, and typed turns never call that hook.
        # https://docs.livekit.io/agents/build/nodes/#llm-node
        # The copy keeps the block out of session.history and out of the context
        # the next step or turn starts from, so no reply ever sees two blocks.
        chat_ctx = chat_ctx.copy()
        items = chat_ctx.items
        users = [
            i for i, item in enumerate(items) if item.type == "message" and item.role == "user"
        ]
        latest = items[users[-1]].text_content or "" if users else ""
        block = await self.call.block_for(latest, turn=len(users))
        if block:
            # Just before what the reply answers, so the request still ends with it:
            # the caller's latest words or, before they have spoken, the instructions
            # of a generate_reply (the greeting).
            if users:
                at = users[-1]
            elif items and items[-1].type == "message" and items[-1].role == "system":
                at = len(items) - 1
            else:
                at = len(items)
            items.insert(
                at, llm.ChatMessage(role="system", content=[block], extra={"memory_block": True})
            )
        async for chunk in Agent.default.llm_node(self, chat_ctx, tools, model_settings):
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
    profile, captures the session's conversation, and returns the Assistant, resumed
    from the call's saved turns when a worker before this one ran it. `call_id` must
    name the call, not the job: the entrypoint passes the room's sid. Its `call` must
    be closed when the call ends (`await agent.call.aclose()`; the entrypoint
    registers it as a shutdown callback). `caller_id=None`: no memory."""
    call = memory.CallMemory(store, caller_id, call_id)
    call.trace = trace_memory  # recall and save as spans in LiveKit's traces
    call.start()  # preload facts and call summaries while the session starts
    start_capture(session, call)
    return await resumed_assistant(call, model=model)


async def resumed_assistant(call: memory.CallMemory, *, model: llm.LLM | None = None) -> Assistant:
    """The Assistant for this call: with the call's saved turns as its chat context
    when a worker before this one ran the call, else a fresh one."""
    if call.caller_id is None:  # memory off: nothing was saved to continue from
        return Assistant(call, model=model)
    try:
        saved = await asyncio.wait_for(
            call.store.exchanges(call.caller_id, call_id=call.call_id), RESUME_TIMEOUT
        )
    except Exception as exc:  # slow or failing: start afresh
        logger.warning("could not read this call's saved turns: %r", exc)
        saved = []
    if not saved:
        return Assistant(call, model=model)
    history = llm.ChatContext()
    for exchange in saved:
        if exchange.user_text:  # (the call's opening is the greeting alone)
            history.add_message(
                role="user", content=exchange.user_text, created_at=exchange.created_at
            )
        if exchange.assistant_text:
            history.add_message(
                role="assistant",
                content=exchange.assistant_text,
                interrupted=exchange.interrupted,
                created_at=exchange.created_at,
            )
    return Assistant(call, model=model, history=history)


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
        # same turn; a model reply runs llm_node, which must ask memory (self-check)
        call.speech_created(
            ev.speech_handle.id,
            within=current_speech_id(),
            asks_memory=ev.source == "generate_reply",
        )

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
        # preemptive generation is on by default; recall in llm_node keeps it useful
    )
    # The room's sid names the call: a worker that takes the room over gets the same.
    # From the job's room info (set by the dispatch, and by `console` too, whose mock
    # room cannot be awaited for it); else from the connected room.
    call_id = ctx.job.room.sid or await ctx.room.sid
    assistant = await build_agent(session, ctx.proc.userdata["memory"], caller_id, call_id)
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
