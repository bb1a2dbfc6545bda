"""Tiers that need translation (Anthropic, Gemini, Bedrock, ...) through litellm.

litellm is imported on `start()` of the first such tier, never at process start-up and never on
the OpenAI-compatible path; its cost map is read from the package, not fetched. Its answers are
already OpenAI-shaped, so the pipeline treats them like any other tier.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import AsyncGenerator
from typing import Any

from router.errors import ContextExceeded, UpstreamError, UpstreamStatus, UpstreamTimeout, upstream_text
from router.policy.model import Tier
from router.sessions import Session
from router.sessions.provenance import model_tag
from router.sessions.reasoning_text import own_reasoning
from router.upstream.base import Chunk, Native, Reply, token_count
from router.upstream.chat_view import usage_of
from router.upstream.context import exceeded

# The fields of a client's body that reach litellm: the OpenAI request (plus `thinking`/`top_k`, which
# providers take). Anything else would reach `litellm.acompletion` as one of litellm's own keyword
# arguments — endpoints, credentials, headers, callbacks, mock answers (a client's
# `aws_bedrock_runtime_endpoint` sent a bedrock tier's signed request to any URL) — so it is dropped.
_CLIENT_FIELDS = frozenset(
    {
        "messages", "temperature", "top_p", "top_k", "n", "stop", "max_completion_tokens", "max_tokens",
        "modalities", "prediction", "audio", "presence_penalty", "frequency_penalty", "logit_bias", "user",
        "reasoning_effort", "verbosity", "response_format", "seed", "tools", "tool_choice", "logprobs",
        "top_logprobs", "parallel_tool_calls", "web_search_options", "safety_identifier", "service_tier",
        "store", "prompt_cache_key", "functions", "function_call", "thinking",
    }
)  # fmt: skip


class LitellmUpstream:
    dialects: frozenset[str] = frozenset()  # every request goes through litellm's translation

    def __init__(self, tier: str, config: Tier) -> None:
        self.tier = tier
        self.config = config
        key = config.api_key.get_secret_value() if config.api_key else ""
        self._secrets = (key,) if key else ()
        self._tag = model_tag(config.model)
        self._litellm: Any = None
        self._absent = False  # litellm was looked for and is not installed

    async def start(self, warm: bool = True) -> None:
        if not await self.load():
            raise RuntimeError(
                f"tier {self.tier!r} ({self.config.model}) needs litellm: pip install 'agent-router[litellm]'"
            )

    @property
    def loaded(self) -> bool:
        return self._litellm is not None

    async def load(self) -> bool:
        """Import litellm (once); False when it is not installed (looked for once)."""
        if self._litellm is not None or self._absent:
            return not self._absent
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        os.environ.setdefault("LITELLM_LOG", "ERROR")
        try:
            litellm: Any = await asyncio.to_thread(importlib.import_module, "litellm")
        except ImportError:
            self._absent = True
            return False
        litellm.suppress_debug_info = True
        litellm.drop_params = True
        self._litellm = litellm
        return True

    async def close(self) -> None:
        return None

    async def context_window(self, deadline: float) -> int | None:
        """The model's `max_input_tokens` in litellm's own table (read from the package, no request)."""
        try:
            info = self._litellm.get_model_info(self.config.model)
        except Exception:  # a model litellm does not know: it raises
            return None
        if not isinstance(info, dict):
            return None
        return token_count(info.get("max_input_tokens")) or None

    async def count_tokens(self, body: dict[str, Any], deadline: float, native: Native | None = None) -> int | None:
        """None: litellm's counters fetch tokenizers from a model hub, which the router never does."""
        return None

    def _kwargs(self, body: dict[str, Any], deadline: float, stream: bool) -> dict[str, Any]:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise UpstreamTimeout(f"tier {self.tier!r}: no time left before the call's deadline", tier=self.tier)
        kwargs = {**self.config.defaults, **{k: v for k, v in body.items() if k in _CLIENT_FIELDS}}
        for owned in ("model", "stream", "stream_options"):
            kwargs.pop(owned, None)
        if isinstance(messages := kwargs.get("messages"), list):  # none of another model's reasoning_content
            kwargs["messages"] = own_reasoning(messages, self._tag)
        kwargs.update(self.config.params)
        kwargs.update(
            model=self.config.model,
            stream=stream,
            timeout=min(self.config.timeouts.total, remaining),
            num_retries=0,
        )
        if self.config.api_bases:
            kwargs["api_base"] = self.config.api_bases[0]
        if self.config.api_key:
            kwargs["api_key"] = self.config.api_key.get_secret_value()
        return kwargs

    def _failure(self, exc: Exception) -> UpstreamError:
        """What a failed call raises (`raise self._failure(exc) from None`; returned, not raised
        here, as in `PooledHTTP._failure`)."""
        if isinstance(exc, UpstreamError):
            return exc
        lit = self._litellm
        if isinstance(exc, TimeoutError) or (lit is not None and isinstance(exc, lit.Timeout)):
            return UpstreamTimeout(f"tier {self.tier!r} timed out", tier=self.tier)
        status = getattr(exc, "status_code", None)
        text = str(getattr(exc, "message", "") or "")
        too_long = exceeded(text) if status == 400 else None
        if too_long is None and lit is not None and isinstance(exc, lit.ContextWindowExceededError):
            too_long = exceeded(text) or (None, None)
        if too_long is not None:  # not the tier's fault
            return ContextExceeded(tier=self.tier, prompt_tokens=too_long[0], window=too_long[1])
        message = upstream_text(text, self._secrets)
        if isinstance(status, int) and status >= 400:
            said = f"tier {self.tier!r} answered HTTP {status}: {message}"
            return UpstreamStatus(said, tier=self.tier, upstream_status=status, detail=message)
        return UpstreamError(f"tier {self.tier!r} failed ({type(exc).__name__})", tier=self.tier)

    async def complete(self, body: dict[str, Any], deadline: float, session: Session | None = None) -> Reply:
        try:
            async with asyncio.timeout(self.config.timeouts.first_token):
                resp = await self._litellm.acompletion(**self._kwargs(body, deadline, stream=False))
        except Exception as exc:
            raise self._failure(exc) from None
        data = resp.model_dump(exclude_none=True)
        return Reply(data, usage=usage_of(data))

    async def stream(
        self, body: dict[str, Any], deadline: float, session: Session | None = None
    ) -> AsyncGenerator[Chunk, None]:
        try:
            async with asyncio.timeout(self.config.timeouts.first_token):
                resp = await self._litellm.acompletion(**self._kwargs(body, deadline, stream=True))
                chunks = aiter(resp)
                first = await anext(chunks, None)
        except Exception as exc:
            raise self._failure(exc) from None
        try:
            chunk = first
            while chunk is not None:
                data = chunk.model_dump(exclude_none=True)
                yield Chunk(data, usage=usage_of(data) if "usage" in data else None)
                chunk = await anext(chunks, None)
        except Exception as exc:
            raise self._failure(exc) from None
