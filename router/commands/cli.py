"""`agent-router`: serve | check | up | models | fake-upstream | stats | report | eval | qa."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="A routing proxy for tool-using agents.")

PolicyArg = Annotated[Path, typer.Option("--policy", "-p", help="policy file (YAML)")]


def _logging(level: str, settings: Any = None) -> None:
    from router.serve import configure_logging

    configure_logging(level, settings)


@app.command()
def serve(
    policy: PolicyArg = Path("policies/default.yaml"),
    host: Annotated[str, typer.Option(help="bind address")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 8080,
    store: Annotated[str | None, typer.Option(help="store URL; overrides the policy's")] = None,
    log_level: Annotated[str, typer.Option(help="debug | info | warning | error")] = "info",
    ssl_certfile: Annotated[Path | None, typer.Option(help="TLS certificate (serve https/wss)")] = None,
    ssl_keyfile: Annotated[Path | None, typer.Option(help="TLS private key")] = None,
    access_log: Annotated[
        bool | None, typer.Option("--access-log/--no-access-log", help="one line per request (default: on)")
    ] = None,
    workers: Annotated[int, typer.Option(min=1, help="worker processes on one port (not with memory://)")] = 1,
) -> None:
    """Run the proxy. Agents point their OpenAI base URL at http://HOST:PORT/v1."""
    import asyncio

    from router.app import create_app, store_problem
    from router.connections import server_options
    from router.policy.loader import PolicyError
    from router.serve import runner
    from router.settings import Settings

    # an option not given leaves the setting to its environment variable (AGENT_ROUTER_STORE, ...)
    given: dict[str, Any] = {k: v for k, v in (("access_log", access_log), ("store", store)) if v is not None}
    settings = Settings(policy=policy, host=host, port=port, log_level=log_level, **given)
    _logging(log_level, settings)
    try:
        asgi = create_app(settings)
        run = runner(settings, asgi, workers)  # connections.serve(asgi, ...), or N worker processes
    except (PolicyError, ValueError) as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from None
    if problem := asyncio.run(store_problem(settings, asgi.state.runtime.policy.current)):
        typer.echo(problem, err=True)
        raise typer.Exit(1)
    run(
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,  # the app logs each request itself (router/api/access.py), with its tier and route
        ssl_certfile=str(ssl_certfile) if ssl_certfile else None,
        ssl_keyfile=str(ssl_keyfile) if ssl_keyfile else None,
        **server_options(settings),  # connection limits, keep-alive, shutdown grace, WebSocket limits
    )


@app.command()
def check(files: Annotated[list[Path], typer.Argument(help="policy files")]) -> None:
    """Validate policy files; print every error as file:line and exit 1 if any. For a valid one, say
    where each tier's prices come from (declared, the table, local) and warn of a hosted tier with none."""
    from router.core.live.prices import Prices
    from router.policy.loader import check_file, load_policy

    failed = False
    for path in files:
        errors = check_file(path)
        for line in errors:
            typer.echo(line, err=True)
        if errors:
            failed = True
            continue
        typer.echo(f"{path}: ok")
        policy = load_policy(path)
        prices = Prices(policy)
        for tier, source in prices.sources.items():
            typer.echo(f"  price of {tier}: {source}")
        typer.echo(f"  baseline: {policy.baseline_tier or 'none (no escalation chain, no baseline:)'}")
        for tier, rates in prices.rates.items():
            if rates is None:
                typer.echo(f"{path}: warning: tier {tier!r} is hosted and has no price: its calls' cost is not "
                           "shown (declare `price:`)", err=True)  # fmt: skip
    raise typer.Exit(1 if failed else 0)


