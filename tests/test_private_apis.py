"""The dependencies' private APIs the router relies on (issue 27, point 6): the list in
docs/architecture.md ("Private APIs we rely on") is complete, and what no other test pins is pinned here.

    the list                  every site tagged in router/ (`# private API: <id>, see docs/architecture.md`)
                              is a row of the table and every row is tagged where it says; each row
                              names a pin of pyproject.toml and a test that exists
    the scan                  a dependency's private API used in router/ without a tag fails: an import
                              from a private or `*_impl` module (and each use of what it imports), a
                              foreign `_name` (one router/ never defines), `super()._name`, an
                              assignment to an imported module's attribute (monkeypatching)
    the pins                  uvicorn's protocol hooks and request cycle as connections.py uses them;
                              Starlette's lazily built middleware stack and its route path; the
                              log records' caller lookup

The scan is a net for the mechanical cases, not a judge: an undocumented method with a public name
(Starlette's `build_middleware_stack`) is found by reading, and listed and tagged by hand.
"""

from __future__ import annotations

import ast
import asyncio
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.middleware import Middleware
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.types import Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState

from router.app import App, _route_path
from router.connections import BodyArrival, GuardedH11, GuardedHttpTools, GuardedWebSockets, Idle, OneWrite
from router.constants import BODY_IN
from router.core.live.open_calls import ConnectionCalls

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
SECTION = "## Private APIs we rely on"
TAG = re.compile(r"#\s*private API: ([a-z0-9-]+), see docs/architecture\.md")
TEST = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
PIN = re.compile(r"`([\w.-]+(?:\[\w+\])?)==([\w.]+)`")

# documented names that begin with an underscore (namedtuple's API), and documented module switches
PUBLIC_UNDERSCORE = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})
DOCUMENTED_SWITCHES = frozenset({"logging.logThreads", "logging.logProcesses", "logging.logMultiprocessing"})


# -- the list ------------------------------------------------------------------------------------
def rows() -> dict[str, dict[str, Any]]:
    """id → {files, pins, tests} of each row of the table in docs/architecture.md's section."""
    text = DOC.read_text()
    assert SECTION in text, f"{DOC.name} has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    out: dict[str, dict[str, Any]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| `") else []
        if len(cells) < 6:
            continue
        ident = cells[0].strip("`")
        assert ident not in out, f"row {ident} twice"
        out[ident] = {
            "files": set(re.findall(r"`(router/[\w/]+\.py)`", cells[1])),
            "pins": PIN.findall(cells[4]),
            "tests": TEST.findall(cells[5]),
            "python": "Python" in cells[4],
        }
    return out


def tags() -> dict[str, set[str]]:
    """id → the router/ files that tag a site with it."""
    out: dict[str, set[str]] = {}
    for path in sorted((ROOT / "router").rglob("*.py")):
        for ident in TAG.findall(path.read_text()):
            out.setdefault(ident, set()).add(str(path.relative_to(ROOT)))
    return out


def defines(test_file: Path, name: str) -> bool:
    tree = ast.parse(test_file.read_text())
    return any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name for n in ast.walk(tree))


def test_every_tagged_site_is_listed_and_every_listed_one_tagged() -> None:
    listed, tagged = rows(), tags()
    assert len(listed) >= 10
    assert sorted(set(tagged) - set(listed)) == [], "tagged in router/ but not in docs/architecture.md"
    assert sorted(set(listed) - set(tagged)) == [], "in docs/architecture.md but tagged nowhere in router/"
    wrong = {i: (sorted(listed[i]["files"]), sorted(tagged[i])) for i in listed if listed[i]["files"] != tagged[i]}
    assert wrong == {}, "a row's files (doc) against where its tag is (code)"


def test_every_row_names_its_pin_and_a_test_that_exists() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    for ident, row in rows().items():
        assert row["pins"] or row["python"], f"{ident}: no pinned version"
        for name, version in row["pins"]:
            assert f'"{name}=={version}"' in pyproject, f"{ident}: {name}=={version} is not pyproject.toml's pin"
        assert row["tests"], f"{ident}: no test named"
        for file, name in row["tests"]:
            assert (ROOT / file).exists() and defines(ROOT / file, name), f"{ident}: no test {file}::{name}"


# -- the scan ------------------------------------------------------------------------------------
def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_module(module: str) -> bool:
    return any(_private(part) or part.endswith("_impl") for part in module.split("."))


def _own(target: ast.Attribute) -> bool:
    """`self.x = …` or `cls.x = …`: an attribute of its own (not one set on a dependency's object)."""
    return isinstance(target.value, ast.Name) and target.value.id in ("self", "cls")


