"""Recipe realtime, driven through the real AgentSession by a scripted realtime model.

ScriptedRealtime stands in for the paid speech-to-speech provider: replies come as
text generations, and `caller_speaks` plays a spoken turn the way providers with
server-side turn detection report it (speech started, the reply, then the caller's
transcript stamped with when they began).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from livekit.agents import AgentSession, llm, utils
from livekit.agents.llm import realtime

import agent
import memory
from tests.conftest import call
from tests.livekit_job import run_job

CALLER = "caller-1"


async def _aiter(items):
    for item in items:
        yield item


class ScriptedRealtimeSession(realtime.RealtimeSession):
    def __init__(self, model: ScriptedRealtime) -> None:
        super().__init__(model)
        self._model = model
        self._chat_ctx = llm.ChatContext.empty()
        self._tools = llm.ToolContext.empty()

    @property
    def chat_ctx(self) -> llm.ChatContext:
        return self._chat_ctx

    @property
    def tools(self) -> llm.ToolContext:
        return self._tools

    async def update_instructions(self, instructions: str) -> None:
        self._model.instructions.append(instructions)

    async def update_chat_ctx(self, chat_ctx: llm.ChatContext) -> None:
        self._chat_ctx = chat_ctx.copy()

    async def update_tools(self, tools) -> None:
        self._tools = llm.ToolContext(tools)

    def update_options(self, *, tool_choice=None) -> None:
        pass

    def push_audio(self, frame) -> None:
        pass

    def push_video(self, frame) -> None:
        pass

    def generation(
        self, text: str, *, user_initiated: bool
    ) -> realtime.GenerationCreatedEvent:
        modalities: asyncio.Future = asyncio.get_running_loop().create_future()
        modalities.set_result(["text"])
        message = realtime.MessageGeneration(
            message_id=utils.shortuuid("item_"),
            text_stream=_aiter([text]),
            audio_stream=_aiter([]),
            modalities=modalities,
        )
        return realtime.GenerationCreatedEvent(
            message_stream=_aiter([message]),
            function_stream=_aiter([]),
            user_initiated=user_initiated,
        )

    def generate_reply(self, *, instructions=None, tool_choice=None, tools=None):
        future = asyncio.get_running_loop().create_future()
        future.set_result(
            self.generation(self._model.next_reply(), user_initiated=True)
        )
        return future

    def commit_audio(self) -> None:
        pass

    def clear_audio(self) -> None:
        pass

    def interrupt(self) -> None:
        pass

    def truncate(
        self, *, message_id, modalities, audio_end_ms, audio_transcript=None
    ) -> None:
        pass

    async def aclose(self) -> None:
        pass

    async def caller_speaks(self, text: str, *, reply: str) -> None:
        """A spoken turn under server-side turn detection: the provider replies on its
        own, and its transcript of the caller comes after the reply."""
        began = time.time()
        self.emit("input_speech_started", realtime.InputSpeechStartedEvent())
        await asyncio.sleep(0.05)
        self.emit(
            "input_speech_stopped",
            realtime.InputSpeechStoppedEvent(user_transcription_enabled=True),
        )
        self.emit("generation_created", self.generation(reply, user_initiated=False))
        await asyncio.sleep(0.2)
        self.emit(
            "input_audio_transcription_completed",
            realtime.InputTranscriptionCompleted(
                item_id=utils.shortuuid("item_"),
                transcript=text,
                is_final=True,
                turn_started_at=began,
            ),
        )
        await asyncio.sleep(0.1)


class ScriptedRealtime(realtime.RealtimeModel):
    def __init__(self, replies: list[str], *, transcription: bool = True) -> None:
        super().__init__(
            capabilities=realtime.RealtimeCapabilities(
                message_truncation=False,
                turn_detection=True,
                user_transcription=transcription,
                auto_tool_reply_generation=False,
                audio_output=False,
                manual_function_calls=False,
                mutable_chat_context=True,
                mutable_instructions=True,
                mutable_tools=True,
            )
        )
        self.replies = list(replies)
        self.instructions: list[str] = []
        self.sessions: list[ScriptedRealtimeSession] = []

    def next_reply(self) -> str:
        return self.replies.pop(0) if self.replies else "OK."

    def session(
        self, *, turn_detection_disabled: bool = False
    ) -> ScriptedRealtimeSession:
        self.sessions.append(ScriptedRealtimeSession(self))
        return self.sessions[-1]

    async def aclose(self) -> None:
        pass


async def realtime_call(store, model: ScriptedRealtime, call_id: str = "call-1"):
    """A call as the entrypoint makes it: a session without STT, LLM or TTS (the
    realtime model hears and speaks), the agent from agent.build_agent."""
    session: AgentSession = AgentSession()
    assistant = await agent.build_agent(session, store, CALLER, call_id, model=model)
    await session.start(assistant)
    await asyncio.sleep(0.2)  # the greeting
    return session, assistant.memory, assistant


async def test_the_profile_is_in_the_instructions_the_provider_receives(store):
    await store.remember(CALLER, memory.Fact.of("name", "Maria"))
    session, call_memory, assistant = await realtime_call(
        store, ScriptedRealtime(["Hi Maria!"])
    )
    assert 'name: "Maria"' in assistant.instructions
    await session.aclose()
    await call_memory.aclose("participant hung up")


async def test_spoken_turns_are_saved_though_each_transcript_comes_after_its_reply(
    store,
):
    model = ScriptedRealtime(["Hello!"])
    session, call_memory, _ = await realtime_call(store, model)
    provider = model.sessions[-1]
    await provider.caller_speaks("My sister Ana is vegetarian.", reply="Good to know.")
    await provider.caller_speaks("And my brother eats everything.", reply="Noted too.")
    await session.aclose()
    await call_memory.aclose("participant hung up")
    assert [(e.user_text, e.assistant_text) for e in await store.exchanges(CALLER)] == [
        ("", "Hello!"),  # the call's opening: the greeting the first turn answered
        ("My sister Ana is vegetarian.", "Good to know."),
        ("And my brother eats everything.", "Noted too."),
    ]


async def test_without_input_transcription_nothing_is_saved_and_the_log_says_so(
    store, caplog
):
    model = ScriptedRealtime(["Hello!"], transcription=False)
    session, call_memory, _ = await realtime_call(store, model)
    await model.sessions[-1].caller_speaks(
        "My sister Ana is vegetarian.", reply="Good to know."
    )
    await session.aclose()
    await call_memory.aclose("participant hung up")
    assert await store.exchanges(CALLER) == []
    assert "memory capture is OFF" in caplog.text


async def test_the_recall_tool_finds_an_earlier_call(store):
    async with call(store, CALLER, ScriptedRealtime(["Hello!", "Good to know."])) as (
        session,
        _,
    ):
        await session.run(user_input="My sister Ana is vegetarian.")
    session, call_memory, assistant = await realtime_call(
        store, ScriptedRealtime([]), call_id="call-2"
    )
    found = await assistant.recall_memory(None, "sister food")
    assert "My sister Ana is vegetarian." in found
    await session.aclose()
    await call_memory.aclose("participant hung up")


async def test_the_real_model_is_built_with_input_transcription(monkeypatch):
    # LiveKit Inference's constructor wants credentials to exist; nothing is sent.
    monkeypatch.setenv("LIVEKIT_API_KEY", "offline-test-key")
    monkeypatch.setenv("LIVEKIT_API_SECRET", "offline-test-secret-offline-test-secret")
    model = agent.new_llm()
    try:
        assert isinstance(model, llm.RealtimeModel)
        assert model.capabilities.user_transcription  # or nothing could be captured
    finally:
        await model.aclose()


@pytest.mark.smoke  # the kit runs it for every backend x recipe
async def test_the_real_entrypoint_gives_the_provider_the_profile_and_saves_the_call(
    store_url,
):
    # The entrypoint run by LiveKit's own job machinery (tests/livekit_job.py), with
    # the scripted realtime model standing in for the provider.
    stand_in = "tests.test_recipe_realtime:ScriptedRealtime"
    first = run_job(
        store_url,
        ["My sister Ana is vegetarian."],
        script=["Hello!", "Good to know."],
        model=stand_in,
    )
    assert first["returncode"] == 0 and "Traceback" not in first["log"], first["log"][
        -3000:
    ]
    store = memory.open_store(store_url)
    assert [
        (e.user_text, e.assistant_text) for e in await store.exchanges("alice")
    ] == [
        ("", "Hello!"),  # the call's opening
        ("My sister Ana is vegetarian.", "Good to know."),
    ]
    assert (
        len((await store.profile("alice")).summaries) == 1
    )  # the shutdown callback ran
    await store.close()
    second = run_job(
        store_url, ["What does my sister eat?"], script=["Hi again!"], model=stand_in
    )
    assert second["returncode"] == 0 and "Traceback" not in second["log"], second[
        "log"
    ][-3000:]
    assert any("My sister Ana is vegetarian." in i for i in second["instructions"])
