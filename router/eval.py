"""`agent-router eval CASES --url URL`: run tool-call cases through the proxy (or straight to a tier)
and score what comes back.

Case format — JSONL, one object per line (blank lines and lines starting with `#` are skipped):

    {"id": "weather-01",                       # unique; optional (default: "line-N")
     "tags": ["weather", "call"],              # optional, free-form
     "messages": [{"role": "user", "content": "What's the weather in Paris?"}],
     "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {...}}}],
     "tool_choice": "auto",                    # optional; sent as given
     "accept": [                               # accepted answers: any one matching is right
        {"tool": "get_weather",                # a tool name, or a list of names
         "args": {"city": {"regex": "(?i)paris"}}}
     ]}

`"accept": "text"` means no call is right: the answer must be text (any text, even empty).
An argument's expected value is one of
    a plain JSON value     equal after normalising: strings stripped and case-folded, numbers
                           compared as numbers (a numeric string counts as its number)
    {"regex": "..."}       `re.search` on the value's text (str() of non-strings)
    {"one_of": [v, ...]}   equal (as above) to one of them
    {"present": true}      the argument is there, any value
Arguments not listed are not checked. Only the answer's first tool call is scored.

Outcomes of one case: `correct`; `wrong_tool`, `wrong_args`, `unneeded_call` (a well-formed call
— an offered tool, arguments a JSON object — that is wrong: these are the **false accepts**, the
wrong calls a format check lets through); `no_call` (text where a call was expected);
`malformed` (arguments not JSON, or a tool that was not offered); `error` (no answer: HTTP error
or timeout).

Run summary: accuracy (correct / cases), false-accept rate (false accepts / cases), escalation
rate (`x-router-escalated: true`), full-tier share (`x-router-tier` equal to `--full-tier`),
latency p50/p95 (client-side, whole call). Headers are absent when talking to a tier directly:
those rates are then null, unless `--assume-tier TIER` names the tier answering.

`--out DIR` keeps every run in DIR/eval.json (a run replaces an earlier one of the same label)
and draws DIR/eval.png: accuracy against full-tier share, one point per run — the cost/quality
curve of the configurations tried.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from router.verify import first_call

OUTCOMES = ("correct", "wrong_tool", "wrong_args", "unneeded_call", "no_call", "malformed", "error")
FALSE_ACCEPTS = frozenset({"wrong_tool", "wrong_args", "unneeded_call"})


class CaseError(ValueError):
    """A case file that does not follow the format; the message names file:line."""


@dataclass(frozen=True)
class Expected:
    tools: tuple[str, ...]
    args: Mapping[str, Any]


@dataclass(frozen=True)
class Case:
    id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    accept: tuple[Expected, ...] | None  # None: text is right
    tool_choice: Any = None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    kind: str
    detail: str = ""

    @property
    def false_accept(self) -> bool:
        return self.kind in FALSE_ACCEPTS


@dataclass
class Result:
    id: str
    outcome: str
    detail: str
    seconds: float
    tier: str | None = None
    escalated: bool | None = None
    mistakes: str = ""
    call: str = ""  # the first call as name(args), shortened


@dataclass
class Run:
    label: str
    url: str
    cases: int = 0
    accuracy: float = 0.0
    false_accept_rate: float = 0.0
    escalation_rate: float | None = None
    full_tier_share: float | None = None
    p50: float = 0.0
    p95: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    results: list[Result] = field(default_factory=list)


# -- the case file --------------------------------------------------------------------------------
def load_cases(path: Path) -> list[Case]:
    cases: list[Case] = []
    seen: set[str] = set()
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path}:{n}"
        try:
            raw = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise CaseError(f"{where}: not JSON ({exc})") from None
        case = _case(raw, where, f"line-{n}")
        if case.id in seen:
            raise CaseError(f"{where}: duplicate id {case.id!r}")
        seen.add(case.id)
        cases.append(case)
    if not cases:
        raise CaseError(f"{path}: no cases")
    return cases


def _case(raw: Any, where: str, default_id: str) -> Case:
    if not isinstance(raw, dict):
        raise CaseError(f"{where}: a case must be a JSON object")
    unknown = set(raw) - {"id", "tags", "messages", "tools", "tool_choice", "accept"}
    if unknown:
        raise CaseError(f"{where}: unknown keys {sorted(unknown)}")
    messages, tools, accept = raw.get("messages"), raw.get("tools", []), raw.get("accept")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise CaseError(f"{where}: 'messages' must be a non-empty list of objects")
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise CaseError(f"{where}: 'tools' must be a list of tool objects")
    if accept == "text":
        expected = None
    elif isinstance(accept, list) and accept:
        expected = tuple(_expected(a, where) for a in accept)
    else:
        raise CaseError(f"{where}: 'accept' must be \"text\" or a non-empty list of accepted calls")
    return Case(
        id=str(raw.get("id") or default_id),
        messages=messages,
        tools=tools,
        accept=expected,
        tool_choice=raw.get("tool_choice"),
        tags=tuple(str(t) for t in raw.get("tags") or ()),
    )


def _expected(a: Any, where: str) -> Expected:
    if not isinstance(a, dict) or set(a) - {"tool", "args"}:
        raise CaseError(f'{where}: an accepted call is {{"tool": name or [names], "args": {{...}}}}')
    tool = a.get("tool")
    names = (tool,) if isinstance(tool, str) else tuple(tool) if isinstance(tool, list) else ()
    if not names or not all(isinstance(t, str) and t for t in names):
        raise CaseError(f"{where}: 'tool' must be a name or a list of names")
    args = a.get("args") or {}
    if not isinstance(args, dict):
        raise CaseError(f"{where}: 'args' must be an object")
    for name, spec in args.items():
        if isinstance(spec, dict):
            if len(spec) != 1 or next(iter(spec)) not in ("regex", "one_of", "present"):
                raise CaseError(f"{where}: args.{name}: use a value, {{regex}}, {{one_of}} or {{present}}")
            if "regex" in spec:
                try:
                    re.compile(spec["regex"])
                except (re.error, TypeError) as exc:
                    raise CaseError(f"{where}: args.{name}: bad regex ({exc})") from None
            if "one_of" in spec and not isinstance(spec["one_of"], list):
                raise CaseError(f"{where}: args.{name}: one_of must be a list")
    return Expected(names, args)


# -- scoring -------------------------------------------------------------------------------------
def _norm(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        s = v.strip().casefold()
        try:
            f = float(s)
        except ValueError:
            return s
        return f if math.isfinite(f) else s
    if isinstance(v, list):
        return [_norm(x) for x in v]
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    return v


def value_matches(spec: Any, present: bool, value: Any) -> bool:
    """Does an argument's value (`present` False: the argument is missing) meet its expectation?"""
    if isinstance(spec, dict) and len(spec) == 1:
        ((op, arg),) = spec.items()
        if op == "present":
            return present == bool(arg)
        if not present:
            return False
        if op == "regex":
            text = value if isinstance(value, str) else orjson.dumps(value).decode()
            return re.search(arg, text) is not None
        if op == "one_of":
            return any(_norm(value) == _norm(x) for x in arg)
    return present and _norm(value) == _norm(spec)


