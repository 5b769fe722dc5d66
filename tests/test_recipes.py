"""Recipes: each is listed, rendered (see test_template.py) and works when copied into an
agent project that the template did not generate."""

from __future__ import annotations

import difflib
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
# in by copying the memory/ folder and the recipe next to it, wiring memory into their
# own session with the adapter, and building their agent on the recipe's Assistant.
EXISTING_AGENT = '''
import asyncio, json

from livekit.agents import AgentSession, RunContext, function_tool

import memory
import memory_agent
from memory.livekit_adapter import start_call_memory
from scripted_llm import ScriptedLLM, first_reply


class FrontDesk(memory_agent.Assistant):
    @function_tool
    async def opening_hours(self, context: RunContext) -> str:
        """When the front desk is open."""
        return "Nine to five."


async def main() -> None:
    store = memory.open_store()  # from MEMORY_URL, as the recipe's prewarm opens it
    # telephony asks first
    await store.remember("caller-1", memory.Fact.of("recording_consent", "yes"))
    for n, text in enumerate(["My sister Ana is vegetarian.", "What does my sister eat?"]):
        model = ScriptedLLM()
        async with AgentSession(llm=model) as session:
            call = start_call_memory(session, store, "caller-1", f"call-{n}")
            greeted = first_reply(session)
            await session.start(FrontDesk(call, model=model))
            await asyncio.wait_for(greeted.wait(), 10)  # the caller answers the greeting
            await session.run(user_input=text)
        await call.aclose("participant hung up")  # as LiveKit calls a shutdown callback
    print(json.dumps([e.user_text for e in await store.exchanges("caller-1")]))
    await store.close()


asyncio.run(main())
'''


