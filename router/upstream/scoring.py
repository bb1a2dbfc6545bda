"""How an OpenAI-compatible server scores a call, for the one-prefill verifier (`verify: {kind: score}`,
router/core/checks/verify.py): the full model *scores* the fast model's call instead of answering again —
the idea of speculative decoding applied to tool calls. A tier that can (`Scores`, router/upstream/
base.py) answers `score_call`; OpenAICompatUpstream does it with the functions here.

The verdict is the mean (or min: `measure`) log-probability of the call's own tokens (the tool's
name and the arguments) given the request, in the scoring model's prompt format; the route accepts
at or above `threshold`. Two ways to ask for it (`verify.via`):

    echo     llama-cpp-python: the prompt with the call as the assistant's answer, once to the legacy
             completions endpoint with `echo: true, logprobs: K, max_tokens: 1` (one prefill, but
             that server ranks the whole vocabulary in Python for every prompt token: slow)
    forced   llama.cpp's llama-server (which has no prompt logprobs): the tier renders the request
             (`POST /apply-template`, exactly the prompt its chat endpoint would build), then
             `POST /completion` generates the call under a grammar that allows only its text, with
             `n_probs: 1, post_sampling_probs: false`: each forced token's log-probability under the
             raw logits, in the session's slot (router/sessions/affinity.py). One decode step per
             call token, and a prefill of only what the slot does not hold yet: on a session whose
             prompt the tier keeps (a warm prefix, router/core/live/warming.py) that is the fast call
             itself; the prompt stays in the slot, so a full answer after a rejection reuses it too.

    chatml_prompt(messages, tools)   Qwen2.5's ChatML with its tool block, exactly as its GGUF
                                     template renders under llama-cpp-python (checked in
                                     tests/e2e/test_full_tier.py)
    call_text(name, arguments)       one call as Qwen2.5 writes it
    call_logprobs(data, call, ...)   from an echo answer: the call tokens' logprobs (`measure`: mean, min)
    gbnf_literal(text)               a GBNF grammar that matches exactly `text`
    forced_logprobs(data, start, end) from a llama-server /completion answer: the forced tokens'
                                     logprobs that begin in characters [start, end) of the call
    echo_request(...), forced_request(...)  the requests of each way; the tier sends them

llama-cpp-python 0.3.36 (measured): with `echo` it reports, at token i, the distribution that
predicts token i + 1 — `token_logprobs[i]` is the token's probability given itself and is useless,
while `top_logprobs[i]` holds the next token's. So the call's token i + 1 is looked up in
`top_logprobs[i]`; a token outside that top K counts as the lowest value listed there (a bound,
not the value). Its `text_offset`s skip special tokens, so the call's tokens are found by spelling
the call from the end of the echo instead.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
_TOOLS_INTRO = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_OUTRO = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n'
    "</tool_call>"
)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping))
    return ""


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if value is not None else "{}"  # ", " and ": ", as Qwen writes


def call_text(name: str, arguments: Any) -> str:
    """One call in Qwen2.5's format; `arguments` a JSON string or a decoded object."""
    if isinstance(arguments, str):
        with contextlib.suppress(orjson.JSONDecodeError):
            arguments = orjson.loads(arguments)
    args = arguments if isinstance(arguments, str) else _json(arguments)
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def chatml_prompt(messages: Sequence[Mapping[str, Any]], tools: Sequence[Any]) -> str:
    """The prompt up to the assistant's answer, as Qwen2.5's template renders it with tools."""
    first = messages[0] if messages else {}
    system = _text(first.get("content")) if first.get("role") == "system" else QWEN_SYSTEM
    out = ["<|im_start|>system\n", system, _TOOLS_INTRO]
    out += ["\n" + json.dumps(t) for t in tools]  # as llama-cpp-python's `tojson`: plain json.dumps
    out.append(_TOOLS_OUTRO + "<|im_end|>\n")
    rest = messages[1:] if first.get("role") == "system" else messages
    for i, m in enumerate(rest):
        role = m.get("role")
        if role == "tool":
            if i == 0 or rest[i - 1].get("role") != "tool":
                out.append("<|im_start|>user")
            out.append(f"\n<tool_response>\n{_text(m.get('content'))}\n</tool_response>")
            if i == len(rest) - 1 or rest[i + 1].get("role") != "tool":
                out.append("<|im_end|>\n")
        elif role == "assistant" and m.get("tool_calls"):
            out.append("<|im_start|>assistant" + (f"\n{_text(m.get('content'))}" if m.get("content") else ""))
            for c in m["tool_calls"]:  # the template encodes the arguments string once more
                fn = c.get("function") or {}
                args = json.dumps(fn.get("arguments"))
                out.append(f'\n<tool_call>\n{{"name": "{fn.get("name", "")}", "arguments": {args}}}\n</tool_call>')
            out.append("<|im_end|>\n")
        else:
            out.append(f"<|im_start|>{role}\n{_text(m.get('content'))}<|im_end|>\n")
    out.append("<|im_start|>assistant\n")
    return "".join(out)


