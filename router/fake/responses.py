"""Wire format of the fake upstream's OpenAI Responses endpoint (POST /v1/responses), JSON and SSE.

Pure functions from an ``Answer`` (see ``fake_tools``) to bytes, as ``fake_wire`` does for chat
completions and Anthropic Messages; ``router.fake`` serves them.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from router.fake.tools import Answer

Tools = list[tuple[str, Any]]
MALFORMED_RESPONSES = b"event: response.output_text.delta\ndata: {not json\n\n"


def responses_tools(body: dict[str, Any]) -> tuple[Tools, str | None]:
    """The offered function and custom tools — the request's `tools`, then those of its
    `additional_tools` input items (Codex offers its tools that way), a namespace's by their own
    names — and the forced tool name; no tools when ``tool_choice`` is "none"."""
    choice = body.get("tool_choice")
    offered = offered_tools(body)
    if not offered or choice == "none":
        return [], None
    out = [(name, params) for name, (params, _, _) in offered.items()]
    chosen = choice.get("name") if isinstance(choice, dict) and choice.get("type") == "function" else None
    return out, chosen if isinstance(chosen, str) else None


_FREEFORM = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}


def offered_tools(body: dict[str, Any]) -> dict[str, tuple[Any, str, str | None]]:
    """Each callable tool a request offers: name → (parameters, "function" | "custom", namespace)."""
    found: dict[str, tuple[Any, str, str | None]] = {}

    def add(tools: Any, namespace: str | None) -> None:
        for t in tools if isinstance(tools, list) else ():
            if not isinstance(t, dict) or not isinstance(t.get("name"), str):
                continue
            if t.get("type") == "namespace" and namespace is None:
                add(t.get("tools"), t["name"])
            elif t.get("type") in ("function", "custom"):
                params = t.get("parameters") or {} if t["type"] == "function" else _FREEFORM
                found.setdefault(t["name"], (params, t["type"], namespace))

    add(body.get("tools"), None)
    items = body.get("input")
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            add(item.get("tools"), None)
    return found


def response_object(
    answer: Answer,
    rid: str,
    model: str,
    usage: tuple[int, int],
    reasoning: list[dict[str, Any]] | None = None,
    offered: dict[str, tuple[Any, str, str | None]] | None = None,
) -> dict[str, Any]:
    """`reasoning`: the items the output starts with (router/fake/reasoning.py); `offered`: the
    request's tools (`offered_tools`), for the shape of a call of a custom or namespaced one."""
    output: list[dict[str, Any]] = list(reasoning or ())
    if answer.text is not None:
        part = {"type": "output_text", "text": answer.text, "annotations": []}
        output.append({"type": "message", "id": f"msg_{rid}", "status": "completed", "role": "assistant",
                       "content": [part]})  # fmt: skip
    if answer.tool_name is not None:
        call_id = answer.call_id or f"call_{rid}"
        _, kind, namespace = (offered or {}).get(answer.tool_name, (None, "function", None))
        call: dict[str, Any] = {"type": "function_call", "id": f"fc_{rid}", "call_id": call_id,
                                "name": answer.tool_name, "arguments": answer.tool_args or "",
                                "status": "completed"}  # fmt: skip
        if kind == "custom":  # a freeform tool's call carries its input as it is
            call = {**call, "type": "custom_tool_call", "id": f"ctc_{rid}", "input": _input_of(answer.tool_args)}
            del call["arguments"]
        if namespace is not None:
            call["namespace"] = namespace
        output.append(call)
    return {
        "id": f"resp_{rid}", "object": "response", "created_at": int(time.time()), "status": "completed",
        "model": model, "output": output,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1], "total_tokens": usage[0] + usage[1]},
    }  # fmt: skip


def _input_of(arguments: str | None) -> str:
    """A freeform call's input: the `input` the fake drew for it, else its arguments' text (broken ones too)."""
    try:
        drawn = orjson.loads(arguments or "")
    except orjson.JSONDecodeError:
        return arguments or ""
    return drawn["input"] if isinstance(drawn, dict) and isinstance(drawn.get("input"), str) else arguments or ""


def _pieces(text: str, parts: int = 4) -> list[str]:
    step = max(1, -(-len(text) // parts))
    return [text[i : i + step] for i in range(0, len(text), step)] or [""]


def response_events(response: dict[str, Any], *, whole_items: bool = False) -> list[bytes]:
    """The SSE events OpenAI sends for `response`, in order, with sequence numbers; `whole_items`:
    each item only in its `response.output_item.done` (no `added`, no deltas)."""
    events: list[dict[str, Any]] = []

    def add(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **fields})

    started = {**response, "status": "in_progress", "output": [], "usage": None}
    add("response.created", response=started)
    add("response.in_progress", response=started)
    for index, item in enumerate(response["output"]):
        if whole_items:
            pass
        elif item["type"] == "message":
            text = item["content"][0]["text"]
            ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
            add("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []})
            add("response.content_part.added", **ids, part={"type": "output_text", "text": "", "annotations": []})
            for word in [w if i == 0 else " " + w for i, w in enumerate(text.split(" "))]:
                add("response.output_text.delta", **ids, delta=word, logprobs=[])
            add("response.output_text.done", **ids, text=text, logprobs=[])
            add("response.content_part.done", **ids, part=item["content"][0])
        elif item["type"] == "reasoning":
            add("response.output_item.added", output_index=index, item={**item, "encrypted_content": None})
        elif item["type"] == "custom_tool_call":
            ids = {"item_id": item["id"], "output_index": index}
            add("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "input": ""})
            for piece in _pieces(item["input"]):
                add("response.custom_tool_call_input.delta", **ids, delta=piece)
            add("response.custom_tool_call_input.done", **ids, input=item["input"])
        else:
            ids = {"item_id": item["id"], "output_index": index}
            add(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            for piece in _pieces(item["arguments"]):
                add("response.function_call_arguments.delta", **ids, delta=piece)
            add("response.function_call_arguments.done", **ids, arguments=item["arguments"], name=item["name"])
        add("response.output_item.done", output_index=index, item=item)
    add("response.completed", response=response)
    return [b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events]
