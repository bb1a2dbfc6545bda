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
    """The offered function tools and the forced tool name; no tools when ``tool_choice`` is "none"."""
    choice, tools = body.get("tool_choice"), body.get("tools")
    if not isinstance(tools, list) or not tools or choice == "none":
        return [], None
    out = [
        (t["name"], t.get("parameters") or {})
        for t in tools
        if isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("name"), str)
    ]
    chosen = choice.get("name") if isinstance(choice, dict) and choice.get("type") == "function" else None
    return out, chosen if isinstance(chosen, str) else None


def response_object(
    answer: Answer, rid: str, model: str, usage: tuple[int, int], reasoning: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """`reasoning`: the items the output starts with (router/fake/reasoning.py)."""
    output: list[dict[str, Any]] = list(reasoning or ())
    if answer.text is not None:
        part = {"type": "output_text", "text": answer.text, "annotations": []}
        output.append({"type": "message", "id": f"msg_{rid}", "status": "completed", "role": "assistant",
                       "content": [part]})  # fmt: skip
    if answer.tool_name is not None:
        call_id = answer.call_id or f"call_{rid}"
        output.append({"type": "function_call", "id": f"fc_{rid}", "call_id": call_id, "name": answer.tool_name,
                       "arguments": answer.tool_args or "", "status": "completed"})  # fmt: skip
    return {
        "id": f"resp_{rid}", "object": "response", "created_at": int(time.time()), "status": "completed",
        "model": model, "output": output,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1], "total_tokens": usage[0] + usage[1]},
    }  # fmt: skip


def _pieces(text: str, parts: int = 4) -> list[str]:
    step = max(1, -(-len(text) // parts))
    return [text[i : i + step] for i in range(0, len(text), step)] or [""]


def response_events(response: dict[str, Any]) -> list[bytes]:
    """The SSE events OpenAI sends for `response`, in order, with sequence numbers."""
    events: list[dict[str, Any]] = []

    def add(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **fields})

    started = {**response, "status": "in_progress", "output": [], "usage": None}
    add("response.created", response=started)
    add("response.in_progress", response=started)
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
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