def offered_names(tools: Sequence[Mapping[str, Any]]) -> set[str]:
    return {str((t.get("function") or {}).get("name") or t.get("name") or "") for t in tools}


def score(case: Case, message: Mapping[str, Any] | None) -> Outcome:
    """The outcome of one answer (`message`: the answer's choices[0].message; None: no answer)."""
    if message is None:
        return Outcome("error", "no answer")
    first = first_call(message)
    if first is None:
        if case.accept is None:
            return Outcome("correct")
        return Outcome("no_call", str(message.get("content") or "")[:80])
    name, raw_args = first
    if name not in offered_names(case.tools):
        return Outcome("malformed", f"tool {name!r} was not offered")
    try:
        args = orjson.loads(raw_args) if raw_args.strip() else {}
    except orjson.JSONDecodeError:
        return Outcome("malformed", "arguments are not JSON")
    if not isinstance(args, dict):
        return Outcome("malformed", "arguments are not a JSON object")
    if case.accept is None:
        return Outcome("unneeded_call", f"called {name}")
    same_tool = [e for e in case.accept if name in e.tools]
    if not same_tool:
        wanted = "|".join(t for e in case.accept for t in e.tools)
        return Outcome("wrong_tool", f"called {name}, wanted {wanted}")
    problems: list[str] = []
    for e in same_tool:
        bad = [k for k, spec in e.args.items() if not value_matches(spec, k in args, args.get(k))]
        if not bad:
            return Outcome("correct")
        problems.append(", ".join(f"{k}={args.get(k, '<missing>')!r}" for k in bad))
    return Outcome("wrong_args", problems[0][:120])


