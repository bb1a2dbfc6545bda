"""Chat-completion chunks → Responses stream events, in the order OpenAI sends them.

    response.created, response.in_progress
    per text item:      response.output_item.added (message), response.content_part.added,
                        response.output_text.delta ..., response.output_text.done,
                        response.content_part.done, response.output_item.done
    per function call:  response.output_item.added (function_call),
                        response.function_call_arguments.delta ..., .done, response.output_item.done
    per freeform call:  response.output_item.added (custom_tool_call), and once its arguments are in:
                        response.custom_tool_call_input.delta (all of it), .done, response.output_item.done
    response.completed  (response.incomplete when the model hit max_output_tokens or a filter)

A tier that serves Responses itself has its own events forwarded (`feed_native`), renumbered.
A chat tier's text reaches the client with the client's own tool names where the tier knows a tool
by one the router made up (`ClientText`: "functions__exec" is written "functions.exec").

Every event carries `sequence_number`. Failures become one `error` event: the transports send it
as the last event of that response (no `response.failed` follows, so a client that stops reading at
`error` finds nothing stale on the connection before its next response).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from router.errors import RouterError
from router.responses.items import message_item, new_id, text_part
from router.responses.translate import response_object
from router.upstream.responses_tools import ClientText, ToolMap, freeform_input

Event = dict[str, Any]
_ENVELOPE = frozenset({"response.created", "response.in_progress", "response.queued", "response.completed",
                       "response.incomplete"})  # fmt: skip


def error_event(exc: RouterError, sequence_number: int = 0) -> Event:
    """The `error` event: the fields of OpenAI's `ResponseErrorEvent` (code, message, param), the
    HTTP status, and the usual error body under `error` (the SDK's SSE reader raises `APIError` on it)."""
    body = exc.to_body()["error"]
    return {
        "type": "error",
        "sequence_number": sequence_number,
        "code": body["code"],
        "message": body["message"],
        "param": body["param"],
        "status": exc.http_status,
        "error": body,
    }


class EventBuilder:
    def __init__(
        self, request: Mapping[str, Any], response_id: str, created_at: int, tools: ToolMap | None = None
    ) -> None:
        self.request = request
        self.tools = tools or ToolMap()
        self._names = ClientText(self.tools)  # the text as the client reads it: its own tool names
        self.id = response_id
        self.created_at = created_at
        self.seq = 0
        self.output: list[dict[str, Any]] = []
        self.model: str | None = None
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self._text: dict[str, Any] | None = None  # the open message item
        self._parts: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}  # chunk tool-call index → its item (open or done)
        self._args: dict[int, str] = {}  # chunk tool-call index → its arguments so far
        self._open_call: int | None = None
        self._native: dict[Any, int] = {}  # a native attempt's output_index → this response's

    def event(self, kind: str, **fields: Any) -> Event:
        ev = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return ev

    def response(self, status: str) -> dict[str, Any]:
        return response_object(
            self.request,
            self.id,
            self.created_at,
            status=status,
            output=self.output if status != "in_progress" else [],
            model=self.model,
            usage=self.usage,
            finish_reason=self.finish_reason,
        )

    def start(self, first: Mapping[str, Any] | None = None) -> list[Event]:
        """`response.created` and `.in_progress`; `first`: the answer's first chunk, whose model the
        response names from the start (as OpenAI's do, every envelope event names the same model)."""
        if first is not None and isinstance(first.get("model"), str):
            self.model = first["model"]
        snapshot = self.response("in_progress")
        created = self.event("response.created", response=snapshot)
        return [created, self.event("response.in_progress", response=snapshot)]

    def feed(self, chunk: Mapping[str, Any]) -> list[Event]:
        """Events for one chat.completion.chunk."""
        if self.model is None and isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        if not choices or not isinstance(choices[0], dict):
            return []
        choice = choices[0]
        delta = choice.get("delta") or {}
        out: list[Event] = []
        if text := delta.get("content"):
            out += self._text_delta(text)
        for i, call in enumerate(delta.get("tool_calls") or ()):
            out += self._call_delta(int(call.get("index", i)), call)
        if fr := choice.get("finish_reason"):
            self.finish_reason = fr
        return out

    def feed_native(self, event: Mapping[str, Any], chunk: Mapping[str, Any]) -> list[Event]:
        """A tier's own Responses event (pass-through, router/upstream/responses_view.py), forwarded with this
        response's sequence numbers and output indexes; `chunk` is its chat equivalent. The envelope
        (created, in_progress, completed) is this builder's own."""
        self.feed({k: v for k, v in chunk.items() if k != "choices"})  # model and usage
        if fr := (chunk.get("choices") or [{}])[0].get("finish_reason"):
            self.finish_reason = fr
        kind = event.get("type")
        index = event.get("output_index")
        if kind == "response.output_item.added" and isinstance(event.get("item"), dict):
            out = self._close_text() + self._close_call()
            self.output.append(dict(event["item"]))
            self._native[index] = len(self.output) - 1
            return [*out, self._forward(event, output_index=len(self.output) - 1)]
        if isinstance(index, int):
            mine = self._native.get(index)
            if mine is None and kind == "response.output_item.done" and isinstance(event.get("item"), dict):
                return self._whole(index, event["item"])  # an item that came whole: no `added` before it
            if mine is None:
                return []
            if kind == "response.output_item.done" and isinstance(event.get("item"), dict):
                self.output[mine] = dict(event["item"])
            return [self._forward(event, output_index=mine)]
        if kind in ("response.completed", "response.incomplete") and isinstance(event.get("response"), dict):
            output = event["response"].get("output")  # items that came only here, in the final response
            whole = enumerate(output) if isinstance(output, list) else ()
            return [e for i, item in whole if i not in self._native and isinstance(item, dict)
                    for e in self._whole(i, item)]  # fmt: skip
        if kind in _ENVELOPE:
            return []
        return [self._forward(event)]

    def _whole(self, index: int, item: Mapping[str, Any]) -> list[Event]:
        """A tier's output item that came whole: added to this response's output, told as its
        `response.output_item.done`."""
        out = self._close_text() + self._close_call()
        self.output.append(dict(item))
        self._native[index] = len(self.output) - 1
        done = {"type": "response.output_item.done", "output_index": len(self.output) - 1, "item": dict(item)}
        return [*out, self._forward(done)]

    def _forward(self, event: Mapping[str, Any], **fields: Any) -> Event:
        ev = {**event, **fields, "sequence_number": self.seq}
        self.seq += 1
        return ev

    def close(self) -> list[Event]:
        """The `.done` events of the items still open; `output` is final after this."""
        return self._close_text() + self._close_call()

    def final(self, **extra: Any) -> Event:
        """`response.completed` (or `.incomplete`) with the whole response; `extra` fields are added."""
        response = self.response("completed")
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        return self.event(kind, response=response, **extra)

    def finish(self, **extra: Any) -> list[Event]:
        return [*self.close(), self.final(**extra)]

    def error(self, exc: RouterError) -> Event:
        ev = error_event(exc, self.seq)
        self.seq += 1
        return ev

    # -- text --------------------------------------------------------------------------------------
    def _text_delta(self, text: str) -> list[Event]:
        return self._client_text(self._names.feed(text))

    def _client_text(self, text: str) -> list[Event]:
        if not text:
            return []
        out: list[Event] = []
        if self._text is None:
            out += self._close_call()
            self._text = message_item("", status="in_progress")
            self._text["content"] = []
            self._parts = []
            self.output.append(self._text)
            index = len(self.output) - 1
            out.append(self.event("response.output_item.added", output_index=index, item=dict(self._text)))
            out.append(
                self.event(
                    "response.content_part.added",
                    item_id=self._text["id"],
                    output_index=index,
                    content_index=0,
                    part=text_part(""),
                )
            )
        self._parts.append(text)
        out.append(
            self.event(
                "response.output_text.delta",
                item_id=self._text["id"],
                output_index=len(self.output) - 1,
                content_index=0,
                delta=text,
                logprobs=[],
            )
        )
        return out

    def _close_text(self) -> list[Event]:
        out = self._client_text(self._names.flush())  # a name still held: nothing follows it now
        item = self._text
        if item is None:
            return out
        self._text = None
        index = self.output.index(item)
        text = "".join(self._parts)
        part = text_part(text)
        item["content"] = [part]
        item["status"] = "completed"
        ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
        return [
            *out,
            self.event("response.output_text.done", **ids, text=text, logprobs=[]),
            self.event("response.content_part.done", **ids, part=part),
            self.event("response.output_item.done", output_index=index, item=item),
        ]

    # -- function calls ----------------------------------------------------------------------------
    def _call_delta(self, index: int, call: Mapping[str, Any]) -> list[Event]:
        fn = call.get("function") or {}
        out: list[Event] = []
        item = self._calls.get(index)
        if item is None:
            out += self._close_text() + self._close_call()
            call_id = str(call.get("id") or new_id("call"))
            item = self.tools.call_item(
                call_id, str(fn.get("name") or ""), "", item_id=new_id("fc"), status="in_progress"
            )
            self._calls[index], self._args[index] = item, ""
            self._open_call = index
            self.output.append(item)
            out.append(self.event("response.output_item.added", output_index=len(self.output) - 1, item=dict(item)))
        elif fn.get("name") and item["status"] == "in_progress":
            item["name"] += fn["name"]
        if (args := fn.get("arguments")) and item["status"] == "in_progress":
            self._args[index] += args
            if item["type"] == "function_call":
                item["arguments"] += args
                ids = {"item_id": item["id"], "output_index": self.output.index(item)}
                out.append(self.event("response.function_call_arguments.delta", **ids, delta=args))
        return out

    def _close_call(self) -> list[Event]:
        if self._open_call is None:
            return []
        item = self._calls[self._open_call]
        args = self._args[self._open_call]
        self._open_call = None
        item["status"] = "completed"
        ids = {"item_id": item["id"], "output_index": self.output.index(item)}
        if item["type"] == "custom_tool_call":
            item["input"] = text = freeform_input(args)
            done = [
                self.event("response.custom_tool_call_input.delta", **ids, delta=text),
                self.event("response.custom_tool_call_input.done", **ids, input=text),
            ]
        else:
            done = [self.event("response.function_call_arguments.done", **ids, name=item["name"], arguments=args)]
        return [*done, self.event("response.output_item.done", output_index=ids["output_index"], item=item)]