def call_logprobs(data: Mapping[str, Any], call: str, start: int, end: int) -> list[float] | None:
    """The logprobs of the echoed tokens of `call` (the prompt's last characters) that begin in its
    characters [start, end); None when the answer has none or its tokens do not spell `call`.

    The call's tokens are found by spelling it from the end of the echo: llama-cpp-python's
    `text_offset`s do not count special tokens (`<|im_start|>` …), so they are no character offsets
    into the prompt, and the echo ends with the one generated token. Each token's logprob is read
    one position back (see the module docstring); one outside that top K counts as the lowest value
    there that is not the previous token's own entry (a bound)."""
    choices = data.get("choices")
    lp = choices[0].get("logprobs") if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    tokens, tops = (lp.get("tokens"), lp.get("top_logprobs")) if isinstance(lp, dict) else (None, None)
    if not (isinstance(tokens, list) and isinstance(tops, list) and len(tokens) == len(tops)):
        return None
    for last in (len(tokens), len(tokens) - 1):  # the echo may end with the generated token
        first, spelled = last, ""
        while first > 0 and len(spelled) < len(call):
            first -= 1
            spelled = str(tokens[first]) + spelled
        if spelled == call:
            break
    else:
        return None
    values, at = [], 0
    for i in range(first, last):
        top = tops[i - 1] if i > 0 else None
        if start <= at < end:
            if not isinstance(top, dict) or not top:
                return None
            others = [v for k, v in top.items() if k != tokens[i - 1]] or list(top.values())
            values.append(float(top.get(tokens[i], min(others))))
        at += len(str(tokens[i]))
    return values or None


def gbnf_literal(text: str) -> str:
    """A GBNF grammar whose only sentence is `text`."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'root ::= "{escaped}"'


def forced_logprobs(data: Mapping[str, Any], start: int, end: int) -> list[float] | None:
    """The logprobs of the generated tokens (llama-server's `completion_probabilities`, pre-sampling)
    that begin in characters [start, end) of the generated text; None when there are none."""
    probs = data.get("completion_probabilities")
    if not isinstance(probs, list):
        return None
    values, at = [], 0
    for p in probs:
        if (
            not isinstance(p, dict)
            or not isinstance(p.get("token"), str)
            or not isinstance(p.get("logprob"), (int, float))
        ):
            return None
        if start <= at < end:
            values.append(float(p["logprob"]))
        at += len(p["token"])
    return values or None


def measure(values: Sequence[float], how: str) -> float:
    """`mean` or `min` of a call's token logprobs."""
    return min(values) if how == "min" else sum(values) / len(values)


def call_span(call: Mapping[str, Any]) -> tuple[str, int, int]:
    """The call as Qwen writes it, and the characters [start, end) that are scored: only what the fast
    model chose — the tool's name and the arguments, not the fixed `<tool_call>\n{"name": "` around
    them (Qwen under llama-cpp-python writes ```json, so those are unlikely tokens for every call alike)."""
    fn = call.get("function") or {}
    name = str(fn.get("name", ""))
    text = call_text(name, fn.get("arguments"))
    return text, text.index(name), text.rindex("}\n</tool_call>")


def echo_request(model: str, body: Mapping[str, Any], text: str, top: int) -> bytes:
    """The legacy completions request whose echo holds the logprobs of `text` after `body`'s prompt."""
    prompt = chatml_prompt(body.get("messages") or [], body.get("tools") or [])
    payload = {"model": model, "prompt": prompt + text, "max_tokens": 1, "temperature": 0, "echo": True,
               "logprobs": top}  # fmt: skip
    return orjson.dumps(payload)


def forced_request(prompt: str, text: str, slot: int | None) -> bytes:
    """The llama-server /completion request that generates exactly `text` after `prompt` (the rendered
    chat), with each token's raw logprob, in `slot`."""
    payload: dict[str, Any] = {
        "prompt": prompt,
        "grammar": gbnf_literal(text),
        "n_predict": len(text) + 8,  # a token is at least one character; room for the end token
        "temperature": 0,
        "n_probs": 1,
        "post_sampling_probs": False,
        "cache_prompt": True,
    }
    if slot is not None:
        payload["id_slot"] = slot
    return orjson.dumps(payload)
