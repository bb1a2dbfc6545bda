#!/usr/bin/env bash
# The eval table of bench/results/eval.md: evals/tool_calls.jsonl through a proxy per configuration
# (bench/policies/eval/*.yaml), against two running llama.cpp servers: fast Gemma 3 270M, full
# Qwen2.5-Coder-1.5B-Instruct (full as router.commands.llama.full_server starts it).
#
#   FAST_PORT=8081 FULL_PORT=8082 bench/eval_gemma.sh [config ...]     # default: every config
#
# Start the servers first, e.g. `agent-router up` (then stop its proxy) or as tests/e2e/conftest.py
# does (router.commands.llama.LlamaServer, n_ctx 2048). Results accumulate in bench/results/eval/ (eval.json,
# eval.png); the markdown table is printed at the end.
#
# Every call is sent with temperature 0 (EVAL_ARGS overrides): llama-cpp-python 0.3.36 ignores
# max_tokens inside tool-call arguments, and sampled at its default 0.8 a few calls in a hundred
# run on until the context is full (minutes each on 2 cores). The `agree` verifier's extra samples
# still use its own temperature (0.8); start the servers with a small n_ctx (1024 was used) to bound
# those.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export FAST_PORT=${FAST_PORT:-8081} FULL_PORT=${FULL_PORT:-8082}
PORT=${PORT:-18090}
OUT=${OUT:-bench/results/eval}
CASES=${CASES:-evals/tool_calls.jsonl}
configs=("$@")
[ ${#configs[@]} -eq 0 ] && configs=(fast-only full-only format score judge agree logprobs)
for c in "${configs[@]}"; do
  $PY -m router serve --policy "bench/policies/eval/$c.yaml" --port "$PORT" --store memory:// --log-level warning &
  pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
  $PY -m router eval "$CASES" --url "http://127.0.0.1:$PORT/v1" --label "$c" --out "$OUT" --max-tokens 64 \
    --timeout 120 ${EVAL_ARGS:---temperature 0 --stride ${STRIDE:-3}} | tail -n 1 || true
  kill "$pid"; wait "$pid" 2>/dev/null || true
done
$PY -c "import orjson,sys; from router.commands.eval import markdown_table; print(markdown_table(orjson.loads(open('$OUT/eval.json','rb').read())['runs']))"
