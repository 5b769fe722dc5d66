"""How long recall takes with each hosted backend, against its fake on localhost.

For each hosted backend (supermemory, mem0, zep) the template is rendered
(cookiecutter's API) and, in a process of its own, the generated project's store
talks to the generated project's fake of the service (tests/fake_<backend>.py,
aiohttp on 127.0.0.1). A caller gets 20 calls of 10 exchanges, 5 facts and 20 call
summaries (synthetic text from a fixed seed), all delivered; the fake's write lag
is then let pass. Measured, 200 recalls each (the caller's latest words as query):
- ``this worker``: the store whose outbox wrote it all (the outbox's rows are merged);
- ``another worker``: a store with an empty outbox (everything from the service).
Both include the HTTP round trips (a listing and a search, in parallel) and the
outbox read; the fakes answer in well under a millisecond of their own work, so this
is the kit's overhead, not the real services' latency.

Usage: python benchmarks/hosted_recall.py [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ["supermemory", "mem0", "zep"]
CALLER = "caller-1"
WORDS = ["garden", "tomatoes", "Lisbon", "train", "sister", "dentist", "report", "ferry"]


def run_one(project: Path, backend: str) -> dict:
    """Runs inside the rendered project (cwd on sys.path)."""
    sys.path.insert(0, str(project))
    import asyncio
    import importlib
    import os

    import memory

    # the generated project's tests package (not the kit's)
    fake_service = importlib.import_module("tests.fake_service")
    fake = importlib.import_module(f"tests.fake_{backend}").FAKE(lag=0.5).start()
    os.environ[fake.key_env] = fake_service.KEY
    rng = random.Random(7)
    tmp = Path(tempfile.mkdtemp())

    async def timed(store, queries: list[str]) -> list[float]:
        took = []
        for q in queries:
            started = time.perf_counter()
            await store.recall(CALLER, q, exclude_call_id="now")
            took.append((time.perf_counter() - started) * 1000)
        return took

    async def main() -> dict:
        store = memory.open_store(fake.url(tmp / "outbox.db"))
        for call in range(20):
            for n in range(10):
                a, b = rng.sample(WORDS, 2)
                await store.save(
                    memory.Exchange(
                        key=memory.exchange_key(CALLER, f"c{call}-u{n}"),
                        caller_id=CALLER,
                        call_id=f"call-{call}",
                        user_text=f"I keep thinking about {a} and {b}, since {n} May.",
                        assistant_text=f"Noted about {a}.",
                        created_at=1.7e9 + call * 100 + n,
                    )
                )
            await store.save_summary(CALLER, f"call-{call}", f"talked about {rng.choice(WORDS)}")
        for n in range(5):
            await store.remember(CALLER, memory.Fact.of(f"fact {n}", f"value {n}"))
        assert await store.flush(60) == 0
        await asyncio.sleep(fake.lag + 0.1)
        queries = [f"what did I say about {rng.choice(WORDS)}?" for _ in range(200)]
        await timed(store, queries[:10])  # warm the connection pool
        here = await timed(store, queries)
        await store.close()
        other = memory.open_store(fake.url(tmp / "other.db"))
        await timed(other, queries[:10])
        there = await timed(other, queries)
        await other.close()
        return {"this_worker_ms": stats(here), "another_worker_ms": stats(there)}

    try:
        return asyncio.run(main())
    finally:
        fake.stop()


def stats(ms: list[float]) -> dict:
    ms = sorted(ms)
    return {
        "p50": round(statistics.median(ms), 2),
        "p95": round(ms[int(len(ms) * 0.95)], 2),
        "max": round(ms[-1], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "hosted_recall.json"
    )
    args = parser.parse_args()
    from cookiecutter.main import cookiecutter

    backends: dict[str, dict] = {}
    results = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "backends": backends,
    }
    for backend in BACKENDS:
        out = Path(tempfile.mkdtemp())
        project = Path(
            cookiecutter(
                str(ROOT),
                no_input=True,
                output_dir=str(out),
                extra_context={"memory_backend": backend},
            )
        )
        code = (
            f"import json, pathlib, sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); "
            "import hosted_recall as h; "
            f"print(json.dumps(h.run_one(pathlib.Path('.'), {backend!r})))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=project, capture_output=True, text=True, timeout=600
        )
        if done.returncode:
            sys.exit(done.stderr[-3000:])
        backends[backend] = json.loads(done.stdout.strip().splitlines()[-1])
        print(backend, backends[backend], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
