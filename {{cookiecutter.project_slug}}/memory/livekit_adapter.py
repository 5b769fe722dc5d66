"""The LiveKit wiring of memory: the only module of this folder that imports livekit.

Everything an agent would otherwise copy lives here, so agent.py and the recipes
keep three visible touch points:

- who is calling: ``wait_for_caller(ctx)`` (before ``session.start``: memory is kept
  under the caller's id, and the greeting already reads their profile);
- capture: ``start_call_memory(session, store, caller_id, call_id)`` makes the
  call's ``CallMemory``, preloads the profile and saves each exchange after the
  reply is added (``conversation_item_added``);
- recall: ``with_memory(call, chat_ctx)`` in the agent's ``llm_node``: a copy of the
  chat context with the memory block just before the caller's latest words;

and the close: ``ctx.add_shutdown_callback(call.on_shutdown)``.

Supported livekit-agents: ``SUPPORTED_LIVEKIT_AGENTS``. One private name is used, in
``current_speech_id``, behind a check with a fallback (see there).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from livekit import rtc
from livekit.agents import (
    AgentSession,
    ConversationItemAddedEvent,
    JobContext,
    SpeechCreatedEvent,
    llm,
)
from livekit.agents import __version__ as livekit_agents_version
from livekit.agents.telemetry import tracer

from .call import CallMemory
from .callers import (
    identity_caller_id,
    normalise_caller_id,
    normalise_phone_number,
    refuse_withheld,
    validate_caller_id,
)
from .errors import FAIL_OPEN
from .limits import switched_off
from .store import MemoryStore

logger = logging.getLogger("memory")

SUPPORTED_LIVEKIT_AGENTS = ">=1.5,<2"
"""The livekit-agents releases this module is tested on (the oldest minor with every
API it uses, and the newest; the kit's CI runs the memory tests on both)."""

EXTRACT_SETTING = "MEMORY_EXTRACT_FACTS"
"""On by default: after each call the agent's model lists the facts the caller
stated (one request per call). "off" (or 0, false, no) leaves facts to the
``remember`` tool alone."""


# -- who is calling ---------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    """The participant memory is kept for: ``identity`` (link the session to it with
    ``RoomOptions(participant_identity=...)``) and ``id``, the caller id memory is
    keyed by, or None when it is unusable (the call goes on without memory)."""

    identity: str
    id: str | None
    participant: rtc.RemoteParticipant


async def wait_for_caller(
    ctx: JobContext, *, kind: rtc.ParticipantKind.ValueType | None = None
) -> Caller:
    """Connect to the room (if not yet) and wait for the caller: the participant the
    dispatch names (``caller_identity`` in the job metadata), else the first of
    ``kind`` (default: SIP or standard, LiveKit's own rule for linking a session) to
    join. Observers should join hidden, or be excluded by naming the caller."""
    dispatch = dispatch_metadata(ctx.job.metadata)
    await ctx.connect()  # a no-op when already connected
    participant = await ctx.wait_for_participant(
        identity=dispatch.get("caller_identity"),
        **({"kind": kind} if kind is not None else {}),
    )
    return Caller(
        participant.identity, caller_or_none(participant, dispatch), participant
    )


def dispatch_metadata(job_metadata: str) -> dict[str, Any]:
    """The JSON object your dispatch put in the job metadata ({} if none or
    malformed). Keys read here: ``caller_id`` (whose memory to use) and
    ``caller_identity`` (which participant is the caller)."""
    try:
        metadata = json.loads(job_metadata) if job_metadata else {}
    except json.JSONDecodeError:
        return {}
    return metadata if isinstance(metadata, dict) else {}


def caller_id_for(participant: rtc.RemoteParticipant, dispatch: dict[str, Any]) -> str:
    """The stable id memory is kept under: ``caller_id`` from the dispatch metadata,
    else the SIP caller's phone number, else the participant identity from the access
    token. Never the room name, which names the call, not the caller. A phone number
    is kept in E.164 form whichever way it arrives (``normalise_caller_id``).

    Only the first is verified, if your backend sets it after verifying the caller:
    a SIP number (caller ID) can be spoofed by whoever places the call, and an
    identity is whatever your token server put in the token.

    Each source has its own namespace: a number (E.164, ``+`` and digits) is a SIP
    caller's or one your dispatch gives; an identity that begins with ``+`` is kept
    as ``identity:`` + the identity (``identity_caller_id``), so a web caller can
    never be a phone caller. The dispatch's ``caller_id`` joins them on purpose.

    Raises ``InvalidCallerIdError`` with the reason when the id is unusable, and
    ``WithheldCallerIdError`` (one) for a placeholder of a withheld number
    ("anonymous", +266696687: ``callers.WITHHELD_CALLER_IDS``)."""
    if dispatch.get("caller_id"):
        given = dispatch["caller_id"]
        refuse_withheld(given)
        found = normalise_caller_id(given)
    elif participant.kind == rtc.ParticipantKind.PARTICIPANT_KIND_SIP:
        number = participant.attributes.get("sip.phoneNumber", "")
        refuse_withheld(number)
        found = normalise_phone_number(number)
    else:
        refuse_withheld(participant.identity)
        found = identity_caller_id(participant.identity)
    refuse_withheld(found)
    return found


def caller_or_none(
    participant: rtc.RemoteParticipant, dispatch: dict[str, Any]
) -> str | None:
    """``caller_id_for``, or None with the reason in the log: a caller without a
    stable id (anonymous web user, withheld number) gets the agent, just without
    memory. Never raises: nothing about an id may end the call."""
    try:
        return validate_caller_id(caller_id_for(participant, dispatch))
    except FAIL_OPEN as exc:  # every kind of bad id, not only the ones foreseen
        logger.warning("memory is off for this call: %s", exc)
        return None


# -- capture ----------------------------------------------------------------------


def start_call_memory(
    session: AgentSession,
    store: MemoryStore,
    caller_id: str | None,
    call_id: str,
    *,
    extract: bool = True,
    recalls_each_reply: bool = True,
) -> CallMemory:
    """One call's memory, wired to ``session``: recall and save as spans in
    LiveKit's traces, the caller's profile preloading while the session starts, and
    capture of every exchange (``capture``). With ``extract`` (and
    ``MEMORY_EXTRACT_FACTS`` not off), the call's facts are extracted by the agent's
    text model when it ends. ``recalls_each_reply``: the agent's ``llm_node`` calls
    ``with_memory`` (the self-check warns when a reply did not); False for an agent
    that recalls by tool only, or a realtime model. ``caller_id=None``: memory off.

    The caller must end it: ``ctx.add_shutdown_callback(call.on_shutdown)``."""
    call = CallMemory(store if caller_id is not None else None, caller_id, call_id)
    call.trace = trace_memory
    if extract and not switched_off(EXTRACT_SETTING):
        call.extract_with = model_asker(session)
    call.start()
    capture(session, call, recalls_each_reply=recalls_each_reply)
    return call


def capture(
    session: AgentSession, call: CallMemory, *, recalls_each_reply: bool = True
) -> None:
    """Hand each user or assistant message of ``session`` to ``call``, which pairs
    them into exchanges and saves them in the background. Tool calls never come
    through this event; agent handoff items do and are skipped.

    Each message goes with the id of the LiveKit speech that added it, so a reply
    pairs with the turn it answers whatever order the items come in. Items the app
    adds itself with ``agent.update_chat_ctx(...)`` raise no event and are not
    remembered; to remember one, hand it over too: ``call.capture(msg.role, msg.id,
    msg.text_content, created_at=msg.created_at)``."""

    @session.on("speech_created")
    def _on_speech(ev: SpeechCreatedEvent) -> None:
        # made by another reply's work (a tool, a handoff's greeting): it answers the
        # same turn; a model reply runs llm_node, which must ask memory (self-check)
        call.speech_created(
            ev.speech_handle.id,
            within=current_speech_id(),
            asks_memory=recalls_each_reply and ev.source == "generate_reply",
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
    itself to tie tools to their speech (livekit-agents 1.5 to 1.8,
    ``voice.agent_activity._SpeechHandleContextVar``); no public accessor exists.
    Where that name is gone, this returns None and capture pairs replies with turns
    by time instead (``TurnPairing``), logged once with the version. By time, each
    exchange still gets its caller's words, interrupted replies and tool loops pair
    as before, but a reply made between turns (a greeting still being said when the
    caller speaks, a ``generate_reply`` of the app's) joins the turn before it."""
    variable = _speech_variable()
    if variable is None:
        return None
    speech_id = getattr(variable.get(None), "id", None)
    return speech_id if isinstance(speech_id, str) else None


SPEECH_VARIABLE = ("livekit.agents.voice.agent_activity", "_SpeechHandleContextVar")
"""Where livekit-agents keeps the context variable of the running speech (module,
name): private, so read in this one place, checked, with a fallback."""


@functools.cache
def _speech_variable() -> contextvars.ContextVar[Any] | None:
    module, name = SPEECH_VARIABLE
    try:
        variable = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        variable = None
    if isinstance(variable, contextvars.ContextVar):
        return variable
    logger.warning(
        "memory: livekit-agents %s has no %s.%s (tested: %s); replies are paired "
        "with the caller's turns by time, so a reply made between turns (a greeting "
        "still being said, an app's generate_reply) is saved with the turn before it",
        livekit_agents_version,
        module,
        name,
        SUPPORTED_LIVEKIT_AGENTS,
    )
    return None


def trace_memory(
    name: str, start_ns: int, end_ns: int, attributes: dict[str, Any]
) -> None:
    """``Trace``: each recall and save as a span in livekit-agents' own tracer, under
    the span of the reply or turn it served (set an exporter with
    ``livekit.agents.telemetry.set_tracer_provider``; LiveKit Cloud records them when
    observability is on). Attributes hold figures, never text."""
    span = tracer.start_span(name, start_time=start_ns, attributes=attributes)
    span.end(end_time=end_ns)


def model_asker(session: AgentSession) -> Callable[[str, str], Awaitable[str]]:
    """``CallMemory.extract_with`` for ``session``: one request to the text model of
    the agent running it (else the session's), outside the conversation; returns the
    answer's text. Raises RuntimeError when neither is a text LLM (a realtime
    model)."""
    seen: list[llm.LLM] = []

    def text_model() -> llm.LLM:
        try:
            found = session.current_agent.llm
        except RuntimeError:  # the session has closed: the model seen last
            found = None
        if not isinstance(found, llm.LLM):
            found = session.llm if isinstance(session.llm, llm.LLM) else None
        if found is not None:
            seen[:] = [found]
        if not seen:
            raise RuntimeError("no text LLM to extract facts with")
        return seen[0]

    session.on("agent_state_changed", lambda _: _remember_model(text_model))

    async def ask(instructions: str, text: str) -> str:
        request = llm.ChatContext()
        request.add_message(role="system", content=instructions)
        request.add_message(role="user", content=text)
        return (await text_model().chat(chat_ctx=request).collect()).text

    return ask


def _remember_model(text_model: Callable[[], llm.LLM]) -> None:
    # While the session runs, so the model is known when the call ends.
    with contextlib.suppress(RuntimeError):
        text_model()


# -- recall -----------------------------------------------------------------------


async def with_memory(call: CallMemory, chat_ctx: llm.ChatContext) -> llm.ChatContext:
    """Recall for one reply: a copy of ``chat_ctx`` with the memory block (a system
    message, ``extra={"memory_block": True}``) just before what the reply answers:
    the caller's latest words or, before they have spoken, the instructions of a
    ``generate_reply`` (the greeting). Never raises; the copy keeps the block out of
    ``session.history`` and out of the context the next step or turn starts from, so
    no reply ever sees two blocks. Call it in the agent's ``llm_node``, not in
    ``on_user_turn_completed`` (which discards LiveKit's preemptive generation, and
    typed turns never call). https://docs.livekit.io/agents/build/nodes/#llm-node"""
    chat_ctx = chat_ctx.copy()
    items = chat_ctx.items
    users = [
        i
        for i, item in enumerate(items)
        if item.type == "message" and item.role == "user"
    ]
    latest = ""
    if users:
        said = items[users[-1]]
        latest = (said.text_content if isinstance(said, llm.ChatMessage) else "") or ""
    block = await call.block_for(latest, turn=len(users))
    if block:
        if users:
            at = users[-1]
        elif items and items[-1].type == "message" and items[-1].role == "system":
            at = len(items) - 1
        else:
            at = len(items)
        message = llm.ChatMessage(
            role="system", content=[block], extra={"memory_block": True}
        )
        items.insert(at, message)
    return chat_ctx
