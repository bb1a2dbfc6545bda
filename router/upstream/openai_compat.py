"""OpenAI-compatible tiers (llama.cpp, vLLM, Ollama, SGLang, OpenAI): a pooled aiohttp pass-through.

A tier keeps each session's prompt prefix where its policy says (`sessions`, router/sessions/affinity.py):
on one replica of an `api_base` list, and on llama.cpp's llama-server in one slot (`id_slot` +
`cache_prompt`); `prefill` reads a session's prompt into its slot ahead of a call (router/core/live/warming.py).
The server's own count of each prompt — tokens evaluated and reused — comes with the answer (`Usage`).
What a request becomes on the tier — defaults, params, model, output cap, `service_tier` (never
`speed`) — is `TierBody`'s (openai_body.py); the answer's `service_tier` comes with it (`Speed`, speed.py);
refused for what the router can change (a service tier, reasoning_content), it is sent again (resend.py).

A tier with `apis: [responses]` also takes Responses calls as they are (`complete_native` / `stream_native`,
POST {api_base}/responses: responses_view.py); with `websocket: true` over one WebSocket per session
(responses_ws.py; warm-ups: `prewarm`).
Items' `encrypted_content` (reasoning, compaction) is bound to the model that made it: the tier's
answers reach the client marked with its model, and of the items a request replays the tier gets
only its own model's (provenance.py); so is a chat answer's `reasoning_content` (reasoning_text.py).

A tier with `cut_loops` is read as a stream, a whole answer too (`Answer`, answer.py), and not read
further once the answer goes round in a loop (`Loop`, loops.py). One `aiohttp.ClientSession` per
tier, keep-alive connections opened at start-up, bodies encoded once with orjson (the pool, warm-up
and SSE reader are `PooledHTTP`'s, in http.py). Timeouts: `connect` for the TCP connection,
`first_token` until the headers (JSON) or the first SSE event, `total` (and the call's deadline) for all.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import orjson

from router.constants import SCORE_TOP
from router.errors import UpstreamError, UpstreamStatus, upstream_text
from router.policy.model import Tier
from router.sessions import Session
from router.sessions.affinity import Affinity, Lease
from router.sessions.provenance import mark_items, model_tag
from router.sessions.reasoning_text import ReasoningMarks, mark_choices
from router.upstream import llama_cpp, resend, scoring
from router.upstream.answer import Answer
from router.upstream.base import Chunk, Limits, Native, Reply, chat_usage
from router.upstream.chat_view import drop_legacy_call, malformed, usage_of, without_repeated_heads
from router.upstream.context import props_window, served_window
from router.upstream.http import PooledHTTP
from router.upstream.loops import Loop
from router.upstream.openai_body import TierBody
from router.upstream.responses_tools import ToolMap
from router.upstream.responses_view import ResponsesEvents, completion_of, responses_usage
from router.upstream.responses_ws import SocketTurns
from router.upstream.speed import served

log = logging.getLogger("router.upstream")

# what a server without llama-server's /apply-template and /tokenize answers there
_NOT_HERE = frozenset({401, 403, 404, 405, 501})
_ENDED = ("response.completed", "response.incomplete")
_HEAD = ("id", "object", "created", "model")  # a chunk's fields a chunk made here repeats


class OpenAICompatUpstream(PooledHTTP):
    def __init__(self, tier: str, config: Tier, limits: Limits | None = None) -> None:
        super().__init__(tier, config, limits)
        bases = [b.rstrip("/") for b in config.api_bases] or [""]
        self.urls = [b + "/chat/completions" for b in bases]  # per replica
        self.responses_urls = [b + "/responses" for b in bases]
        self.url, self.responses_url = self.urls[0], self.responses_urls[0]
        self.warm_urls = tuple(b + "/models" for b in bases)
        self.roots = [b.removesuffix("/v1") for b in bases]  # llama-server's own endpoints are at its root
        sessions = config.sessions
        self.affinity = Affinity(len(bases), sessions.slots, sessions.side_slots)  # router/sessions/affinity.py
        self.llama_cpp = False  # the server is llama.cpp's llama-server (router/upstream/llama_cpp.py)
        self.dialects: frozenset[str] = frozenset(config.apis)  # client APIs passed through (`complete_native`)
        self.tag = model_tag(config.model)  # the provenance of this model's encrypted reasoning
        self.bodies = TierBody(config, self.tag)  # what a request becomes on this tier (openai_body.py)
        self._headers["accept"] = "application/json, text/event-stream"
        self._tokenizes = True  # until the server shows it has no /apply-template and /tokenize
        if self._key:
            self._headers["authorization"] = f"Bearer {self._key}"
        auth = {"authorization": self._headers["authorization"]} if self._key else {}
        self.sockets = (  # Responses calls over one WebSocket per session (responses_ws.py)
            SocketTurns(tier, config, self.limits, auth, self._secrets, self.bodies.responses)
            if config.websocket else None
        )  # fmt: skip

    def again(self, refused: UpstreamStatus, data: bytes) -> tuple[bytes, str | None] | None:
        return resend.again(refused, data)  # a service tier, reasoning_content

    async def complete(self, body: dict[str, Any], deadline: float, session: Session | None = None) -> Reply:
        legacy = "functions" in body  # a client of the legacy API reads `function_call`; others never
        lease = self.affinity.place(session)
        try:
            if self.llama_cpp and (name := llama_cpp.named_choice(body)) is not None:
                completion = await self._forced_call(body, name, lease, deadline)
                return Reply(completion, usage=usage_of(completion))
            if self.config.cut_loops and not legacy:
                return await self._whole_stream(body, deadline, lease)
            payload = self.bodies.chat(body, False, lease.slot)
            return await self.post_json(
                self.urls[lease.replica], payload, deadline, lambda raw, data: self._reply(raw, data, legacy)
            )
        finally:
            lease.release()

    async def _whole_stream(self, body: dict[str, Any], deadline: float, lease: Lease) -> Reply:
        """A whole answer read as a stream, stopped where it loops (router/upstream/loops.py)."""
        payload = self.bodies.chat({**body, "stream_options": {"include_usage": True}}, True, lease.slot)
        answer, loop, speed = Answer(), Loop(), None
        events = self._events(self.urls[lease.replica], payload, deadline)
        try:
            async for chunk in events:
                answer.add(chunk.data)
                speed = chunk.speed or speed
                if loop.feed(chunk.data):
                    break
        finally:
            await events.aclose()
        if loop.looped:
            answer.text = [loop.kept("".join(answer.text))]
            answer.drop_repeated_calls()
            answer.finish_reason = loop.finish
            # written until then; the prompt's count never came (the last chunk has it): the tier counts it
            prompt: int | None = None
            with contextlib.suppress(UpstreamError):
                prompt = await self.count_tokens(body, deadline)
            answer.usage = chat_usage(prompt, loop.deltas)
            self._looped(loop.deltas)
        data = answer.completion()
        if problem := malformed(data, "message"):
            raise UpstreamError(f"tier {self.tier!r} answered with a malformed completion ({problem})", tier=self.tier)
        self.llama_cpp = self.llama_cpp or answer.timings is not None
        return Reply(data, usage=usage_of(data), speed=speed, looped=loop.looped)

    def stream(self, body: dict[str, Any], deadline: float, session: Session | None = None) -> AsyncIterator[Chunk]:
        if self.affinity.slots or (self.llama_cpp and llama_cpp.named_choice(body) is not None):
            return self._watched(self._held_stream(body, deadline, session))
        url = self.urls[self.affinity.place(session).replica]  # no slot: nothing is held, no wrapper per chunk
        asked, forced = counted(body)
        return self._watched(self._events(url, self.bodies.chat(asked, True), deadline, forced))

    def _events(self, url: str, payload: bytes, deadline: float, unasked: bool = False) -> AsyncGenerator[Chunk, None]:
        """`unasked`: the router asked for the stream's token counts, the client did not."""
        heads: dict[int, str] = {}  # tool-call index → id, to drop repeated call heads
        marks = ReasoningMarks(self.tag)  # the model's reasoning, marked as its own

        def convert(raw: bytes) -> Chunk:
            chunk = without_repeated_heads(self._chunk(raw), heads)
            if b'"reasoning_content"' in raw and marks.chunk(chunk.data):
                chunk.raw = None  # re-encoded, marked
            return _unasked(chunk) if unasked else chunk

        return self.post_events(url, payload, deadline, convert)

    def _watched(self, chunks: AsyncGenerator[Chunk, None]) -> AsyncGenerator[Chunk, None]:
        """`chunks`, ended where the answer loops when the tier says `cut_loops`: a finish chunk
        (`looped`) follows the last one read, and the tier is not read further."""
        return chunks if not self.config.cut_loops else self._cut(chunks)

    async def _cut(self, chunks: AsyncGenerator[Chunk, None]) -> AsyncGenerator[Chunk, None]:
        loop = Loop()
        try:
            async for chunk in chunks:
                yield chunk
                if loop.feed(chunk.data):
                    self._looped(loop.deltas)
                    end: dict[str, Any] = {k: chunk.data[k] for k in _HEAD if k in chunk.data}
                    end["choices"] = [{"index": 0, "delta": {}, "finish_reason": loop.finish}]
                    yield Chunk(end, looped=True)
                    return
        finally:
            await chunks.aclose()

    def _looped(self, tokens: int) -> None:
        log.info("tier %s: the answer went round in a loop; stopped after %d tokens", self.tier, tokens)

    async def _held_stream(
        self, body: dict[str, Any], deadline: float, session: Session | None
    ) -> AsyncGenerator[Chunk, None]:
        """A stream in a slot (held until it ends), or a forced call's chunks."""
        lease = self.affinity.place(session)
        try:
            if self.llama_cpp and (name := llama_cpp.named_choice(body)) is not None:
                completion = await self._forced_call(body, name, lease, deadline)
                for data in llama_cpp.completion_chunks(completion):
                    yield Chunk(data, usage=usage_of(data) if "timings" in data else None)
                return
            asked, forced = counted(body)
            payload = self.bodies.chat(asked, True, lease.slot)
            events = self._events(self.urls[lease.replica], payload, deadline, forced)
            try:
                async for chunk in events:
                    yield chunk
            finally:
                await events.aclose()
        finally:
            lease.release()

    async def prefill(self, body: dict[str, Any], session: Session, deadline: float) -> None:
        """Read `body`'s prompt into the session's slot (or replica) and answer nothing: a warm-up
        (router/core/live/warming.py). One token is generated: a server evaluates a prompt for an answer."""
        lease = self.affinity.place(session)
        try:
            warm = {k: v for k, v in body.items() if k not in ("stream", "stream_options", "n", "logprobs")}
            payload = self.bodies.chat({**warm, "max_tokens": 1}, False, lease.slot)
            await self.post_json(self.urls[lease.replica], payload, deadline, lambda raw, data: Reply(data))
        finally:
            lease.release()

    async def score_call(
        self, body: dict[str, Any], call: dict[str, Any], deadline: float, session: Session | None, via: str
    ) -> list[float] | None:
        """The logprobs of `call`'s tokens given `body` (router/upstream/scoring.py: `echo` from
        llama-cpp-python's legacy completions, `forced` from llama-server in the session's slot); None
        when the server gave none."""
        text, start, end = scoring.call_span(call)
        lease = self.affinity.place(session)
        try:
            if via != "forced":
                url = self.urls[lease.replica].removesuffix("/chat/completions") + "/completions"
                payload = scoring.echo_request(self.config.upstream_model, body, text, SCORE_TOP)
                echoed = await self.post_json(url, payload, deadline, lambda raw, data: Reply(data))
                return scoring.call_logprobs(echoed.data, text, start, end)
            root = self.roots[lease.replica]
            rendered = await self.post_json(root + "/apply-template", self.bodies.chat(body, False), deadline,
                                            lambda raw, data: Reply(data))  # fmt: skip
            prompt = rendered.data.get("prompt")
            if not isinstance(prompt, str):
                return None
            payload = scoring.forced_request(prompt, text, lease.slot)
            forced = await self.post_json(root + "/completion", payload, deadline, lambda raw, data: Reply(data))
        except UpstreamError:
            return None
        finally:
            lease.release()
        return scoring.forced_logprobs(forced.data, start, end) if forced.data.get("content") == text else None

    async def _forced_call(self, body: dict[str, Any], name: str, lease: Lease, deadline: float) -> dict[str, Any]:
        """A call of `name`, generated under its schema by llama-server (router/upstream/llama_cpp.py)."""
        root = self.roots[lease.replica]
        rendered = await self.post_json(
            root + "/apply-template", self.bodies.chat({**body, "tool_choice": "auto"}, False), deadline,
            lambda raw, data: Reply(data),
        )  # fmt: skip
        prompt = rendered.data.get("prompt")
        if not isinstance(prompt, str):
            raise UpstreamError(f"tier {self.tier!r} rendered no prompt", tier=self.tier)
        payload = llama_cpp.completion_request(body, prompt, name, lease.slot)
        answer = await self.post_json(root + "/completion", payload, deadline, lambda raw, data: Reply(data))
        return llama_cpp.call_completion(answer.data, name, self.config.upstream_model)

    def _warmed(self, body: bytes) -> None:
        with contextlib.suppress(ValueError):
            models = orjson.loads(body)
            self.llama_cpp = self.llama_cpp or (isinstance(models, dict) and llama_cpp.is_llama_cpp(models))

    def _reply(self, raw: bytes, data: dict[str, Any], legacy: bool = False) -> Reply:
        if problem := malformed(data, "message"):
            raise UpstreamError(f"tier {self.tier!r} answered with a malformed completion ({problem})", tier=self.tier)
        self.llama_cpp = self.llama_cpp or "timings" in data
        usage, speed = usage_of(data), served(data.get("service_tier"))
        marked = b'"reasoning_content"' in raw and mark_choices(data, self.tag)  # the model's reasoning: its own
        if (not legacy and drop_legacy_call(data)) or marked:
            return Reply(data, usage=usage, speed=speed)  # re-encoded
        return Reply(data, raw, usage=usage, speed=speed)

    def _native_payload(self, native: Native, stream: bool) -> bytes:
        return orjson.dumps({**self.bodies.responses(native.body), "stream": stream})

    async def complete_native(self, native: Native, deadline: float, session: Session | None = None) -> Reply:
        """A Responses request, passed through (router/upstream/responses_view.py)."""
        tools = ToolMap.of_request(native.body)
        if self.sockets is not None and self.sockets.serves(session):  # a socket streams: the whole answer read
            final: Any = None
            async for chunk in self.stream_native(native, deadline, session):
                if chunk.native is not None and chunk.native.get("type") in _ENDED:
                    final = chunk.native.get("response")
            if not isinstance(final, dict) or not isinstance(final.get("output"), list):
                raise UpstreamError(f"tier {self.tier!r} ended its answer without a response", tier=self.tier)
            usage = responses_usage(final.get("usage"))
            return Reply(completion_of(final, tools), native=final, usage=usage)  # its items marked as they streamed
        payload = self._native_payload(native, False)
        url = self.responses_urls[self.affinity.place(session).replica]
        return await self.post_json(url, payload, deadline, lambda raw, data: _response(raw, data, tools, self.tag))

    def stream_native(self, native: Native, deadline: float, session: Session | None = None) -> AsyncIterator[Chunk]:
        tools = ToolMap.of_request(native.body)
        replica = self.affinity.place(session).replica
        url = self.responses_urls[replica]

        def http() -> AsyncIterator[Chunk]:
            view = ResponsesEvents(self.tier, self._secrets, tools, self.tag)
            return self.post_events(url, self._native_payload(native, True), deadline, view.chunk)

        if self.sockets is not None and session is not None and self.sockets.serves(session):
            view = ResponsesEvents(self.tier, self._secrets, tools, self.tag)
            return self.sockets.stream(native, deadline, session, replica, view, http)
        return http()

    async def prewarm(self, native: Native, deadline: float, session: Session, generate: bool = True) -> str | None:
        """The session's WebSocket opened, `generate: false` sent on it (responses_ws.py): the upstream's id."""
        if self.sockets is None:
            return None
        view = ResponsesEvents(self.tier, self._secrets, ToolMap.of_request(native.body), self.tag)
        replica = self.affinity.place(session).replica
        return await self.sockets.prewarm(native, deadline, session, replica, view, generate)

    async def close(self) -> None:
        await super().close()
        if self.sockets is not None:
            await self.sockets.seats.close_all()

    def _chunk(self, raw: bytes) -> Chunk:
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise UpstreamError(f"tier {self.tier!r} sent a malformed SSE event", tier=self.tier) from None
        if not isinstance(data, dict):
            raise UpstreamError(f"tier {self.tier!r} sent a non-object SSE event", tier=self.tier)
        if "error" in data and "choices" not in data:
            message = upstream_text(str((data.get("error") or {}).get("message", "")), self._secrets)
            raise UpstreamError(f"tier {self.tier!r} sent an error event: {message}", tier=self.tier)
        if problem := malformed(data, "delta"):
            raise UpstreamError(f"tier {self.tier!r} sent a malformed SSE event ({problem})", tier=self.tier)
        usage = usage_of(data) if "usage" in data or "timings" in data else None
        tier = data.get("service_tier")  # OpenAI's: in every chunk
        return Chunk(data, raw, usage=usage, speed=served(tier) if tier is not None else None)

    # -- context (router/upstream/context.py) ---------------------------------------------------
    @property
    def server_root(self) -> str:
        """The server's own root, where llama-server has /props, /apply-template and /tokenize."""
        return self.roots[0]

    async def context_window(self, deadline: float) -> int | None:
        """From GET {api_base}/models (llama-server: `meta.n_ctx`; vLLM: `max_model_len`), else
        llama-server's GET /props; None from servers that say neither (llama-cpp-python's, OpenAI)."""
        window = served_window(await self.get_json(self.warm_urls[0], deadline), self.config.upstream_model)
        return window or props_window(await self.get_json(self.server_root + "/props", deadline))

    async def count_tokens(self, body: dict[str, Any], deadline: float, native: Native | None = None) -> int | None:
        """llama-server's count: the request as this tier would send it (`TierBody.chat`) through its
        chat template (POST /apply-template), then its tokenizer (POST /tokenize, the special tokens
        as a completion adds and parses them). A server without those endpoints is not asked again."""
        if not self._tokenizes:
            return None
        root = self.server_root
        try:
            payload = self.bodies.chat(body, False)
            rendered = await self.post_json(root + "/apply-template", payload, deadline, _as_reply)
            prompt = rendered.data.get("prompt")
            if not isinstance(prompt, str):
                return None
            asked = orjson.dumps({"content": prompt, "add_special": True, "parse_special": True})
            tokens = (await self.post_json(root + "/tokenize", asked, deadline, _as_reply)).data.get("tokens")
        except UpstreamStatus as exc:
            if exc.upstream_status in _NOT_HERE:  # no such endpoint (or not for this client): not llama-server
                self._tokenizes = False
            return None
        except UpstreamError:
            return None
        return len(tokens) if isinstance(tokens, list) else None


