"""docs/add-memory-to-your-agent.md, followed literally on a project shaped like LiveKit's
agent-starter-python (tests/fixtures/starter/, the kit's own small agent of that shape).

The page's `cp` commands, its diffs, its ignore lines, its test and its memory_admin.py
commands are what runs here, read from the page itself, so the page cannot drift from
what works: a diff that no longer applies, or code that no longer recalls, fails here.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "{{cookiecutter.project_slug}}"
PAGE = ROOT / "docs" / "add-memory-to-your-agent.md"
FIXTURE = ROOT / "tests" / "fixtures" / "starter"
TOOLS = Path(sys.executable).parent
CALLER = "maria@example.com"  # the caller of the page's memory_admin.py commands
# One mypy cache per test worker, as tests/test_template.py keeps it.
MYPY_CACHE = Path(os.environ.get("TMPDIR", "/tmp")) / (
    f"kit-mypy-cache-existing-agent-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
)


# -- the page -------------------------------------------------------------------------


def blocks(info: str) -> list[str]:
    """The page's fenced code blocks with this info string, in order."""
    pattern = rf"^```{re.escape(info)}\n(.*?)^```$"
    return re.findall(pattern, PAGE.read_text(encoding="utf-8"), re.M | re.S)


def commands(start: str) -> list[str]:
    """The lines of the page's bash blocks that start with ``start``."""
    lines = (line.strip() for block in blocks("bash") for line in block.splitlines())
    return [line for line in lines if line.startswith(start)]


def uv_run(command: str) -> list[str]:
    """A page command run the way `uv run` runs it: with this environment's Python."""
    words = shlex.split(command)
    assert words[:2] == ["uv", "run"], command
    if words[2] == "python":
        return [sys.executable, *words[3:]]
    return [sys.executable, "-m", *words[2:]]


HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def apply_diff(project: Path, diff: str) -> list[str]:
    """Apply a unified diff as `patch -p1` would, but strictly: each hunk at the line its
    header names, with its context and removed lines exactly as in the file (no offset,
    no fuzz), so the diff also applies with `patch` or `git apply`. Returns the files."""
    files: list[tuple[str, list[tuple[int, int, int, list[str]]]]] = []
    lines = diff.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            name = lines[i + 1][4:].split("\t")[0]
            assert name.startswith("b/"), f"not a -p1 path: {name}"
            files.append((name[2:], []))
            i += 2
            continue
        hunk = HUNK.match(line)
        assert hunk and files, f"not a line of a unified diff: {line!r}"
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith(("@@", "--- ")):
            # a blank context line can lose its one space in a Markdown editor
            body.append(lines[i] or " ")
            i += 1
        start, old, new = int(hunk[1]), int(hunk[2] or 1), int(hunk[4] or 1)
        files[-1][1].append((start, old, new, [b for b in body if not b.startswith("\\")]))
    for name, hunks in files:
        text = (project / name).read_text().splitlines()
        out: list[str] = []
        at = 0
        for start, old, new, body in hunks:
            assert all(b[0] in " -+" for b in body), f"{name}: a hunk holds a stray line"
            was = [b[1:] for b in body if b[0] in " -"]
            becomes = [b[1:] for b in body if b[0] in " +"]
            assert (len(was), len(becomes)) == (old, new), f"{name}: hunk {start} miscounted"
            begin = start - 1 if old else start
            assert text[begin : begin + old] == was, f"{name}: hunk at line {start} does not match"
            out += text[at:begin] + becomes
            at = begin + old
        (project / name).write_text("\n".join(out + text[at:]) + "\n")
    return [name for name, _ in files]


# -- the project, with the page's steps done ------------------------------------------


def run(
    args: list[str], project: Path, *, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """A command as the project's owner runs it, in ``cwd`` (default: the project's
    root): no LiveKit keys or memory settings from this machine; ``src/`` importable, as
    the editable install `uv sync` makes of the starter's setuptools layout; and a
    stand-in for the turn-detector plugin, which the kit's environment does not carry
    and no offline test constructs (``stubs`` beside the project)."""
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("LIVEKIT_", "MEMORY_", "PYTEST"))
    }
    clean["PYTHONPATH"] = os.pathsep.join([str(project / "src"), str(stubs(project))])
    return subprocess.run(
        args,
        cwd=cwd or project,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=180,
    )


