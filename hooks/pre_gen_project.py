"""Check the answers before anything is generated.

A bad answer stops generation with one `ERROR:` line naming the question, what was
given and what is accepted; cookiecutter then removes the half-made folder.
Answers are read as data (JSON), never pasted into this source.
"""

import json
import re
import sys
from pathlib import Path

# tojson escapes ' as \u0027, so the answers cannot end this raw string early (and
# the formatter must keep its quotes: JSON is full of double quotes).
# fmt: off
ANSWERS = json.loads(r'''{{ cookiecutter | tojson }}''')
KIT_DIR = json.loads(r'''{{ kit_dir | tojson }}''')
# fmt: on

# LiveKit Inference model strings: "provider/model", optionally ":variant".
# https://docs.livekit.io/agents/models/
MODEL_STRING = r"[a-z0-9-]+/[A-Za-z0-9._-]+(:[A-Za-z0-9._-]+)?"

RULES = {
    "project_slug": (
        r"[a-z][a-z0-9]*(-[a-z0-9]+)*",
        "lower-case letters, digits and single dashes, starting with a letter, "
        "at most 50 characters",
    ),
    "agent_name": (
        r"[A-Za-z0-9][A-Za-z0-9_-]*",
        "letters, digits, '-' and '_', at most 50 characters",
    ),
    "llm_model": (MODEL_STRING, "a model string such as 'openai/gpt-4.1-mini'"),
    "stt_model": (MODEL_STRING, "a model string such as 'deepgram/nova-3'"),
    "tts_model": (MODEL_STRING, "a model string such as 'cartesia/sonic-3'"),
    "python_version": (r"3\.(1[1-9])", "3.11 or newer, as '3.X'"),
}
MAX_CHARS = {
    "project_slug": 50,
    "agent_name": 50,
    "llm_model": 100,
    "stt_model": 100,
    "tts_model": 100,
}
# What can be chosen is what the kit holds: a backend is a folder of tests in the
# template's backend_tests/, a recipe is a file in recipes/ ("default" is agent.py).
TEMPLATE_DIR = Path(KIT_DIR) / "{{ '{{cookiecutter.project_slug}}' }}"
CHOICES = {
    "memory_backend": sorted(
        p.name
        for p in (TEMPLATE_DIR / "backend_tests").iterdir()
        if p.is_dir() and p.name[0] not in "_."
    ),
    "recipe": ["default", *sorted(p.stem for p in (Path(KIT_DIR) / "recipes").glob("*.py"))],
}


def fail(message: str) -> None:
    print(f"ERROR: {message}", file=sys.stderr)
    sys.exit(1)


def check_text(name: str) -> None:
    value = ANSWERS.get(name)
    pattern, accepted = RULES[name]
    if (
        not isinstance(value, str)
        or len(value) > MAX_CHARS.get(name, 50)
        or not re.fullmatch(pattern, value)
    ):
        fail(f"{name} = {value!r} is not valid; use {accepted}.")


def check_choice(name: str) -> None:
    value = ANSWERS.get(name)
    if value not in CHOICES[name]:
        fail(f"{name} = {value!r} is not one of {', '.join(CHOICES[name])}.")


def main() -> None:
    if not KIT_DIR:
        fail(
            "the template was loaded without local_extensions.py; "
            "run cookiecutter on the repository itself."
        )
    if not str(ANSWERS.get("project_name", "")).strip():
        fail("project_name is empty; give the project a name.")
    for name in RULES:
        check_text(name)
    for name in CHOICES:
        check_choice(name)


if __name__ == "__main__":
    main()
