"""`TierBody`: what a client's request becomes on one OpenAI-compatible tier (openai_compat.py), as
the JSON it sends: the tier's `defaults` under the request, its `params` over it, its own model id,
its `service_tier` (and never Anthropic's `speed`: no OpenAI API takes it), its `max_output_tokens`
as a cap on every output limit the request sets. A chat completions body also gets its llama.cpp
slot (`id_slot` + `cache_prompt`), `stream` as asked, "" for the `content: null` beside tool calls,
the tier's `tools_system`, and only its model's `reasoning_content` (router/sessions/reasoning_text.py);
a Responses body only its model's encrypted reasoning (router/sessions/provenance.py).
"""

from __future__ import annotations

from typing import Any

import orjson

from router.policy.model import Tier
from router.sessions.provenance import responses_input
from router.sessions.reasoning_text import own_reasoning


class TierBody:
    def __init__(self, config: Tier, tag: str) -> None:
        self.config = config
        self.tag = tag  # the provenance of the tier's model's encrypted reasoning

    def chat(self, body: dict[str, Any], stream: bool, slot: int | None = None) -> bytes:
        """A chat completions body as this tier gets it; in llama-server's `slot` when one is given."""
        config = self.config
        out = self._fields({**config.defaults, **body, **config.params, "model": config.upstream_model})
        if slot is not None:  # llama.cpp's llama-server: this slot, whose kept prompt is the session's
            out["id_slot"], out["cache_prompt"] = slot, True
        if "tool_choice" not in body and not body.get("tools"):
            out.pop("tool_choice", None)  # a default tool_choice means nothing, and is an error, without tools
        if config.max_output_tokens is not None:
            _cap(out, config.max_output_tokens, "max_tokens", "max_completion_tokens")
        if stream:
            out["stream"] = True
        else:
            out.pop("stream", None)
            out.pop("stream_options", None)
        messages = out.get("messages")
        if isinstance(messages, list) and (own := own_reasoning(messages, self.tag)) is not messages:
            out["messages"] = messages = own  # only this model's reasoning_content, as it wrote it
        if isinstance(messages, list) and any(_null_beside_calls(m) for m in messages):
            out["messages"] = messages = [{**m, "content": ""} if _null_beside_calls(m) else m for m in messages]
        system = config.tools_system
        if system is not None and out.get("tools") and isinstance(messages, list) and _no_system(messages):
            out["messages"] = [{"role": "system", "content": system}, *messages]
        return orjson.dumps(out)

    def responses(self, request: dict[str, Any]) -> dict[str, Any]:
        """A Responses body as this tier gets it: its defaults and params, its model, only the fields its
        API takes (`_fields`), only its model's encrypted reasoning, its output cap."""
        config = self.config
        merged = {**config.defaults, **request, **config.params, "model": config.upstream_model}
        body = responses_input(self._fields(merged), self.tag)  # only this model's encrypted reasoning (a copy)
        if "tool_choice" not in request and not request.get("tools"):
            body.pop("tool_choice", None)
        if config.max_output_tokens is not None:
            _cap(body, config.max_output_tokens, "max_output_tokens")
        return body

    def _fields(self, out: dict[str, Any]) -> dict[str, Any]:
        """`out` with the tier's `service_tier`, and without Anthropic's `speed`."""
        out.pop("speed", None)
        if self.config.service_tier is not None:
            out["service_tier"] = self.config.service_tier
        return out


def _cap(body: dict[str, Any], cap: int, key: str, *others: str) -> None:
    """The tier's `max_output_tokens`: every limit the request sets (`key`, `others`) at most `cap`;
    none set, `key` set to it."""
    present = [k for k in (key, *others) if k in body]
    for name in present:
        asked = body[name]
        if not isinstance(asked, int) or isinstance(asked, bool) or asked > cap:
            body[name] = cap
    if not present:
        body[key] = cap


def _no_system(messages: list[Any]) -> bool:
    """A message list without a system message (what the tier option `tools_system` fills in)."""
    return not any(isinstance(m, dict) and m.get("role") == "system" for m in messages)


def _null_beside_calls(message: Any) -> bool:
    """An assistant message with tool calls and `content: null`, as the OpenAI SDK sends back its
    answers: OpenAI and vLLM take it, llama-cpp-python's server refuses it (HTTP 500), and "" means
    the same to all of them."""
    return isinstance(message, dict) and message.get("content", "") is None and bool(message.get("tool_calls"))
