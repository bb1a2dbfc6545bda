"""One client call, parsed once: the body as a dict, lower-cased headers, routing features, session
(router/sessions).

Bodies are decoded with orjson and never turned into pydantic models; fields the router does not
own are passed upstream untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from router.constants import MAX_DEPTH
from router.errors import BadRequest, ForbiddenField, InvalidJSON
from router.policy.decide import Features, features_of
from router.sessions import Session, session_of
from router.upstream.base import Native

# orjson decodes 1024 levels of nesting but encodes only 254, and the router re-encodes what it
# forwards (the Responses transport also echoes request fields inside its events, a level or two
# down): bodies nested deeper than MAX_DEPTH are refused as they are parsed, never failed on the way out.
_ENCODER_DEPTH = 254

# Fields that would let a client choose where (or with which key) the router calls out.
FORBIDDEN_FIELDS = ("api_base", "base_url", "api_key", "api_version", "custom_llm_provider", "extra_headers")


@dataclass(frozen=True, slots=True)
class Call:
    body: dict[str, Any]
    headers: Mapping[str, str]
    features: Features
    session: Session
    native: Native | None = None  # the request in the client's own API, for tiers that speak it
    reported_errors: frozenset[str] = frozenset()  # tool calls the client marked failed (`is_error`)
    # the request's `speed` / `service_tier` where neither `body` nor `native` carries them (a Responses
    # request for chat tiers, which are not sent them): what it asks of a lane (router/core/live/lanes.py)
    lane_fields: Mapping[str, Any] | None = None

    @property
    def stream(self) -> bool:
        return self.features.stream


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidJSON(f"The request body is not valid JSON ({exc.msg} at position {exc.pos}).") from None
    if not isinstance(body, dict):
        raise InvalidJSON("The request body must be a JSON object.")
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:  # fewer brackets cannot nest deeper: no re-encoding
        check_depth(body)
    return body


def check_depth(body: Any) -> None:
    """400 if `body` nests deeper than MAX_DEPTH: it is encoded once inside as many extra levels as
    the router may add, so the encoder's own limit does the counting (about 10 µs per 64 KiB)."""
    wrapped = body
    for _ in range(_ENCODER_DEPTH - MAX_DEPTH):
        wrapped = [wrapped]
    try:
        orjson.dumps(wrapped)
    except orjson.JSONEncodeError:
        raise BadRequest(f"The request body nests deeper than {MAX_DEPTH} levels.") from None


def chat_call(raw: bytes, headers: Mapping[str, str]) -> Call:
    """Parse and check a chat-completions request body."""
    body = parse_body(raw)
    refuse_forbidden(body)
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise BadRequest("'model' is required and must be a string.", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise BadRequest("'messages' must be a non-empty array of message objects.", param="messages")
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise BadRequest("'tools' must be an array of tool objects.", param="tools")
    features = features_of(body, headers)
    return Call(body, headers, features, session_of(body, headers, features.prompt_tokens))


def refuse_forbidden(body: Mapping[str, Any]) -> None:
    """400 for a field that would choose where, or with which key, the router calls out (every API)."""
    for name in FORBIDDEN_FIELDS:
        if name in body:
            raise ForbiddenField(f"The field {name!r} is not accepted: upstreams are set by the policy.", param=name)
