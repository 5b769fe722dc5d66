"""Run agent.py's real entrypoint through livekit-agents' own job machinery, offline.

What `uv run agent.py console` does in text mode, with the model provider swapped for
a scripted one and the speech providers for offline ones (agent.new_stt, new_tts): the
worker (`agent.server`) runs unregistered with the thread job executor, LiveKit's
process setup calls `prewarm`, a job is launched with LiveKit's mock room (the
console's), the entrypoint connects, waits for the caller and starts the session; the
caller's turns are typed into the console session (as the console's text prompt does),
then the caller hangs up: the worker shuts the job down and LiveKit calls the shutdown
callbacks with the reason, as in production.

Used by tests/test_entrypoint.py: `run_job(...)` runs one call in a child process (so
LiveKit's console singleton and the worker start fresh) and returns what the model
was sent, the log and the child's exit code. In the child:
`python -m tests.livekit_job < spec.json`.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
RESULT = "LIVEKIT_JOB_RESULT "


def run_job(
    memory_url: str,
    turns: list[str],
    *,
    identity: str = "alice",
    sip_number: str | None = None,
    metadata: dict[str, Any] | None = None,
    script: list[Any] | None = None,
    extract: list[Any] | None = None,
    model: str = "tests.scripted_llm:ScriptedLLM",
    timeout: float = 90,
) -> dict[str, Any]:
    """One call through the real entrypoint, as a new job (its own job id, the call id
    of most agents). ``identity`` (and ``sip_number``, which makes the caller a SIP
    participant) is who joins the mock room; ``metadata`` is the dispatch's job
    metadata; ``script`` the scripted model's replies (texts, {"tool": name,
    "arguments": {...}}, or {"slow": seconds, "text": str}); ``extract`` its answers
    to the end-of-call fact extraction (the same forms); ``model`` the "module:class"
    that stands in for the provider (given the script), e.g. a scripted realtime model.

    Returns {"job_id": str, "requests": [[[role, text], ...], ...] (every request the
    stand-in received; a tool's answer appears as ["tool", output]), "history":
    [[role, text], ...], "agent_class": "module.Class" of the agent the session ran
    at the end, "instructions": [str, ...] (a realtime stand-in's),
    "extractions": [[[role, text], ...], ...] (the fact-extraction requests),
    "returncode": int, "log": str}."""
    spec = {
        "job_id": f"job-{uuid.uuid4().hex[:12]}",  # a new call each time, as in production
        "memory_url": memory_url,
        "turns": turns,
        "identity": identity,
        "sip_number": sip_number,
        "metadata": json.dumps(metadata) if metadata is not None else "",
        "script": script or [],
        "extract": extract,
        "model": model,
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIVEKIT_")}
    done = subprocess.run(
        [sys.executable, "-m", "tests.livekit_job"],
        input=json.dumps(spec),
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    result: dict[str, Any] = {"requests": [], "history": []}
    for line in done.stdout.splitlines():
        if line.startswith(RESULT):
            result = json.loads(line[len(RESULT) :])
    result["returncode"] = done.returncode
    result["log"] = done.stderr
    return result


# -- the child ----------------------------------------------------------------------


LOCAL_HOSTS = {
    None,
    "localhost",
    "127.0.0.1",
    "::1",
    b"localhost",
    b"127.0.0.1",
    b"::1",
}


def _offline() -> None:
    # A test job touches no network: a name other than this machine's is refused, and
    # said in the log (ERROR), which every test's clean-log check rejects.
    resolve = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in LOCAL_HOSTS:
            logging.getLogger("tests.livekit_job").error(
                "the job tried to reach %s", host
            )
            raise OSError(f"offline test job: {host!r} is not reachable")
        return resolve(host, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo


def _child(spec: dict[str, Any]) -> int:
    # LiveKit Inference's constructors (the model's, if a test keeps it) want
    # credentials to exist; these never leave the machine.
    os.environ.update(
        LIVEKIT_API_KEY="offline-test-key",
        LIVEKIT_API_SECRET="offline-test-secret-offline-test-secret",
        MEMORY_URL=spec["memory_url"],
    )
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    _offline()

    from livekit import rtc
    from livekit.agents import JobExecutorType
    from livekit.agents.cli import _legacy, cli
    from livekit.agents.ipc import mock_room
    from livekit.agents.job import JobAcceptArguments, RunningJobInfo
    from livekit.protocol import agent as agent_pb
    from livekit.protocol import models

    import agent
    import memory.limits
    from tests.conftest import TEST_RECALL_BUDGET
    from tests.scripted_llm import Slow, ToolCall

    # what recall finds must not depend on the machine's speed (tests/conftest.py)
    memory.limits.RECALL_BUDGET = TEST_RECALL_BUDGET
    from tests.scripted_speech import ScriptedSTT, SilentTTS

    def reply(r: Any) -> Any:
        if isinstance(r, dict) and "slow" in r:
            return Slow(r["slow"], r.get("text", ""))
        return ToolCall(r["tool"], r.get("arguments", {})) if isinstance(r, dict) else r

    script = [reply(r) for r in spec["script"]]
    # only given when set, so a stand-in without fact extraction (realtime) still fits
    extract = (
        {}
        if spec.get("extract") is None
        else {"extract": [reply(r) for r in spec["extract"]]}
    )
    module, name = spec["model"].split(":")
    stand_in = getattr(importlib.import_module(module), name)
    models_made: list[Any] = []

    def scripted_llm() -> Any:
        model = stand_in(list(script), **extract)
        models_made.append(model)
        return model

    agent.new_llm = scripted_llm  # the model provider
    # The speech providers too, so a test job never reaches the network (text mode
    # never asks them for speech, but a session starts their connections). A realtime
    # recipe has none to swap.
    for name, offline in (("new_stt", ScriptedSTT), ("new_tts", SilentTTS)):
        if hasattr(agent, name):
            setattr(agent, name, offline)

    # The caller who joins the console's mock room.
    create = mock_room.create_mock_room

    def create_room() -> Any:
        room = create()
        (caller,) = room.remote_participants.values()
        caller.identity = spec["identity"]
        caller.attributes = {}
        if spec["sip_number"] is not None:
            caller.kind = rtc.ParticipantKind.PARTICIPANT_KIND_SIP
            caller.attributes = {"sip.phoneNumber": spec["sip_number"]}
        return room

    mock_room.create_mock_room = create_room  # type: ignore[assignment]

    # LiveKit's console, in text mode: the session's input is what is typed.
    console = _legacy.AgentsConsole.get_instance()
    cli.AgentsConsole._instance = console  # type: ignore[assignment]  # as `console` does
    console.console_mode = "text"
    console.enabled = True

    server = agent.server
    server._job_executor_type = JobExecutorType.THREAD  # as `console` does

    async def launch() -> None:
        # AgentServer.simulate_job, with the dispatch's metadata
        job = agent_pb.Job(
            id=spec["job_id"],
            room=models.Room(sid="RM_entrypoint_test", name="console-room"),
            type=agent_pb.JobType.JT_ROOM,
            metadata=spec["metadata"],
        )
        info = RunningJobInfo(
            worker_id=server._id,
            accept_arguments=JobAcceptArguments(
                identity="console", name="", metadata=""
            ),
            job=job,
            url="",
            token="",
            fake_job=True,
        )
        await server._proc_pool.launch_job(info)

    history: list[list[str]] = []
    agent_class: list[str] = []

    async def call() -> None:
        await asyncio.to_thread(console.wait_for_io_acquisition)
        session = console.io_session
        loop = console.io_loop

        async def on_job_loop(coro: Any) -> Any:
            return await asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(coro, loop)
            )

        async def greeted() -> None:
            # the on_enter greeting is said before the caller speaks
            for _ in range(500):
                if any(
                    i.type == "message" and i.role == "assistant"
                    for i in session.history.items
                ):
                    return
                await asyncio.sleep(0.02)

        await on_job_loop(greeted())

        async def typed(text: str) -> None:
            await session.run(user_input=text)  # what the console's text prompt does

        for text in spec["turns"]:
            await on_job_loop(typed(text))
        history.extend(
            [i.role, i.text_content or ""]
            for i in session.history.items
            if i.type == "message"
        )
        ran = type(session.current_agent)
        agent_class.append(f"{ran.__module__}.{ran.__qualname__}")

    async def main() -> None:
        server.once("worker_started", lambda: asyncio.ensure_future(launch()))
        worker = asyncio.create_task(server.run(devmode=True, unregistered=True))
        try:
            await asyncio.wait_for(call(), 60)
        finally:
            # The caller hangs up: the worker closes, LiveKit shuts the job down and
            # calls every shutdown callback with the reason.
            await server.aclose()
            await worker

    started = time.monotonic()
    asyncio.run(main())
    result = {
        "job_id": spec["job_id"],
        "requests": [
            [_said(i) for i in r.items if i.type in ("message", "function_call_output")]
            for m in models_made
            for r in getattr(m, "requests", [])
        ],
        "history": history,
        "extractions": [
            [_said(i) for i in r.items if i.type == "message"]
            for m in models_made
            for r in getattr(m, "extractions", [])
        ],
        "agent_class": agent_class[0] if agent_class else "",
        # what a realtime stand-in was told (it gets instructions, not requests)
        "instructions": [
            i for m in models_made for i in getattr(m, "instructions", [])
        ],
        "seconds": time.monotonic() - started,
    }
    print(RESULT + json.dumps(result), flush=True)
    return 0


def _said(item: Any) -> list[str]:
    # a message as [role, text]; a tool's answer as ["tool", output]
    if item.type == "function_call_output":
        return ["tool", item.output]
    return [item.role, item.text_content or ""]


if __name__ == "__main__":
    sys.path.insert(0, str(PROJECT))
    sys.exit(_child(json.loads(sys.stdin.read())))
