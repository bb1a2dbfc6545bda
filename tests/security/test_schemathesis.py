"""schemathesis against a live proxy, from the OpenAPI description it serves at /openapi.json.

`router/api/openapi.yaml` describes its HTTP surface (chat completions, Responses, Messages and
count_tokens, models, stats, series, health, the document itself) with request
bodies typed only as far as the proxy checks them. schemathesis generates positive examples (valid
per the description: the proxy must answer without a 5xx, in a listed status and content type,
matching the response schema) and negative ones (invalid per the description: the proxy must refuse
them with a 4xx). Every 4xx must be the OpenAI error shape (Anthropic's on the Messages routes). One
proxy, in front of two fake upstreams, serves every example.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.resources import files
from typing import Any

import orjson
import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from tests.security.stack import Stack

OPENAPI = files("router.api").joinpath("openapi.yaml")
ERROR_KEYS = {"message", "type", "param", "code"}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with Stack(settings={"max_body_bytes": 256 * 1024}) as s:
        yield s


# The description, loaded once; requests go to the module's proxy (`base_url` on each call).
# (schemathesis' pytest integration, `from_fixture`, does not run under pytest 9: its lazy loader
# writes `node._nodeid`, which pytest 9 no longer has. Its Python API, `as_strategy`, is used instead.)
SCHEMA = schemathesis.openapi.from_dict(yaml.safe_load(OPENAPI.read_text()))
SCHEMA.config.update(request_timeout=20)
EXAMPLES = {GenerationMode.POSITIVE: 200, GenerationMode.NEGATIVE: 150}  # 12 operations, 6 taking input


def error_shape(response: Any, path: str) -> None:
    """Every 4xx: the OpenAI shape `{"error": {"message", "type", "param", "code"}}`, or on the Messages
    routes Anthropic's `{"type": "error", "error": {"type", "message"}}`; with a message, never the
    catch-all."""
    if not 400 <= response.status_code < 500:
        return
    ctype = response.headers.get("content-type", [""])
    assert (ctype[0] if isinstance(ctype, list) else ctype).startswith("application/json"), response.headers
    body = orjson.loads(response.content)
    if path.startswith("/v1/messages"):
        assert set(body) == {"type", "error"} and body["type"] == "error", body
        assert set(body["error"]) == {"type", "message"}, body
    else:
        assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], body
    assert "unexpectedly" not in body["error"]["message"], body


@pytest.mark.parametrize("mode", list(EXAMPLES), ids=str)
def test_openapi(stack: Stack, mode: GenerationMode) -> None:
    seen: dict[str, int] = {}

    @settings(
        max_examples=EXAMPLES[mode],
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure is reported as generated
    )
    @given(case=SCHEMA.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        # Lenient on purpose, so not "rejections" to demand: a repeated query parameter (the last value
        # counts, as in most servers) and non-ASCII digits (Python reads float("٣") as 3.0). Such
        # cases must still not fail; they just need not be refused.
        values = (case.query or {}).values()
        lenient = any(isinstance(v, list) or not str(v).isascii() for v in values)
        checks = [c for c in CHECKS if c is not negative_data_rejection] if lenient else CHECKS
        response = case.call_and_validate(base_url=stack.base, checks=checks)
        error_shape(response, case.path)
        key = f"{case.method} {case.path} {response.status_code}"
        seen[key] = seen.get(key, 0) + 1

    run()
    operations = {key.rsplit(" ", 1)[0] for key in seen}
    # every operation was exercised (root, health and models take no input — a model's id, a session's,
    # is any string: nothing negative to send them)
    paths = yaml.safe_load(OPENAPI.read_text())["paths"]
    expected = {f"{method.upper()} {path}" for path, methods in paths.items() for method in methods}
    if mode is GenerationMode.NEGATIVE:
        expected -= {"GET /", "GET /healthz", "GET /readyz", "GET /v1/models", "GET /v1/models/{model_id}",
                     "GET /openapi.json"}  # fmt: skip
    # a session's id is any string too: only its `limit` can be negative, which a run may not draw
    optional = {"GET /v1/router/sessions/{session_id}"} if mode is GenerationMode.NEGATIVE else set()
    assert len(expected) == (14 if mode is GenerationMode.POSITIVE else 8)
    assert expected - optional <= operations <= expected, (sorted(expected - operations), seen)
    print(mode, dict(sorted(seen.items())))
