"""A LiveKit voice agent that remembers each caller from one call to the next.

LiveKit's starter agent (agent-starter-python) with memory added at three touch
points, each one visible line below:
- recall: `Assistant.llm_node` adds one memory block to a copy of the chat context
  before each reply (never to the session history);
- capture: `start_call_memory` saves each exchange after the reply is added;
- close: the call's memory is flushed by a shutdown callback when the call ends.
Everything else memory needs is in the `memory/` folder; to copy it into an agent
you already have, see livekit-memory-kit's docs/add-memory-to-your-agent.md.

Run: `uv run -m livekit.agents download-files` once, then `lk agent console` (or
`lk agent dev`; `uv run agent.py start` in production); a worker joins only rooms
that dispatch it by name (README.md, "Quick start").
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
    stt,
    tts,
)
from livekit.plugins import noise_cancellation, silero

import memory
from memory.livekit_adapter import start_call_memory, wait_for_caller, with_memory

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
    (their name, where they live, a preference), save it with the remember tool."""
)


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

    async def on_enter(self) -> None:
        # llm_node runs for this reply too, so the greeting sees the preloaded profile.
        self.session.generate_reply(
            instructions="Greet the caller, by name if you know it."
        )

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
    # Memory is kept under the caller's id, so find the caller before the session
    # starts (the greeting already reads their profile).
    caller = await wait_for_caller(ctx)
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
