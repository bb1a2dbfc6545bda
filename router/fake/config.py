"""`FakeConfig`: the fake upstream's knobs (router/fake/server.py), each fault's rate or delay."""

from __future__ import annotations

from dataclasses import dataclass, field

from router.fake.tools import BAD_KINDS


@dataclass(frozen=True)
class FakeConfig:
    seed: int = 0
    model: str = "fake-model"
    bad_tool_rate: float = 0.0  # share of tool-calling answers that are broken
    bad_tool_rates: dict[str, float] = field(default_factory=dict)  # per tool name override
    bad_kinds: tuple[str, ...] = BAD_KINDS  # which breakages to draw from
    error_rate: float = 0.0  # share of requests answered with HTTP 500
    delay_ms: float = 0.0  # before the response headers
    first_token_delay_ms: float = 0.0  # streams: after the headers, before the first event
    chunk_delay_ms: float = 0.0  # streams: between events
    reset_mid_stream: float = 0.0  # share of answers cut (TCP RST) after a few chunks
    reset_before_first_byte: float = 0.0  # share of requests cut (TCP RST) with no response
    malformed_sse: float = 0.0  # share of streams with a garbage data line
    words: int = 12  # words in a text answer
    finish_after: int = 0  # answer text once the conversation holds this many tool results (0: never)
    prefer_tools: tuple[str, ...] = ()  # call the first of these that is offered (unless tool_choice names one)
    api_key: str | None = None  # if set, required as Bearer (or x-api-key on /v1/messages)
    endless: bool = False  # every answer never ends (as the ``endless`` fault)
    looping: bool = False  # every chat answer goes round in a loop (as the ``loop`` fault)
    # a slot's context in tokens, as llama-server has one (router/fake/context.py): a prompt that fills it is
    # refused with llama-server's 400 (Anthropic's on /v1/messages), and /props, /apply-template, /tokenize
    # and the model list's `meta.n_ctx` are served. 0: no limit, and none of those (as other servers)
    n_ctx: int = 0
    greedy: bool = False  # the same request, the same answer (as a greedy model), unless it asks for temperature > 0
    # the secret that binds thinking signatures and encrypted reasoning to a model (router/fake/reasoning.py)
    signing_key: str = "agent-router-fake"
    # fast modes (router/fake/speed.py): models (globs) that take Anthropic's `speed: "fast"` (with the
    # fast-mode beta header) and OpenAI's service tiers beyond the default, and such requests taken per
    # minute before a 429 (0: no limit)
    fast_models: tuple[str, ...] = ("*",)
    fast_rate_limit: int = 0
    # the highest `output_config.effort` a Messages request takes beside thinking off (router/fake/reasoning.py):
    # "max" (any), "high" (Anthropic's newest models refuse xhigh and max), "none" (DeepSeek's Anthropic API)
    effort_without_thinking: str = "max"
    # chat completions' `reasoning_content` (router/fake/reasoning.py): "" (none), "write" (answers carry it),
    # "require" (and a tool loop's turn without it is refused, as DeepSeek's thinking mode), "refuse" (in any message)
    reasoning_content: str = ""
    # Responses WebSocket mode (GET /v1/responses, router/fake/websocket.py): served (False: the upgrade gets a
    # 404, as from a server without it), and a connection's time limit in seconds (OpenAI's: 60 minutes)
    websocket: bool = True
    ws_limit_s: float = 3600.0
    # Responses streams (HTTP and WebSocket): each output item only in `response.output_item.done` and
    # `response.completed`, with no `output_item.added` and no text or arguments deltas (the published
    # event schema allows it; a strict upstream was seen sending it)
    whole_items: bool = False

    def __post_init__(self) -> None:
        unknown = [k for k in self.bad_kinds if k not in BAD_KINDS]
        if unknown:
            raise ValueError(f"unknown bad_kinds {unknown}; expected some of {list(BAD_KINDS)}")
        rates = {
            "bad_tool_rate": self.bad_tool_rate,
            "error_rate": self.error_rate,
            "reset_mid_stream": self.reset_mid_stream,
            "reset_before_first_byte": self.reset_before_first_byte,
            "malformed_sse": self.malformed_sse,
            **{f"bad_tool_rates[{k}]": v for k, v in self.bad_tool_rates.items()},
        }
        for name, rate in rates.items():
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {rate}")
        if self.words < 1:
            raise ValueError(f"words must be at least 1, got {self.words}")
        if self.n_ctx < 0:
            raise ValueError(f"n_ctx must be 0 (no limit) or more, got {self.n_ctx}")
        if self.fast_rate_limit < 0:
            raise ValueError(f"fast_rate_limit must be 0 (no limit) or more, got {self.fast_rate_limit}")
        if self.ws_limit_s <= 0:
            raise ValueError(f"ws_limit_s must be above 0, got {self.ws_limit_s}")
        if self.effort_without_thinking not in ("none", "low", "medium", "high", "xhigh", "max"):
            raise ValueError(f"effort_without_thinking: none or an effort level, not {self.effort_without_thinking!r}")
        if self.reasoning_content not in ("", "write", "require", "refuse"):
            raise ValueError(f"reasoning_content: '', write, require or refuse, not {self.reasoning_content!r}")
        if self.finish_after < 0:
            raise ValueError(f"finish_after must be 0 (never) or more, got {self.finish_after}")
