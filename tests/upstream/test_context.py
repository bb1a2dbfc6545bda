"""What tiers say about their context (router/upstream/context.py): the window a server reports and
the error bodies that say a prompt did not fit, as each server writes them."""

from __future__ import annotations

from typing import Any

import pytest

from router.upstream.context import exceeded, props_window, served_window

LLAMA_SERVER_MODELS = {  # llama.cpp's llama-server, GET /v1/models (tools/server/server-context.cpp)
    "object": "list",
    "data": [{"id": "qwen2.5-coder-1.5b", "object": "model", "owned_by": "llamacpp",
              "meta": {"vocab_type": 2, "n_vocab": 151936, "n_ctx": 4096, "n_ctx_train": 32768}}],
}  # fmt: skip
VLLM_MODELS = {"object": "list", "data": [{"id": "Qwen/Qwen2.5-7B", "max_model_len": 32768}]}


@pytest.mark.parametrize(
    ("models", "model", "window"),
    [
        (LLAMA_SERVER_MODELS, "qwen2.5-coder-1.5b", 4096),  # a slot's context, not n_ctx_train
        (LLAMA_SERVER_MODELS, "another-alias", 4096),  # the only model it serves
        (VLLM_MODELS, "Qwen/Qwen2.5-7B", 32768),
        ({"data": [{"id": "a", "max_model_len": 1}, {"id": "b", "max_model_len": 2}]}, "b", 2),
        ({"data": [{"id": "a", "max_model_len": 1}, {"id": "b", "max_model_len": 2}]}, "c", None),
        ({"data": [{"id": "gemma", "object": "model", "owned_by": "me"}]}, "gemma", None),  # llama-cpp-python
        ({"data": [{"id": "x", "meta": {"n_ctx_train": 32768}}]}, "x", None),  # the model's, not the server's
        ({"data": [{"id": "x", "meta": {"n_ctx": "4096"}}]}, "x", None),  # not a count
        ({"data": "nonsense"}, "x", None),
        (None, "x", None),
    ],
)  # fmt: skip
def test_served_window(models: Any, model: str, window: int | None) -> None:
    assert served_window(models, model) == window


def test_props_window() -> None:
    assert props_window({"default_generation_settings": {"n_ctx": 8192, "params": {}}, "total_slots": 4}) == 8192
    assert props_window({"default_generation_settings": {}}) is None
    assert props_window(["not", "props"]) is None


@pytest.mark.parametrize(
    ("error", "said"),
    [
        # llama-server: its error type, with both numbers as fields
        ({"code": 400, "message": "request (11679 tokens) exceeds the available context size (4096 tokens), try "
          "increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 11679, "n_ctx": 4096},
         (11679, 4096)),
        # the same words without the type (a proxy in between kept only the message)
        ("request (5000 tokens) exceeds the available context size (4096 tokens), try increasing it", (5000, 4096)),
        ({"message": "input (9000 tokens) is larger than the max context size (8192 tokens). skipping"}, (9000, 8192)),
        # Anthropic
        ({"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"},
         (210000, 200000)),
        # OpenAI chat completions
        ({"message": "This model's maximum context length is 128000 tokens. However, your messages resulted in "
          "130532 tokens. Please reduce the length of the messages.", "type": "invalid_request_error",
          "param": "messages", "code": "context_length_exceeded"}, (130532, 128000)),
        # llama-cpp-python's server, and older vLLM: the prompt is the part "in the messages"
        ({"message": "This model's maximum context length is 4096 tokens. However, you requested 5012 tokens (4500 "
          "in the messages, 512 in the completion). Please reduce the length of the messages or completion.",
          "code": "context_length_exceeded"}, (4500, 4096)),
        # vLLM
        ({"message": "This model's maximum context length is 2048 tokens. However, your request has 3000 input "
          "tokens. Please reduce the length of the input messages.", "type": "BadRequestError"}, (3000, 2048)),
        # OpenAI's Responses API: the code alone
        ({"message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
          "code": "context_length_exceeded"}, (None, None)),
        # other errors
        ({"message": "'messages' must be a non-empty array", "type": "invalid_request_error"}, None),
        ({"message": "Invalid value for 'temperature'", "code": "invalid_value"}, None),
        ("plain text", None),
        (None, None),
    ],
)  # fmt: skip
def test_exceeded_reads_every_servers_words(error: Any, said: tuple[int | None, int | None] | None) -> None:
    assert exceeded(error) == said
