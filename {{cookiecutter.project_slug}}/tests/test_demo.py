"""`uv run demo.py` tells the whole truth: the stand-in model's fixed lines are
labelled as scripted, facts are printed as the model reads them, and the call
summary reads cleanly."""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
import sys
from pathlib import Path

import demo
import memory


async def test_the_demo_labels_scripted_replies_and_prints_what_the_model_reads(
    store_url, capsys, monkeypatch
):
    monkeypatch.delenv("LIVEKIT_API_KEY", raising=False)  # the scripted stand-in
    await demo.main(store_url)
    out = capsys.readouterr().out
    replies = [line.strip() for line in out.splitlines() if line.startswith("  agent")]
    assert replies and all(line.startswith("agent (scripted): ") for line in replies)
    assert "agent (scripted): Welcome back, Maria!" in replies
    # facts as format_block renders them for the model, never the stored kind
    store = memory.open_store(store_url)
    profile = await store.profile(demo.CALLER)
    await store.close()
    block = memory.format_block(memory.Recall(facts=profile.facts))
    facts = [line for line in block.splitlines() if line.startswith("- ")]
    assert any(line.startswith('- home city: "Lisbon"') for line in facts)
    saved = out.split("== call 2")[0]
    assert all(f"  {line}" in saved.splitlines() for line in facts)
    assert "home_city" not in out
    # the summary joins the caller's sentences without ".;"
    assert ".;" not in out


def run_demo(url: str) -> subprocess.CompletedProcess[str]:
    """``uv run demo.py --url URL`` as a new user runs it."""
    return subprocess.run(
        [sys.executable, "demo.py", "--url", url],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_demo_on_a_memory_url_it_cannot_use_says_what_to_do_in_one_line():
    done = run_demo("nosuch://db.example.com/memory")
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    (said,) = [line for line in done.stderr.splitlines() if line.startswith("demo:")]
    assert "no backend for 'nosuch'" in said


def test_git_and_docker_ignore_every_file_the_demo_writes_beside_its_memory_file(
    tmp_path,
):
    """The README's `uv run demo.py --url sqlite:///demo.db` in the project's root
    writes the memory file and its companions (its -wal and -shm, its spool): callers'
    words, which the project's .gitignore and .dockerignore must each keep out."""
    project = Path(__file__).resolve().parents[1]
    done = run_demo(f"sqlite:///{(tmp_path / 'demo.db').as_posix()}")
    assert done.returncode == 0, done.stderr[-3000:]
    written = sorted(p.name for p in tmp_path.iterdir())
    assert "demo.db" in written and any("spool" in name for name in written), written
    docker = [
        line.strip()
        for line in (project / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "!"))
    ]
    assert all(any(fnmatch.fnmatchcase(n, p) for p in docker) for n in written), written
    git = shutil.which("git")
    if git is None:
        return  # the .dockerignore check above still ran
    shutil.copy(project / ".gitignore", tmp_path / ".gitignore")
    subprocess.run([git, "init", "-q", str(tmp_path)], check=True)
    status = subprocess.run(
        [git, "status", "--porcelain", "--untracked-files=all"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert status == ["??", ".gitignore"], status
