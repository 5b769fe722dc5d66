"""A scripted stand-in for the paid model provider, for offline tests and the demo.

It is a real `livekit.agents.llm.LLM`, so the real AgentSession drives it exactly as
it drives a provider plugin. It records every chat context it receives (what the
model would have seen) and answers from a script.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from livekit.agents import llm
from livekit.agents.llm import ChatChunk, ChoiceDelta, FunctionToolCall
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS

import memory


@dataclass
class ToolCall:
    """A scripted reply that calls a tool, after saying ``say`` (if any) first."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    say: str = ""


@dataclass
class Slow:
    """A scripted reply that starts only after ``seconds`` (a provider under load)."""

    seconds: float
    text: str


Reply = str | ToolCall | Slow | Exception
"""A text, a tool call, a slow text, or an exception the provider raises."""
Script = Callable[[llm.ChatContext], Reply]


INSTRUCTIONS_ID = "lk.agent_task.instructions"  # livekit-agents voice/generation.py


class ScriptedLLM(llm.LLM):
    """Answers each request with the next scripted reply.

    ``script`` is a list of replies (used in order; "OK." once it runs out) or a
    function from the chat context to a reply. ``chunk_delay`` (seconds) streams a
    text reply word by word with that pause, so a test can interrupt it midway.
    ``requests`` holds a copy of every chat context received, in order, except the
    fact-extraction requests made when a call ends (those that start with
    memory.extraction.EXTRACT_INSTRUCTIONS): ``extractions`` holds those, and ``extract`` (a list
    of replies, used in order) answers them; '{"facts": []}' once it runs out.
    """

    def __init__(
        self,
        script: list[Reply] | Script | None = None,
        *,
        chunk_delay: float = 0.0,
        extract: list[Reply] | None = None,
    ) -> None:
        super().__init__()
        self._script = script if callable(script) else list(script or [])
        self._extract = list(extract or [])
        self.chunk_delay = chunk_delay
        self.requests: list[llm.ChatContext] = []
        self.extractions: list[llm.ChatContext] = []

    @property
    def replies(self) -> list[llm.ChatContext]:
        """The requests the agent made for its replies: those that start with the
        agent's instructions (LiveKit gives that message a fixed id). Requests that
        code makes itself with the same model, such as a call summary, are left out."""
        return [
            r for r in self.requests if r.items and r.items[0].id == INSTRUCTIONS_ID
        ]

    def chat(
        self,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool] | None = None,
        conn_options=DEFAULT_API_CONNECT_OPTIONS,
        **_: Any,
    ) -> llm.LLMStream:
        first = chat_ctx.items[0] if chat_ctx.items else None
        if (
            first is not None
            and first.type == "message"
            and first.role == "system"
            and (first.text_content == memory.extraction.EXTRACT_INSTRUCTIONS)
        ):
            self.extractions.append(chat_ctx.copy())
            answer: Reply = self._extract.pop(0) if self._extract else '{"facts": []}'
            return _ScriptedStream(
                self,
                answer,
                chat_ctx=chat_ctx,
                tools=tools or [],
                conn_options=conn_options,
            )
        self.requests.append(chat_ctx.copy())
        if callable(self._script):
            reply = self._script(chat_ctx)
        else:
            reply = self._script.pop(0) if self._script else "OK."
        return _ScriptedStream(
            self, reply, chat_ctx=chat_ctx, tools=tools or [], conn_options=conn_options
        )


class _ScriptedStream(llm.LLMStream):
    def __init__(self, model: ScriptedLLM, reply: Reply, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self._reply = reply
        self._delay = model.chunk_delay

    async def _run(self) -> None:
        if isinstance(self._reply, Exception):
            raise self._reply
        if isinstance(self._reply, Slow):
            await asyncio.sleep(self._reply.seconds)
            self._reply = self._reply.text
        if isinstance(self._reply, ToolCall):
            call = FunctionToolCall(
                name=self._reply.name,
                arguments=json.dumps(self._reply.arguments),
                call_id=f"call_{id(self)}",
            )
            if self._reply.say:
                self._event_ch.send_nowait(
                    ChatChunk(
                        id="scripted",
                        delta=ChoiceDelta(role="assistant", content=self._reply.say),
                    )
                )
            self._event_ch.send_nowait(
                ChatChunk(
                    id="scripted",
                    delta=ChoiceDelta(role="assistant", tool_calls=[call]),
                )
            )
            return
        words = self._reply.split(" ") if self._delay else [self._reply]
        for n, word in enumerate(words):
            text = word if n == 0 else " " + word
            self._event_ch.send_nowait(
                ChatChunk(
                    id="scripted", delta=ChoiceDelta(role="assistant", content=text)
                )
            )
            if self._delay:
                await asyncio.sleep(self._delay)


def memory_blocks(chat_ctx: llm.ChatContext) -> list[str]:
    """The texts of the memory blocks in a chat context (agent.py marks them)."""
    return [
        i.text_content or ""
        for i in chat_ctx.items
        if i.type == "message" and i.extra.get("memory_block")
    ]


def first_reply(session) -> asyncio.Event:
    """An event set when the agent's first reply (the on_enter greeting) is added to
    the conversation. Register it before `session.start`, then wait on it, as a
    caller hears the greeting before speaking."""
    said = asyncio.Event()

    def on_item(ev: Any) -> None:
        if getattr(ev.item, "role", None) == "assistant":
            said.set()

    session.on("conversation_item_added", on_item)
    return said
