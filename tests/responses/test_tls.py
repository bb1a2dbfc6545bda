"""`agent-router serve --ssl-certfile/--ssl-keyfile`: the SDK over https and wss, trusting a test CA."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import free_socket, policy_text
from tests.responses.conftest import TOOLS, recv_response

ROOT = Path(__file__).resolve().parents[2]


def self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return cert, key


@pytest.fixture
async def tls_proxy(fake, tmp_path: Path) -> AsyncIterator[tuple[str, ssl.SSLContext]]:
    """A `python -m router serve` subprocess over TLS; yields (https base URL ending /v1, client context)."""
    cert, key = self_signed(tmp_path)
    policy = tmp_path / "policy.yaml"
    policy.write_text(policy_text(fake.url, extra="escalation: {to: full}\n"))
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    log = (tmp_path / "serve.log").open("wb")
    args = ["--policy", str(policy), "--port", str(port), "--store", "memory://", "--log-level", "warning"]
    tls = ["--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "router", "serve", *args, *tls, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log
    )
    ctx = ssl.create_default_context(cafile=str(cert))
    url = f"https://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(verify=ctx, timeout=2) as probe:
            for _ in range(300):  # bounded: 30 s for imports and start-up
                if proc.returncode is not None:
                    break
                with contextlib.suppress(httpx.HTTPError):
                    if (await probe.get(url + "/healthz")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("TLS proxy did not start")
        assert proc.returncode is None, (tmp_path / "serve.log").read_text()
        yield url + "/v1", ctx
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        log.close()


async def test_sdk_over_https_and_wss(tls_proxy, sdk) -> None:
    url, ctx = tls_proxy
    client = sdk(url, http_client=httpx.AsyncClient(verify=ctx))
    first = await client.responses.create(model="auto", input="Weather in Paris?", tools=TOOLS)
    assert first.output[0].type == "function_call"
    stream = await client.responses.create(model="auto", input="hi", stream=True)
    assert [e async for e in stream][-1].type == "response.completed"
    async with client.responses.connect(websocket_connection_options={"ssl": ctx}) as conn:  # type: ignore[typeddict-unknown-key]
        call = first.output[0]
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
        await conn.response.create(model="auto", previous_response_id=first.id, input=[output])
        events = await recv_response(conn)
        assert events[-1].type == "response.completed" and events[-1].response.output_text
    plain = sdk(url.replace("https", "http"))  # a plain-HTTP client gets no answer from a TLS port
    with pytest.raises(openai.APIConnectionError):
        await plain.responses.create(model="auto", input="x", timeout=5)