def counted(body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """A streamed request that asks for the stream's token counts (`stream_options.include_usage`,
    which OpenAI, vLLM, SGLang and llama.cpp honour): what a call costs is read from them; True when
    the client did not ask for them itself, so that it does not get them (`_unasked`,
    router/flow/pipeline.py)."""
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return body, False
    return {**body, "stream_options": {**(options if isinstance(options, dict) else {}), "include_usage": True}}, True


def _unasked(chunk: Chunk) -> Chunk:
    """A chunk of a stream whose counts the router asked for: the `"usage": null` each chunk then
    carries, taken out (as it is in OpenAI's bytes, or re-encoded)."""
    data = chunk.data
    if "usage" in data and data["usage"] is None:
        del data["usage"]
        raw = chunk.raw
        chunk.raw = raw[: -len(_NULL_USAGE)] + b"}" if raw is not None and raw.endswith(_NULL_USAGE) else None
    return chunk


_NULL_USAGE = b',"usage":null}'


def _as_reply(raw: bytes, data: dict[str, Any]) -> Reply:
    return Reply(data, raw)


def _response(raw: bytes, response: dict[str, Any], tools: ToolMap, tag: str) -> Reply:
    if not isinstance(response.get("output"), list):
        raise ValueError("a response without an output list")
    marked = mark_items(response["output"], tag)  # its encrypted reasoning, marked with the tier's model
    speed = served(response.get("service_tier"))
    usage = responses_usage(response.get("usage"))
    return Reply(completion_of(response, tools), None if marked else raw, native=response, speed=speed, usage=usage)
