"""An agentic eval of the router: whole multi-step tasks, run by real agent loops through it.

    python -m bench.agentic run --config NAME [--loop L ...] [--limit N] [--base URL | --tiers FAST:FULL]
    python -m bench.agentic report [--out DIR]
    python -m bench.agentic tasks                 the tasks, their kinds and levels

world.py     the starting state: files, calendar, contacts, inbox, issues (plain data, by formula)
env.py       the Environment: 30 executable tools over that state, deterministic and resettable
checks.py    exact checks of a finished task (final state and answer); no model judges
tasks.py     the tasks (74): prompt, tools offered, kinds, level, checks, a correct and a wrong
             scripted run
loops.py     the agent loops: the OpenAI Agents SDK (Responses, chat completions) and a plain
             Anthropic Messages tool loop; what each call's x-router-* headers said
run.py       configurations (policies/), the router to run them against, resumable JSONL results
report.py    the tables, summary.json and the plot
oracle.py    an upstream that plays each task's scripted solution (chat completions): the harness's
             own check that a correct run is scored a success through every loop and the router

docs/agentic.md says what it measures and how to run it.
"""
