"""The Anthropic Messages API in front of real llama.cpp Qwen2.5-Coder-0.5B servers (policies/local.yaml),
through the official anthropic SDK: text, streams, tool calls, and a replayed Claude Code-style
session whose failing tool result makes the session sticky to the full tier."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import jsonschema
import pytest

from tests.conftest import Proxy
from tests.e2e.conftest import CALL_TIMEOUT

pytestmark = pytest.mark.llama


def _tool(name: str, description: str, **props: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {k: {"type": v} for k, v in props.items()}, "required": [*props][:1]}
    return {"name": name, "description": description, "input_schema": schema}


# Tools shaped like a coding agent's (names and arguments as Claude Code's built-in ones)
CODING_TOOLS = [
    _tool("Bash", "Run a shell command in the project directory", command="string", timeout="integer"),
    _tool("Read", "Read a file from the local filesystem", file_path="string", offset="integer"),
    _tool("Write", "Write a file to the local filesystem", file_path="string", content="string"),
    _tool("Edit", "Replace a string in a file", file_path="string", old_string="string", new_string="string"),
    _tool("Glob", "Find files by glob pattern", pattern="string", path="string"),
    _tool("Grep", "Search file contents with a regex", pattern="string", path="string"),
    _tool("WebFetch", "Fetch a URL and summarise it", url="string", prompt="string"),
    _tool("TodoWrite", "Update the task list", todos="array"),
]
SCHEMAS = {t["name"]: t["input_schema"] for t in CODING_TOOLS}
SYSTEM = (
    "You are an interactive CLI tool that helps users with software engineering tasks. Use the "
    "instructions below and the tools available to you to assist the user.\n"
    + "\n".join(f"- {t['name']}: {t['description']}." for t in CODING_TOOLS)
    + "\nIMPORTANT: Keep your responses short. Prefer tools over guessing. When a command fails, "
    "read the error and try something else."
)
SESSION = {"user_id": "user_replay_account__session_5f0c9a1e"}


@pytest.fixture
async def claude(local_proxy: Proxy) -> AsyncIterator[anthropic.AsyncAnthropic]:
    sdk = anthropic.AsyncAnthropic(base_url=local_proxy.base, api_key="x", max_retries=0, timeout=CALL_TIMEOUT)
    yield sdk
    await sdk.close()


async def test_text_message(claude: anthropic.AsyncAnthropic) -> None:
    raw = await claude.messages.with_raw_response.create(
        model="claude-opus-4-6",
        max_tokens=24,
        messages=[{"role": "user", "content": "Write one sentence about the sea."}],
    )
    assert (raw.headers["x-router-tier"], raw.headers["x-router-route"]) == ("full", "default")
    message = await raw.parse()
    [block] = message.content
    assert block.type == "text" and block.text.strip()
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0


async def test_text_stream(claude: anthropic.AsyncAnthropic) -> None:
    ask = [{"role": "user", "content": "Name three colors."}]
    async with claude.messages.stream(model="claude-opus-4-6", max_tokens=16, messages=ask) as stream:  # type: ignore[arg-type]
        texts = [t async for t in stream.text_stream]
        final = await stream.get_final_message()
    assert "".join(texts).strip() and final.content[0].text == "".join(texts)  # type: ignore[union-attr]
    assert final.stop_reason in ("end_turn", "max_tokens")


async def test_named_tool_is_a_valid_tool_use_from_fast(claude: anthropic.AsyncAnthropic) -> None:
    raw = await claude.messages.with_raw_response.create(
        model="claude-opus-4-6", max_tokens=64, system=SYSTEM, tools=CODING_TOOLS,  # type: ignore[arg-type]
        tool_choice={"type": "tool", "name": "Bash"},
        messages=[{"role": "user", "content": "List the files in this directory."}],
    )  # fmt: skip
    assert (raw.headers["x-router-tier"], raw.headers["x-router-escalated"]) == ("fast", "false")
    [call] = (await raw.parse()).content
    assert call.type == "tool_use" and call.name == "Bash"
    jsonschema.validate(call.input, SCHEMAS["Bash"])


async def test_auto_tool_answers_are_never_malformed(claude: anthropic.AsyncAnthropic) -> None:
    for question in ("Show me README.md", "Run the unit tests", "Find every TODO in the code"):
        try:
            raw = await claude.messages.with_raw_response.create(
                model="claude-opus-4-6", max_tokens=48, system=SYSTEM, tools=CODING_TOOLS,  # type: ignore[arg-type]
                messages=[{"role": "user", "content": question}],
            )  # fmt: skip
        except anthropic.APIStatusError as exc:  # no attempt passed the checks: Anthropic's retryable api_error
            assert exc.status_code == 502 and exc.body["error"]["type"] == "api_error", exc.body  # type: ignore[index]
            assert "failed the router's checks" in exc.body["error"]["message"], exc.body  # type: ignore[index]
            continue
        message = await raw.parse()
        calls = [b for b in message.content if b.type == "tool_use"]
        for call in calls:  # whatever the small model did, what reached us is a valid call or text
            assert call.name in SCHEMAS
            jsonschema.validate(call.input, SCHEMAS[call.name])
        if calls:
            assert message.stop_reason == "tool_use"
        elif not any(b.type == "text" and b.text.strip() for b in message.content):
            # an empty answer: the router must have seen it on fast and escalated
            assert raw.headers["x-router-escalated"] == "true", raw.headers
            assert "empty_response" in raw.headers["x-router-mistakes"], raw.headers


async def test_replayed_coding_session_turns_sticky_after_a_failed_tool(
    claude: anthropic.AsyncAnthropic, local_proxy: Proxy
) -> None:
    """Turn 1 is pinned to Bash so the replay is deterministic; Claude Code's later turns are `auto`."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "The build is broken. Run the tests and fix it."}]
    first = await claude.messages.with_raw_response.create(
        model="claude-opus-4-6", max_tokens=64, system=SYSTEM, tools=CODING_TOOLS, metadata=SESSION,  # type: ignore[arg-type]
        tool_choice={"type": "tool", "name": "Bash"}, messages=history,  # type: ignore[arg-type]
    )  # fmt: skip
    first_tier = first.headers["x-router-tier"]
    assert first_tier == "fast"
    [call] = (await first.parse()).content
    assert call.type == "tool_use"
    failure = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'pytest'"
    history += [
        {"role": "assistant", "content": [call.model_dump(exclude_none=True)]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": failure, "is_error": True}],
        },
    ]
    tiers = []
    for _ in range(2):
        raw = await claude.messages.with_raw_response.create(
            model="claude-opus-4-6", max_tokens=48, system=SYSTEM, tools=CODING_TOOLS, metadata=SESSION,  # type: ignore[arg-type]
            messages=history,  # type: ignore[arg-type]
        )  # fmt: skip
        tiers.append(raw.headers["x-router-tier"])
        answer = await raw.parse()
        history += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in answer.content] or "ok"},
                    {"role": "user", "content": "Go on."}]  # fmt: skip
    # sticky: the fast tier's Bash call failed; greedy full's own mistake may go on sampled (full-resample)
    assert len(tiers) == 2 and set(tiers) <= {"full", "full-resample"}, tiers
    stats: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=10) as http:
        deadline = time.monotonic() + 10  # the store records off the request path
        while time.monotonic() < deadline:
            stats = (await http.get(f"{local_proxy.url}/router/stats")).json()
            if stats["tiers"].get("fast", {}).get("mistakes", {}).get("agent_reported_error"):
                break
            await asyncio.sleep(0.1)
    assert stats["tiers"]["fast"]["mistakes"].get("agent_reported_error") == 1, json.dumps(stats)
    assert stats["tools"]["fast"]["Bash"]["mistakes"].get("agent_reported_error") == 1
