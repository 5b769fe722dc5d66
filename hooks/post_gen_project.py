"""Shape the generated project to the answers.

memory/ is the same folder in every project (every backend is a module in it); the
chosen backend's tests and fixtures (backend_tests/<name>/) go into tests/, and one
recipe becomes agent.py, with the chosen agent name and model strings written into
its settings block. Python files are copied without Jinja rendering
(cookiecutter.json `_copy_without_render`), so agent.py stays the same file as in
the kit; its settings are set here instead.
"""

import json
import re
import shutil
import sys
from pathlib import Path

# tojson escapes ' as \u0027, so the answers cannot end this raw string early (and
# the formatter must keep its quotes: JSON is full of double quotes).
# fmt: off
ANSWERS = json.loads(r'''{{ cookiecutter | tojson }}''')
KIT_DIR = Path(json.loads(r'''{{ kit_dir | tojson }}'''))
# fmt: on
PROJECT = Path.cwd()

# agent.py setting -> the answer that sets it
SETTINGS = {
    "AGENT_NAME": "agent_name",
    "LLM_MODEL": "llm_model",
    "STT_MODEL": "stt_model",
    "TTS_MODEL": "tts_model",
}


def fail(message: str) -> None:
    print(f"ERROR: {message}", file=sys.stderr)
    sys.exit(1)


# Backends over a hosted service's HTTP API share backend_tests/_hosted/: the fakes'
# plumbing, the shared tests and fixtures.
HOSTED_BACKENDS = {"supermemory", "mem0", "zep"}


def place_backend_tests(name: str) -> None:
    """backend_tests/<name>/ holds what tests only this backend: its tests, its fake
    service, and store_fixtures.py (how tests get a fresh store); all go into
    tests/."""
    folders = [PROJECT / "backend_tests" / name]
    if name in HOSTED_BACKENDS:
        folders.insert(0, PROJECT / "backend_tests" / "_hosted")
    for source in folders:
        for path in sorted(source.glob("*.py")):
            shutil.move(path, PROJECT / "tests" / path.name)
    shutil.rmtree(PROJECT / "backend_tests")


# agent.py's own behaviour tests (the default agent's, through its Assistant) stay in
# the default project. A recipe is agent.py plus its idea (the kit checks that the
# rest is agent.py's, line for line), so its project carries the recipe's own tests
# instead, with the memory folder's and the store's, which are the same everywhere.
DEFAULT_AGENT_TESTS = [
    "test_agent.py",
    "test_agent_privacy.py",
    "test_capture.py",
    "test_capture_pairing.py",
    "test_extraction.py",
    "test_live.py",
    "test_live_extraction.py",
    "test_tracing.py",
    "test_voice_turns.py",
    "test_wiring.py",
]
# The real entrypoint's tests apply to a recipe that keeps agent.py's entrypoint and
# greeting; the others run their entrypoint in their own tests.
OWN_ENTRYPOINT = {"tool_only", "telephony", "realtime", "call_summary", "resume"}


def place_recipe(name: str) -> None:
    if name == "default":
        return
    shutil.copyfile(KIT_DIR / "recipes" / f"{name}.py", PROJECT / "agent.py")
    tests = PROJECT / "tests"
    shutil.copyfile(
        KIT_DIR / "recipes" / "tests" / f"test_{name}.py", tests / f"test_recipe_{name}.py"
    )
    for test_file in DEFAULT_AGENT_TESTS:
        (tests / test_file).unlink()
    if name in OWN_ENTRYPOINT:
        (tests / "test_entrypoint.py").unlink()


def set_agent_settings() -> None:
    path = PROJECT / "agent.py"
    source = path.read_text()
    for setting, answer in SETTINGS.items():
        line = re.compile(rf'^{setting} = "[^"\n]*"(?P<comment>  #.*)?$', re.MULTILINE)
        if len(line.findall(source)) != 1:
            fail(f"agent.py must assign {setting} exactly once as a string literal.")
        # json.dumps gives a valid Python string literal too; a function replacement
        # keeps re.sub from reading backslashes in it as escapes.
        assignment = f"{setting} = {json.dumps(ANSWERS[answer])}"

        def keep_comment(m: re.Match[str], text: str = assignment) -> str:
            return text + (m["comment"] or "")

        source = line.sub(keep_comment, source)
    path.write_text(source)


def main() -> None:
    place_backend_tests(ANSWERS["memory_backend"])
    place_recipe(ANSWERS["recipe"])
    set_agent_settings()


if __name__ == "__main__":
    main()
