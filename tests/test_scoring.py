"""router/scoring.py: the prompt the full model scores, and reading llama-cpp-python's echoed logprobs."""

from __future__ import annotations

import json

from router.scoring import call_logprobs, call_text, chatml_prompt, measure

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def test_prompt_is_qwen_chatml_with_the_tool_block() -> None:
    prompt = chatml_prompt([{"role": "user", "content": "Weather in Paris?"}], [TOOL])
    assert prompt.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")
    assert "<tools>\n" + json.dumps(TOOL) + "\n</tools>" in prompt
    assert prompt.endswith("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n")
    own = chatml_prompt([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x"}], [TOOL])
    assert own.startswith("<|im_start|>system\nBe brief.\n\n# Tools") and own.count("<|im_start|>system") == 1


def test_a_turn_with_a_call_and_its_result() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    prompt = chatml_prompt(messages, [TOOL])
    earlier = '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}\n</tool_call>'
    assert f"<|im_start|>assistant\n{earlier}<|im_end|>\n" in prompt  # the template encodes it once more
    assert "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n" in prompt
    assert call_text("get_weather", '{"city": "Paris"}') == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    )
    assert call_text("f", "not json") == '<tool_call>\n{"name": "f", "arguments": not json}\n</tool_call>'


def test_echoed_logprobs_are_read_one_token_back() -> None:
    # As llama-cpp-python 0.3.36 answers (measured): at token i, the top logprobs predict token i + 1.
    prompt = "PROMPT"
    data = {
        "choices": [
            {
                "logprobs": {
                    "tokens": ["PROMPT", "<a>", "b", "</a>"],
                    "text_offset": [0, 6, 9, 10],
                    "token_logprobs": [None, -20.0, -20.0, -20.0],
                    "top_logprobs": [{"<a>": -0.5, "x": -1.0}, {"b": -0.1}, {"y": -0.2, "z": -3.0}, {"\n": -0.1}],
                }
            }
        ]
    }
    # "<a>" -0.5, "b" -0.1, "</a>" not in the top: the top's lowest value (-3.0) as a bound
    values = call_logprobs(data, len(prompt))
    assert values == [-0.5, -0.1, -3.0]
    assert measure(values, "mean") == (-0.5 - 0.1 - 3.0) / 3 and measure(values, "min") == -3.0
    assert call_logprobs(data, len(prompt), 10) == [-0.5, -0.1]  # tokens starting before character 10
    assert call_logprobs({"choices": [{"logprobs": None}]}, 0) is None
    assert call_logprobs({}, 0) is None
