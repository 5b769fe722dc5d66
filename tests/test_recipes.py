"""Recipes: each is listed, rendered (see test_template.py) and works when copied into an
agent project that the template did not generate."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "{{cookiecutter.project_slug}}"
RECIPES = sorted(p.stem for p in (ROOT / "recipes").glob("*.py"))
CHOICES = json.loads((ROOT / "cookiecutter.json").read_text())["recipe"]


def test_every_recipe_is_a_template_choice_with_tests_and_a_row_in_the_index():
    assert CHOICES[0] == "default" and sorted(CHOICES[1:]) == RECIPES
    index = (ROOT / "recipes" / "README.md").read_text()
    for name in RECIPES:
        assert (ROOT / "recipes" / "tests" / f"test_{name}.py").is_file(), name
        assert re.search(rf"^\| \[?`?{name}`?", index, re.MULTILINE), f"{name} not in the index"


@pytest.mark.parametrize("name", RECIPES)
def test_a_recipe_docstring_says_when_what_changes_and_how_to_copy(name):
    doc = (ROOT / "recipes" / f"{name}.py").read_text().split('"""')[1]
    assert doc.startswith(f"Recipe {name}:")
    for part in ("When to use it:", "What changes against agent.py:", "Copy it into your agent:"):
        assert part in doc, f"{name}: no '{part}'"


# An agent someone already has: their own Agent class with their own tool. Memory comes
# in by copying two files next to it and building their agent on the recipe's Assistant.
EXISTING_AGENT = '''
import asyncio, json, sys

from livekit.agents import AgentSession, RunContext, function_tool

import memory
import memory_agent
from scripted_llm import ScriptedLLM, first_reply


class FrontDesk(memory_agent.Assistant):
    @function_tool
    async def opening_hours(self, context: RunContext) -> str:
        """When the front desk is open."""
        return "Nine to five."


async def main(db: str) -> None:
    store = memory.open_store(db)
    await store.remember("caller-1", "recording_consent", "yes")  # telephony asks first
    for n, text in enumerate(["My sister Ana is vegetarian.", "What does my sister eat?"]):
        call = memory.CallMemory(store, "caller-1", f"call-{n}")
        call.start()
        model = ScriptedLLM()
        async with AgentSession(llm=model) as session:
            memory_agent.start_capture(session, call)
            greeted = first_reply(session)
            await session.start(FrontDesk(call, model=model))
            await asyncio.wait_for(greeted.wait(), 10)  # the caller answers the greeting
            await session.run(user_input=text)
        await call.aclose()
    print(json.dumps([e.user_text for e in await store.exchanges("caller-1")]))
    await store.close()


asyncio.run(main(sys.argv[1]))
'''


@pytest.mark.parametrize("name", RECIPES)
def test_a_recipe_copied_into_an_existing_agent_runs(name, tmp_path):
    project = tmp_path / "front-desk"
    project.mkdir()
    (project / "front_desk.py").write_text(textwrap.dedent(EXISTING_AGENT))
    # the two files the recipe's docstring says to copy (memory.py is the sqlite backend)
    shutil.copyfile(ROOT / "recipes" / f"{name}.py", project / "memory_agent.py")
    shutil.copyfile(TEMPLATE / "memory_backends" / "sqlite.py", project / "memory.py")
    shutil.copyfile(TEMPLATE / "tests" / "scripted_llm.py", project / "scripted_llm.py")
    env = {
        k: v for k, v in os.environ.items() if k not in ("LIVEKIT_API_KEY", "LIVEKIT_API_SECRET")
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    calls = run("front_desk.py", str(project / "memory.db"))
    assert calls.returncode == 0, calls.stderr[-3000:]
    assert json.loads(calls.stdout.strip().splitlines()[-1]) == [
        "My sister Ana is vegetarian.",
        "What does my sister eat?",
    ]
    # and it is still a LiveKit worker on its own
    cli = run("memory_agent.py", "--help")
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert "start" in cli.stdout and "console" in cli.stdout


def _definitions(path: Path) -> dict[str, str]:
    """Source of each top-level function and each Assistant method, by name."""
    import ast

    source = path.read_text()
    tree = ast.parse(source)
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = ast.get_source_segment(source, node)
        elif isinstance(node, ast.ClassDef) and node.name == "Assistant":
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found[f"Assistant.{item.name}"] = ast.get_source_segment(source, item)
    return found


# The memory wiring every recipe copies from agent.py unchanged. A recipe is one
# self-contained file, so these are copies on purpose; this keeps a fix to one from
# leaving the others behind.
SHARED = [
    "start_capture",
    "dispatch_metadata",
    "caller_id_for",
    "caller_or_none",
    "Assistant.llm_node",
    "Assistant.remember",
    "Assistant.on_exit",
]


@pytest.mark.parametrize("name", RECIPES)
def test_a_recipe_keeps_agent_pys_memory_wiring_where_it_has_it(name):
    default = _definitions(TEMPLATE / "agent.py")
    recipe = _definitions(ROOT / "recipes" / f"{name}.py")
    for function in SHARED:
        if function in recipe:
            assert recipe[function] == default[function], (
                f"{name}: {function} differs from agent.py"
            )
