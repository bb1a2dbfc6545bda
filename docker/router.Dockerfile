# The agent-router proxy. Build context: the repository root (see .dockerignore).
#   docker build -f docker/router.Dockerfile -t agent-router .
FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY router ./router
# otel: OpenTelemetry traces, on when OTEL_* variables configure them (off otherwise).
# A fixed numeric uid, so that Kubernetes' runAsNonRoot can check it (deploy/k8s).
RUN pip install '.[otel]' \
 && useradd --system --uid 10001 --home-dir /app router \
 && mkdir -p /app/.agent-router \
 && chown router /app/.agent-router
COPY policies ./policies
USER 10001
EXPOSE 8080
ENTRYPOINT ["agent-router"]
CMD ["serve", "--policy", "/app/policies/compose.yaml", "--host", "0.0.0.0", "--port", "8080"]