@app.command("fake-upstream")
def fake_upstream(
    port: Annotated[int, typer.Option(help="port")] = 9100,
    host: Annotated[str, typer.Option(help="bind address")] = "127.0.0.1",
    seed: Annotated[int, typer.Option(help="seed of the deterministic answers")] = 0,
    bad_tool_rate: Annotated[
        list[str] | None,
        typer.Option(help="share of broken tool calls: RATE, or TOOL=RATE for one tool (repeatable)"),
    ] = None,
    error_rate: Annotated[float, typer.Option(help="share of HTTP 500 answers")] = 0.0,
    delay_ms: Annotated[float, typer.Option(help="delay before the response headers")] = 0.0,
    first_token_delay_ms: Annotated[float, typer.Option(help="streams: delay before the first event")] = 0.0,
    chunk_delay_ms: Annotated[float, typer.Option(help="streams: delay between events")] = 0.0,
    reset_mid_stream: Annotated[float, typer.Option(help="share of streams cut after a few chunks")] = 0.0,
    reset_before_first_byte: Annotated[float, typer.Option(help="share of connections closed unanswered")] = 0.0,
    malformed_sse: Annotated[float, typer.Option(help="share of streams with a garbage event")] = 0.0,
    endless: Annotated[bool, typer.Option(help="every answer never ends (a hostile upstream)")] = False,
    loop: Annotated[bool, typer.Option(help="every chat answer goes round in a loop until max_tokens")] = False,
    greedy: Annotated[
        bool, typer.Option(help="the same request, the same answer (unless it asks for temperature > 0)")
    ] = False,
    model: Annotated[str, typer.Option(help="model name it reports")] = "fake-model",
    finish_after: Annotated[
        int, typer.Option(help="answer text once the conversation holds this many tool results (0: never)")
    ] = 0,
    prefer_tool: Annotated[
        list[str] | None, typer.Option(help="call this tool when offered (repeatable: the first offered wins)")
    ] = None,
    n_ctx: Annotated[
        int, typer.Option(help="a context in tokens, as llama-server's: longer prompts refused (0: no limit)")
    ] = 0,
    fast_model: Annotated[
        list[str] | None,
        typer.Option(help="Messages models (globs) with fast mode, `speed: fast` (repeatable; default: every model)"),
    ] = None,
    fast_rate_limit: Annotated[
        int, typer.Option(help="fast-mode requests taken per minute before a 429 (0: no limit)")
    ] = 0,
    effort_without_thinking: Annotated[
        str, typer.Option(help="the highest Messages effort taken beside thinking off: max, high, ... or none")
    ] = "max",
) -> None:
    """Run the deterministic, fault-injecting fake model server (OpenAI-compatible)."""
    from router.fake import FakeConfig, run_fake

    rate, per_tool = 0.0, {}
    for item in bad_tool_rate or []:
        tool, sep, value = item.rpartition("=")
        if sep:
            per_tool[tool] = float(value)
        else:
            rate = float(value)
    config = FakeConfig(
        seed=seed,
        model=model,
        bad_tool_rate=rate,
        bad_tool_rates=per_tool,
        error_rate=error_rate,
        delay_ms=delay_ms,
        first_token_delay_ms=first_token_delay_ms,
        chunk_delay_ms=chunk_delay_ms,
        reset_mid_stream=reset_mid_stream,
        reset_before_first_byte=reset_before_first_byte,
        malformed_sse=malformed_sse,
        finish_after=finish_after,
        prefer_tools=tuple(prefer_tool or ()),
        endless=endless,
        looping=loop,
        n_ctx=n_ctx,
        greedy=greedy,
        fast_models=tuple(fast_model) if fast_model else ("*",),
        fast_rate_limit=fast_rate_limit,
        effort_without_thinking=effort_without_thinking,
    )
    typer.echo(f"fake upstream on http://{host}:{port}/v1")
    run_fake(config, host, port)


