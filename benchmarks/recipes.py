"""What each recipe adds to a turn: the time a reply waits for memory, and the memory
characters in each model request.

For every recipe the template is rendered (cookiecutter's API) and, in a process of
its own, one call of 10 typed turns runs through the real AgentSession with a
scripted model, for a caller who already has 20 calls of 10 exchanges and 5 facts
on file (synthetic text, made here from a fixed seed). Measured per user turn:
- wait: how long replies of that turn waited on `CallMemory.block_for` (recall in
  `llm_node`; recipes that recall elsewhere wait 0 per turn);
- memory chars per request: memory blocks in the request, plus what the recipe
  added to the agent's instructions (tool_only and realtime put the profile there).

Usage: python benchmarks/recipes.py [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CALLER = "caller-1"
TOPICS = {
    "garden": ["tomatoes", "roses", "the hedge", "compost", "the greenhouse"],
    "travel": ["Lisbon", "the night train", "a hostel", "the ferry", "hiking boots"],
    "family": ["my sister Ana", "my nephew", "grandma's birthday", "the twins", "my dad"],
    "work": ["the quarterly report", "my manager", "a new client", "the office move"],
    "health": ["the dentist", "my knee", "a running plan", "physio on Tuesdays"],
}
VERBS = ["I keep thinking about", "we talked about", "I need help with", "tell me more about"]


def synthetic_turn(rng: random.Random) -> tuple[str, str]:
    topic = rng.choice(list(TOPICS))
    thing = rng.choice(TOPICS[topic])
    user = f"{rng.choice(VERBS)} {thing}, it's been on my mind since {rng.randint(2, 28)} May."
    return user, f"Noted about {thing}. Anything else on {topic}?"


def run_one(project: Path) -> dict:
    """Runs inside the rendered project (cwd on sys.path)."""
    sys.path.insert(0, str(project))
    import agent
    import memory
    from livekit.agents import AgentSession
    from tests.scripted_llm import ScriptedLLM, first_reply, memory_blocks

    rng = random.Random(7)

    async def main() -> dict:
        # the default backend (SQLite), in a file of its own
        store = memory.open_store(f"sqlite:///{Path(tempfile.mkdtemp()) / 'memory.db'}")
        # telephony asks first
        await store.remember(CALLER, memory.Fact.of("recording_consent", "yes"))
        for kind, value in [
            ("name", "Maria"),
            ("home city", "Lisbon"),
            ("sister", "Ana"),
            ("diet", "vegetarian"),
            ("job", "architect"),
        ]:
            await store.remember(CALLER, memory.Fact.of(kind, value))
        for c in range(20):
            for n in range(10):
                user, reply = synthetic_turn(rng)
                await store.save(
                    memory.Exchange(
                        key=memory.exchange_key(CALLER, f"c{c}-{n}"),
                        caller_id=CALLER,
                        call_id=f"past-{c}",
                        user_text=user,
                        assistant_text=reply,
                        item_ids=(f"c{c}-{n}",),
                        created_at=time.time() - 86400 * (20 - c),
                    )
                )
            await store.save_summary(CALLER, f"past-{c}", f"Talked about {synthetic_turn(rng)[0]}")

        waits: list[float] = []

        def timed(call: memory.CallMemory) -> None:
            """Record how long each block_for of the call is awaited (the time a reply
            waits for memory)."""
            block_for = call.block_for

            async def timed_block_for(user_text: str, **kwargs):
                start = time.perf_counter()
                try:
                    return await block_for(user_text, **kwargs)
                finally:
                    waits.append(time.perf_counter() - start)

            call.block_for = timed_block_for

        model = ScriptedLLM()
        per_turn_wait: list[float] = []
        async with AgentSession(llm=model) as session:
            # as each recipe's entrypoint builds it
            assistant = await agent.build_agent(session, store, CALLER, "measured", model=model)
            call = assistant.memory
            timed(call)
            greeted = first_reply(session)
            await session.start(assistant)
            await asyncio.wait_for(greeted.wait(), 10)
            first_turn_request = len(model.replies)
            for _ in range(10):
                waits.clear()
                await session.run(user_input=synthetic_turn(rng)[0])
                per_turn_wait.append(sum(waits))
        await call.aclose("benchmark call ended")  # as the job's shutdown callback
        turn_requests = model.replies[first_turn_request:]  # not the call summary request
        chars = [
            sum(len(b) for b in memory_blocks(r))
            + max(0, len(r.items[0].text_content or "") - len(agent.INSTRUCTIONS))
            for r in turn_requests
        ]
        stored = await store.exchanges(CALLER, call_id="measured")
        await store.close()
        return {
            "wait_ms_p50": round(statistics.median(per_turn_wait) * 1000, 2),
            "wait_ms_max": round(max(per_turn_wait) * 1000, 2),
            "requests_per_turn": len(turn_requests) / 10,
            "memory_chars_per_request_mean": round(statistics.mean(chars)),
            "exchanges_saved": len(stored),
        }

    return asyncio.run(main())


def render(recipe: str, out: Path) -> Path:
    from cookiecutter.main import cookiecutter

    return Path(
        cookiecutter(
            str(ROOT),
            no_input=True,
            output_dir=str(out),
            extra_context={"recipe": recipe, "project_slug": f"r-{recipe.replace('_', '-')}"},
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--project", type=Path, help=argparse.SUPPRESS)  # child process
    args = parser.parse_args()
    if args.project:
        print(json.dumps(run_one(args.project)))
        return
    recipes = json.loads((ROOT / "cookiecutter.json").read_text())["recipe"]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for recipe in recipes:
            project = render(recipe, Path(tmp))
            child = subprocess.run(
                [sys.executable, __file__, "--project", str(project)],
                cwd=project,
                capture_output=True,
                text=True,
                timeout=300,
            )
            if child.returncode:
                sys.exit(f"{recipe} failed:\n{child.stderr[-3000:]}")
            results[recipe] = json.loads(child.stdout.strip().splitlines()[-1])
    print(
        "| recipe | wait per turn p50 / max ms | model requests per turn | memory chars per request | exchanges saved of 10 |"  # noqa: E501 (a table row)
    )
    print("| --- | --- | --- | --- | --- |")
    for recipe, r in results.items():
        print(
            f"| {recipe} | {r['wait_ms_p50']} / {r['wait_ms_max']} | {r['requests_per_turn']} | "
            f"{r['memory_chars_per_request_mean']} | {r['exchanges_saved']} |"
        )
    if args.out:
        args.out.write_text(
            json.dumps({"python": sys.version.split()[0], "results": results}, indent=2)
        )


if __name__ == "__main__":
    main()
