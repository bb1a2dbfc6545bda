"""What the proxy refuses, and how: every refusal is an OpenAI error body and nothing reaches upstream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import openai
import orjson
import pytest

from router.fake import FakeConfig
from tests.api.helpers import USER, assert_error_body, fake_requests, get, post
from tests.conftest import policy_text

CLIENT_KEY = "k-1234567890-client"


async def test_malformed_json_is_400(fake, proxy_) -> None:
    proxy = await proxy_(policy_text(fake.url))
    raw = await post(proxy.url + "/chat/completions", data=b'{"model": "auto", "messages": [')
    err = assert_error_body(raw, 400, type_="invalid_request_error", code="invalid_json")
    assert raw.headers["x-should-retry"] == "false"
    assert "not valid JSON" in err["message"]
    assert await fake_requests(fake.url) == []


@pytest.mark.parametrize("body", [b"[]", b'"text"', b"42", b"null", b""])
async def test_non_object_body_is_400(fake, proxy_, body: bytes) -> None:
    proxy = await proxy_(policy_text(fake.url))
    raw = await post(proxy.url + "/chat/completions", data=body)
    assert_error_body(raw, 400, type_="invalid_request_error", code="invalid_json")
    assert await fake_requests(fake.url) == []


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": USER}, "model"),
        ({"model": "auto"}, "messages"),
        ({"model": "auto", "messages": []}, "messages"),
        ({"model": "auto", "messages": ["hi"]}, "messages"),
        ({"model": "auto", "messages": USER, "tools": {"a": 1}}, "tools"),
    ],
)
async def test_invalid_request_fields_are_400(fake, proxy_, body: dict[str, object], param: str) -> None:
    proxy = await proxy_(policy_text(fake.url))
    err = assert_error_body(await post(proxy.url + "/chat/completions", body), 400, code="invalid_request")
    assert err["param"] == param
    assert await fake_requests(fake.url) == []


async def test_body_over_limit_is_413_with_and_without_content_length(fake, proxy_) -> None:
    proxy = await proxy_(policy_text(fake.url), max_body_bytes=2048)
    big = orjson.dumps({"model": "auto", "messages": [{"role": "user", "content": "x" * 4096}]})
    raw = await post(proxy.url + "/chat/completions", data=big)
    assert_error_body(raw, 413, type_="invalid_request_error", code="body_too_large")

    async def chunked() -> AsyncIterator[bytes]:  # no content-length: the limit applies while reading
        for i in range(0, len(big), 512):
            yield big[i : i + 512]

    async with (
        aiohttp.ClientSession() as s,
        s.post(proxy.url + "/chat/completions", data=chunked(), headers={"content-type": "application/json"}) as r,
    ):
        assert r.status == 413
        assert "content-length" not in {k.lower() for k in r.request_info.headers}
        body = orjson.loads(await r.read())
        assert set(body["error"]) == {"message", "type", "param", "code"}
        assert body["error"]["code"] == "body_too_large"
    small = {"model": "auto", "messages": USER}
    assert (await post(proxy.url + "/chat/completions", small)).status == 200
    assert len(await fake_requests(fake.url)) == 1
    metrics = (await get(proxy.base + "/metrics")).body.decode()
    assert 'router_refused_total{reason="body_too_large"} 2.0' in metrics


@pytest.mark.parametrize("field", ["api_base", "base_url", "api_key"])
async def test_fields_that_choose_an_upstream_are_refused(fake, proxy_, field: str) -> None:
    proxy = await proxy_(policy_text(fake.url))
    body = {"model": "auto", "messages": USER, field: "http://attacker.example/v1"}
    err = assert_error_body(await post(proxy.url + "/chat/completions", body), 400, code="forbidden_field")
    assert err["param"] == field
    stream = await post(proxy.url + "/chat/completions", {**body, "stream": True})
    assert_error_body(stream, 400, code="forbidden_field")
    assert await fake_requests(fake.url) == []


@pytest.mark.parametrize("where", ["policy", "settings"])
async def test_client_keys(fake, proxy_, sdk, where: str) -> None:
    if where == "policy":
        proxy = await proxy_(policy_text(fake.url, extra=f'client_keys: ["{CLIENT_KEY}"]\n'))
    else:
        proxy = await proxy_(policy_text(fake.url), client_keys=[CLIENT_KEY])
    url = proxy.url + "/chat/completions"
    body = {"model": "auto", "messages": USER}
    for headers in ({}, {"authorization": "Bearer wrong-key"}, {"x-api-key": "wrong"}, {"authorization": CLIENT_KEY}):
        raw = await post(url, body, headers=headers)
        err = assert_error_body(raw, 401, type_="authentication_error", code="invalid_api_key")
        assert CLIENT_KEY not in err["message"]
    assert await fake_requests(fake.url) == []
    assert (await post(url, body, headers={"authorization": f"Bearer {CLIENT_KEY}"})).status == 200
    assert (await post(url, body, headers={"x-api-key": CLIENT_KEY})).status == 200
    with pytest.raises(openai.AuthenticationError):
        await sdk(proxy.url, api_key="nope").chat.completions.create(model="auto", messages=USER)
    done = await sdk(proxy.url, api_key=CLIENT_KEY).chat.completions.create(model="auto", messages=USER)
    assert done.choices[0].message.content
    # admin endpoints that show routing state need the key too; health does not
    assert (await get(proxy.url + "/models")).status == 401
    assert (await get(proxy.url + "/router/stats")).status == 401
    assert (await get(proxy.url + "/models", {"authorization": f"Bearer {CLIENT_KEY}"})).status == 200
    assert (await get(proxy.base + "/healthz")).status == 200
    assert len(await fake_requests(fake.url)) == 3


async def test_concurrency_cap_is_503_with_retry_after(start_fake_, proxy_) -> None:
    slow = await start_fake_(FakeConfig(delay_ms=300))
    proxy = await proxy_(policy_text(slow.url), max_concurrency=1)
    url = proxy.url + "/chat/completions"
    body = {"model": "auto", "messages": USER}
    first = asyncio.create_task(post(url, body))
    for _ in range(200):
        if proxy.runtime.inflight == 1:
            break
        await asyncio.sleep(0.005)
    assert proxy.runtime.inflight == 1
    refused = await post(url, body)
    err = assert_error_body(refused, 503, type_="overloaded_error", code="overloaded")
    assert refused.headers["retry-after"] == "1"
    assert refused.headers["x-should-retry"] == "true"
    assert err["param"] is None
    assert (await first).status == 200
    assert proxy.runtime.inflight == 0
    # a stream holds its slot until it ends, then frees it
    streamed = await post(url, {**body, "stream": True})
    assert streamed.status == 200 and proxy.runtime.inflight == 0
    assert (await post(url, body)).status == 200
    assert len(await fake_requests(slow.url)) == 3


async def test_unknown_path_and_method_are_openai_errors(fake, proxy_) -> None:
    proxy = await proxy_(policy_text(fake.url))
    err = assert_error_body(await get(proxy.url + "/no/such/thing"), 404, type_="invalid_request_error")
    assert err["code"] == "not_found"  # a URL, not a model, was not found
    assert "/v1/no/such/thing" in err["message"]
    assert_error_body(await post(proxy.url + "/embeddings", {"model": "auto", "input": "x"}), 404, code="not_found")
    assert_error_body(await get(proxy.url + "/chat/completions"), 405, code="not_found")
    assert await fake_requests(fake.url) == []
