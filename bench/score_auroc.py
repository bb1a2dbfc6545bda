"""How well the one-prefill verifier (`verify: {kind: score}`, router/upstream/scoring.py) separates the fast
tier's right calls from its wrong ones, and what it adds per call.

    python -m bench.score_auroc FAST_URL FULL_URL [CASES ...] [--stride N] [--via echo|forced] [--out FILE]

FAST_URL answers each case as the fast tier would (through the local policy's fast tier settings:
greedy, tool_choice auto, a system message when the case has none; a call written as text salvaged
as the proxy does); every answer holding a tool
call is scored by FULL_URL's model (`--via echo`: llama-cpp-python, one completions request with echo +
top logprobs; `--via forced`: llama-server, /apply-template then /completion forcing the call). Outcomes come
from router/eval/cases.py. Reports AUROC (right calls should score higher), the accuracy of
accepting at the best threshold, and the scoring request's latency (p50/p95). The same for the fast
answer's own token logprobs (`own`, `own_min`: what `verify: {kind: logprobs}` reads, at no cost;
llama-cpp-python returns none for tool calls, llama-server does). Start the servers
first (router.commands.llama.LlamaServer / full_server), e.g. as tests/e2e does.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

import orjson

from router.commands.eval.cases import load_cases, offered_names, score
from router.core.checks.validate import Validator
from router.core.checks.verify import logprob_measure
from router.flow.salvage import salvaged_message
from router.policy.model import Tier, Timeouts
from router.upstream.openai_compat import OpenAICompatUpstream
from router.upstream.scoring import measure

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
SLOW = Timeouts(connect=5.0, first_token=900.0, total=900.0)  # a 1.5B prefill on a busy 2-core machine


def auroc(positives: list[float], negatives: list[float]) -> float | None:
    """P(a random right call scores above a random wrong one); ties count half."""
    if not positives or not negatives:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def best_threshold(scored: list[tuple[float, bool]]) -> tuple[float, float]:
    """(threshold, accuracy of 'accept iff score >= threshold') maximising that accuracy."""
    best = (0.0, sum(not ok for _, ok in scored) / len(scored))  # threshold 0: reject everything
    for t, _ in scored:
        acc = sum((s >= t) == ok for s, ok in scored) / len(scored)
        if acc > best[1]:
            best = (t, acc)
    return best


async def run(fast_url: str, full_url: str, case_files: list[Path], stride: int, via: str) -> dict[str, Any]:
    fast = OpenAICompatUpstream(
        "fast", Tier(model="openai/gemma-3-270m", api_base=fast_url, warm_connections=0, timeouts=SLOW)
    )
    full = OpenAICompatUpstream(
        "full",
        Tier(
            model="openai/qwen2.5-coder-1.5b",
            api_base=full_url,
            warm_connections=0,
            timeouts=SLOW,
            tools_system=SYSTEM["content"],  # as policies/local.yaml's full tier
        ),
    )
    await fast.start(warm=False)
    await full.start(warm=False)
    rows: list[dict[str, Any]] = []
    validator = Validator()
    try:
        for path in case_files:
            for case in load_cases(path)[::stride]:
                if case.accept is None:
                    continue  # "no call is right": nothing to score
                messages = case.messages if case.messages[0].get("role") == "system" else [SYSTEM, *case.messages]
                body = {"model": "x", "messages": messages, "tools": case.tools, "tool_choice": "auto"}
                body |= {"temperature": 0, "max_tokens": 128, "logprobs": True}  # for `kind: logprobs`
                loop = asyncio.get_running_loop()
                reply = await fast.complete(body, loop.time() + 300)
                choice = reply.data["choices"][0]
                message = choice["message"]
                # as the proxy does (salvage is on in every route): a call written as text becomes a tool call
                fixed = salvaged_message(message, body, offered_names(case.tools), validator)
                message = fixed or message
                own = {"own": logprob_measure(choice, "mean"), "own_min": logprob_measure(choice, "min")}
                outcome = score(case, message).kind
                calls = message.get("tool_calls") or []
                if not calls:
                    rows.append({"id": case.id, "outcome": outcome, "score": None, "min": None, "seconds": None, **own})
                    continue
                started = time.monotonic()
                body = {"messages": case.messages, "tools": case.tools}
                values = await full.score_call(body, calls[0], loop.time() + 900, None, via)
                took = time.monotonic() - started
                mean = measure(values, "mean") if values else None
                low = measure(values, "min") if values else None
                row = {"id": case.id, "outcome": outcome, "score": mean, "min": low, "seconds": took, **own}
                rows.append({**row, "call": calls[0].get("function"), "logprobs": values})
                print(f"{case.id:<24} {outcome:<14} mean {mean} min {low}  {took:.1f} s", flush=True)
    finally:
        await fast.close()
        await full.close()
    seconds = sorted(r["seconds"] for r in rows if r["seconds"] is not None)
    out: dict[str, Any] = {"answers": len(rows)}
    for key in ("score", "min", "own", "own_min"):
        scored = [(r[key], r["outcome"] == "correct") for r in rows if r[key] is not None and r["seconds"] is not None]
        threshold, accuracy = best_threshold(scored) if scored else (None, None)
        out[{"score": "mean"}.get(key, key)] = {
            "scored_calls": len(scored),
            "right_calls": sum(ok for _, ok in scored),
            "auroc": auroc([s for s, ok in scored if ok], [s for s, ok in scored if not ok]),
            "best_threshold": threshold,
            "accuracy_at_best_threshold": accuracy,
            "accept_all_accuracy": sum(ok for _, ok in scored) / len(scored) if scored else None,
        }
    return {
        **out,
        "score_seconds_p50": statistics.median(seconds) if seconds else None,
        "score_seconds_p95": seconds[min(len(seconds) - 1, int(0.95 * len(seconds)))] if seconds else None,
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fast_url")
    parser.add_argument("full_url")
    parser.add_argument("cases", nargs="*", type=Path, default=[Path("evals/tool_calls.jsonl")])
    parser.add_argument("--stride", type=int, default=1)
    parser.add_argument("--via", choices=("echo", "forced"), default="echo")
    parser.add_argument("--out", type=Path, default=Path("bench/results/score_auroc.json"))
    args = parser.parse_args()
    result = asyncio.run(run(args.fast_url, args.full_url, args.cases, args.stride, args.via))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(orjson.dumps({k: v for k, v in result.items() if k != "rows"}, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
