"""Views of a Responses answer from a tier that serves the Responses API itself (`apis: [responses]`),
for the checks (router/upstream/openai_compat.py; the request it gets is `native_body` in
router/responses/translate.py):

    ResponsesEvents                 the tier's stream events → the chat.completion.chunk each one
                                    amounts to, for the Gate and the checks (the event rides along in
                                    `Chunk.native`); anthropic.py's MessagesEvents does the same for Messages
    completion_of(response)         a whole Response object → the chat.completion the checks read

Items the chat translation cannot carry (reasoning, built-in tool calls, annotations) reach the
client as the tier sent them; the chain the router remembers keeps text and function calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from router.errors import UpstreamError, upstream_text
from router.sessions.provenance import mark_event
from router.upstream.base import Chunk, Usage, native_event, token_count
from router.upstream.responses_tools import ToolMap, freeform_arguments
from router.upstream.speed import served

_CALLS = ("function_call", "custom_tool_call")
_DELTAS = ("response.function_call_arguments.delta", "response.custom_tool_call_input.delta")
# the events whose response says its `service_tier` (the one asked for first, the one it got at the end)
_SAY_TIER = ("response.created", "response.completed", "response.incomplete")


def responses_usage(usage: Any) -> Usage | None:
    """A Responses `usage` as a `Usage`: `input_tokens`, of them `input_tokens_details.cached_tokens`
    reused; `output_tokens`. None where there is none."""
    if not isinstance(usage, Mapping) or "input_tokens" not in usage:
        return None
    details = usage.get("input_tokens_details")
    cached = token_count(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    prompt = token_count(usage.get("input_tokens"))
    return Usage(max(0, prompt - cached), min(cached, prompt), token_count(usage.get("output_tokens")))


def _usage(usage: Any) -> dict[str, int] | None:
    if not isinstance(usage, dict):
        return None
    return {
        "prompt_tokens": token_count(usage.get("input_tokens")),
        "completion_tokens": token_count(usage.get("output_tokens")),
    }


def _finish(response: Mapping[str, Any], calls: bool) -> str:
    if calls:
        return "tool_calls"
    incomplete = response.get("incomplete_details")
    reason = incomplete.get("reason") if isinstance(incomplete, dict) else None
    return "length" if reason == "max_output_tokens" else "content_filter" if reason == "content_filter" else "stop"


def _function(item: Mapping[str, Any], tools: ToolMap) -> dict[str, str]:
    """A call item as the chat function call the checks read: the name the chat body knows the tool by."""
    name = tools.chat_name(item.get("namespace"), str(item.get("name", "")))
    custom = item.get("type") == "custom_tool_call"
    return {
        "name": name,
        "arguments": freeform_arguments(item.get("input")) if custom else str(item.get("arguments", "")),
    }


def completion_of(response: Mapping[str, Any], tools: ToolMap | None = None) -> dict[str, Any]:
    tools = tools or ToolMap()
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in response.get("output") or ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            texts += [str(p.get("text", "")) for p in item.get("content") or () if isinstance(p, dict)]
        elif item.get("type") in ("function_call", "custom_tool_call"):
            calls.append({"id": str(item.get("call_id", "")), "type": "function", "function": _function(item, tools)})
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    choice = {"index": 0, "message": message, "finish_reason": _finish(response, bool(calls))}
    model = str(response.get("model", ""))
    out: dict[str, Any] = {"id": str(response.get("id", "")), "object": "chat.completion", "model": model,
                           "choices": [choice]}  # fmt: skip
    if (usage := _usage(response.get("usage"))) is not None:
        out["usage"] = usage
    return out


class ResponsesEvents:
    """Responses stream events → the chat.completion.chunk each one amounts to (`chunk`)."""

    def __init__(
        self, tier: str, secrets: tuple[str, ...], tools: ToolMap | None = None, tag: str | None = None
    ) -> None:
        self.tier = tier
        self.tag = tag  # marks the items' encrypted_content with the tier's model (router/sessions/provenance.py)
        self.tools = tools or ToolMap()
        self.secrets = secrets
        self.id = ""
        self.model = ""
        self._calls: dict[int, int] = {}  # output_index of a function_call item → tool-call index
        self._args: set[int] = set()  # tool calls whose arguments have started
        self._custom: set[int] = set()  # tool calls of freeform tools (arguments: {"input": "..."})
        self._texted: set[int] = set()  # output_index of message items whose text has been passed on
        self._texted_unindexed = False  # text deltas came without an output_index: no message is whole

    def chunk(self, raw: bytes) -> Chunk:
        event = native_event(raw, self.tier)
        if event["type"] in ("error", "response.failed"):
            detail = event.get("error") or (event.get("response") or {}).get("error") or event
            message = upstream_text(str(detail.get("message", "") if isinstance(detail, dict) else ""), self.secrets)
            raise UpstreamError(f"tier {self.tier!r} sent an error event: {message}", tier=self.tier)
        if self.tag is not None:
            mark_event(event, self.tag)
        data: dict[str, Any] = {"id": self.id, "object": "chat.completion.chunk", "model": self.model}
        delta, finish = self._delta(event, data)
        data["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
        data["id"], data["model"] = self.id, self.model
        if event["type"] in _SAY_TIER and isinstance(response := event.get("response"), dict):
            usage = responses_usage(response.get("usage"))
            return Chunk(data, None, native=event, speed=served(response.get("service_tier")), usage=usage)
        return Chunk(data, None, native=event)

    def _delta(self, event: dict[str, Any], data: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        kind = event["type"]
        response: dict[str, Any] = event["response"] if isinstance(event.get("response"), dict) else {}
        item: dict[str, Any] = event["item"] if isinstance(event.get("item"), dict) else {}
        index = event.get("output_index")
        if kind == "response.created":
            self.id, self.model = str(response.get("id", "")), str(response.get("model", ""))
            return {"role": "assistant"}, None
        if kind in ("response.completed", "response.incomplete"):
            if (usage := _usage(response.get("usage"))) is not None:
                data["usage"] = usage
            output = response.get("output")
            whole = self._whole(enumerate(output)) if isinstance(output, list) else {}
            return whole, _finish(response, bool(self._calls))
        if kind == "response.output_text.delta":
            if isinstance(index, int):
                self._texted.add(index)
            else:
                self._texted_unindexed = True
            return {"content": str(event.get("delta", ""))}, None
        whole_item = item.get("type") == "message" or (item.get("type") in _CALLS and index not in self._calls)
        if kind == "response.output_item.done" and isinstance(index, int) and whole_item:
            return self._whole([(index, item)]), None  # a message not streamed, a call not announced
        if kind == "response.output_item.added" and item.get("type") in _CALLS and isinstance(index, int):
            n = self._calls[index] = len(self._calls)
            function = {"name": _function(item, self.tools)["name"], "arguments": ""}
            if item.get("type") == "custom_tool_call":
                self._custom.add(n)
                function["arguments"] = '{"input":"'  # the input's pieces follow as a JSON string's
            return {"tool_calls": [{"index": n, "id": str(item.get("call_id", "")), "type": "function",
                                    "function": function}]}, None  # fmt: skip
        found = self._calls.get(index) if isinstance(index, int) else None
        if found is None:
            return {}, None
        n = found
        if kind in _DELTAS and (text := str(event.get("delta") or "")):
            self._args.add(n)
            return _arguments(n, orjson.dumps(text).decode()[1:-1] if n in self._custom else text), None
        if kind == "response.output_item.done" and n in self._custom:
            rest = "" if n in self._args else orjson.dumps(str(item.get("input") or "")).decode()[1:-1]
            return _arguments(n, rest + '"}'), None
        if kind == "response.output_item.done" and n not in self._args:  # a tier that sent no deltas
            self._args.add(n)
            return _arguments(n, str(item.get("arguments") or "{}")), None
        return {}, None

    def _whole(self, items: Any) -> dict[str, Any]:
        """The delta of output items that came whole (in `output_item.done`, or only in the final
        response): the text of messages whose text was not streamed, the calls not announced."""
        text: list[str] = []
        calls: list[dict[str, Any]] = []
        for index, item in items:
            if not isinstance(item, dict) or not isinstance(index, int):
                continue
            if item.get("type") == "message" and index not in self._texted and not self._texted_unindexed:
                self._texted.add(index)
                text += [str(p.get("text", "")) for p in item.get("content") or () if isinstance(p, dict)]
            elif item.get("type") in _CALLS and index not in self._calls:
                n = self._calls[index] = len(self._calls)
                self._args.add(n)
                call = {"index": n, "id": str(item.get("call_id", "")), "type": "function"}
                calls.append({**call, "function": _function(item, self.tools)})
        delta: dict[str, Any] = {"content": "".join(text)} if "".join(text) else {}
        return delta | ({"tool_calls": calls} if calls else {})


def _arguments(n: int, text: str) -> dict[str, Any]:
    return {"tool_calls": [{"index": n, "function": {"arguments": text}}]}
