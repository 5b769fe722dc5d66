"""LoCoMo recall benchmark: does the memory block that reaches the model hold the evidence?

Replays real multi-session conversations through the agent *generated* from this
template (rendered with cookiecutter into a temporary directory, then imported:
``agent``, ``memory`` and ``tests.scripted_llm``), one call per session through the
real livekit-agents ``AgentSession``, with the scripted stand-in model speaking the
other person's lines. Then, in a fresh call per question, it asks each LoCoMo
question as the caller's typed turn and checks the memory block the model received
(``memory_blocks(model.requests[-1])``) for the question's evidence turns. It also
reports recall@k of the store's ranked exchanges, recall latencies, and a
recency-only block as a baseline. See benchmarks/README.md for the figures.

Usage (the data is never copied into this repository):

    python benchmarks/locomo_recall.py --data PATH/TO/locomo_dev.json \
        [--conversations N] [--out results.json] [--max-block-chars N] [--per-question] \
        [--memory-url URL] [--held-out conv-26,conv-48]

Figures are printed for the conversations used to tune the design, for the held-out
ones (--held-out: never looked at while tuning) and for all.

Dataset: LoCoMo, A. Maharana, D.-H. Lee, S. Tulyakov, M. Bansal, F. Barbieri,
Y. Fang, "Evaluating Very Long-Term Conversational Memory of LLM Agents", ACL 2024
(arXiv:2402.17753), https://github.com/snap-research/locomo . Licensed CC BY-NC 4.0
(https://creativecommons.org/licenses/by-nc/4.0/legalcode): attribution required,
non-commercial use only. This benchmark reads a local file given with --data and
writes no dialogue text anywhere (results hold ids and numbers only).

Replay rules (each is a choice; see README):
- speaker_a is the caller; caller id = the conversation's sample_id; one SQLite file
  per conversation; session_<n> is call f"{sample_id}-s{n}".
- A maximal run of consecutive caller turns is ONE ``session.run(user_input=...)``,
  its turns joined with "\\n" (a caller who says several things before the agent
  answers produces one user turn; the dev file has no run longer than one turn).
  The scripted reply to it is the other speaker's following run, joined with "\\n";
  "" (no reply) when the session ends with the caller.
- The on_enter greeting takes the first scripted reply: the other speaker's opening
  run when the session starts with them, else "" (no text of our own is added).
  The agent saves a greeting as the call's opening (its words alone) once the caller
  speaks; a greeting in a session the caller never speaks in is not saved, and the
  benchmark counts evidence lost that way apart (there is none in the dev file).
- A turn that shared a photo is fed as ``text + " [shares a photo: CAPTION]"``.
- Each call happens on its session's own date (``session_<n>_date_time``, read as
  UTC; the generated memory shows dates in MEMORY_TIMEZONE=UTC): the call's clock and
  every captured message's time are shifted by the same amount, so exchanges are
  stamped with the session's date and time (call summaries keep the store's own
  write time: ``save_summary`` takes no time). Question calls happen a day after
  the conversation's last session.
- Every call is built by the generated ``agent.build_agent``, as agent.py's entrypoint
  and tests/conftest.py build it: CallMemory preload, capture, the Assistant's llm_node
  recall; then the greeting played out, and CallMemory.aclose (with a reason, as
  LiveKit calls the shutdown callback) after the session closes. Question calls switch
  capture off (``CallMemory.capturing = False``), so no question is written to the
  store and each one sees exactly the replayed conversation.
- Between calls, outside every timed region, the benchmark collects cyclic garbage
  (see collect_call_garbage).

The honest replay (the default; see README, "The honest replay"): 12 facts on file
for every caller (PROFILE, learned on the first session's date), each question asked
in the caller's voice (``in_callers_voice``: the caller's name as "I", the other
speaker's, the agent's, as "you"). ``--facts 0 --voice third`` gives the old, kinder
replay.

Found rules (per evidence turn; the block's exchange lines are parsed, every
``caller: "..."`` / ``you: "..."`` JSON string unquoted, a clipped end's "…"
dropped): let T be the whitespace-normalised text fed for the turn and S the
normalised text of the exchange side that holds it (the caller's run or the reply
run, turns joined by one space). A shown part P of that side (same role) covers a
span of S. "whole": some P covers all of T. "strict" (the headline): whole, or some
P covers part of T and that part holds every word of T that matches the question
(``memory.words.relevance`` of each ``query_words`` word, the block's own matching;
a turn with no matching word must be shown whole). "lenient" (the old rule, printed
for continuity): whole, or any clipped P overlaps T (with lines clipped at their
start, as before, that is "its first 299 characters are shown"). A question's score
is the share of its (normalised, existing) evidence turns found; LoCoMo's recall.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import logging
import math
import os
import platform
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

CATEGORIES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
EVIDENCE_RE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
CALLER_CLIP = 300  # memory.format_block clips each side to memory.block.TURN_CHARS
REPLY_CLIP = 300
RECALL_KS = (5, 10)
RECENCY_EXCHANGES = 64  # more than fit any sane cap; format_block cuts at the cap
# The reference BM25 yardstick from the data README (one row per turn, k turns).
BASELINE_BM25 = {
    1: (201, 0.235, 0.356),
    2: (236, 0.663, 0.719),
    3: (64, 0.251, 0.312),
    4: (610, 0.610, 0.692),
    5: (330, 0.621, 0.715),
    "1-4": (1111, 0.532, 0.615),
    "1-5": (1441, 0.553, 0.638),
}


def norm(text: str) -> str:
    return " ".join(text.split())


# -- Rendering the template -----------------------------------------------------------


def render_project(out_dir: Path, backend: str = "sqlite") -> Path:
    """Generate a project from this repository with the default answers and return
    its directory. User cookiecutter config is ignored and replay files stay in
    ``out_dir``."""
    from cookiecutter.main import cookiecutter

    project = cookiecutter(
        str(REPO),
        no_input=True,
        extra_context={"memory_backend": backend},
        output_dir=str(out_dir),
        default_config={
            "cookiecutters_dir": str(out_dir / "cookiecutters"),
            "replay_dir": str(out_dir / "replay"),
        },
    )
    return Path(project)


# -- The data -----------------------------------------------------------------------


@dataclass
class Run:
    """One session.run: a caller run and the reply run that follows it."""

    caller_ids: list[str]
    caller_texts: list[str]
    reply_ids: list[str]
    reply_texts: list[str]


@dataclass
class Session:
    number: int
    at: float  # when the session happened (session_<n>_date_time, as UTC), epoch seconds
    greeting_ids: list[str]
    greeting_texts: list[str]
    runs: list[Run]


@dataclass
class Conversation:
    sample_id: str
    caller: str
    other: str
    sessions: list[Session]
    fed: dict[str, str]  # dia_id -> exact text fed
    # dia_id -> (offset of its normalised text in its exchange side, length of that side)
    side: dict[str, tuple[int, int]] = field(default_factory=dict)
    side_limit: dict[str, int] = field(default_factory=dict)  # dia_id -> clip limit of its side
    side_text: dict[str, str] = field(default_factory=dict)  # dia_id -> its side's normalised text
    side_role: dict[str, str] = field(default_factory=dict)  # dia_id -> "caller" or "you"
    greeting_turns: set[str] = field(default_factory=set)
    qa: list[dict[str, Any]] = field(default_factory=list)


def turn_text(turn: dict[str, Any]) -> str:
    text = str(turn.get("text", ""))
    caption = turn.get("blip_caption")
    if caption:
        text = f"{text} [shares a photo: {caption}]"
    return text


def load_conversation(record: dict[str, Any]) -> Conversation:
    conv = record["conversation"]
    caller, other = conv["speaker_a"], conv["speaker_b"]
    numbers = sorted(int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
    sessions: list[Session] = []
    fed: dict[str, str] = {}
    for n in numbers:
        turns = conv[f"session_{n}"]
        if not turns:
            continue
        for t in turns:
            fed[t["dia_id"]] = turn_text(t)
        i = 0
        greeting: list[dict[str, Any]] = []
        while i < len(turns) and turns[i]["speaker"] != caller:
            greeting.append(turns[i])
            i += 1
        runs: list[Run] = []
        while i < len(turns):
            said: list[dict[str, Any]] = []
            while i < len(turns) and turns[i]["speaker"] == caller:
                said.append(turns[i])
                i += 1
            reply: list[dict[str, Any]] = []
            while i < len(turns) and turns[i]["speaker"] != caller:
                reply.append(turns[i])
                i += 1
            runs.append(
                Run(
                    [t["dia_id"] for t in said],
                    [fed[t["dia_id"]] for t in said],
                    [t["dia_id"] for t in reply],
                    [fed[t["dia_id"]] for t in reply],
                )
            )
        sessions.append(
            Session(
                n,
                session_time(conv[f"session_{n}_date_time"]),
                [t["dia_id"] for t in greeting],
                [fed[t["dia_id"]] for t in greeting],
                runs,
            )
        )
    c = Conversation(record["sample_id"], caller, other, sessions, fed, qa=record.get("qa", []))
    for s in sessions:
        if not s.runs:  # the caller never spoke: no opening is saved
            c.greeting_turns.update(s.greeting_ids)
        sides = [(s.greeting_ids, REPLY_CLIP, "you")]  # the opening: the greeting alone
        for r in s.runs:
            sides += [(r.caller_ids, CALLER_CLIP, "caller"), (r.reply_ids, REPLY_CLIP, "you")]
        for ids, limit, role in sides:
            offset = 0
            text = norm(" ".join(fed[d] for d in ids))
            for d in ids:
                c.side[d] = (offset, len(text))
                c.side_limit[d] = limit
                c.side_text[d] = text
                c.side_role[d] = role
                offset += len(norm(fed[d])) + 1
    return c


def session_time(text: str) -> float:
    """The session time ("1:56 pm on 8 May, 2023") in seconds since the epoch, as UTC."""
    at = datetime.strptime(" ".join(text.split()), "%I:%M %p on %d %B, %Y")
    return at.replace(tzinfo=UTC).timestamp()


def evidence_ids(evidence: list[Any], existing: dict[str, str]) -> list[str]:
    """The data README's normalisation: every D<s>:<t> in each string, ids that do not
    exist dropped, duplicates dropped (order kept)."""
    out: list[str] = []
    for item in evidence or []:
        for s, t in EVIDENCE_RE.findall(str(item)):
            d = f"D{int(s)}:{int(t)}"
            if d in existing and d not in out:
                out.append(d)
    return out


RULES = ("strict", "lenient", "whole")
"""How an evidence turn counts as found in a block (module docstring, "Found rules")."""


def found_in_block(
    c: Conversation, dia_id: str, block: str, question: str = "", rule: str = "strict"
) -> bool:
    """Whether evidence turn ``dia_id`` is in ``block`` by ``rule`` (module
    docstring): "strict" (the honest default: its words shown whole, or a clipped
    part that holds every word of it that matches ``question``), "lenient" (the old
    rule: whole, or any clipped part; on the start-clipped layout, its first 299
    characters) or "whole" (its words shown whole only)."""
    if dia_id in c.greeting_turns or not block:
        return False  # never saved; nothing else can match by accident
    text = norm(c.fed[dia_id])
    if not text:
        return False
    side = c.side_text[dia_id]
    start = c.side[dia_id][0]
    end = start + len(text)
    for part in shown_parts(block, c.side_role[dia_id]):
        at = side.find(part)
        while at >= 0:
            lo, hi = max(at, start), min(at + len(part), end)
            if lo <= start and hi >= end:
                return True  # every word of the turn is shown
            if lo < hi and rule == "lenient":
                return True
            if lo < hi and rule == "strict" and holds_matched(text, side[lo:hi], question):
                return True
            at = side.find(part, at + 1)
    return False


_SHOWN_RE = re.compile(r'(caller|you): "((?:[^"\\]|\\.)*)"')


def shown_parts(block: str, role: str) -> list[str]:
    """The texts the block shows as ``role``'s side of an exchange line ("caller" or
    "you"), unquoted, without the "…" that marks a clipped end; the longest first."""
    parts = []
    for m in _SHOWN_RE.finditer(block):
        if m.group(1) == role:
            part = json.loads(f'"{m.group(2)}"').strip("…").strip()
            if part:
                parts.append(part)
    return sorted(set(parts), key=len, reverse=True)


_MEMORY: Any = None  # the generated memory package, once Bench has imported it


def holds_matched(text: str, shown: str, question: str) -> bool:
    """Whether ``shown`` (a clipped part of the turn ``text``) holds every word of
    the turn that matches the question (``memory.words.query_words`` and
    ``relevance``, the block's own matching), and the turn has one."""
    words = _MEMORY.words
    matched = [w for w in words.query_words(question) if words.relevance([w], text)]
    return bool(matched) and all(words.relevance([w], shown) for w in matched)


# -- Measuring ------------------------------------------------------------------------


def on_date(call: Any, at: float) -> None:
    """Make one call happen at ``at`` (epoch seconds): its clock (the block's "now")
    and the time of every message it captures move by the same amount, so order and
    gaps stay as they were."""
    shift = at - time.time()
    capture = call.capture

    def dated(role: str, item_id: str, text: str | None, **kwargs: Any) -> None:
        created = kwargs.get("created_at")
        kwargs["created_at"] = (time.time() if created is None else created) + shift
        capture(role, item_id, text, **kwargs)

    call.capture = dated
    call.clock = lambda: time.time() + shift


def sqlite_bench(prefix: str, held_out: set[str]) -> Bench:
    """A ``Bench`` over a fresh render of the sqlite project in a temporary folder
    named by ``prefix``, dates in UTC (the sessions' own), for the experiment scripts
    (semantic_recall.py, ranking_experiments.py)."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ["MEMORY_TIMEZONE"] = "UTC"
    project = render_project(tmp / "render", "sqlite")
    (tmp / "db").mkdir()
    return Bench(project, tmp / "db", None, None, held_out)


Scores = dict[tuple[str, str, int], list[float]]
"""Evidence-in-block scores, one per question, by (ranking, "tuning" or "held out",
category)."""


def scored_questions(c: Conversation) -> Iterator[tuple[dict[str, Any], list[str]]]:
    """The conversation's questions that have usable evidence, each with its evidence
    turn ids (``evidence_ids``)."""
    for qa in c.qa:
        evidence = evidence_ids(qa.get("evidence", []), c.fed)
        if evidence:
            yield qa, evidence


def evidence_share(
    c: Conversation, evidence: list[str], block: str, question: str, rule: str = "strict"
) -> float:
    """LoCoMo's recall for one question: the share of its evidence turns found in
    ``block`` (``found_in_block`` by ``rule``, ``question`` as asked)."""
    return sum(found_in_block(c, d, block, question, rule) for d in evidence) / len(evidence)


# -- The honest replay: a profile on file, questions in the caller's voice -------------

PROFILE = (
    ("name", "{caller}"),
    ("language", "English"),
    ("home_city", "Leeds"),
    ("email", "{login}@example.com"),
    ("birthday", "14 March"),
    ("contact_preference", "a text message before any call"),
    ("best_time_to_call", "weekday evenings after 6 pm"),
    ("account_plan", "standard plan, renewed every January"),
    ("payment_method", "direct debit on the 1st of the month"),
    ("accessibility", "speak a little slower on the phone"),
    ("open_issue", "router replacement ordered, tracking number pending"),
    ("customer_since", "2019"),
)
"""The 12 facts on file for every caller in the honest replay (kind, value; the
caller's name filled in): what a service agent's ``remember`` tool typically holds,
chosen to say nothing LoCoMo asks about, so they only take room as a real profile
does. Learned on the first session's date."""


async def put_profile(memory: Any, store: Any, caller_id: str, c: Conversation, n: int) -> None:
    """Remember the first ``n`` PROFILE facts for the caller, dated the first session."""
    at = c.sessions[0].at
    for kind, value in PROFILE[:n]:
        text = value.format(caller=c.caller, login=c.caller.lower())
        await store.remember(caller_id, memory.Fact.of(kind, text, updated_at=at))


_AUX = {  # auxiliary -> (as the caller says it of themselves, of the agent)
    "does": ("do", "do"),
    "is": ("am", "are"),
    "was": ("was", "were"),
    "has": ("have", "have"),
}
_OBJECT_BEFORE = re.compile(
    r"\b(to|with|for|about|from|at|by|of|than|like|help|helped|helps|give|gave|tell|"
    r"told|ask|asked|meet|met|invite|invited|visit|visited|support|supported|"
    r"supports|inspire|inspired|inspires|encourage|encouraged|remind|reminded|join|"
    r"joined|see|saw|call|called|teach|taught|motivate|motivated|motivates|make|"
    r"made|makes|get|got|gets|bring|brought|show|showed|send|sent|surprise|"
    r"surprised|love|loves|loved|thank|thanked|congratulate|congratulated|"
    r"recommend|recommended|offer|offered)\s+$",
    re.IGNORECASE,
)


PRONOUNS = (("I", "me", "my", "myself"), ("you", "you", "your", "yourself"))
"""Subject, object, possessive, reflexive: the caller's (0) and the agent's (1)."""
_HER_POSSESSIVE = re.compile(
    r"\bher(?=\s+[a-z])"
    r"(?!\s+(?:to|with|for|about|and|in|on|at|when|after|before|if|that|the|a|an)\b)"
)


def in_callers_voice(question: str, caller: str, agent: str) -> str:
    """``question`` as the caller would ask it (benchmarks/README.md, "Questions in the
    caller's voice"): the caller's name becomes I / me / my, the agent's you / your,
    both together we / us / our, an auxiliary before or after a name agrees with its
    pronoun ("Does Caroline" -> "Do I", "Melanie is" -> "you are"), and where only one
    of the two is named, she / he / her / his / herself / himself become that
    person's pronouns."""
    q = question
    for a, b in ((caller, agent), (agent, caller)):
        q = re.sub(rf"\b{a} and {b}'s\b", "our", q)
        q = re.sub(rf"\b{a} and {b}\b", "we", q)
    q = re.sub(r"\b(\w+) we\b", _we_or_us, q)
    names = [(n, i) for i, n in enumerate((caller, agent)) if re.search(rf"\b{n}\b", q)]
    for name, who in names:
        subject, _, mine, _ = PRONOUNS[who]
        q = re.sub(rf"\b{name}'s?(?=\W)", mine, q)
        for aux, forms in _AUX.items():
            q = re.sub(rf"\b{aux.capitalize()} {name}\b", f"{forms[who].capitalize()} {subject}", q)
            q = re.sub(rf"\b{aux} {name}\b", f"{forms[who]} {subject}", q)
            q = re.sub(rf"\b{name} {aux}\b", f"{subject} {forms[who]}", q)
        q = re.sub(rf"\b{name}\b", functools.partial(_subject_or_object, who=who), q)
    if len(names) == 1:
        subject, obj, mine, self_ = PRONOUNS[names[0][1]]
        q = re.sub(r"\b(she|he)\b", subject, q)
        q = re.sub(r"\b(She|He)\b", subject.capitalize(), q)
        q = re.sub(r"\b(herself|himself)\b", self_, q)
        q = re.sub(r"\bhis\b", mine, q)
        q = _HER_POSSESSIVE.sub(mine, q)
        q = re.sub(r"\bher\b", obj, q)
        q = re.sub(r"\bhim\b", obj, q)
    for pron, who in (("I", 0), ("you", 1)):  # "she is" became "I is"
        for aux, forms in _AUX.items():
            q = re.sub(rf"\b{pron} {aux}\b", f"{pron} {forms[who]}", q)
    return q


def _we_or_us(m: re.Match[str]) -> str:
    # "we" after a preposition or an object-taking verb is "us"
    word = m.group(1)
    return f"{word} us" if _OBJECT_BEFORE.search(word + " ") else m.group(0)


def _subject_or_object(m: re.Match[str], who: int) -> str:
    # a name after a preposition or an object-taking verb is "me" / "you"
    before = m.string[: m.start()]
    return PRONOUNS[who][1] if _OBJECT_BEFORE.search(before) else PRONOUNS[who][0]


def ranking_table(scores: Scores, names: list[str]) -> dict[str, dict[str, float]]:
    """Per ranking: the mean over tuning and held-out questions of categories 1-4,
    over all of them, and over each category (NaN where there are none)."""

    def mean(name: str, groups: set[str], categories: set[int]) -> float:
        values = [
            v
            for (n, g, cat), vs in scores.items()
            if n == name and g in groups and cat in categories
            for v in vs
        ]
        return statistics.fmean(values) if values else float("nan")

    both = {"tuning", "held out"}
    return {
        name: {
            "tuning 1-4": mean(name, {"tuning"}, {1, 2, 3, 4}),
            "held out 1-4": mean(name, {"held out"}, {1, 2, 3, 4}),
            "all 1-4": mean(name, both, {1, 2, 3, 4}),
            **{f"category {k}": mean(name, both, {k}) for k in (1, 2, 3, 4, 5)},
        }
        for name in names
    }


def print_ranking_table(table: dict[str, dict[str, float]]) -> None:
    """``ranking_table`` as a Markdown table, three decimals."""
    columns = list(next(iter(table.values())))
    print("| ranking | " + " | ".join(columns) + " |")
    print("| --- |" + " --- |" * len(columns))
    for name, row in table.items():
        print(f"| {name} | " + " | ".join(f"{row[c]:.3f}" for c in columns) + " |")


def collect_call_garbage() -> None:
    """Free one call's reference cycles (~640 objects from the AgentSession machinery),
    outside every measured region. A LiveKit worker runs each job in its own process;
    this benchmark runs ~1,600 calls in one, and without this the automatic full
    collections of many calls' garbage pause the event loop for ~50-135 ms, landing
    inside a few latency measurements."""
    gc.collect()


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


class Bench:
    def __init__(
        self,
        project: Path,
        db_dir: Path,
        max_block_chars: int | None,
        memory_url: str | None,
        held_out: set[str],
        facts: int = len(PROFILE),
        voice: str = "caller",
    ) -> None:
        global _MEMORY
        sys.path.insert(0, str(project))
        import agent  # the generated project's modules, from sys.path
        import memory
        from livekit.agents import AgentSession
        from tests.scripted_llm import ScriptedLLM, memory_blocks

        self.agent, self.memory = agent, memory
        _MEMORY = memory
        self.facts, self.voice = facts, voice
        self.AgentSession, self.ScriptedLLM, self.memory_blocks = (
            AgentSession,
            ScriptedLLM,
            memory_blocks,
        )
        self.db_dir = db_dir
        self.memory_url = memory_url
        self.held_out = held_out
        self.max_block_chars = (
            max_block_chars if max_block_chars is not None else memory.MAX_BLOCK_CHARS
        )
        if self.max_block_chars < memory.limits.MIN_BLOCK_CHARS:
            raise SystemExit(f"--max-block-chars must be at least {memory.limits.MIN_BLOCK_CHARS}")

    def store_url(self, sample_id: str) -> str:
        """One SQLite file per conversation (the default backend), as a MEMORY_URL;
        or --memory-url, shared by every conversation (each has its own caller id)."""
        if self.memory_url:
            return self.memory_url
        return f"sqlite:///{self.db_dir / f'{sample_id}.db'}"  # an absolute path: 4 slashes

    async def replayed(
        self, records: list[dict[str, Any]]
    ) -> AsyncIterator[tuple[dict[str, Any], Conversation, str, Any]]:
        """Each conversation replayed into its store, as (record, conversation, caller
        id, open store); the store is closed and the calls' garbage collected after
        the caller is done with it (the experiment scripts' loop)."""
        for record in records:
            c = load_conversation(record)
            caller_id = self.memory.validate_caller_id(c.sample_id)
            store = self.memory.open_store(self.store_url(c.sample_id))
            try:
                await self.replay(c, store, caller_id)
                await put_profile(self.memory, store, caller_id, c, self.facts)
                yield record, c, caller_id, store
            finally:
                await store.close()
            collect_call_garbage()

    @staticmethod
    def timed(call: Any) -> list[tuple[str, float]]:
        """Record how long each ``block_for`` of the call is awaited (the time the
        agent's llm_node waits for the block): returns the list it fills with
        (user_text, seconds)."""
        waits: list[tuple[str, float]] = []
        block_for = call.block_for

        async def timed_block_for(user_text: str, **kwargs: Any) -> str | None:
            t0 = time.perf_counter()
            try:
                return await block_for(user_text, **kwargs)
            finally:
                waits.append((user_text, time.perf_counter() - t0))

        call.block_for = timed_block_for
        return waits

    async def _start(self, session: Any, assistant: Any) -> None:
        await session.start(assistant)
        if session.current_speech is not None:
            # the on_enter greeting: let it finish, as a caller would hear it first
            await asyncio.wait_for(session.current_speech.wait_for_playout(), 30)

    async def replay(self, c: Conversation, store: Any, caller_id: str) -> dict[str, Any]:
        """One call per session through the real AgentSession; returns integrity counts
        (item id -> dia ids in self.item_turns)."""
        item_turns: dict[str, list[str]] = {}
        runs = requests = 0
        for s in c.sessions:
            script = ["\n".join(s.greeting_texts)] + ["\n".join(r.reply_texts) for r in s.runs]
            model = self.ScriptedLLM(script)
            call_id = f"{c.sample_id}-s{s.number}"
            current: dict[str, list[str]] = {"user": [], "assistant": s.greeting_ids}
            async with self.AgentSession(llm=model) as session:
                assistant = await self.agent.build_agent(
                    session, store, caller_id, call_id, model=model
                )
                call = assistant.memory
                on_date(call, s.at)

                @session.on("conversation_item_added")
                def _map(ev: Any, current: dict[str, list[str]] = current) -> None:
                    item = ev.item
                    if item.type == "message" and item.role in current:
                        item_turns[item.id] = list(current[item.role])

                await self._start(session, assistant)
                for r in s.runs:
                    current["user"], current["assistant"] = r.caller_ids, r.reply_ids
                    await asyncio.wait_for(session.run(user_input="\n".join(r.caller_texts)), 30)
                    runs += 1
            # Leaving AgentSession closed it; then end the call's
            # memory as agent.py's job shutdown callback does (flush + call summary).
            await call.aclose("participant hung up")
            collect_call_garbage()
            requests += len(model.requests)
            if call.pending:
                raise RuntimeError(f"{call.pending} exchange(s) unsaved after call {call.call_id}")
        self.item_turns = item_turns

        # Integrity: every fed turn of a session the caller spoke in is in exactly one
        # stored exchange, on the right side, with the text fed.
        exchanges = await store.exchanges(caller_id)
        stored: dict[str, int] = {}
        side_ok = 0
        by_turn: dict[str, Any] = {}
        for e in exchanges:
            for item_id in e.item_ids:
                for d in item_turns.get(item_id, []):
                    stored[d] = stored.get(d, 0) + 1
                    by_turn[d] = e
        caller_turns = {d for s in c.sessions for r in s.runs for d in r.caller_ids}
        self.caller_turns = caller_turns
        for d, e in by_turn.items():
            side = e.user_text if d in caller_turns else e.assistant_text
            side_ok += norm(c.fed[d]) in norm(side)
        expected = [
            d
            for s in c.sessions
            if s.runs
            for d in s.greeting_ids + [d for r in s.runs for d in r.caller_ids + r.reply_ids]
        ]
        return {
            "calls": len(c.sessions),
            "runs": runs,
            "llm_requests": requests,
            "turns": len(c.fed),
            "greeting_turns": len(c.greeting_turns),
            "exchanges_stored": len(exchanges),
            "turns_expected_in_store": len(expected),
            "turns_stored_once": sum(1 for d in expected if stored.get(d) == 1),
            "turns_stored_on_right_side_with_fed_text": side_ok,
        }

    def shown_turns(self, e: Any, side: str) -> set[str]:
        """The turns of exchange ``e`` on the side(s) its block line shows
        (``memory.block.shown_sides``)."""
        caller, reply = self.memory.block.shown_sides(e, side)
        return {d for d in self.exchange_turns(e) if (caller if d in self.caller_turns else reply)}

    def exchange_turns(self, e: Any) -> set[str]:
        out: set[str] = set()
        for item_id in e.item_ids:
            out.update(self.item_turns.get(item_id, []))
        return out

    def exchange_line(self, e: Any, side: str = "both", query: str = "") -> str:
        """The block line of one exchange showing ``side`` (Recall.sides) for
        ``query``, rendered by the generated format_block."""
        return self.memory.format_block(
            self.memory.Recall(exchanges=(e,), sides=(side,)), max_chars=10**9, query=query
        ).splitlines()[-1]

    async def ask(
        self, store: Any, caller_id: str, call_id: str, question: str, at: float
    ) -> tuple[str, float]:
        """One fresh call, the question as the caller's typed turn: the memory block the
        model got for it and how long llm_node waited for it."""
        model = self.ScriptedLLM(["", ""])
        async with self.AgentSession(llm=model) as session:
            assistant = await self.agent.build_agent(
                session, store, caller_id, call_id, model=model
            )
            call = assistant.memory
            call.capturing = False  # the question is not saved: the store stays as replayed
            call.max_block_chars = self.max_block_chars
            on_date(call, at)
            waits_of_call = self.timed(call)
            await self._start(session, assistant)
            await asyncio.wait_for(session.run(user_input=question), 30)
        await call.aclose("participant hung up")
        collect_call_garbage()
        blocks = self.memory_blocks(model.requests[-1])
        if len(blocks) > 1:
            raise RuntimeError(f"{call_id}: {len(blocks)} memory blocks in one request")
        waits = [w for text, w in waits_of_call if text == question]
        if len(model.requests) != 2 or len(waits) != 1:
            raise RuntimeError(
                f"{call_id}: {len(model.requests)} requests, {len(waits)} recalls for the question"
            )
        return (blocks[0] if blocks else ""), waits[0]

    def asked(self, c: Conversation, qa: dict[str, Any]) -> str:
        """The question as this replay asks it: in the caller's voice
        (``in_callers_voice``) or, with voice "third", as LoCoMo words it."""
        q = str(qa["question"])
        return in_callers_voice(q, c.caller, c.other) if self.voice == "caller" else q

    async def recency_block(self, store: Any, caller_id: str) -> str:
        profile = await store.profile(caller_id)
        newest = list(reversed(await store.exchanges(caller_id)))[:RECENCY_EXCHANGES]
        recall = self.memory.Recall(profile.facts, profile.summaries, tuple(newest))
        return self.memory.format_block(recall, max_chars=self.max_block_chars)

    async def conversation(self, record: dict[str, Any]) -> dict[str, Any]:
        c = load_conversation(record)
        caller_id = self.memory.validate_caller_id(c.sample_id)
        store = self.memory.open_store(self.store_url(c.sample_id))
        t0 = time.perf_counter()
        try:
            integrity = await self.replay(c, store, caller_id)
            await put_profile(self.memory, store, caller_id, c, self.facts)
            t1 = time.perf_counter()
            questions: list[dict[str, Any]] = []
            skipped = 0
            for n, qa in enumerate(c.qa):
                ev = evidence_ids(qa.get("evidence", []), c.fed)
                if not ev:
                    skipped += 1
                    continue
                q = self.asked(c, qa)
                asked_at = c.sessions[-1].at + 86400.0  # a day after the last session
                block, wait = await self.ask(store, caller_id, f"{c.sample_id}-q{n}", q, asked_at)
                rec: dict[str, Any] = {
                    "sample_id": c.sample_id,
                    "qa_index": n,
                    "category": int(qa["category"]),
                    "evidence": ev,
                    "greeting_evidence": [d for d in ev if d in c.greeting_turns],
                    "held_out": c.sample_id in self.held_out,
                    "block_chars": len(block),
                    "block_wait_ms": round(wait * 1000, 4),
                }
                for rule in RULES:
                    key = "found_in_block" + ("" if rule == "strict" else f"_{rule}")
                    rec[key] = [d for d in ev if found_in_block(c, d, block, q, rule)]
                # raw store recall: as block_for calls it (limit RECALL_EXCHANGES) and top-k
                t, cpu = time.perf_counter(), time.process_time()
                top = await store.recall(caller_id, q, limit=self.memory.RECALL_EXCHANGES)
                rec["raw_recall_ms"] = round((time.perf_counter() - t) * 1000, 4)
                # the process's CPU time (its reader thread included; nothing else of
                # the process runs meanwhile), which other processes' load inflates less
                rec["raw_recall_cpu_ms"] = round((time.process_time() - cpu) * 1000, 4)
                # Cross-check by item ids: evidence in a ranked exchange whose line (as
                # format_block renders it) survived the cap.
                lines = set(block.splitlines())
                sides = top.sides or ("both",) * len(top.exchanges)
                shown = [
                    (e, side, line)
                    for e, side in zip(top.exchanges, sides, strict=True)
                    if (line := self.exchange_line(e, side, q)) in lines
                ]
                in_block_ids: set[str] = set()
                for e, side, _ in shown:
                    in_block_ids |= self.shown_turns(e, side)
                rec["exchanges_ranked"] = len(top.exchanges)
                rec["exchanges_in_block"] = len(shown)
                rec["exchange_chars_in_block"] = sum(len(line) + 1 for *_, line in shown)
                rec["found_in_block_by_id"] = [d for d in ev if d in in_block_ids]
                for k in RECALL_KS:
                    r = await store.recall(caller_id, q, limit=k)
                    ids: set[str] = set()
                    for e in r.exchanges:
                        ids |= self.exchange_turns(e)
                    rec[f"found_at_{k}"] = [d for d in ev if d in ids]
                    rec[f"turns_in_top_{k}"] = len(ids)
                t = time.perf_counter()
                rblock = await self.recency_block(store, caller_id)
                rec["recency_build_ms"] = round((time.perf_counter() - t) * 1000, 4)
                rec["found_in_recency_block"] = [d for d in ev if found_in_block(c, d, rblock, q)]
                questions.append(rec)
            t2 = time.perf_counter()
        finally:
            await store.close()
        return {
            "sample_id": c.sample_id,
            "integrity": integrity,
            "questions_total": len(c.qa),
            "questions_skipped_no_evidence": skipped,
            "replay_seconds": t1 - t0,
            "questions_seconds": t2 - t1,
            "questions": questions,
        }


# -- Reporting ------------------------------------------------------------------------


def score(rec: dict[str, Any], key: str) -> float:
    return len(rec[key]) / len(rec["evidence"])


def kept_score(rec: dict[str, Any]) -> float | None:
    """Evidence in the block among the turns the product keeps (a greeting the caller
    never answered is not saved); None when no evidence turn of the question is kept."""
    kept = [d for d in rec["evidence"] if d not in rec["greeting_evidence"]]
    return len([d for d in rec["found_in_block"] if d in kept]) / len(kept) if kept else None


def summarise(questions: list[dict[str, Any]]) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = {
        str(k): [q for q in questions if q["category"] == k] for k in CATEGORIES
    }
    groups["1-4"] = [q for q in questions if q["category"] in (1, 2, 3, 4)]
    groups["1-5"] = list(questions)
    keys = {
        "block": "found_in_block",
        "block_lenient": "found_in_block_lenient",
        "block_whole": "found_in_block_whole",
        "block_by_id": "found_in_block_by_id",
        "recency_block": "found_in_recency_block",
        **{f"recall@{k}": f"found_at_{k}" for k in RECALL_KS},
    }
    out: dict[str, Any] = {}
    for name, qs in groups.items():
        row: dict[str, Any] = {"n": len(qs)}
        for label, key in keys.items():
            row[label] = round(statistics.fmean(score(q, key) for q in qs), 4) if qs else None
        kept = [s for q in qs if (s := kept_score(q)) is not None]
        row["block_kept_evidence"] = round(statistics.fmean(kept), 4) if kept else None
        row["n_kept"] = len(kept)
        for k in RECALL_KS:
            row[f"mean_turns_in_top_{k}"] = (
                round(statistics.fmean(q[f"turns_in_top_{k}"] for q in qs), 2) if qs else None
            )
        out[name] = row
    return out


def latency(questions: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for label, key in (
        ("block_wait", "block_wait_ms"),
        ("raw_recall", "raw_recall_ms"),
        ("raw_recall_cpu", "raw_recall_cpu_ms"),
        ("recency_build", "recency_build_ms"),
    ):
        v = [q[key] for q in questions]
        out[label] = {
            "p50_ms": round(pct(v, 50), 3),
            "p95_ms": round(pct(v, 95), 3),
            "max_ms": round(max(v), 3) if v else None,
        }
    return out


def block_stats(questions: list[dict[str, Any]]) -> dict[str, Any]:
    """What the agent's blocks were made of (means over questions)."""
    if not questions:
        return {}
    return {
        "mean_block_chars": round(statistics.fmean(q["block_chars"] for q in questions), 1),
        "mean_exchange_chars": round(
            statistics.fmean(q["exchange_chars_in_block"] for q in questions), 1
        ),
        "mean_exchanges_ranked": round(
            statistics.fmean(q["exchanges_ranked"] for q in questions), 2
        ),
        "mean_exchanges_in_block": round(
            statistics.fmean(q["exchanges_in_block"] for q in questions), 2
        ),
        "block_chars_p50_p90_p99_max": [
            pct([q["block_chars"] for q in questions], p) for p in (50, 90, 99, 100)
        ],
        "block_chars_histogram": {
            f"{lo}-{lo + 499}": sum(1 for q in questions if lo <= q["block_chars"] < lo + 500)
            for lo in range(0, max(q["block_chars"] for q in questions) + 1, 500)
        },
        "exchanges_in_block_histogram": {
            str(n): sum(1 for q in questions if q["exchanges_in_block"] == n)
            for n in sorted({q["exchanges_in_block"] for q in questions})
        },
    }


def markdown(summary: dict[str, Any], lat: dict[str, Any], cap: int, recall_limit: int) -> str:
    def f(x: Any) -> str:
        return "-" if x is None else f"{x:.3f}"

    rows = [
        (
            f"Evidence in the memory block (cap {cap} chars) and recall@k of ranked exchanges "
            "(1 exchange ~ 2 turns; the BM25 reference ranks single turns)"
        ),
        "",
        "| category | n | agent block (strict) | lenient (old rule) | whole turns only | recency block | R@5 exch. | R@10 exch. | BM25 ref. R@5 turns | R@10 turns |",  # noqa: E501 (a table row)
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key, row in summary.items():
        name = f"{key} {CATEGORIES[int(key)]}" if key.isdigit() else f"overall {key}"
        ref = BASELINE_BM25.get(int(key) if key.isdigit() else key)
        refs = f"{ref[1]:.3f} | {ref[2]:.3f}" if ref else "- | -"
        rows.append(
            f"| {name} | {row['n']} | {f(row['block'])} | {f(row['block_lenient'])} | "
            f"{f(row['block_whole'])} | {f(row['recency_block'])} | "
            f"{f(row['recall@5'])} | {f(row['recall@10'])} | {refs} |"
        )
    if not lat:
        return "\n".join(rows)
    rows += [
        "",
        "| latency per question | p50 ms | p95 ms | max ms |",
        "| --- | --- | --- | --- |",
    ]
    names = {
        "block_wait": "llm_node wait for the block (CallMemory.block_for)",
        "raw_recall": f"store.recall (limit {recall_limit}, as block_for)",
        "raw_recall_cpu": "store.recall, CPU time of the process",
        "recency_build": "recency block build",
    }
    for key, v in lat.items():
        rows.append(f"| {names[key]} | {v['p50_ms']:.2f} | {v['p95_ms']:.2f} | {v['max_ms']:.2f} |")
    return "\n".join(rows)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    records = json.loads(Path(args.data).read_text())
    if args.conversations:
        records = records[: args.conversations]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="locomo-recall-") as tmp:
        tmp_path = Path(tmp)
        t = time.perf_counter()
        scheme = (args.memory_url or "sqlite:").split(":", 1)[0].split("+", 1)[0]
        backend = {"postgresql": "postgres"}.get(scheme, scheme)
        project = render_project(tmp_path / "render", backend)
        render_s = time.perf_counter() - t
        db_dir = tmp_path / "db"
        db_dir.mkdir()
        os.environ["MEMORY_TIMEZONE"] = "UTC"  # session dates are read as UTC
        held_out = {s for s in args.held_out.split(",") if s}
        bench = Bench(
            project,
            db_dir,
            args.max_block_chars,
            args.memory_url,
            held_out,
            facts=args.facts,
            voice=args.voice,
        )
        warnings = _count_warnings()
        # The parsed data set and the imported libraries are long-lived: keep them out
        # of the collector's scans (see collect_call_garbage).
        gc.collect()
        gc.freeze()
        convs = []
        for record in records:
            result = await bench.conversation(record)
            convs.append(result)
            integ = result["integrity"]
            print(
                f"{result['sample_id']}: {integ['calls']} calls, {integ['runs']} turns replayed "
                f"in {result['replay_seconds']:.1f} s; {len(result['questions'])} questions in "
                f"{result['questions_seconds']:.1f} s; stored once {integ['turns_stored_once']}"
                f"/{integ['turns_expected_in_store']}",
                file=sys.stderr,
            )
    questions = [q for c in convs for q in c["questions"]]
    summary = summarise(questions)
    by_group = {
        "tuning": summarise([q for q in questions if not q["held_out"]]),
        "held_out": summarise([q for q in questions if q["held_out"]]),
    }
    lat = latency(questions)
    greeting_pairs = sum(len(q["greeting_evidence"]) for q in questions)
    greeting_turns = len({(q["sample_id"], d) for q in questions for d in q["greeting_evidence"]})
    greeting_questions = sum(1 for q in questions if q["greeting_evidence"])
    total_seconds = time.perf_counter() - started
    result = {
        "benchmark": "locomo_recall",
        "dataset": {
            "file": str(args.data),
            "name": "LoCoMo (Maharana et al., ACL 2024, arXiv:2402.17753)",
            "license": "CC BY-NC 4.0",
            "conversations": [c["sample_id"] for c in convs],
            "held_out": sorted(held_out),
        },
        "template": template_revision(),
        "config": {
            "memory_backend": backend,
            "max_block_chars": bench.max_block_chars,
            "recall_exchanges": bench.memory.RECALL_EXCHANGES,
            "recall_budget_s": bench.memory.RECALL_BUDGET,
            "recency_exchanges_offered": RECENCY_EXCHANGES,
            "facts_on_file": bench.facts,
            "voice": bench.voice,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "platform": platform.platform(),
        },
        "counts": {
            "questions_total": sum(c["questions_total"] for c in convs),
            "questions_scored": len(questions),
            "questions_skipped_no_evidence": sum(c["questions_skipped_no_evidence"] for c in convs),
            "evidence_turns_scored": sum(len(q["evidence"]) for q in questions),
            "greeting_evidence_turns": greeting_turns,
            "greeting_evidence_question_turn_pairs": greeting_pairs,
            "questions_with_greeting_evidence": greeting_questions,
            "memory_warnings": dict(warnings),
            "replay": {
                k: sum(c["integrity"][k] for c in convs)
                for k in (convs[0]["integrity"] if convs else {})
            },
        },
        "summary": summary,
        "summary_by_group": by_group,
        "block_stats": block_stats(questions),
        "latency": lat,
        "timing_s": {
            "render": round(render_s, 2),
            "replay": round(sum(c["replay_seconds"] for c in convs), 2),
            "questions": round(sum(c["questions_seconds"] for c in convs), 2),
            "total": round(total_seconds, 2),
        },
        "conversations": [{k: v for k, v in c.items() if k != "questions"} for c in convs],
        "questions": questions,
    }
    return result


def template_revision() -> dict[str, Any]:
    """The commit the template was rendered from and whether its files had local changes."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", "-C", str(REPO), *args],
                check=False,
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    changed = git(
        "status", "--porcelain", "--", "{{cookiecutter.project_slug}}", "hooks", "cookiecutter.json"
    )
    return {"commit": git("rev-parse", "HEAD") or None, "template_files_changed": bool(changed)}


def _count_warnings() -> dict[str, int]:
    """Count warnings the generated memory module logs (slow or failed recalls/saves)."""
    counts: dict[str, int] = {}

    class Counter(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            key = record.getMessage()[:80]
            counts[key] = counts.get(key, 0) + 1

    logging.getLogger("memory").addHandler(Counter(logging.WARNING))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", required=True, type=Path, help="path to locomo_dev.json (never copied here)"
    )
    parser.add_argument(
        "--conversations", type=int, default=0, help="only the first N conversations (default: all)"
    )
    parser.add_argument("--out", type=Path, help="write the JSON results here")
    parser.add_argument(
        "--memory-url",
        help="run on this store, shared by every conversation, with the template rendered"
        " for the backend its scheme names (default: one SQLite file per conversation)."
        " It must be empty: e.g. a fresh PostgreSQL schema after"
        " `uv run -m memory.postgres_store upgrade`",
    )
    parser.add_argument(
        "--held-out",
        default="conv-26,conv-48",
        help="conversations kept out of tuning, reported apart (comma-separated sample ids)",
    )
    parser.add_argument(
        "--facts",
        type=int,
        default=len(PROFILE),
        choices=range(len(PROFILE) + 1),
        metavar=f"0..{len(PROFILE)}",
        help=f"facts on file for every caller (default {len(PROFILE)}, the honest replay;"
        " 0: the old replay's empty profile)",
    )
    parser.add_argument(
        "--voice",
        choices=("caller", "third"),
        default="caller",
        help="questions in the caller's voice (default) or as LoCoMo words them (the old replay)",
    )
    parser.add_argument(
        "--per-question",
        action="store_true",
        help="also write one record per question to --out (ids and scores, no text; ~0.5 MB)",
    )
    parser.add_argument(
        "--max-block-chars",
        type=int,
        default=None,
        help="memory block cap (default: the generated memory.MAX_BLOCK_CHARS)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    result = asyncio.run(run(args))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        body = {k: v for k, v in result.items() if k != "questions"}
        text = json.dumps(body, indent=1)
        if args.per_question:  # one compact line per question
            rows = ",\n  ".join(json.dumps(q, separators=(",", ":")) for q in result["questions"])
            text = text[:-2] + ',\n "questions": [\n  ' + rows + "\n ]\n}"
        args.out.write_text(text + "\n")
    cfg = result["config"]
    held = ", ".join(result["dataset"]["held_out"]) or "none"
    for title, summary in (
        (f"Conversations used for tuning (all but {held})", result["summary_by_group"]["tuning"]),
        (f"Held out from tuning ({held})", result["summary_by_group"]["held_out"]),
        ("All conversations", result["summary"]),
    ):
        print(f"\n## {title}\n")
        lat = result["latency"] if title.startswith("All") else {}
        print(markdown(summary, lat, cfg["max_block_chars"], cfg["recall_exchanges"]))
    c = result["counts"]
    print(
        f"\n{c['questions_scored']} questions scored ({c['questions_skipped_no_evidence']} without usable "  # noqa: E501
        f"evidence skipped); evidence turns never saved (a greeting the caller never answered): {c['greeting_evidence_turns']} "  # noqa: E501
        f"distinct turns, in {c['questions_with_greeting_evidence']} questions; memory warnings: "
        f"{sum(c['memory_warnings'].values())}; run time {result['timing_s']['total']:.0f} s"
    )
    b = result["block_stats"]
    if b:
        print(
            f"agent block: mean {b['mean_block_chars']:.0f} chars, of which exchange lines "
            f"{b['mean_exchange_chars']:.0f}; exchanges shown {b['mean_exchanges_in_block']:.2f} "
            f"of {b['mean_exchanges_ranked']:.2f} ranked"
        )
        print(
            "block size, chars: p50 / p90 / p99 / max "
            + " / ".join(str(v) for v in b["block_chars_p50_p90_p99_max"])
            + "; histogram "
            + ", ".join(f"{k}: {v}" for k, v in b["block_chars_histogram"].items())
        )


if __name__ == "__main__":
    main()
