"""Shape the generated project to the answers.

Leaves exactly one backend (memory_backends/<name>/ placed next to memory.py and in
tests/) and one recipe (as agent.py), and writes
the chosen agent name and model strings into agent.py's settings block. Python
files are copied without Jinja rendering (cookiecutter.json `_copy_without_render`),
so agent.py stays the same file as in the kit; its settings are set here instead.
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


# Backends over a hosted service's HTTP API share memory_backends/_hosted/: hosted.py
# (HTTP client, the store) and outbox.py go next to memory.py, the rest (the fakes'
# plumbing, the shared tests and fixtures) into tests/.
HOSTED_BACKENDS = {"supermemory", "mem0", "zep"}


def place_backend(name: str) -> None:
    """memory_backends/<name>/ holds the backend: <name>_store.py goes next to
    memory.py; its tests and store_fixtures.py (how tests get a fresh store) go
    into tests/."""
    folders = [PROJECT / "memory_backends" / name]
    if name in HOSTED_BACKENDS:
        folders.insert(0, PROJECT / "memory_backends" / "_hosted")
    for source in folders:
        for path in sorted(source.glob("*.py")):
            if path.name in (f"{name}_store.py", "hosted.py", "outbox.py"):
                shutil.move(path, PROJECT / path.name)
            else:
                shutil.move(path, PROJECT / "tests" / path.name)
    shutil.rmtree(PROJECT / "memory_backends")


# Tests of the default agent that a recipe does not pass by design (its docstring
# says what it changes); the recipe's own tests (recipes/tests/) take their place,
# its own run through the real entrypoint included.
DEFAULT_TESTS_NOT_FOR = {
    # no block in each request
    "tool_only": [
        "test_agent.py",
        "test_agent_privacy.py",
        "test_tracing.py",
        "test_voice_turns.py",
        "test_entrypoint.py",
        "test_wiring.py",
    ],
    # nothing is captured before the caller consents; it waits for a SIP caller
    "telephony": [
        "test_agent.py",
        "test_agent_privacy.py",
        "test_tracing.py",
        "test_voice_turns.py",
        "test_capture.py",
        "test_capture_pairing.py",
        "test_entrypoint.py",
        "test_wiring.py",
    ],
    # realtime models never call llm_node: no block in each request
    "realtime": [
        "test_agent.py",
        "test_agent_privacy.py",
        "test_tracing.py",
        "test_voice_turns.py",
        "test_entrypoint.py",
        "test_wiring.py",
    ],
    # the model writes the summary at the end of the call
    "call_summary": ["test_entrypoint.py"],
    # the call id is the room's, so a second worker can continue the call
    "resume": ["test_entrypoint.py"],
}
# Fact extraction when a call ends is agent.py's (Assistant.ask_model); a recipe keeps
# to the facts its remember tool saves.
DEFAULT_AGENT_ONLY = ["test_extraction.py", "test_live_extraction.py"]


def place_recipe(name: str) -> None:
    if name == "default":
        return
    shutil.copyfile(KIT_DIR / "recipes" / f"{name}.py", PROJECT / "agent.py")
    tests = PROJECT / "tests"
    shutil.copyfile(
        KIT_DIR / "recipes" / "tests" / f"test_{name}.py", tests / f"test_recipe_{name}.py"
    )
    for test_file in [*DEFAULT_TESTS_NOT_FOR.get(name, []), *DEFAULT_AGENT_ONLY]:
        (tests / test_file).unlink()


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
    place_backend(ANSWERS["memory_backend"])
    place_recipe(ANSWERS["recipe"])
    set_agent_settings()


if __name__ == "__main__":
    main()
