"""The report of bench.agent_session: per configuration, each turn's tier, time to first token,
whole time and prompt tokens (evaluated / reused / added by the turn), a summary against the goals,
and a plot of time to first token per turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

TTFT_FAST, TTFT_FULL, EVALUATED_OVER_NEW = 10.0, 15.0, 1.1  # the goals (issue 24): later turns


def _sessions(out: Path, prompt: str) -> list[dict[str, Any]]:
    from bench.agent_session.run import CONFIGS

    found = {p.stem.removeprefix(f"{prompt}-"): orjson.loads(p.read_bytes()) for p in out.glob(f"{prompt}-*.json")}
    return [found[name] for name in CONFIGS if name in found]


def write(out: Path, prompt: str) -> None:
    sessions = _sessions(out, prompt)
    lines = [f"# An agent session on the local tiers ({prompt}'s prompt)", "",
             "`python -m bench.agent_session run --prompt " + prompt + "`: fast = Qwen2.5-Coder-0.5B, full = "
             "Qwen2.5-Coder-1.5B, each on llama-server with one thread, 4 slots of 32k tokens (as `./scripts/up`). "
             "Turn 1 is the agent's captured first request (a cold prompt); each later turn adds the model's call "
             "and a ~300-token tool result. Tokens are the servers' own counts. Goals from turn 2 on: evaluated "
             f"≤ {EVALUATED_OVER_NEW} times the turn's new tokens; time to first token ≤ {TTFT_FAST:.0f} s on fast, "
             f"≤ {TTFT_FULL:.0f} s on a turn that lands on full.", "",
             "| configuration | cold turn 1: TTFT s | later turns on fast: TTFT s (max) | turns on full: TTFT s (max) "
             "| evaluated ÷ new, later turns (max) | wall s | RSS MiB fast / full |",
             "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for s in sessions:
        later = s["turns"][1:]
        fast = [t["ttft"] for t in later if t["tier"] == "fast"]
        full = [t["ttft"] for t in later if t["tier"] == "full"]
        ratio = max((t["evaluated"] / t["new"] for t in later if t["new"] > 0), default=0.0)
        rss = s.get("rss_mib") or {}
        lines.append(f"| {s['config']} | {s['turns'][0]['ttft']:.1f} | {max(fast, default=0):.1f} | "
                     f"{max(full, default=0):.1f} | {ratio:.2f} | {s['wall']:.0f} | "
                     f"{rss.get('fast', 0)} / {rss.get('full', 0)} |")  # fmt: skip
    for s in sessions:
        head = "| turn | tier | TTFT s | total s | evaluated | reused | new |"
        lines += ["", f"## {s['config']}: {s['what']}", "", head, "|---:|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {t['turn']} | {t['tier']} | {t['ttft']:.2f} | {t['total']:.2f} | {t['evaluated']} | "
                  f"{t['reused']} | {t['new']} |" for t in s["turns"]]  # fmt: skip
    (out / f"{prompt}.md").write_text("\n".join(lines) + "\n")
    _plot(out / f"{prompt}.png", sessions)


def _plot(path: Path, sessions: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for s in sessions:
        turns = s["turns"]
        ax.plot([t["turn"] for t in turns], [max(t["ttft"], 0.1) for t in turns], marker="o", label=s["config"])
    ax.axhline(TTFT_FULL, color="grey", linestyle=":", linewidth=1)
    ax.set_yscale("log")
    ax.set_xlabel("turn")
    ax.set_ylabel("time to first token, s (log)")
    ax.set_title("Agent session on the local tiers: time to first token per turn")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
