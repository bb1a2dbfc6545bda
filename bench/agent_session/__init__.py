"""A scripted agent session on the local tiers (`up`'s llama-server models): per turn, time to first
token, whole time, and the prompt tokens each server evaluated and reused, in configurations side
by side — fast only, full only, routed — with and without session slots and warm prefixes.

    python -m bench.agent_session capture         the agents' real first requests → prompts/*.json
    python -m bench.agent_session run [--prompt claude-code] [--turns 6] [--config NAME ...]
                                                  → bench/results/agent_session/{NAME}.json, report.md, ttft.png

capture.py  Claude Code's and Codex's first main-loop request, as the tier sees it, through the router
            in front of the fake upstream (the CLIs from node_modules/)
run.py      the session: turn 1 is the captured request, each later turn adds the model's call and a
            ~300-token tool result; every configuration starts its own servers (a cold start)
report.py   the table and the plot
"""
