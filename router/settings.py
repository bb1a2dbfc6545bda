"""Process settings: every knob of the running proxy and its default, in one place.

Read from the environment (`AGENT_ROUTER_<NAME>`), overridden by CLI flags. What to route where
lives in the policy file; how the process behaves lives here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENT_ROUTER_", extra="forbid", frozen=True)

    policy: Path = Field(Path("policies/default.yaml"), description="policy file (YAML)")
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    store: str | None = Field(None, description="overrides the policy's `store` URL")

    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024, description="request bodies above → 413")
    max_concurrency: int = Field(512, ge=1, description="calls in flight above → 503 with Retry-After")
    admin_key: SecretStr | None = Field(
        default=None,
        description="the key the console (/console) and its API ask for where there are client keys, or "
        "where the router listens beyond loopback (header `x-admin-key` or `Authorization: Bearer`)",
    )
    client_keys: list[SecretStr] = Field(
        default_factory=list, description="client API keys (added to the policy's client_keys)"
    )

    responses_cache_entries: int = Field(
        10_000, ge=0, description="responses kept in process for previous_response_id (LRU; 0 = none)"
    )
    responses_cache_bytes: int = Field(
        256 * 1024 * 1024, ge=0, description="bytes of message history that cache may hold (LRU)"
    )
    # response state in the store (router/store/responses.py): previous_response_id on a new connection,
    # on another replica (Redis) or after a restart (SQLite); never with memory://. 24 h, like sticky
    # session state: a chain resumed the next working day still resolves, and each turn extends it.
    responses_store_ttl: float = Field(
        24 * 3600.0, ge=0, description="seconds a stored response resolves after its chain's last turn (0 = not stored)"
    )
    responses_store_max_entry_bytes: int = Field(
        4 * 1024 * 1024, ge=1024, description="a response bigger than this as stored (compressed) is not stored"
    )
    responses_store_max_rows: int = Field(
        100_000, ge=1, description="responses an SQLite store keeps (the soonest to expire are pruned first)"
    )
    store_prefix: str = Field(
        "agent-router:", min_length=1, description="key prefix in a Redis store; replicas sharing state use the same"
    )
    store_write_wait: float = Field(
        0.1, ge=0, description="seconds an answer's end waits for its tool calls and response to reach the store"
    )
    ws_enabled: bool = Field(
        True, description="the Responses WebSocket mode; false: its handshake is answered 426, clients use HTTP"
    )
    ws_max_message_bytes: int = Field(8 * 1024 * 1024, ge=1024, description="WebSocket messages above → close 1009")
    ws_idle_timeout: float = Field(600.0, gt=0, description="seconds with no message and no response → close 1000")
    ws_max_responses: int = Field(64, ge=1, description="responses remembered per WebSocket connection (LRU)")
    ws_max_state_bytes: int = Field(
        64 * 1024 * 1024, ge=0, description="bytes of message history one WebSocket connection may hold (LRU)"
    )
    ws_ping_interval: float = Field(20.0, gt=0, description="seconds between WebSocket pings; no pong as long → close")
    ws_max_pending: int = Field(8, ge=1, description="response.create messages queued per connection; more → 1008")
    ws_max_streams: int = Field(8, ge=1, description="stream_ids running side by side per connection; more → 1008")

    stream_keepalive: float = Field(
        15.0, ge=0, description="seconds a stream waits for its first chunk before keep-alives start (0 = never)"
    )
    warm_max_pending: int = Field(
        8, ge=1, description="sessions waiting per tier for a background prefill (core/live/warming.py; oldest dropped)"
    )
    # requests whose every attempt failed the checks, remembered so that a repeat is not run the same way
    # (the policy's `escalation.repeat`, router/core/live/repeats.py)
    repeat_max_entries: int = Field(
        4096, ge=1, description="exhausted requests remembered (by digest, LRU) to resample or refuse their repeats"
    )
    repeat_ttl: float = Field(
        600.0, gt=0, description="seconds an exhausted request is remembered after its last run failed"
    )

    # shadow mode (a route's `shadow` option, router/core/live/shadow.py): background work, bounded
    shadow_max_inflight: int = Field(
        8, ge=1, description="shadow comparisons in flight; a sampled call beyond it is dropped and counted"
    )
    shadow_timeout: float = Field(120.0, gt=0, description="seconds for one shadow comparison (reference + judge)")
    shadow_max_sample_bytes: int = Field(
        256 * 1024, ge=1024, description="requests larger than this (as JSON) are not shadowed: samples stay small"
    )

    # limits against slow, silent and hostile peers (router/connections.py, api/__init__.py, upstream/http.py);
    # each one that trips counts in router_limits_tripped{limit} on /metrics
    max_connections: int = Field(
        0, ge=0, description="open client connections; beyond it an idle one is closed, else 503 (0: ¾ of the fd limit)"
    )
    defer_accept: float = Field(
        10.0, ge=0, description="seconds a new connection that sent nothing stays with the kernel (0: off)"
    )
    header_timeout: float = Field(10.0, gt=0, description="seconds to receive a request's headers → closed")
    max_header_bytes: int = Field(64 * 1024, ge=1024, description="bytes of request line and headers → 431, closed")
    body_timeout: float = Field(60.0, gt=0, description="seconds to receive a request's body → 408, closed")
    keep_alive_timeout: float = Field(5.0, gt=0, description="seconds an idle keep-alive connection stays open")
    # what a real answer needs: today's largest output budgets are 64k-128k tokens, ~0.5 Mi characters at
    # ~4 a token; as JSON, escaping at most doubles ASCII text and \u-escaped non-Latin text is ~1.5 MiB.
    # The bounds below leave 2x room or more over that; answers with `logprobs` over thousands of tokens,
    # audio, or a large `n` can need more (raise them). They bound the memory and the time a tier that never
    # stops may take from a call before it escalates; the CPU such a tier costs is the rate it sends at.
    upstream_max_body_bytes: int = Field(
        4 * 1024 * 1024, ge=1024, description="an upstream JSON answer or SSE event over this → upstream error"
    )
    upstream_max_answer_chars: int = Field(
        1024 * 1024, ge=1024, description="characters of text and tool-call arguments one stream may carry"
    )
    # upstream WebSocket mode (a tier's `websocket: true`, router/upstream/responses_ws.py): one socket per
    # client session and tier; an upstream message is bounded as an SSE event (upstream_max_body_bytes),
    # the connect and each event by the tier's timeouts (connect, first_token)
    upstream_ws_max_sockets: int = Field(
        256, ge=0, description="upstream WebSockets open at once, all tiers; beyond: the idlest closed, else HTTP"
    )
    upstream_ws_idle_timeout: float = Field(
        300.0, gt=0, description="seconds an upstream WebSocket stays open without a turn"
    )
    upstream_ws_max_age: float = Field(
        3300.0, gt=0, description="seconds an upstream WebSocket is used, then reopened (OpenAI ends one at 60 min)"
    )
    upstream_ws_fallback: float = Field(
        300.0, ge=0, description="seconds a session stays on HTTP with a tier after its WebSocket failed"
    )
    max_schema_bytes: int = Field(
        256 * 1024, ge=1024, description="a tool schema bigger than this (as JSON) → 400: too costly to check"
    )
    max_pattern_bytes: int = Field(
        1024 * 1024, ge=1024, description="compiled size of one schema regex over this → 400: too costly to check"
    )
    max_costly_patterns: int = Field(
        1024, ge=0, description="schema regexes remembered as too costly (LRU): refused on sight, not compiled again"
    )
    shutdown_grace: float = Field(
        5.0, gt=0, description="seconds calls may finish after SIGTERM; streams still open then get an error ending"
    )
    accept_drain: float = Field(
        0.2, ge=0, description="seconds after SIGTERM with no connection queued before the port closes (none taken)"
    )
    shutdown_idle_wait: float = Field(
        0.5, ge=0, description="seconds after SIGTERM an idle connection stays for a last request (connection: close)"
    )

    # what routing is worth (router/core/live/ledger.py, router/store/calls.py)
    ledger_max_sessions: int = Field(
        10_000, ge=1, description="sessions whose running totals one process keeps in memory (least recent dropped)"
    )

    # OpenTelemetry traces (router/core/live/tracing.py): on or off by the standard OTEL_* variables alone
    otel_capture_content: bool = Field(
        False, description="put prompts and answers in trace spans (gen_ai.input/output.messages); off: never"
    )

    reload_policy: bool = Field(True, description="watch the policy file and reload it on change")
    warm_up: bool = Field(True, description="open upstream connections at start-up")
    log_level: str = "info"
    # the log's lines to stderr (router/log_output.py): info lines are written in batches, warnings at once
    log_flush_interval: float = Field(
        0.5, ge=0, description="seconds an info line may wait to be written with others (0: each at once)"
    )
    log_buffer_bytes: int = Field(64 * 1024, ge=0, description="characters of info lines waiting → written at once")
    access_log: bool = Field(True, description="one info line per request: method, path, status, tier, route, ms")


def default(name: str) -> Any:
    """A setting's default, for code that also runs without a Settings (a store, a validator, a client)."""
    return Settings.model_fields[name].default
