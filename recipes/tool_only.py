"""Recipe tool_only: no automatic recall; the model looks memory up with a tool.

When to use it: long calls where most turns need no memory, or models billed per
prompt token. Fewest tokens per turn: the caller's profile (facts, latest call
summaries) goes into the instructions once at call start, and the model calls
`recall_memory` only when it needs what was said before.

What changes against agent.py: no `llm_node` override (no per-turn recall, no block
in each request); `on_enter` puts the profile into the instructions before the
greeting; a `recall_memory` tool; capture is told that replies do not recall
(`recalls_each_reply=False`, so the wiring self-check stays quiet). Capture, facts,
caller id and the end-of-call flush are the same. Trade-off: the model must decide
to look things up; a model that does not will answer without what it was told in
earlier calls.

Copy it into your agent: copy `memory/` and make agent.py's three touch points
first (livekit-memory-kit's docs/add-memory-to-your-agent.md); then copy `on_enter`, the `recall_memory` tool and the
instructions into your own Agent, and drop the `with_memory` line. Or build
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
    stt,
    tts,
)
from livekit.plugins import noise_cancellation, silero

import memory
from memory.livekit_adapter import start_call_memory, wait_for_caller

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
    When the caller refers to something from an earlier call, look it up with the
    recall_memory tool before answering; never claim to remember anything you have
    not been told or found. When the caller tells you something lasting about
    themselves (their name, where they live, a preference), save it with the
    remember tool."""
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
        # The profile goes into the instructions once, so every reply of the call has
        # it without a per-turn lookup. block_for is bounded and never raises.
        profile = await self.memory.block_for("")
        if profile:
            await self.update_instructions(f"{self.instructions}\n\n{profile}")
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
    model: llm.LLM | None = None,
) -> Assistant:
    """One call's agent with its memory: the entrypoint, the demo, the tests and the
    benchmarks all build it here. ``caller_id=None``: memory off for the call."""
    # 2. Capture: each exchange is saved after its reply (the profile preloads now).
    call = start_call_memory(
        session, store, caller_id, call_id, recalls_each_reply=False
    )
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