# -- running -------------------------------------------------------------------------------------
def request_body(
    case: Case, model: str, max_tokens: int | None, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {**(extra or {}), "model": model, "messages": case.messages}
    if case.tools:
        body["tools"] = case.tools
    if case.tool_choice is not None:
        body["tool_choice"] = case.tool_choice
    if max_tokens:
        body["max_tokens"] = max_tokens
    return body


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(run: Run, full_tier: str) -> Run:
    results = run.results
    n = len(results)
    counts = Counter(r.outcome for r in results)
    run.cases = n
    run.outcomes = {k: counts.get(k, 0) for k in OUTCOMES}
    run.accuracy = counts["correct"] / n if n else 0.0
    run.false_accept_rate = sum(counts[k] for k in FALSE_ACCEPTS) / n if n else 0.0
    with_headers = [r for r in results if r.tier is not None]
    if with_headers:
        run.escalation_rate = sum(bool(r.escalated) for r in with_headers) / len(with_headers)
        run.full_tier_share = sum(r.tier == full_tier for r in with_headers) / len(with_headers)
    else:
        run.escalation_rate = run.full_tier_share = None
    seconds = [r.seconds for r in results if r.outcome != "error"]
    run.p50, run.p95 = percentile(seconds, 0.5), percentile(seconds, 0.95)
    return run


async def run_cases(
    cases: Sequence[Case],
    url: str,
    *,
    label: str,
    model: str = "auto",
    key: str | None = None,
    max_tokens: int | None = 128,
    call_timeout: float = 120.0,
    concurrency: int = 1,
    full_tier: str = "full",
    assume_tier: str | None = None,
    extra: Mapping[str, Any] | None = None,
    on_result: Callable[[Result], None] | None = None,
) -> Run:
    """Send every case to `url` (an OpenAI base URL ending in /v1) and score the answers."""
    import aiohttp

    endpoint = url.rstrip("/") + "/chat/completions"
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    run = Run(label=label, url=url)
    slots = asyncio.Semaphore(concurrency)

    async def one(session: aiohttp.ClientSession, case: Case) -> Result:
        async with slots:
            started = time.perf_counter()
            message: dict[str, Any] | None = None
            tier = escalated = None
            mistakes = detail = ""
            try:
                body = orjson.dumps(request_body(case, model, max_tokens, extra))
                async with session.post(endpoint, data=body, headers=headers) as resp:
                    raw = await resp.read()
                    tier = resp.headers.get("x-router-tier", assume_tier)
                    if "x-router-escalated" in resp.headers:
                        escalated = resp.headers["x-router-escalated"] == "true"
                    mistakes = resp.headers.get("x-router-mistakes", "")
                    if resp.status == 200:
                        data = orjson.loads(raw)
                        message = data["choices"][0]["message"]
                    else:
                        detail = f"HTTP {resp.status}: {raw[:100].decode('utf-8', 'replace')}"
            except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
                detail = f"{type(exc).__name__}: {exc}"[:120]
            seconds = time.perf_counter() - started
        outcome = score(case, message)
        first = first_call(message) if message is not None else None
        result = Result(
            id=case.id,
            outcome=outcome.kind,
            detail=detail or outcome.detail,
            seconds=round(seconds, 4),
            tier=tier,
            escalated=escalated,
            mistakes=mistakes,
            call=f"{first[0]}({first[1]})"[:160] if first else "",
        )
        if on_result is not None:
            on_result(result)
        return result

    client_timeout = aiohttp.ClientTimeout(total=call_timeout)
    async with aiohttp.ClientSession(timeout=client_timeout) as session:
        run.results = list(await asyncio.gather(*(one(session, c) for c in cases)))
    return summarize(run, full_tier)


def run_with_progress(cases: Sequence[Case], url: str, **kwargs: Any) -> Run:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
    ) as progress:
        task = progress.add_task(str(kwargs.get("label", "eval")), total=len(cases), status="")
        counts: Counter[str] = Counter()

        def advance(r: Result) -> None:
            counts[r.outcome] += 1
            progress.update(task, advance=1, status=f"correct {counts['correct']}")

        return asyncio.run(run_cases(cases, url, on_result=advance, **kwargs))


