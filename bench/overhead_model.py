"""`bench.overhead`'s vocabulary: the run's counts, its requests, its targets and what each measured."""

from __future__ import annotations

import datetime as dt
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.load import Result
from bench.validate import TOOLS

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
POLICIES = BENCH / "policies"
QUICK_OUT = Path(tempfile.gettempdir()) / "bench-overhead-quick"
console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)


@dataclass(frozen=True)
class Counts:
    warm: int  # warm-up requests before the c=1 loop (not counted)
    warm_load: int  # warm-up requests before the c=16 and stream loops
    c1: int  # non-streaming at concurrency 1 (all rounds together)
    c16: int  # non-streaming at concurrency 16
    stream: int  # streaming at concurrency 8
    budget: float  # seconds per phase and target (all rounds): a loop stops taking requests once its
    # share is spent (soft); a loop aborts the run after 2x its share + 30 s (hard)
    rounds: int  # every phase runs `rounds` times over all targets, interleaved; samples are pooled
    profile_seconds: int = 10


NORMAL = Counts(warm=200, warm_load=100, c1=2100, c16=5100, stream=1500, budget=45.0, rounds=3)
QUICK = Counts(warm=30, warm_load=30, c1=200, c16=500, stream=200, budget=15.0, rounds=1, profile_seconds=5)
MESSAGES = [
    {"role": "system", "content": "You are a coding agent. Answer briefly."},
    {"role": "user", "content": "Say hello to the benchmark in about a dozen words."},
]
CHAT: dict[str, Any] = {"model": "fake", "messages": MESSAGES, "max_tokens": 64}
TOOL_CHAT: dict[str, Any] = {**CHAT, "tools": TOOLS, "tool_choice": "auto"}
HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench-dummy"}
IDLE_WARMUP = 10  # requests before the idle RSS reading


@dataclass(frozen=True)
class Target:
    key: str
    label: str
    tools: bool  # the tool-calling load instead of the plain one


@dataclass
class Measured:
    target: Target
    c1: Result
    c16: Result
    stream: Result
    rss_idle: float | None = None  # MiB
    rss_after: float | None = None
    startup: float | None = None  # seconds until healthy
    cpu_ms: dict[str, float] = field(default_factory=dict)  # phase → CPU ms per request of the subject
    others: dict[str, float] = field(default_factory=dict)  # phase → cores used by unrelated processes


@dataclass
class Run:
    counts: Counts
    started: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    measured: dict[str, Measured] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    profile: list[str] = field(default_factory=list)  # markdown lines
    seconds: float = 0.0
    candidates: list[tuple[Target, Path]] = field(default_factory=list)  # agent-router from other trees, both loads
    out: Path = RESULTS  # where the report, the plot and the flame graphs go
    litellm: bool = True  # --no-litellm: agent-router alone (no comparison, no verdicts, no plot)
    spans: int | None = None  # spans the OTLP sink received from the traced agent-router

    def order(self) -> list[str]:
        """Row order: plain load (direct, LiteLLM, agent-router, traced, candidates), then the tool load
        (direct, agent-router, candidates)."""
        keys = [DIRECT.key, *([LITELLM.key] if self.litellm else []), ROUTER.key, QUIET.key, TRACED.key]
        keys += [t.key for t, _ in self.candidates if not t.tools]
        return [*keys, DIRECT_TOOLS.key, ROUTER_ON.key, *[t.key for t, _ in self.candidates if t.tools]]


DIRECT = Target("direct", "direct to the fake", tools=False)
DIRECT_TOOLS = Target("direct-tools", "direct to the fake, tools", tools=True)
ROUTER = Target("agent-router", "agent-router", tools=False)
TRACED = Target("agent-router-traced", "agent-router, OTel traces on", tools=False)
QUIET = Target("agent-router-quiet", "agent-router, access log off", tools=False)
ROUTER_ON = Target("agent-router-validate", "agent-router, tools", tools=True)
LITELLM = Target("litellm", "LiteLLM proxy", tools=False)
