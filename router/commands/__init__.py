"""Offline tools: the `agent-router` command (cli.py), `agent-router qa` (qa.py), `report`
(report.py), `up` with two local llama.cpp servers (local.py, llama.py), and `eval` (eval/).
None of them is on a call's path."""