@app.command()
def up(
    policy: PolicyArg = Path("policies/local.yaml"),
    port: Annotated[int, typer.Option(help="proxy port")] = 8080,
    fast_port: Annotated[int, typer.Option(help="llama.cpp port of the fast tier")] = 8081,
    full_port: Annotated[int, typer.Option(help="llama.cpp port of the full tier")] = 8082,
    fast_model: Annotated[
        str | None,
        typer.Option(
            help="qwen2.5-coder-0.5b (default), qwen2.5-coder-1.5b, or a GGUF path; with --fast-url, "
            "the served model to use"
        ),
    ] = None,
    full_model: Annotated[
        str | None, typer.Option(help="qwen2.5-coder-1.5b (default), qwen2.5-coder-0.5b, or a GGUF path")
    ] = None,
    fast_url: Annotated[
        str | None, typer.Option(help="a server you run for the fast tier (llama-server, vLLM, SGLang, Ollama, ...)")
    ] = None,
    full_url: Annotated[str | None, typer.Option(help="a server you run for the full tier")] = None,
    slots: Annotated[int, typer.Option(help="sessions each served model keeps at once (one for side calls)")] = 4,
    ctx: Annotated[
        int | None, typer.Option(help="tokens per slot (default: the model's context, capped by memory)")
    ] = None,
    engine: Annotated[
        str, typer.Option(help="xllamacpp (prebuilt), or source (llama-server from scripts/build-llama-server)")
    ] = "xllamacpp",
) -> None:
    """Run the local demo: a fast and a full tier (by default Qwen2.5-Coder-0.5B and -1.5B on llama.cpp;
    any GGUF, or a server you run) and the proxy."""
    from router.commands.local import run_local

    _logging("info")
    code = run_local(
        policy=policy, port=port, fast_port=fast_port, full_port=full_port, fast_model=fast_model,
        full_model=full_model, fast_url=fast_url, full_url=full_url, slots=slots, ctx=ctx, engine=engine,
    )  # fmt: skip
    raise typer.Exit(code)


@app.command()
def models() -> None:
    """Assemble the local demo's models (fast: Qwen2.5-Coder-0.5B, full: Qwen2.5-Coder-1.5B) into the
    cache once, with progress, and print their paths. Later runs take seconds (nothing is hashed again)."""
    from router.commands.models import QWEN25_CODER_0_5B, QWEN25_CODER_1_5B, ensure

    try:
        typer.echo(f"fast  {ensure(QWEN25_CODER_0_5B)}")
        typer.echo(f"full  {ensure(QWEN25_CODER_1_5B)}")
    except (OSError, ValueError) as exc:  # ModelError is a ValueError
        typer.echo(f"cannot prepare the models: {exc}", err=True)
        raise typer.Exit(1) from None


UrlOpt = Annotated[str, typer.Option("--url", help="the running proxy")]
KeyOpt = Annotated[str | None, typer.Option("--key", envvar="AGENT_ROUTER_KEY", help="client API key, if required")]


@app.command()
def stats(
    url: UrlOpt = "http://127.0.0.1:8080",
    window: Annotated[float | None, typer.Option(help="seconds (default: all time)")] = None,
    key: KeyOpt = None,
) -> None:
    """Print calls, mistakes and mistake rates per tier, route and tool."""
    from router.commands.report import print_stats

    with _reaching(url):
        print_stats(url, window, key)


@app.command()
def sessions(
    url: UrlOpt = "http://127.0.0.1:8080",
    limit: Annotated[int, typer.Option(help="sessions listed at most", min=1, max=1000)] = 20,
    key: KeyOpt = None,
) -> None:
    """Print the recent sessions: calls per tier, escalations, sticky calls, mistakes, cost against the baseline."""
    from router.commands.sessions import print_sessions

    with _reaching(url):
        print_sessions(url, limit, key)


@app.command()
def statusline() -> None:
    """Claude Code's status line: reads its status JSON on stdin, prints this session's routing in one line."""
    from router.commands.sessions import statusline as line

    typer.echo(line())


@app.command()
def report(
    out: Annotated[Path, typer.Option("--out", help="output directory")],
    url: UrlOpt = "http://127.0.0.1:8080",
    since: Annotated[float, typer.Option(help="seconds of history")] = 3600.0,
    bucket: Annotated[int, typer.Option(help="seconds per point")] = 60,
    key: KeyOpt = None,
) -> None:
    """Write an HTML page with plots: mistake rates per tier and tool, escalation rate, latency."""
    from router.commands.report import write_report

    with _reaching(url):
        page = write_report(url, out, since, bucket, key)
    typer.echo(f"report written to {page}")


