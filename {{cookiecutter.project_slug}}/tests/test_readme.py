"""README.md's run instructions work as written with the livekit-agents installed:
the commands it gives are the ones that version recommends, and a worker with an
agent name is told how rooms get it (explicit dispatch), with APIs that exist."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from livekit import api
from livekit.agents.cli import _legacy

import agent

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def commands() -> list[str]:
    """The shell commands of README's fenced blocks, comments dropped."""
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    return [
        line.split("#")[0].strip()
        for b in blocks
        for line in b.splitlines()
        if line.strip()
    ]


def test_the_readme_runs_the_console_the_way_this_livekit_agents_recommends():
    legacy = inspect.getsource(_legacy)
    # livekit-agents deprecates its own console and dev commands for the LiveKit CLI's
    for command in ("console", "dev"):
        assert f"use [bold]lk agent {command}[/bold] instead" in legacy
        assert f"lk agent {command}" in commands()
        assert f"uv run agent.py {command}" not in commands()


def test_the_readme_says_how_a_room_gets_the_named_agent():
    assert agent.AGENT_NAME, (
        "an unnamed agent is dispatched to every room; README says so"
    )
    assert f"--agent-name {agent.AGENT_NAME}" in README
    assert f'agent_name="{agent.AGENT_NAME}"' in README
    # the API names README gives exist in the installed livekit-api
    for name in (
        "CreateAgentDispatchRequest",
        "RoomConfiguration",
        "RoomAgentDispatch",
    ):
        assert name in README and hasattr(api, name)
    assert hasattr(api.AccessToken, "with_room_config") and "with_room_config" in README
    assert (
        hasattr(api.LiveKitAPI, "agent_dispatch")
        and "agent_dispatch.create_dispatch" in README
    )
    assert 'AGENT_NAME = ""' in README  # and how to switch to automatic dispatch
