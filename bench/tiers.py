"""The two-tier eval of bench/results/tiers.md: real llama.cpp servers, a real proxy per configuration,
both case sets (evals/tool_calls.jsonl, the 110 own cases; evals/bfcl_cases.jsonl, BFCL-style).

    python -m bench.tiers run LABEL... [--server xllamacpp|source] [--fast-server xllamacpp|source] [--stride N]
    python -m bench.tiers score [--fast-server xllamacpp|source] [--stride N]
    python -m bench.tiers compose FORMAT_LABEL FULL_LABEL SCORES.json THRESHOLD LABEL
    python -m bench.tiers table

LABEL is a configuration of bench/policies/eval/ (fast-only, full-only, format, score, judge, agree).
Each run starts its two llama.cpp servers on free loopback ports (fast: Qwen2.5-Coder-0.5B; full:
Qwen2.5-Coder-1.5B) on an engine of router/commands/llama.py's ENGINES (`xllamacpp`, the prebuilt
default; `source`, llama-server built by scripts/build-llama-server), `--jinja`, then per
configuration `python -m router serve` with that policy, the cases through it (greedy,
`--max-tokens 128`), then stops everything. The earlier runs in bench/results/tiers.md also had
Gemma 3 270M on llama-cpp-python's server (`python`), both gone since.

`compose` builds "routed + score" from recorded answers instead of running it (greedy decoding:
the same request gets the same answer): the `format` run's answers, where its fast tier delivered a
call that bench/score_auroc.py scored below THRESHOLD (the same fast answer: its outcome must
match, else the case is dropped and counted) taking the full-only run's answer instead. Its latency
is the sum of the recorded ones — format + scoring + full only — an upper bound: the full answer
after a rejection re-reads the prompt that llama-server's slot already holds from the scoring.

Each server gets cores // 2 threads, as `agent-router up` runs them. Results accumulate in
bench/results/tiers/eval.json (a run is replaced by one of the same label), each run with the load
average at its start and end. Run the whole thing under `nice -n 19` on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from router.commands.eval import Result, Run, load_cases, markdown_table, run_cases, summarize
from router.commands.llama import ENGINES, Child, LlamaServer
from router.commands.models import QWEN25_CODER_0_5B, QWEN25_CODER_1_5B, ensure

ROOT = Path(__file__).resolve().parents[1]
CASES = (ROOT / "evals" / "tool_calls.jsonl", ROOT / "evals" / "bfcl_cases.jsonl")
OUT = ROOT / "bench" / "results" / "tiers"
N_CTX = 4096
READY = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def server(tier: str, model_name: str, engine: str, port: int, logs: Path) -> Child:
    """One llama.cpp server, not started: model qwen05 (Qwen2.5-Coder-0.5B) or qwen15 (1.5B)."""
    packed = {"qwen05": QWEN25_CODER_0_5B, "qwen15": QWEN25_CODER_1_5B}[model_name]
    return LlamaServer(tier, ensure(packed), port, logs / f"{tier}.log", alias=packed.alias, n_ctx=N_CTX, engine=engine)


def port_of(child: Child) -> int:
    return int(child.ready_url.split(":")[2].split("/")[0])


def eval_config(config: str, label: str, fast: Child, full: Child, stride: int, logs: Path) -> dict[str, Any]:
    port = free_port()
    env = {**os.environ, "FAST_PORT": str(port_of(fast)), "FULL_PORT": str(port_of(full))}
    policy = ROOT / "bench" / "policies" / "eval" / f"{config}.yaml"
    argv = [sys.executable, "-m", "router", "serve", "--policy", str(policy), "--port", str(port)]
    argv += ["--store", "memory://", "--log-level", "warning"]
    proxy = Child("proxy", argv, f"http://127.0.0.1:{port}/healthz", logs / f"proxy-{config}.log", env=env)
    cases = [c for path in CASES for c in load_cases(path)[::stride]]
    with proxy:
        proxy.wait_ready(60.0)
        started, before = time.time(), load()

        def progress(r: Any) -> None:
            print(
                f"  {label:<28} {r.id:<22} {r.outcome:<14} {r.tier or '-':<5} {r.seconds:6.1f} s  {r.call[:60]}",
                flush=True,
            )

        run = asyncio.run(
            run_cases(cases, f"http://127.0.0.1:{port}/v1", label=label, max_tokens=128, call_timeout=900.0,
                      extra={"temperature": 0}, on_result=progress)
        )  # fmt: skip
    data = asdict(run)
    data |= {
        "stride": stride,
        "load_before": before,
        "load_after": load(),
        "minutes": round((time.time() - started) / 60, 1),
    }
    return data


def save(run: dict[str, Any]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "eval.json"
    runs = [r for r in orjson.loads(path.read_bytes())["runs"] if r["label"] != run["label"]] if path.exists() else []
    path.write_bytes(orjson.dumps({"runs": [*runs, run]}, option=orjson.OPT_INDENT_2))


def run(configs: list[str], fast_name: str, kind: str, fast_kind: str, stride: int) -> None:
    logs = OUT / "logs" / f"{fast_name}-{fast_kind}-{kind}"
    fast = server("fast", fast_name, fast_kind, free_port(), logs)
    full = server("full", "qwen15", kind, free_port(), logs)
    try:
        for child in (fast, full):
            child.start()
        for child in (fast, full):
            child.wait_ready(READY)
        for config in configs:
            label = f"{config} · fast {fast_name}{f' ({fast_kind})' if fast_kind != kind else ''} · {kind}"
            result = eval_config(config, label, fast, full, stride, logs)
            save(result)
            print(markdown_table([result]), flush=True)
    finally:
        for child in (fast, full):
            child.stop()


def score(fast_name: str, fast_kind: str, stride: int) -> Path:
    """bench/score_auroc.py with its servers: fast as given, full Qwen2.5-Coder-1.5B on the default engine (forced)."""
    from bench.score_auroc import run as score_run

    logs = OUT / "logs" / f"score-{fast_name}-{fast_kind}"
    fast = server("fast", fast_name, fast_kind, free_port(), logs)
    full = server("full", "qwen15", ENGINES[0], free_port(), logs)
    out = OUT / f"score-{fast_name}-{fast_kind}.json"
    try:
        for child in (fast, full):
            child.start()
        for child in (fast, full):
            child.wait_ready(READY)
        before = load()
        url = f"http://127.0.0.1:{port_of(fast)}/v1", f"http://127.0.0.1:{port_of(full)}/v1"
        result = asyncio.run(score_run(*url, list(CASES), stride, "forced"))
    finally:
        for child in (fast, full):
            child.stop()
    result |= {"stride": stride, "load_before": before, "load_after": load()}
    out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(orjson.dumps({k: v for k, v in result.items() if k != "rows"}, option=orjson.OPT_INDENT_2).decode())
    return out


def compose(format_label: str, full_label: str, scores: Path, threshold: float, label: str) -> dict[str, Any]:
    runs = {r["label"]: r for r in orjson.loads((OUT / "eval.json").read_bytes())["runs"]}
    routed, full = runs[format_label], {r["id"]: r for r in runs[full_label]["results"]}
    scored = {r["id"]: r for r in orjson.loads(scores.read_bytes())["rows"]}
    results, dropped = [], []
    for r in routed["results"]:
        s = scored.get(r["id"])
        if r["tier"] == "fast" and r["call"] and r["outcome"] != "error":
            if s is None or s["score"] is None or s["outcome"] != r["outcome"] or r["id"] not in full:
                dropped.append(r["id"])
                continue
            if s["score"] < threshold:
                f = full[r["id"]]
                r = {
                    **f,
                    "seconds": r["seconds"] + s["seconds"] + f["seconds"],
                    "escalated": True,
                    "mistakes": "verifier_reject",
                }
            else:
                r = {**r, "seconds": r["seconds"] + s["seconds"]}
        results.append(r)
    run = summarize(Run(label=label, url="composed", results=[Result(**x) for x in results]), "full")
    data = asdict(run) | {"stride": routed["stride"], "load_before": "composed", "load_after": "composed", "minutes": 0}
    return data | {"composed_from": [format_label, full_label, str(scores), threshold], "dropped": dropped}


def table() -> str:
    runs = orjson.loads((OUT / "eval.json").read_bytes())["runs"]
    lines = [
        markdown_table(runs),
        "",
        "| run | stride | cases | load at start → end | minutes |",
        "|---|---:|---:|---|---:|",
    ]
    lines += [
        f"| {r['label']} | {r['stride']} | {r['cases']} | {r['load_before']} → {r['load_after']} | {r['minutes']} |"
        for r in runs
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("configs", nargs="+")
    r.add_argument("--fast", choices=("qwen05",), default="qwen05")
    r.add_argument("--server", choices=ENGINES, default=ENGINES[0])
    r.add_argument("--fast-server", choices=ENGINES, help="the fast tier's (default: --server)")
    r.add_argument("--stride", type=int, default=1)
    sc = sub.add_parser("score")
    sc.add_argument("--fast", choices=("qwen05",), default="qwen05")
    sc.add_argument("--fast-server", choices=ENGINES, default=ENGINES[0])
    sc.add_argument("--stride", type=int, default=1)
    c = sub.add_parser("compose")
    c.add_argument("format_label")
    c.add_argument("full_label")
    c.add_argument("scores", type=Path)
    c.add_argument("threshold", type=float)
    c.add_argument("label")
    sub.add_parser("table")
    args = parser.parse_args()
    if args.cmd == "run":
        run(args.configs, args.fast, args.server, args.fast_server or args.server, args.stride)
    elif args.cmd == "score":
        score(args.fast, args.fast_server, args.stride)
    elif args.cmd == "compose":
        result = compose(args.format_label, args.full_label, args.scores, args.threshold, args.label)
        save(result)
        print(markdown_table([result]), f"dropped: {result['dropped']}")
    else:
        print(table())


if __name__ == "__main__":
    main()