@app.command("eval")
def eval_(
    cases: Annotated[Path, typer.Argument(help="case file (JSONL; format in router/commands/eval/cases.py)")],
    url: Annotated[str, typer.Option("--url", help="OpenAI base URL: the proxy's …/v1, or a tier's")] = (
        "http://127.0.0.1:8080/v1"
    ),
    model: Annotated[str, typer.Option(help="model name sent (auto: the proxy's routes decide)")] = "auto",
    label: Annotated[str | None, typer.Option(help="name of this run (default: the model name)")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="keep the run in DIR/eval.json, plot DIR/eval.png")] = None,
    max_tokens: Annotated[int, typer.Option(help="max_tokens of each call (0: not sent)")] = 128,
    timeout: Annotated[float, typer.Option(help="seconds per call")] = 120.0,
    concurrency: Annotated[int, typer.Option(min=1, help="calls in flight")] = 1,
    full_tier: Annotated[str, typer.Option(help="tier counted as the expensive one")] = "full",
    assume_tier: Annotated[
        str | None, typer.Option(help="tier answering when there are no x-router-* headers (straight to a tier)")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="only the first N cases")] = None,
    stride: Annotated[int, typer.Option(min=1, help="every Nth case only (a spread-out subset)")] = 1,
    temperature: Annotated[float | None, typer.Option(help="temperature sent with every call")] = None,
    key: KeyOpt = None,
) -> None:
    """Score tool-call cases: accuracy, false accepts, escalations, full-tier share, latency."""
    from rich.console import Console

    from router.commands.eval import CaseError, load_cases, plot, run_with_progress, runs_table, save

    try:
        loaded = load_cases(cases)
    except (CaseError, OSError) as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from None
    loaded = loaded[::stride][:limit] if limit else loaded[::stride]
    run = run_with_progress(
        loaded,
        url,
        label=label or model,
        model=model,
        key=key,
        max_tokens=max_tokens or None,
        call_timeout=timeout,
        concurrency=concurrency,
        full_tier=full_tier,
        assume_tier=assume_tier,
        extra={"temperature": temperature} if temperature is not None else None,
    )
    console = Console()
    console.print(runs_table([run]))
    if out is not None:
        runs = save(run, out)
        png = plot(runs, out / "eval.png")
        console.print(runs_table(runs, title=f"all runs in {out / 'eval.json'}"))
        console.print(f"plot: {png}")
    if run.outcomes.get("error") == run.cases:
        typer.echo(f"{url}: no case got an answer", err=True)
        raise typer.Exit(1)


@app.command()
def qa(
    policy: PolicyArg = Path("policies/default.yaml"),
    route: Annotated[
        list[str] | None, typer.Option("--route", "-r", help="route to check (repeatable; default: all with samples)")
    ] = None,
    samples: Annotated[int, typer.Option(min=1, help="newest samples per route")] = 100,
    pass_rate: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="recommend the sampled tier at this pass rate or above")
    ] = 0.9,
    min_samples: Annotated[int, typer.Option(min=1, help="judged samples needed before recommending")] = 20,
    tier: Annotated[str | None, typer.Option(help="reference tier (default: shadow.tier or escalation.to)")] = None,
    judge: Annotated[str | None, typer.Option(help="judging tier (default: shadow.judge, else the reference)")] = None,
    rejudge: Annotated[bool, typer.Option(help="judge again samples that hold a verdict")] = False,
    store: Annotated[str | None, typer.Option(help="store URL; overrides the policy's")] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="samples judged at once")] = 4,
    timeout: Annotated[float, typer.Option(help="seconds per sample (reference answer and verdict)")] = 120.0,
    as_json: Annotated[bool, typer.Option("--json", help="print the reports as JSON")] = False,
) -> None:
    """Distillation QA: judge a route's sampled answers against the full tier; recommend a tier."""
    import asyncio

    from router.commands.qa import Options, main

    options = Options(samples, pass_rate, min_samples, tier, judge, rejudge, concurrency, timeout)
    raise typer.Exit(asyncio.run(main(policy, store, route or [], options, as_json)))


@contextlib.contextmanager
def _reaching(url: str) -> Iterator[None]:
    """One clear line instead of a traceback when the proxy cannot be read."""
    import urllib.error

    try:
        yield
    except urllib.error.HTTPError as exc:
        typer.echo(f"{url}: HTTP {exc.code} {exc.reason}" + (" (pass --key)" if exc.code == 401 else ""), err=True)
        raise typer.Exit(1) from None
    except (urllib.error.URLError, OSError) as exc:
        typer.echo(f"{url}: cannot reach the proxy ({getattr(exc, 'reason', exc)})", err=True)
        raise typer.Exit(1) from None


if __name__ == "__main__":
    app()