@pytest.mark.parametrize("name", RECIPES)
def test_a_recipe_copied_into_an_existing_agent_runs(name, tmp_path):
    project = tmp_path / "front-desk"
    project.mkdir()
    (project / "front_desk.py").write_text(textwrap.dedent(EXISTING_AGENT))
    # what the recipe's docstring says to copy: the memory/ folder and the recipe
    shutil.copyfile(ROOT / "recipes" / f"{name}.py", project / "memory_agent.py")
    shutil.copytree(
        TEMPLATE / "memory", project / "memory", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copyfile(TEMPLATE / "tests" / "scripted_llm.py", project / "scripted_llm.py")
    env = {
        k: v for k, v in os.environ.items() if k not in ("LIVEKIT_API_KEY", "LIVEKIT_API_SECRET")
    }
    env["MEMORY_URL"] = f"sqlite:///{project / 'memory.db'}"  # an absolute path: 4 slashes

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    calls = run("front_desk.py")
    assert calls.returncode == 0, calls.stderr[-3000:]
    # each call's opening (the greeting the caller answered: the agent's words alone,
    # no caller side) is saved before the caller's turn
    assert json.loads(calls.stdout.strip().splitlines()[-1]) == [
        "",
        "My sister Ana is vegetarian.",
        "",
        "What does my sister eat?",
    ]
    assert (project / "memory.db").is_file()
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
            found[node.name] = ast.get_source_segment(source, node) or ""
        elif isinstance(node, ast.ClassDef) and node.name == "Assistant":
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found[f"Assistant.{item.name}"] = ast.get_source_segment(source, item) or ""
    return found


# What a recipe has of agent.py stays agent.py's: a recipe is agent.py plus its idea,
# so `diff agent.py recipes/<name>.py` shows only the idea.
SHARED = [
    "new_llm",
    "new_stt",
    "new_tts",
    "build_agent",
    "prewarm",
    "entrypoint",
    "Assistant.__init__",
    "Assistant.on_enter",
    "Assistant.llm_node",
    "Assistant.remember",
]
# What a recipe changes in them on purpose (its docstring says why). Each must really
# differ: once it is agent.py's again, it comes off this list and is checked again.
DIFFERS = {
    "realtime": {
        "new_llm": "a realtime model, with input transcription",
        "build_agent": "waits for the profile, which goes into the instructions",
        "prewarm": "no VAD: the realtime model hears for itself",
        "entrypoint": "no STT, TTS, VAD or turn detector: the realtime model has them",
        "Assistant.__init__": "takes the profile for the instructions",
        "Assistant.on_enter": "checks that the caller's words are transcribed",
    },
    "resume": {
        "build_agent": "the Assistant continues the call from its saved turns",
        "entrypoint": "the call id is the room's sid",
        "Assistant.__init__": "takes the call's saved turns",
        "Assistant.on_enter": "a resumed call is picked up, not greeted",
    },
    "tool_only": {
        "build_agent": "capture is told replies do not recall (no self-check)",
        "Assistant.on_enter": "the profile goes into the instructions",
    },
    "telephony": {
        "entrypoint": "dials out, and waits for a SIP caller",
        "Assistant.__init__": "capture is off until consent",
        "Assistant.on_enter": "asks for consent",
    },
    "call_summary": {
        "entrypoint": "a longer bound for the end of the call",
        "Assistant.__init__": "the model writes the call summary",
        "Assistant.on_enter": "the greeting picks up the last call",
    },
    "forget_on_request": {"Assistant.__init__": "remembers a pending forget request"},
}


@pytest.mark.parametrize("name", RECIPES)
def test_a_recipe_keeps_agent_pys_code_where_it_has_it(name):
    default = _definitions(TEMPLATE / "agent.py")
    recipe = _definitions(ROOT / "recipes" / f"{name}.py")
    for function in SHARED:
        if function not in recipe:
            continue
        if function in DIFFERS.get(name, {}):
            assert recipe[function] != default[function], (
                f"{name}: {function} is agent.py's again; take it off DIFFERS"
            )
        else:
            assert recipe[function] == default[function], (
                f"{name}: {function} differs from agent.py"
            )


ADAPTER = TEMPLATE / "memory" / "livekit_adapter.py"


@pytest.mark.parametrize("name", RECIPES)
def test_a_recipe_copies_no_glue_and_its_diff_is_its_idea(name):
    """No recipe writes again what the memory folder holds (its functions, or a
    private LiveKit name), and its diff against agent.py stays small: the idea."""
    glue = {n for n in _definitions(ADAPTER) if not n.startswith(("_", "Assistant."))}
    source = (ROOT / "recipes" / f"{name}.py").read_text()
    defined = set(_definitions(ROOT / "recipes" / f"{name}.py"))
    assert not glue & defined, f"{name} defines the adapter's {sorted(glue & defined)}"
    assert "livekit.agents.voice" not in source and "_SpeechHandle" not in source
    diff = list(
        difflib.unified_diff(
            (TEMPLATE / "agent.py").read_text().splitlines(), source.splitlines(), n=0
        )
    )
    changed = [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert len(changed) <= MAX_DIFF_LINES, f"{name}: {len(changed)} lines differ"


MAX_DIFF_LINES = 150
"""The most lines a recipe may differ from agent.py by (docstring included); the
largest, realtime, swaps the whole voice pipeline for a realtime model."""


def _signature(path: Path, function: str) -> tuple:
    """Kind, parameter names and defaults of a top-level function (no annotations)."""
    import ast

    node = next(
        n
        for n in ast.parse(path.read_text()).body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function
    )
    a = node.args
    return (
        type(node).__name__,
        [p.arg for p in a.posonlyargs + a.args],
        [ast.unparse(d) for d in a.defaults],
        [p.arg for p in a.kwonlyargs],
        [d if d is None else ast.unparse(d) for d in a.kw_defaults],
        a.vararg and a.vararg.arg,
        a.kwarg and a.kwarg.arg,
    )


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_is_built_the_way_agent_py_is(name):
    # demo.py, the tests and the benchmarks call agent.new_llm() and
    # agent.build_agent(session, store, caller_id, call_id, model=model) whichever
    # recipe the project was generated with.
    for function in ("new_llm", "build_agent"):
        assert _signature(ROOT / "recipes" / f"{name}.py", function) == _signature(
            TEMPLATE / "agent.py", function
        ), f"{name}: {function} is not called as agent.py's"


@pytest.mark.parametrize("name", RECIPES)
def test_a_recipe_names_no_backend(name):
    # The store opens from MEMORY_URL (memory.open_store); the docstring may say which
    # file to copy, the code never picks a backend.
    source = (ROOT / "recipes" / f"{name}.py").read_text()
    code = source.split('"""', 2)[2]
    assert "MEMORY_DB" not in source
    assert "sqlite" not in code.lower()
    assert "memory.open_store(fail_open=True)" in code
