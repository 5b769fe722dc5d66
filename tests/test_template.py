"""The template: every choice renders, bad answers are refused, each project's tests pass."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "{{cookiecutter.project_slug}}"
CHOICES = {
    k: v
    for k, v in json.loads((ROOT / "cookiecutter.json").read_text()).items()
    if isinstance(v, list)
}
DEFAULT_BACKEND, DEFAULT_RECIPE = CHOICES["memory_backend"][0], CHOICES["recipe"][0]


def suite(backend: str, recipe: str) -> str:
    """What a render runs; tests follow the structure. The memory folder is the same in
    every project, so its tests run once, in the default project ("all": the whole
    suite); each other backend runs what touches the store ("store": the contract, its
    own tests, memory_admin.py, the real entrypoint on it); each other recipe runs its
    own tests ("recipe"); every other pair, one call of the recipe through the real
    entrypoint on the backend ("smoke")."""
    if backend == DEFAULT_BACKEND and recipe == DEFAULT_RECIPE:
        return "all"
    if recipe == DEFAULT_RECIPE:
        return "store"
    return "recipe" if backend == DEFAULT_BACKEND else "smoke"


COMBINATIONS = [
    {"memory_backend": backend, "recipe": recipe, "suite": suite(backend, recipe)}
    for backend, recipe in itertools.product(CHOICES["memory_backend"], CHOICES["recipe"])
]


def bake(cookies, **answers):
    return cookies.bake(extra_context=answers, template=str(ROOT))


def run(args: list[str], cwd: Path, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    # The model keys must not leak in: these runs are the offline ones.
    env = {
        k: v for k, v in os.environ.items() if k not in ("LIVEKIT_API_KEY", "LIVEKIT_API_SECRET")
    }
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_default_project_has_the_memory_folder_and_one_agent(cookies):
    result = bake(cookies)
    assert result.exit_code == 0, result.exception
    project = result.project_path
    assert project.name == "memory-agent"
    files = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    assert "agent.py" in files and "memory/__init__.py" in files
    assert "memory/sqlite_store.py" in files and "memory/livekit_adapter.py" in files
    assert not (project / "backend_tests").exists()
    assert "tests/test_sqlite_store.py" in files and "tests/store_fixtures.py" in files
    for name in (
        "pyproject.toml",
        ".env.example",
        "Dockerfile",
        ".dockerignore",
        "README.md",
        "AGENTS.md",
        "demo.py",
    ):
        assert name in files
    # agent.py is the kit's own file, byte for byte, with only the settings set.
    assert (project / "agent.py").read_text() == (TEMPLATE / "agent.py").read_text()


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*.py"))
        if "__pycache__" not in p.parts
    }


@pytest.mark.parametrize("backend", CHOICES["memory_backend"])
def test_the_memory_folder_is_the_same_for_every_backend(cookies, backend):
    result = bake(cookies, memory_backend=backend)
    assert result.exit_code == 0, result.exception
    assert folder_bytes(result.project_path / "memory") == folder_bytes(TEMPLATE / "memory")
    assert not list(result.project_path.glob("*_store.py"))


BACKEND_WORDS = re.compile(r"sqlite|postgres|supermemory|mem0|zep|MEMORY_DB", re.IGNORECASE)


def test_agent_py_and_the_recipes_name_no_backend():
    for path in [TEMPLATE / "agent.py", *sorted((ROOT / "recipes").glob("*.py"))]:
        found = BACKEND_WORDS.findall(path.read_text())
        assert not found, f"{path.name} names a backend: {sorted(set(found))}"


@pytest.mark.parametrize("python_version", CHOICES["python_version"])
def test_no_generated_file_keeps_template_markup(cookies, python_version):
    result = bake(cookies, python_version=python_version)
    assert result.exit_code == 0, result.exception
    for path in result.project_path.rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert "{{ cookiecutter" not in text and "{{cookiecutter" not in text, path
            assert "{%" not in text, path
    pyproject = tomllib.loads((result.project_path / "pyproject.toml").read_text())
    assert pyproject["project"]["requires-python"] == f">={python_version}"
    assert f"python{python_version}-" in (result.project_path / "Dockerfile").read_text()


def test_the_answers_reach_agent_py_settings(cookies):
    result = bake(
        cookies,
        project_name="Front Desk",
        agent_name="front_desk-2",
        llm_model="google/gemini-2.5-flash",
        stt_model="assemblyai/universal-streaming",
        tts_model="rime/arcana:luna",
    )
    assert result.exit_code == 0, result.exception
    agent_py = (result.project_path / "agent.py").read_text()
    assert result.project_path.name == "front-desk"
    assert 'AGENT_NAME = "front_desk-2"' in agent_py
    assert 'LLM_MODEL = "google/gemini-2.5-flash"' in agent_py
    assert 'STT_MODEL = "assemblyai/universal-streaming"' in agent_py
    assert 'TTS_MODEL = "rime/arcana:luna"' in agent_py
    compile(agent_py, "agent.py", "exec")


@pytest.mark.parametrize(
    ("answers", "question"),
    [
        ({"project_slug": "My Agent"}, "project_slug"),
        ({"project_slug": "../escape"}, "project_slug"),
        ({"project_slug": "a" * 51}, "project_slug"),
        ({"project_slug": "-agent"}, "project_slug"),
        ({"agent_name": "bad name"}, "agent_name"),
        ({"agent_name": 'x"; import os; os.system("id") #'}, "agent_name"),
        ({"llm_model": "gpt-4o"}, "llm_model"),
        ({"llm_model": 'openai/gpt"\nimport os'}, "llm_model"),
        ({"stt_model": ""}, "stt_model"),
        ({"tts_model": "cartesia/sonic-3 --rm"}, "tts_model"),
        ({"project_name": "   "}, "project_name"),
    ],
)
def test_a_bad_answer_stops_generation_with_one_clear_error(
    cookies, capfd, tmp_path, answers, question
):
    result = bake(cookies, **answers)
    assert result.exit_code != 0
    err = capfd.readouterr().err
    assert re.search(rf"^ERROR: {question} ", err, re.MULTILINE), err
    # nothing half-written is left behind (pytest-cookies bakes into tmp_path/cookies)
    assert list((tmp_path / "cookies").glob("bake*/*")) == []


@pytest.mark.parametrize(
    ("question", "answer"),
    [("python_version", "3.9"), ("memory_backend", "redis"), ("recipe", "nope")],
)
def test_an_answer_outside_a_choice_list_is_refused_by_name(cookies, tmp_path, question, answer):
    result = bake(cookies, **{question: answer})
    assert result.exit_code != 0
    assert question in str(result.exception) and answer in str(result.exception)
    assert list((tmp_path / "cookies").glob("bake*/*")) == []


HOSTILE = [
    "Quote \" and ' and \"\"\" and '''",
    "Back\\slash \\n \\u0041 and a tab\t!",
    "${HOME} $(id) `id` <script>alert(1)</script> ; rm -rf /",
    "Ünïcödé — ☎ voice agent",
]


# Jinja markup is left out on purpose: cookiecutter renders answers as templates (its
# documented feature), so "{{ 7 * 7 }}" becomes "49" before any hook sees it.
@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_free_text_is_kept_as_data(cookies, text):
    result = bake(cookies, project_name="Safe Name", description=text)
    assert result.exit_code == 0, result.exception
    pyproject = tomllib.loads((result.project_path / "pyproject.toml").read_text())
    assert pyproject["project"]["description"] == text
    assert text in (result.project_path / "README.md").read_text()


@pytest.mark.parametrize("backend", CHOICES["memory_backend"])
def test_the_generated_dependencies_are_the_ones_this_environment_runs(cookies, backend):
    result = bake(cookies, memory_backend=backend)
    pyproject = tomllib.loads((result.project_path / "pyproject.toml").read_text())
    wanted = pyproject["project"]["dependencies"] + pyproject["dependency-groups"]["dev"]
    kit = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]["dev"]
    for line in wanted:
        assert line in kit, f"{line} is not in the kit's dev group"
        req = Requirement(line)
        installed = metadata.version(req.name)
        assert req.specifier.contains(installed, prereleases=True), (
            f"{req} but {installed} is installed"
        )


def selected(project: Path, suite: str) -> list[str]:
    """The pytest arguments that run ``suite`` (see ``suite``) in a rendered project.
    The real entrypoint's other tests (SIP numbers, dispatch metadata, bad ids) test
    agent.py and the adapter, the same on every backend: they run in "all", and other
    renders run its one smoke call on their store."""
    tests = project / "tests"
    if suite == "all":
        return []
    if suite == "smoke":
        return ["-m", "smoke"]
    if suite == "recipe":
        kinds = ["test_recipe_*.py", "test_readme.py"]
    else:
        kinds = ["test_store_contract.py", "test_*_store.py", "test_sqlite_erase.py"]
        kinds.append("test_memory_admin.py")
    files = {str(p.relative_to(project)) for kind in kinds for p in tests.glob(kind)}
    if (tests / "test_entrypoint.py").is_file():
        files.add(f"tests/test_entrypoint.py::{ENTRYPOINT_SMOKE}")
    return sorted(files)


ENTRYPOINT_SMOKE = "test_a_real_call_saves_its_exchanges_and_summary_and_the_next_call_hears_them"


@pytest.mark.parametrize(
    "answers", COMBINATIONS, ids=lambda a: f"{a['memory_backend']}-{a['recipe']}-{a['suite']}"
)
def test_every_choice_renders_and_its_own_tests_pass(cookies, request, answers):
    suite = answers.pop("suite")
    if answers["memory_backend"] == "postgres":
        request.getfixturevalue("postgres_server")  # one answers, or is started
    result = bake(cookies, **answers)
    assert result.exit_code == 0, result.exception
    args = selected(result.project_path, suite)
    assert suite == "all" or args, f"nothing to run for {suite}"
    tests = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=result.project_path,
    )
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    assert re.search(r"\d+ passed", tests.stdout)
    if suite != "smoke":  # (a smoke pair holds no file the others do not)
        lint_and_type_check(result.project_path, "generated project")


# One mypy cache per test worker: reused across renders, never written by two at once.
MYPY_CACHE = Path(os.environ.get("TMPDIR", "/tmp")) / (
    f"kit-mypy-cache-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
)


def lint_and_type_check(where: Path, what: str, paths: tuple[str, ...] = (".",)) -> None:
    """ruff (lint and format) and mypy, with the settings of the pyproject in ``where``."""
    tools = Path(sys.executable).parent
    for command in (
        [str(tools / "ruff"), "check", "--no-cache", *paths],
        [str(tools / "ruff"), "format", "--check", "--no-cache", *paths],
        [str(tools / "mypy"), "--cache-dir", str(MYPY_CACHE), *paths],
    ):
        done = run(command, cwd=where)
        assert done.returncode == 0, f"{what}: {' '.join(command[:2])}\n{done.stdout[-3000:]}"


def test_the_kit_itself_passes_ruff_and_mypy():
    lint_and_type_check(ROOT, "kit", ("hooks", "tests", "benchmarks", "local_extensions.py"))


@pytest.mark.parametrize("recipe", CHOICES["recipe"])
def test_the_demo_shows_call_two_receiving_what_call_one_saved(cookies, recipe):
    result = bake(cookies, recipe=recipe)
    demo = run([sys.executable, "demo.py"], cwd=result.project_path, timeout=120)
    assert demo.returncode == 0, demo.stderr[-3000:]
    saved, _, block = demo.stdout.partition("== the memory")
    assert '- home city: "Lisbon"' in saved  # as the model reads it (format_block, quoted)
    assert "vegetarian" in saved
    assert "call 2's model" in block and 'name: "Maria"' in block


def test_ci_runs_the_readme_commands_exactly():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## The two commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert len(commands) == 2
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for command in commands:
        assert command in ci, command


MEMORY = TEMPLATE / "memory"
# The modules below the store interface, which a store may import (README, "A map").
STORE_MAY_IMPORT = {
    "errors",
    "limits",
    "records",
    "facts",
    "text",
    "words",
    "dates",
    "places",
    "callers",
    "store",
    "health",
    "writer",
}
BACKEND_PREFIXES = ("sqlite_", "postgres_", "hosted", "outbox", "supermemory_", "mem0_", "zep_")


def memory_imports(path: Path) -> set[str]:
    """What a module of memory/ imports: "livekit..." for LiveKit, a bare module name
    for one of memory/'s own (relative imports)."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # from .x import y, or from . import x
                base = node.module
                found |= {base.split(".")[0]} if base else {a.name for a in node.names}
            elif node.module:
                found.add(node.module)
    return found


