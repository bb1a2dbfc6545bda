"""router/upstream/scoring.py: the prompt the full model scores, and reading llama-cpp-python's echoed logprobs."""

from __future__ import annotations

import json

from router.upstream.scoring import call_logprobs, call_text, chatml_prompt, forced_logprobs, gbnf_literal, measure

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
    # As llama-cpp-python 0.3.36 answers (measured): at token i, the top logprobs predict token i + 1;
    # special tokens spell nothing, and the echo ends with the generated token.
    call = "<a>bc</a>"
    tokens = ["<|im_start|>", "P", "<a>", "b", "c", "</a>", "\n"]
    tops = [
        {"P": -0.1},
        {"<a>": -0.5, "x": -1.0, "P": -9.0},
        {"b": -0.1, "<a>": -20.0},
        {"y": -0.2, "z": -3.0, "b": -30.0},  # "c" is not in the top: the lowest other value is its bound
        {"</a>": -0.4},
        {"\n": -0.1},
        {"\n": -0.1},
    ]
    data = {"choices": [{"logprobs": {"tokens": tokens, "top_logprobs": tops, "text_offset": [0] * 7}}]}
    assert call_logprobs(data, call, 0, len(call)) == [-0.5, -0.1, -3.0, -0.4]
    assert call_logprobs(data, call, 3, 5) == [-0.1, -3.0]  # "b" and "c": what lies between the tags
    values = [-0.5, -0.1, -3.0]
    assert measure(values, "mean") == (-0.5 - 0.1 - 3.0) / 3 and measure(values, "min") == -3.0
    assert call_logprobs(data, "<a>XY</a>", 0, 9) is None  # tokens that do not spell the call
    assert call_logprobs({"choices": [{"logprobs": None}]}, call, 0, 1) is None
    assert call_logprobs({}, call, 0, 1) is None


def test_a_literal_grammar_escapes_quotes_backslashes_and_newlines() -> None:
    assert gbnf_literal('<t>\n{"a": "b\\c"}') == 'root ::= "<t>\\n{\\"a\\": \\"b\\\\c\\"}"'


def test_forced_logprobs_are_those_of_the_tokens_inside_the_span() -> None:
    # As llama-server answers /completion with n_probs 1, post_sampling_probs false
    probs = [
        {"id": 1, "token": t, "logprob": lp, "top_logprobs": []}
        for t, lp in [("<a>", -0.1), ("b", -0.5), ("c", -2.0), ("</a>", -0.3)]
    ]
    data = {"content": "<a>bc</a>", "completion_probabilities": probs}
    assert forced_logprobs(data, 3, 5) == [-0.5, -2.0]
    assert forced_logprobs(data, 0, 9) == [-0.1, -0.5, -2.0, -0.3]
    assert forced_logprobs(data, 20, 30) is None  # nothing inside
    assert forced_logprobs({"content": "x"}, 0, 1) is None
    assert forced_logprobs({"completion_probabilities": [{"token": "x"}]}, 0, 1) is None
