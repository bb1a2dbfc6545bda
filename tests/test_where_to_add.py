"""docs/architecture.md's "Where to add", held to the code: a provider or a client API added with one
of its places forgotten fails here (a mistake kind: tests/test_mistakes.py). The lists are read from
the code itself — the clients in router/upstream/, `CLIENTS`, the `Native`s the transports make, the
app's routes — never written out again here."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import typing
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.routing import Route, WebSocketRoute

from router import upstream as upstream_package
from router.app import create_app
from router.core.call import FORBIDDEN_FIELDS
from router.fake import FakeServer
from router.policy.model import Tier
from router.settings import Settings
from router.upstream import CLIENTS, build_upstream
from router.upstream.base import NativeUpstream, Prefills, Prewarms, Scores, Upstream
from tests.api.helpers import get, post
from tests.conftest import Proxy, policy_text
from tests.scripted import UNUSED, Scripted

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
OPENAPI = ROOT / "router" / "api" / "openapi.yaml"
APIS: tuple[str, ...] = typing.get_args(typing.get_args(Tier.model_fields["apis"].annotation)[0])
Starter = Callable[..., Awaitable[Proxy]]
HOOKS = (Prefills, Prewarms, Scores)  # found on a client by name (router/upstream/base.py's `prefills`, ...)


# ------------------------------------------------------------------------------ providers


def tier_of(provider: str) -> Tier:
    """A tier of `provider`, with every client API an `openai/*` tier may take as it is."""
    try:
        return Tier(model=f"{provider}/m", api_base=UNUSED, apis=list(APIS))  # type: ignore[arg-type]
    except ValidationError:  # only openai/* tiers take `apis`
        return Tier(model=f"{provider}/m", api_base=UNUSED)


def built(provider: str) -> Upstream:
    return build_upstream("t", tier_of(provider))


LITELLM = "bedrock"  # a provider without a client of its own: litellm's


def client_classes() -> set[type]:
    """Every class of router/upstream/ that answers calls (has `complete`): the tiers' clients."""
    found = set()
    for info in pkgutil.iter_modules(upstream_package.__path__, "router.upstream."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            protocol = getattr(cls, "_is_protocol", False)
            if cls.__module__ == module.__name__ and not protocol and callable(getattr(cls, "complete", None)):
                found.add(cls)
    return found


def members(protocol: type) -> tuple[set[str], set[str]]:
    """(attributes, methods) a protocol asks for, its bases' included."""
    attributes: set[str] = set()
    methods: set[str] = set()
    for cls in protocol.__mro__:
        if not getattr(cls, "_is_protocol", False) or cls is typing.Protocol:
            continue
        attributes |= set(inspect.get_annotations(cls))
        methods |= {n for n, v in vars(cls).items() if not n.startswith("_") and inspect.isfunction(v)}
    return attributes, methods


def shape(function: Any) -> tuple[object, ...]:
    """What a caller relies on of a method: its parameters (names, kinds, defaults), and whether it is
    awaited (a coroutine) or iterated (an async iterator: a plain `def` or an async generator)."""
    parameters = tuple((p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values())
    return parameters, inspect.iscoroutinefunction(function)


def breaks(client: object, protocol: type) -> list[str]:
    """How `client` fails `protocol`: each member missing or of another shape."""
    attributes, methods = members(protocol)
    wrong = [f"{protocol.__name__}.{name}: missing" for name in sorted(attributes) if not hasattr(client, name)]
    for name in sorted(methods):
        own = getattr(type(client), name, None)
        if own is None:
            wrong.append(f"{protocol.__name__}.{name}: missing")
        elif shape(own) != shape(getattr(protocol, name)):
            wrong.append(f"{protocol.__name__}.{name}: {shape(own)} is not {shape(getattr(protocol, name))}")
    return wrong


def test_every_client_is_built_for_its_provider() -> None:
    """A client written but never built (its provider not in `CLIENTS`), or a provider whose builder
    gives another's client, fails here; so does a provider `build_upstream` sends to litellm."""
    clients = {provider: type(built(provider)) for provider in CLIENTS}
    fallback = type(built(LITELLM))
    assert LITELLM not in CLIENTS and fallback not in clients.values()
    assert len(set(clients.values())) == len(clients), clients  # one client per provider
    assert {*clients.values(), fallback} == client_classes()


def test_every_client_keeps_the_protocols() -> None:
    """Each client, and the in-process object the docs offer (tests/scripted.py), has every member of
    `Upstream` in its shape; one that speaks a client API as it is (`dialects`) is a `NativeUpstream`;
    a hook found by name (`prefill`, `prewarm`, `score_call`) has its protocol's shape."""
    clients = [built(provider) for provider in (*CLIENTS, LITELLM)] + [Scripted("t", [])]
    for client in clients:
        assert isinstance(client.dialects, frozenset), client
        wrong = breaks(client, NativeUpstream if client.dialects else Upstream)
        for hook in HOOKS:
            if any(hasattr(client, name) for name in members(hook)[1]):
                wrong += breaks(client, hook)
        assert wrong == [], type(client).__name__


def test_a_client_that_breaks_a_protocol_is_seen() -> None:
    class Short(Scripted):
        dialects = frozenset({"messages"})  # no complete_native / stream_native

        async def context_window(self, deadline: float, extra: int = 0) -> int | None:
            return None

    assert breaks(Scripted("t", []), Upstream) == []
    wrong = breaks(Short("t", []), NativeUpstream)
    assert [w.split(":")[0] for w in wrong] == [
        "NativeUpstream.complete_native", "NativeUpstream.context_window", "NativeUpstream.stream_native"
    ]  # fmt: skip


def provider_names(path: Path) -> set[str]:
    """The providers a module names: strings compared with a `.provider` (`==`, `!=`, `in (...)`)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and node.left.attr == "provider":
            for side in node.comparators:
                names |= {c.value for c in ast.walk(side) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return names


def test_the_policy_and_the_docs_name_the_providers_with_clients() -> None:
    """The policy's `Tier` checks keys of providers that have a client of their own, and says which;
    docs/policy.md names each."""
    named = provider_names(ROOT / "router" / "policy" / "model.py")
    assert named and named <= set(CLIENTS), named - set(CLIENTS)
    description = Tier.model_fields["model"].description or ""
    policy_doc = (DOCS / "policy.md").read_text()
    for provider in CLIENTS:
        assert f'"{provider}/<id>"' in description, provider
        assert f"`{provider}/*`" in policy_doc, provider


def test_the_architecture_names_each_clients_module() -> None:
    """docs/architecture.md's floors (its first code block) name each client's module."""
    floors = (DOCS / "architecture.md").read_text().split("```")[1]
    for cls in client_classes():
        assert f"{cls.__module__.rsplit('.', 1)[1]}.py" in floors, cls


# ------------------------------------------------------------------------------ client APIs


def dialects_made() -> set[str]:
    """The client APIs the transports hand tiers as they are: every `Native(<dialect>, ...)` in router/."""
    made = set()
    for path in (ROOT / "router").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Native":
                dialect = node.args[0] if node.args else next(k.value for k in node.keywords if k.arg == "dialect")
                assert isinstance(dialect, ast.Constant), f"{path}:{node.lineno}: a dialect this test cannot read"
                made.add(dialect.value)
    return made


def fake_apis() -> set[str]:
    """The APIs the fake upstream answers (router/fake/server.py's `calls.endpoint(<name>)` routes)."""
    tree = ast.parse((ROOT / "router" / "fake" / "server.py").read_text())
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "endpoint"
        and isinstance(node.func.value, ast.Name) and node.func.value.id == "calls"
        and node.args and isinstance(node.args[0], ast.Constant)
    }  # fmt: skip


def test_every_dialect_is_made_spoken_and_faked() -> None:
    """A client API tiers may take as it is: the transport makes its `Native`, a client speaks it (for
    `openai/*` tiers: a value of `apis`), and the fake upstream serves it, for the fault suites."""
    made = dialects_made()
    spoken = set().union(*(built(provider).dialects for provider in (*CLIENTS, LITELLM)))
    assert made == spoken
    assert set(APIS) <= made
    assert made <= fake_apis()


def app(tmp_path: Path) -> Starlette:
    path = tmp_path / "policy.yaml"
    path.write_text(policy_text(UNUSED))
    return create_app(Settings(policy=path, reload_policy=False, warm_up=False), upstreams={})


def http_routes(application: Starlette) -> list[Route]:
    return [r for r in application.routes if isinstance(r, Route)]


def described() -> dict[str, set[str]]:
    paths = yaml.safe_load(OPENAPI.read_text())["paths"]
    return {path: {m.upper() for m in methods} for path, methods in paths.items()}


def served(application: Starlette) -> dict[str, set[str]]:
    """Path → methods of the HTTP routes openapi.yaml describes: its header leaves out the WebSocket
    routes, /metrics (Prometheus text) and the unversioned aliases of the /v1 routes."""
    routes = {r.path: set(r.methods or ()) - {"HEAD"} for r in http_routes(application)}
    aliases = {p for p in routes if not p.startswith("/v1") and routes.get("/v1" + p) == routes[p]}
    return {p: m for p, m in routes.items() if p not in aliases and p != "/metrics"}


def test_every_route_is_described_and_every_description_served(tmp_path: Path) -> None:
    assert served(app(tmp_path)) == described()


def test_every_http_route_renders_its_errors(tmp_path: Path) -> None:
    """Each handler is wrapped by `router.api.endpoint` (errors in its API's shape, no traceback out)."""
    assert [r.path for r in http_routes(app(tmp_path)) if not hasattr(r.endpoint, "__wrapped__")] == []


def client_apis(application: Starlette) -> set[str]:
    """The client APIs' paths: the /v1 routes that call a model (POST, WebSocket), but sub-paths."""
    paths = {r.path for r in http_routes(application) if "POST" in (r.methods or ())}
    paths |= {r.path for r in application.routes if isinstance(r, WebSocketRoute)}
    paths = {p for p in paths if p.startswith("/v1/")}
    return {p for p in paths if not any(p.startswith(q + "/") for q in paths)}


async def test_the_root_and_the_client_docs_name_every_client_api(
    tmp_path: Path, fake: FakeServer, proxy_: Starter
) -> None:
    application = app(tmp_path)
    apis = client_apis(application)
    assert {"/v1/chat/completions", "/v1/messages", "/v1/responses"} <= apis
    proxy = await proxy_(policy_text(fake.url))
    assert apis <= set((await get(proxy.base + "/")).json()["endpoints"])
    clients = (DOCS / "clients.md").read_text()
    for route in application.routes:
        methods = ["GET"] if isinstance(route, WebSocketRoute) else sorted(getattr(route, "methods", None) or ())
        if route.path in apis or any(route.path.startswith(p + "/") for p in apis):
            assert any(f"`{method} {route.path}`" in clients for method in methods), route.path


async def test_every_call_route_refuses_a_body_that_names_where_to_call(
    tmp_path: Path, fake: FakeServer, proxy_: Starter
) -> None:
    """Each POST route's parse refuses the fields that would choose the upstream (`refuse_forbidden`),
    before any tier is asked."""
    posts = [r.path for r in http_routes(app(tmp_path)) if "POST" in (r.methods or ())]
    proxy = await proxy_(policy_text(fake.url))
    for field in FORBIDDEN_FIELDS:
        body = {"model": "auto", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "input": "hi",
                field: "http://127.0.0.1:9/v1"}  # fmt: skip
        for route in posts:
            raw = await post(proxy.base + route, body)
            assert raw.status == 400 and repr(field).encode() in raw.body, (route, raw.body)
    async with aiohttp.ClientSession() as session, session.get(fake.url.removesuffix("/v1") + "/_fake/requests") as r:
        assert [e["path"] for e in await r.json() if e["method"] == "POST"] == []