def stubs(project: Path) -> Path:
    return project.parent / "stubs"


def stand_in_turn_detector(where: Path) -> None:
    package = where / "livekit" / "plugins" / "turn_detector"  # livekit is a namespace
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "multilingual.py").write_text(
        "from typing import Any\n\n"
        "# Only the entrypoint builds one, and no offline test runs the entrypoint.\n"
        "MultilingualModel: Any = None\n"
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The starter-shaped fixture with every step of the page done, in the page's order:
    the `cp` commands (memory/, the scripted model, memory_admin.py), the diffs
    (pyproject.toml, src/agent.py), the ignore lines, and the page's test saved where
    the page says."""
    where = tmp_path_factory.mktemp("existing-agent")
    project = where / "garden-helper"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("__pycache__", "data"))
    stand_in_turn_detector(stubs(project))
    (project / "tests").mkdir(exist_ok=True)
    bash = shutil.which("bash")
    assert bash, "the page's commands are bash"
    copies = commands("cp ")
    assert len(copies) == 3, copies  # memory/, scripted_llm.py, memory_admin.py
    for command in copies:
        done = subprocess.run(
            [bash, "-ec", command], cwd=project, env={**os.environ, "KIT": str(ROOT)}
        )
        assert done.returncode == 0, command
    patched = [name for diff in blocks("diff") for name in apply_diff(project, diff)]
    assert patched == ["pyproject.toml", "src/agent.py"]
    for info, name in (("gitignore", ".gitignore"), ("dockerignore", ".dockerignore")):
        (added,) = blocks(info)
        with (project / name).open("a") as file:
            file.write(added)
    saved_as = re.search(r"Save this as\s+`([^`]+)`", PAGE.read_text())
    assert saved_as, "the page says where its test goes"
    (test,) = [block for block in blocks("python") if "def test_" in block]
    (project / saved_as[1]).write_text(test)
    return project


# -- what is checked ------------------------------------------------------------------


def test_the_page_s_own_test_passes_in_the_starter_shaped_project(project: Path) -> None:
    """The page tells the reader to run its test; it must pass as given."""
    (command,) = commands("uv run pytest")
    done = run([*uv_run(command), "-p", "no:cacheprovider"], project)
    tests = len(
        re.findall(
            r"^async def test_|^def test_",
            (project / "tests").joinpath("test_memory.py").read_text(),
            re.M,
        )
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert f"{tests} passed" in done.stdout, done.stdout[-2000:]


TWO_CALLS = """
import asyncio, json, sys, tempfile
sys.path.insert(0, "tests")
from livekit.agents import AgentSession, inference
from scripted_llm import ScriptedLLM, memory_blocks
import agent, memory
from memory.livekit_adapter import start_call_memory

def messages(chat_ctx):
    return [i for i in chat_ctx.items if i.type == "message"]

async def main():
    model = ScriptedLLM(["Lisbon is lovely in spring.", "You moved to Lisbon.", "Hello!"])
    inference.LLM = lambda **_: model  # the starter's Assistant builds its own model
    store = memory.open_store("sqlite:///" + tempfile.mkdtemp() + "/memory.db")
    histories = []
    for call_id, said in [
        ("call-1", "I moved to Lisbon last spring."),
        ("call-2", "Where did I move to?"),
    ]:
        async with AgentSession() as session:
            call = start_call_memory(session, store, "maria@example.com", call_id)
            call.recall_budget = 30.0  # what is checked is what recall found, not speed
            await session.start(agent.Assistant(call))
            await session.run(user_input=said)
            histories.append(memory_blocks(session.history))
        await call.aclose()
    saved = await store.exchanges("maria@example.com")
    await store.close()
    async with AgentSession() as session:  # no memory, as the starter's tests build it
        await session.start(agent.Assistant())
        await session.run(user_input="Hello")
        reply = session.history.items[-1].text_content
    print(json.dumps({
        "saved": [[e.call_id, e.user_text, e.assistant_text] for e in saved],
        "blocks": [memory_blocks(r) for r in model.replies],
        "last_two": [
            [[m.role, bool(m.extra.get("memory_block"))] for m in messages(r)[-2:]]
            for r in model.replies
        ],
        "in_history": histories,
        "nothing_known": memory.NOTHING_KNOWN,
        "reply_without_memory": reply,
    }))

asyncio.run(main())
"""


def test_the_starter_shaped_agent_recalls_and_captures_through_a_real_session(
    project: Path,
) -> None:
    """Two calls from one caller through LiveKit's AgentSession with typed turns, a
    scripted model in place of the starter's `inference.LLM`: call 1's words are stored,
    call 2's request carries them in one block just before the caller's words, the
    block never enters the session's history, and `Assistant()` with no memory answers."""
    done = run([sys.executable, "-c", TWO_CALLS], project)
    assert done.returncode == 0, done.stderr[-4000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["saved"] == [
        ["call-1", "I moved to Lisbon last spring.", "Lisbon is lovely in spring."],
        ["call-2", "Where did I move to?", "You moved to Lisbon."],
    ]
    first, second, without = seen["blocks"]
    (nothing,) = first
    assert nothing.startswith(seen["nothing_known"])  # a new caller: said in one sentence
    (block,) = second
    assert "I moved to Lisbon last spring." in block
    just_before = [["system", True], ["user", False]]  # the block, then the caller's words
    assert seen["last_two"][:2] == [just_before, just_before]
    assert seen["in_history"] == [[], []]
    assert without == [] and seen["reply_without_memory"] == "Hello!"


def test_the_copied_folder_passes_ruff_at_its_defaults_and_the_project_at_its_own(
    project: Path,
) -> None:
    """The folder is copied byte for byte, so ruff at its defaults (`--isolated`: 88
    columns, default rules) must pass on it, and the starter's own CI (`ruff check .`,
    `ruff format --check .` with its rules) on the whole project after the page's steps,
    memory_admin.py (which the page copies too) included."""
    ruff = str(TOOLS / "ruff")
    assert (project / "src" / "memory_admin.py").is_file()
    for args in (
        ["check", "--isolated", "src/memory", "src/memory_admin.py"],
        ["format", "--isolated", "--check", "src/memory", "src/memory_admin.py"],
        ["check", "."],
        ["format", "--check", "."],
    ):
        done = run([ruff, *args, "--no-cache"], project)
        assert done.returncode == 0, f"ruff {' '.join(args)}\n{done.stdout[-3000:]}"


def python_without(where: Path, prefix: str) -> Path:
    """A Python whose site-packages hold what this environment's do, except the
    distributions whose names start with ``prefix``: a user's environment without that
    driver (a venv of links to this one's packages, made in a second)."""
    home = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    python = home / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    into = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        if not entry.name.lower().startswith(prefix):
            (Path(into) / entry.name).symlink_to(entry)
    return python


def test_the_copied_folder_passes_mypy_at_its_defaults_with_and_without_psycopg(
    project: Path, tmp_path: Path
) -> None:
    """mypy with no configuration (`--config-file=`) on src/memory, where the PostgreSQL
    driver is installed (this environment) and where it is not (most users): the
    folder's psycopg imports must type-check either way."""
    assert metadata.version("psycopg")  # installed here, so the first run has it
    for python in (Path(sys.executable), python_without(tmp_path, "psycopg")):
        done = run(
            [
                str(TOOLS / "mypy"),
                "--config-file=",
                "--cache-dir",
                str(MYPY_CACHE),
                "--python-executable",
                str(python),
                "src/memory",
            ],
            project,
        )
        assert done.returncode == 0, f"mypy with {python}\n{done.stdout[-3000:]}"


def test_the_page_s_lines_in_agent_py_type_check_against_livekit_and_memory(
    project: Path,
) -> None:
    """mypy on the patched src/agent.py: the calls the page adds (wait_for_caller,
    start_call_memory, the shutdown callback, RoomOptions' participant_identity) match
    livekit-agents' and memory's signatures. The one error allowed is the starter's own:
    its `session = AgentSession(...)` leaves AgentSession's type parameter to infer."""
    done = run(
        [str(TOOLS / "mypy"), "--config-file=", "--cache-dir", str(MYPY_CACHE), "src/agent.py"],
        project,
        MYPYPATH=os.pathsep.join([str(project / "src"), str(stubs(project))]),
    )
    said = done.stdout.splitlines()
    assert said and said[-1].startswith(("Success:", "Found 1 error")), done.stdout + done.stderr
    errors = [line for line in said if ": error:" in line]
    starters = [e for e in errors if '"session"' in e and e.endswith("[var-annotated]")]
    assert errors == starters, done.stdout[-3000:]


PREWARM = """
import asyncio, json, types
import agent, memory
from memory import places

proc = types.SimpleNamespace(userdata={})
agent.prewarm(proc)  # as LiveKit runs it in each worker process
store = proc.userdata["memory"]

async def main():
    await store.remember("maria@example.com", memory.Fact.of("home city", "Lisbon"))
    await store.close()

asyncio.run(main())
print(json.dumps(places.default_url()))
"""


def docker_ignores(dockerignore: str, path: str) -> bool:
    """Whether Docker leaves ``path`` (relative, with /) out of the build context: each
    line is cleaned as Docker cleans it (no leading or trailing /) and matched against
    the path and each folder above it, * and ? within one folder and ** across them;
    the last line that matches wins, ! excepting."""
    ignored = False
    for line in dockerignore.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = posixpath.normpath(line.lstrip("!").strip().lstrip("/"))
        regex = "".join(
            {"**": ".*", "*": "[^/]*", "?": "[^/]"}.get(part, re.escape(part))
            for part in re.split(r"(\*\*|\*|\?)", pattern)
        )
        parts = path.split("/")
        if any(re.fullmatch(regex, "/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            ignored = not negated
    return ignored


def test_the_memory_file_lands_in_data_which_git_and_docker_ignore(
    project: Path, tmp_path: Path
) -> None:
    """With MEMORY_URL unset, the page's prewarm opens the SQLite file in data/ at the
    project's root, whatever the working directory, and writes nothing else; the page's
    ignore lines keep every file there out of git and out of the image, while the
    memory code itself stays in both."""
    before = {p for p in project.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    done = run([sys.executable, "-c", PREWARM], project, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    memory_file = project / "data" / "memory.db"
    assert json.loads(done.stdout.splitlines()[-1]) == f"sqlite:///{memory_file.as_posix()}"
    assert memory_file.is_file()
    written = {
        p for p in project.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    } - before
    assert written and all(p.parent == project / "data" for p in written), written
    dockerignore = (project / ".dockerignore").read_text()
    kept = "src/memory/call.py"
    for path in [p.relative_to(project).as_posix() for p in written]:
        assert docker_ignores(dockerignore, path), path
    assert not docker_ignores(dockerignore, kept)
    git = shutil.which("git")
    if git is None:
        return  # the .dockerignore match above still ran
    subprocess.run([git, "init", "-q", str(project)], check=True)
    for path in [p.relative_to(project).as_posix() for p in written]:
        ignored = subprocess.run([git, "check-ignore", "-q", path], cwd=project)
        assert ignored.returncode == 0, f"git would commit {path}"
    assert subprocess.run([git, "check-ignore", "-q", kept], cwd=project).returncode == 1


SEED = """
import asyncio, sys
import memory

async def main():
    store = memory.open_store(sys.argv[1])
    await store.remember("maria@example.com", memory.Fact.of("home city", "Porto"))
    await store.close()

asyncio.run(main())
"""


def test_memory_admin_shows_and_forgets_a_caller_from_the_project_root(project: Path) -> None:
    """The page's memory_admin.py commands, in src/ and run from the project's root,
    open the store the project's .env.local names (where the starter keeps it, not
    beside the script), show the caller's memory and forget it."""
    store_url = "sqlite:///data/admin.db"  # relative to the project's root
    seeded = run([sys.executable, "-c", SEED, store_url], project)
    assert seeded.returncode == 0, seeded.stderr[-3000:]
    (show,) = [c for c in commands("uv run python src/memory_admin.py") if " show " in c]
    (forget,) = [c for c in commands("uv run python src/memory_admin.py") if " forget " in c]
    assert CALLER in show and CALLER in forget
    (project / ".env.local").write_text(f"MEMORY_URL={store_url}\n")
    try:
        shown = run(uv_run(show), project)
        assert shown.returncode == 0, shown.stderr[-3000:]
        assert 'home city: "Porto"' in shown.stdout, shown.stdout
        forgot = run(uv_run(forget), project)
        assert forgot.returncode == 0 and f"forgot {CALLER}" in forgot.stdout, forgot.stderr
        again = run(uv_run(show), project)
        # nothing stored: show says the caller was forgotten, and fails (exit 3)
        assert again.returncode == 3 and "Porto" not in again.stdout, again.stdout
        assert f"nothing is stored for {CALLER}: forgotten" in again.stderr, again.stderr
    finally:
        (project / ".env.local").unlink()


def _limit(name: str) -> float:
    found = re.search(
        rf"^{name} = ([\d.]+)$", (TEMPLATE / "memory" / "limits.py").read_text(), re.M
    )
    assert found, name
    return float(found[1])


def test_the_page_gives_the_folder_s_dependencies_python_floor_livekit_range_and_limits(
    project: Path,
) -> None:
    """What the page states is what the folder needs: the template's dependency lines
    for memory (the three every backend needs, added by the diff; the backend drivers,
    quoted), the template's lowest Python, the adapter's livekit-agents range (the
    starter's `~=1.5` accepts the same releases), each line satisfied by the release
    these tests ran on, and every limit quoted with its value in memory/limits.py."""
    page = PAGE.read_text()
    template = (TEMPLATE / "pyproject.toml").read_text()
    listed = template.split("dependencies = [", 1)[1].split("\n]", 1)[0]
    needs = [
        line
        for line in re.findall(r'^\s*"([^"]+)",', listed, re.M)
        if not line.startswith(("livekit-", "python-dotenv"))
    ]
    drivers = [n for n in needs if Requirement(n).name in ("psycopg", "httpx2")]
    every_backend = [n for n in needs if n not in drivers]
    assert len(drivers) == 2 and len(every_backend) == 3, needs
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    assert set(every_backend) <= set(pyproject["dependencies"])  # the diff adds them
    for driver in drivers:
        assert f'`"{driver}"`' in page, driver
    lowest = json.loads((ROOT / "cookiecutter.json").read_text())["python_version"][0]
    assert pyproject["requires-python"] == f">={lowest}"
    assert f"**Python {lowest} or newer**" in page
    floor = page.split(f"**Python {lowest} or newer**", 1)[1].split("\n- ", 1)[0]
    code = "\n".join(p.read_text() for p in (TEMPLATE / "memory").glob("*.py"))
    added = re.findall(r"`(\w+)\.(\w+)`", floor)  # what Python 3.11 added, used in memory/
    assert added, floor
    for module, name in added:
        assert re.search(rf"\b{module}\.{name}\b|from {module} import .*\b{name}\b", code), name
    for line in pyproject["dependencies"]:
        wanted = Requirement(line)
        assert wanted.specifier.contains(metadata.version(wanted.name), prereleases=True), line
    adapter = (TEMPLATE / "memory" / "livekit_adapter.py").read_text()
    stated = re.search(r'^SUPPORTED_LIVEKIT_AGENTS = "(.+?)"$', adapter, re.M)
    assert stated and f"`{stated[1]}`" in page
    (starter,) = [Requirement(d) for d in pyproject["dependencies"] if d.startswith("livekit-a")]
    for release in ("1.4.9", "1.5.0", "1.8.9", "1.99.0", "2.0.0"):
        assert starter.specifier.contains(release) == SpecifierSet(stated[1]).contains(release)
    quoted = re.findall(r"`([A-Z_]+)` = ([\d.]+)", page)
    assert len(quoted) >= 2, quoted
    for name, value in quoted:
        assert float(value) == _limit(name), name