def test_only_the_adapter_imports_livekit_and_stores_import_only_the_types():
    for path in sorted(MEMORY.glob("*.py")):
        imports = memory_imports(path)
        livekit = {i for i in imports if i == "livekit" or i.startswith("livekit.")}
        if path.stem == "livekit_adapter":
            assert livekit, "the adapter is where livekit is imported"
        else:
            assert not livekit, f"{path.name} imports {sorted(livekit)}"
        if path.stem.startswith(BACKEND_PREFIXES):
            own = {i for i in imports if (MEMORY / f"{i}.py").is_file()}
            backend = {i for i in own if i.startswith(BACKEND_PREFIXES)}
            assert own - backend <= STORE_MAY_IMPORT, (
                f"{path.name} imports {sorted(own - backend - STORE_MAY_IMPORT)}"
            )


def test_every_module_of_the_memory_folder_is_on_both_maps():
    # A module split off (sqlite_index, sqlite_erase, postgres_migrations) was once
    # missing from the folder's own map while the README's had it.
    import ast

    folder_map = ast.get_docstring(ast.parse((MEMORY / "__init__.py").read_text())) or ""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("memory/__init__.py ")
    kit_map = readme[start : readme.index("```", start)]
    for path in sorted(MEMORY.glob("*.py")):
        if path.stem == "__init__":
            continue
        assert f"``{path.stem}``" in folder_map, f"memory/__init__.py's map: {path.stem}"
        assert re.search(rf"\b{path.stem}\b", kit_map), f"README's map: {path.stem}"


MAX_MODULE_LINES = 520
MAX_CLASS_LINES = 275
"""Issue 20's "no module over about 500 lines, no class over about 250"."""


def test_every_module_of_the_memory_folder_reads_in_one_sitting():
    import ast

    for path in sorted(MEMORY.glob("*.py")):
        source = path.read_text()
        assert source.count("\n") <= MAX_MODULE_LINES, f"{path.name} is too long"
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                assert size <= MAX_CLASS_LINES, f"{path.name}: {node.name} is {size} lines"