def defined_names(trees: list[ast.Module]) -> set[str]:
    """Every name router/ itself defines or binds (its own `_names` are not a dependency's)."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _own(node):
                names.add(node.attr)
    return names


def uses(tree: ast.Module, ours: set[str]) -> list[tuple[int, str]]:
    """(line, what) of each mechanical use of a dependency's private API in one module."""
    modules: set[str] = set()  # names bound to an imported (non-router) module
    private_imports: set[str] = set()  # names imported from a private module
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "router":
                    modules.add(alias.asname or alias.name.split(".")[0])
                    if _private_module(alias.name):
                        found.append((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module not in (None, "__future__"):
            if node.module.split(".")[0] == "router":
                continue
            for alias in node.names:
                if _private_module(node.module) or _private(alias.name):
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
                    private_imports.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in private_imports and isinstance(node.ctx, ast.Load):
            found.append((node.lineno, f"uses {node.id}"))
        if not isinstance(node, ast.Attribute):
            continue
        if _private(node.attr) and node.attr not in ours and node.attr not in PUBLIC_UNDERSCORE:
            found.append((node.lineno, f"a dependency's .{node.attr}"))
        value = node.value
        if _private(node.attr) and isinstance(value, ast.Call) and ast.unparse(value.func) == "super":
            found.append((node.lineno, f"super().{node.attr}"))
        if isinstance(node.ctx, ast.Store):
            root = value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in modules and ast.unparse(node) not in DOCUMENTED_SWITCHES:
                found.append((node.lineno, f"assigns {ast.unparse(node)}"))
    return sorted(found)


def untagged(path: Path, tree: ast.Module, ours: set[str]) -> list[str]:
    """The uses in `path` whose top-level statement carries no tag (in it, or in the comment
    lines just above it)."""
    lines = path.read_text().splitlines()
    spans = [(n.lineno, n.end_lineno or n.lineno, n) for n in tree.body]
    out = []
    for line, what in uses(tree, ours):
        start, end, statement = next((s, e, n) for s, e, n in spans if s <= line <= e)
        above = ("#", "@", "import ", "from ") if isinstance(statement, ast.Import | ast.ImportFrom) else ("#", "@")
        while start > 1 and lines[start - 2].lstrip().startswith(above):
            start -= 1  # the comments above it (for an import: and the imports above it, one block)
        if not any(TAG.search(lines[i - 1]) for i in range(start, end + 1)):
            out.append(f"{path.relative_to(ROOT) if ROOT in path.parents else path.name}:{line}: {what}")
    return out


def scan(paths: list[Path]) -> list[str]:
    trees = {p: ast.parse(p.read_text(), str(p)) for p in paths}
    ours = defined_names(list(trees.values()))
    return [hit for path, tree in trees.items() for hit in untagged(path, tree, ours)]


def test_no_private_api_is_used_untagged() -> None:
    assert scan(sorted((ROOT / "router").rglob("*.py"))) == []


def test_the_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text(
        "import logging\n"
        "from aiohttp import TCPConnector\n"
        "from uvicorn.protocols.http.h11_impl import H11Protocol\n"
        "\n"
        "class C(TCPConnector):\n"
        "    async def _wrap_create_connection(self, *a, **k):\n"
        "        return await super()._wrap_create_connection(*a, **k)\n"
        "\n"
        "P = H11Protocol\n"
        "logging._srcfile = None\n"
        "logging.logThreads = False\n"
        "def f(parts):\n"
        "    return parts._replace(a=1)\n"
        "\n"
        "# private API: x, see docs/architecture.md\n"
        "def g(state):\n"
        "    state._hidden.reset()\n"
    )
    hits = [h.split(": ", 1)[1] for h in scan([module])]
    assert hits == [
        "from uvicorn.protocols.http.h11_impl import H11Protocol",
        "super()._wrap_create_connection",
        "uses H11Protocol",
        "a dependency's ._srcfile",
        "assigns logging._srcfile",
    ]  # not: `_wrap_create_connection` defined here, the documented switch, namedtuple's `_replace`, the tagged `g`


# -- the pins: uvicorn ---------------------------------------------------------------------------
# what `_guarded` overrides of each protocol, and what it calls on the request cycle
HOOKS = ("connection_made", "data_received", "connection_lost", "on_response_complete", "timeout_keep_alive_handler",
         "shutdown")  # fmt: skip
PARSER_CALLBACKS = ("on_headers_complete", "on_message_complete")  # httptools' own, on HttpToolsProtocol only


def test_uvicorn_protocols_keep_what_guarded_overrides() -> None:
    for base in (H11Protocol, HttpToolsProtocol):
        assert [h for h in HOOKS if not callable(getattr(base, h, None))] == [], base.__name__
    assert all(callable(getattr(HttpToolsProtocol, c, None)) for c in PARSER_CALLBACKS)
    assert callable(getattr(WebSocketsSansIOProtocol, "shutdown", None))
    # the names Guarded adds must not shadow one of uvicorn's (class or instance attributes)
    loop = asyncio.new_event_loop()
    plain = HttpToolsProtocol(config=_config(), server_state=ServerState(), app_state={}, _loop=loop)
    loop.close()
    for guarded, base in ((GuardedHttpTools, HttpToolsProtocol), (GuardedH11, H11Protocol)):
        added = {n for n in vars(guarded) if _private(n)} - {"_abc_impl"}
        assert added and not added & (set(dir(base)) | set(vars(plain))), guarded.__name__
    assert not {n for n in vars(GuardedWebSockets) if _private(n)} & set(dir(WebSocketsSansIOProtocol))


class Recording(asyncio.Transport):
    """A transport that keeps each write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.protocol: Any = None

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_protocol(self) -> Any:
        return self.protocol

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _config(app: Any = None) -> Config:
    async def nothing(scope: Scope, receive: Receive, send: Send) -> None:
        pass

    return Config(app or nothing, lifespan="off", http=GuardedHttpTools, log_level="warning")


async def test_a_request_through_the_guarded_protocol() -> None:
    """uvicorn's httptools protocol driven as the server drives it: the request's cycle writes
    through `OneWrite` (head and body in one write), wakes the app through `BodyArrival` (a body in
    three parts is one message), and the app's scope carries `ConnectionCalls` and `BODY_IN`."""
    seen: list[dict[str, Any]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        body_in = scope.get(BODY_IN)
        messages = [await receive()]
        while messages[-1].get("more_body"):
            messages.append(await receive())
        seen.append({"calls": scope.get(ConnectionCalls.KEY), "body_in": body_in, "messages": messages})
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    tripped: list[str] = []
    runtime = SimpleNamespace(
        settings=SimpleNamespace(max_connections=8, header_timeout=5.0, max_header_bytes=4096),
        metrics=SimpleNamespace(tripped=tripped.append),
        open=SimpleNamespace(drain=lambda: None, draining=False),
    )
    state = ServerState()
    protocol = GuardedHttpTools(
        config=_config(app), server_state=state, app_state={"runtime": runtime}, _loop=asyncio.get_running_loop()
    )
    transport = Recording()
    transport.protocol = protocol
    protocol.connection_made(transport)
    assert protocol in state.connections and protocol in Idle.of(protocol).fresh

    async def settle() -> None:
        for _ in range(20):
            await asyncio.sleep(0)

    head = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 6\r\n\r\n"
    protocol.data_received(head + b"abcdef")  # the whole request at once
    assert isinstance(protocol.cycle.transport, OneWrite) and isinstance(protocol.cycle.message_event, BodyArrival)
    await settle()
    protocol.data_received(head + b"ab")  # the next one's body in three parts
    for part in (b"cd", b"ef"):
        await settle()
        protocol.data_received(part)
    await settle()

    assert [s["messages"] for s in seen] == [[{"type": "http.request", "body": b"abcdef", "more_body": False}]] * 2
    assert all(isinstance(s["calls"], ConnectionCalls) for s in seen)
    assert [s["body_in"] for s in seen] == [True, None]  # buffered whole before the app ran; not yet
    answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    assert transport.writes == [answer, answer]  # each response's head with its body, in one write
    assert protocol in Idle.of(protocol).kept and tripped == []
    protocol.connection_lost(None)
    assert protocol not in state.connections and transport.closed


# -- the pins: Starlette -------------------------------------------------------------------------
async def test_starlette_builds_its_stack_with_the_routers_layers_outside() -> None:
    """Starlette builds its stack on the first call, through `build_middleware_stack`: `App` puts the
    router's layers outside it, so they run before its server-error layer."""
    order: list[str] = []

    class Layer:
        def __init__(self, app: Any, name: str) -> None:
            self.app, self.name = app, name

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            order.append(self.name)
            await self.app(scope, receive, send)

    app = App(outer=[Middleware(Layer, name="outer"), Middleware(Layer, name="inner")])
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/nowhere", "root_path": "", "headers": [], "query_string": b""}
    await app(scope, receive, send)
    assert order == ["outer", "inner"] and sent[0]["status"] == 404
    stack = app.middleware_stack  # built on the first call
    assert isinstance(stack, Layer) and isinstance(stack.app, Layer)
    assert isinstance(stack.app.app, ServerErrorMiddleware)


@pytest.mark.parametrize(
    ("path", "root"),
    [("/v1/chat/completions", ""), ("/router/v1/chat/completions", "/router"), ("/v1/messages", "/router"),
     ("/routerx/v1/responses", "/router"), ("/router/", "/router")],
)  # fmt: skip
def test_the_route_path_is_read_as_starlette_reads_it(path: str, root: str) -> None:
    from starlette._utils import get_route_path  # the private function `_route_path` mirrors

    assert _route_path({"path": path, "root_path": root}) == get_route_path({"path": path, "root_path": root})


# -- the pins: the standard library --------------------------------------------------------------
def test_log_records_skip_the_callers_file() -> None:
    """After `configure_logging`, a record carries no caller (file, line, function): logging's
    `_srcfile` is None, so it no longer walks the stack for every record."""
    code = (
        "import logging\n"
        "from router.serve import configure_logging\n"
        "configure_logging('info')\n"
        "class Keep(logging.Handler):\n"
        "    def emit(self, record): print([record.pathname, record.lineno, record.funcName, record.threadName])\n"
        "log = logging.getLogger('x'); log.addHandler(Keep()); log.propagate = False\n"
        "log.info('hi')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['(unknown file)', 0, '(unknown function)', None]"
