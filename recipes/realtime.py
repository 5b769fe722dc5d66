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
input transcription), no STT/TTS/VAD/turn detector, an `Assistant` that takes the
profile (which `build_agent` waits for, at most `RECALL_BUDGET`), no `llm_node`, a
`recall_memory` tool, the transcription check in `on_enter`, and capture told that
replies neither recall nor can extract facts (no text model).
Tested with a scripted realtime stand-in (the recipe's tests): profile in the
instructions, the recall tool, capture from late transcripts, the guard for missing
transcription. Not tested: a real provider's audio path.

Copy it into your agent: copy `memory/` and make agent.py's three touch points
first (livekit-memory-kit's docs/add-memory-to-your-agent.md); then copy the `profile` argument, `on_enter`'s transcription
check and the `recall_memory` tool into your own Agent. Or build
your Agent on this file's `Assistant` (tests/test_recipes.py does).
"""

import logging
import textwrap
from pathlib import Path

from dotenv import load_dotenv
from livekit import rtc
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
)
from livekit.plugins import noise_cancellation
from openai.types.realtime import AudioTranscription

import memory
from memory.livekit_adapter import start_call_memory, wait_for_caller

logger = logging.getLogger("agent")

# Next to this file, not the working directory, so `uv run` works from anywhere.
load_dotenv(Path(__file__).with_name(".env.local"))

AGENT_NAME = "memory-agent"
LLM_MODEL = "openai/gpt-4.1-mini"  # unused here: the realtime model below replies
REALTIME_MODEL = "openai/gpt-realtime"
TRANSCRIPTION_MODEL = "gpt-4o-mini-transcribe"  # the caller's words, for capture
STT_MODEL = "deepgram/nova-3"  # unused here, as LLM_MODEL
TTS_MODEL = "cartesia/sonic-3"  # unused here, as LLM_MODEL
# Where memory is kept: MEMORY_URL in the environment or .env.local (.env.example
# lists every setting); unset, the embedded default, a file in data/ here.

INSTRUCTIONS = textwrap.dedent(
    """\
    You are a friendly voice assistant who remembers the people who call you.
    Keep answers short and speakable: no lists, markdown or emojis.
    Below may be background about the caller from earlier calls. When the caller
    refers to something else from an earlier call, look it up with the
    recall_memory tool; never claim to remember anything you have not been told or
    found. When the caller tells you something lasting about themselves (their
    name, where they live, a preference), save it with the remember tool."""
)


def new_llm() -> llm.RealtimeModel:
    """The model provider, here a realtime model that hears and speaks, with input
    transcription on (tests swap this one function for a scripted model)."""
    return inference.RealtimeModel(
        REALTIME_MODEL,
        input_audio_transcription=AudioTranscription(model=TRANSCRIPTION_MODEL),
    )


class Assistant(Agent):
    """Your agent, with memory. ``call``: the call's memory (none, as in tests or
    for a caller without a stable id: memory is off and no store is opened)."""

    def __init__(
        self,
        call: memory.CallMemory | None = None,
        *,
        instructions: str = INSTRUCTIONS,
        model: llm.LLM | llm.RealtimeModel | None = None,
        profile: str | None = None,
    ) -> None:
        if profile:
            instructions = f"{instructions}\n\n{profile}"
        super().__init__(instructions=instructions, llm=model or new_llm())
        self.memory = call or memory.CallMemory()

    async def on_enter(self) -> None:
        model = self.llm
        hears = (
            not isinstance(model, llm.RealtimeModel)
            or model.capabilities.user_transcription
        )
        if self.memory.enabled and not hears:
            # No transcripts means no user items: saving would keep only the agent's.
            logger.error(
                "memory capture is OFF for this call: the realtime model has no input "
                "audio transcription, so the caller's words never reach the agent"
            )
            self.memory.capturing = False
        self.session.generate_reply(
            instructions="Greet the caller, by name if you know it."
        )

    @function_tool
    async def recall_memory(self, context: RunContext, query: str) -> str:
        """Look up what the caller said in earlier calls.

        Args:
            query: What to look for, in the caller's words, e.g. "sister's restaurant".
        """
        return await self.memory.lookup(query)

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


async def build_agent(
    session: AgentSession,
    store: memory.MemoryStore,
    caller_id: str | None,
    call_id: str,
    *,
    model: llm.LLM | llm.RealtimeModel | None = None,
) -> Assistant:
    """One call's agent with its memory: the entrypoint, the demo, the tests and the
    benchmarks all build it here. ``caller_id=None``: memory off for the call. Waits
    for the caller's profile (at most RECALL_BUDGET) for the instructions."""
    # 2. Capture: each exchange is saved after its reply (the profile preloads now).
    call = start_call_memory(
        session, store, caller_id, call_id, extract=False, recalls_each_reply=False
    )
    profile = await call.block_for("")  # bounded; None when memory is off
    return Assistant(call, model=model, profile=profile)


server = AgentServer()


def prewarm(proc: JobProcess) -> None:
    # One store per worker process, shared by the calls it runs; one it cannot open
    # is logged (ERROR) and the calls go on without memory.
    proc.userdata["memory"] = memory.open_store(fail_open=True)


server.setup_fnc = prewarm


@server.rtc_session(agent_name=AGENT_NAME)
async def entrypoint(ctx: JobContext) -> None:
    ctx.log_context_fields = {"room": ctx.room.name}
    # Memory is kept under the caller's id, so find the caller before the session
    # starts (the greeting already reads their profile).
    caller = await wait_for_caller(ctx)
    # the Assistant's realtime model hears, detects turns and speaks
    session: AgentSession = AgentSession()
    assistant = await build_agent(
        session, ctx.proc.userdata["memory"], caller.id, ctx.job.id
    )
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
