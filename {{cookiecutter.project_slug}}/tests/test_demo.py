"""`uv run demo.py` tells the whole truth: the stand-in model's fixed lines are
labelled as scripted, facts are printed as the model reads them, and the call
summary reads cleanly."""

from __future__ import annotations

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
