"""The memory folder on the livekit-agents releases it supports.

The newest (the release the generated project pins) runs the memory folder's tests in
every render of tests/test_template.py. The oldest minor release with every API the
folder uses runs them here, in an environment of its own: found by running those
tests on each minor (1.3 lacks `LLMStream.collect`; 1.4 merges a reply's instructions
into the system prompt, like 1.5.0, which the adapter handles), so 1.5.0, the first
release of 1.5, is the floor `SUPPORTED_LIVEKIT_AGENTS` states."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ADAPTER = ROOT / "{{cookiecutter.project_slug}}" / "memory" / "livekit_adapter.py"
OLDEST = "1.5.0"
# The memory folder's own tests: none imports agent.py.
MEMORY_TESTS = [
    "tests/test_adapter.py",
    "tests/test_memory.py",
    "tests/test_privacy.py",
    "tests/test_store_contract.py",
]


def test_the_stated_range_starts_at_the_release_tested_here():
    stated = re.search(r'SUPPORTED_LIVEKIT_AGENTS = "(.+?)"', ADAPTER.read_text())
    assert stated is not None
    minor = ".".join(OLDEST.split(".")[:2])
    assert stated[1] == f">={minor},<2"


def test_the_memory_folder_passes_its_tests_on_the_oldest_supported_livekit_agents(
    cookies, tmp_path
):
    uv = shutil.which("uv")
    assert uv, "uv is needed to make the environment of the oldest release"
    result = cookies.bake(template=str(ROOT))
    assert result.exit_code == 0, result.exception
    project = result.project_path
    for test in MEMORY_TESTS:
        assert "import agent" not in (project / test).read_text(), test
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    memory_needs = [
        line
        for line in pyproject["project"]["dependencies"]
        if not line.startswith(("livekit-agents", "livekit-plugins"))
    ]
    venv = tmp_path / "venv"
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIVEKIT_", "VIRTUAL_ENV"))}

    def run(*args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    made = run(uv, "venv", "--quiet", "--python", sys.executable, venv)
    assert made.returncode == 0, made.stderr[-2000:]
    installed = run(
        uv,
        "pip",
        "install",
        "--quiet",
        "--python",
        python,
        f"livekit-agents=={OLDEST}",
        # livekit-agents 1.5 imports httpx, which the openai SDK stopped bringing at 3
        "openai>=2,<3",
        *memory_needs,
        *pyproject["dependency-groups"]["dev"],
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    version = run(python, "-c", "import livekit.agents as a; print(a.__version__)")
    assert version.stdout.strip() == OLDEST, version.stderr[-2000:]
    tests = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *MEMORY_TESTS)
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    assert re.search(r"\d+ passed", tests.stdout)