# -- reporting -----------------------------------------------------------------------------------
def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def runs_table(runs: Sequence[Run | Mapping[str, Any]], title: str = "agent-router eval") -> Any:
    from rich.table import Table

    table = Table(title=title)
    for col in ("run", "cases", "accuracy", "false accepts", "escalated", "full tier", "p50 s", "p95 s", "outcomes"):
        table.add_column(col, justify="left" if col in ("run", "outcomes") else "right")
    for r in runs:
        d = asdict(r) if isinstance(r, Run) else dict(r)
        outcomes = ", ".join(f"{k} {v}" for k, v in d.get("outcomes", {}).items() if v and k != "correct")
        table.add_row(
            d["label"],
            str(d["cases"]),
            _pct(d["accuracy"]),
            _pct(d["false_accept_rate"]),
            _pct(d.get("escalation_rate")),
            _pct(d.get("full_tier_share")),
            f"{d['p50']:.2f}",
            f"{d['p95']:.2f}",
            outcomes,
        )
    return table


def markdown_table(runs: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        "| run | cases | accuracy | false-accept rate | escalated | full-tier share | p50 s | p95 s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for d in runs:
        lines.append(
            f"| {d['label']} | {d['cases']} | {_pct(d['accuracy'])} | {_pct(d['false_accept_rate'])} | "
            f"{_pct(d.get('escalation_rate'))} | {_pct(d.get('full_tier_share'))} | {d['p50']:.2f} | {d['p95']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def save(run: Run, out: Path) -> list[dict[str, Any]]:
    """Add `run` to out/eval.json (replacing a run of the same label); return every run kept."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "eval.json"
    runs: list[dict[str, Any]] = []
    if path.exists():
        runs = [r for r in orjson.loads(path.read_bytes()).get("runs", []) if r.get("label") != run.label]
    runs.append(asdict(run))
    path.write_bytes(orjson.dumps({"runs": runs}, option=orjson.OPT_INDENT_2))
    return runs


def plot(runs: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Accuracy against full-tier share, one labelled point per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    for d in runs:
        x = d.get("full_tier_share")
        if x is None:  # straight to a tier, without --assume-tier: no cost to plot
            continue
        ax.scatter([x], [d["accuracy"]], s=40)
        ax.annotate(d["label"], (x, d["accuracy"]), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xlim(-0.05, 1.1)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("full-tier share (cost)")
    ax.set_ylabel("accuracy")
    ax.set_title("agent-router eval: accuracy vs full-tier share")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
