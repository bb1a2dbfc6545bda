"""How `agent-router serve` runs: one process, or `--workers N` processes on one port.

With N > 1 the `serve` process becomes a supervisor (router/supervisor.py) of N worker processes,
each listening on the port with its own socket (SO_REUSEPORT: the kernel spreads connections over
them) and building its own app, event loop, upstream pools and store client with
`app_from_environment`, from the `AGENT_ROUTER_*` environment that `runner()` fills from the
command line. SIGTERM/SIGINT stop every worker gracefully; SIGHUP replaces them one by one.

The store rule for N > 1 (what the workers share, and what stays inside each one):

  memory://   refused: counters, sticky sessions and response chains would be split N ways
  sqlite:///  counters, shadow samples and stored responses are shared through the file (WAL,
              busy timeout: several writer processes are fine); sticky sessions and the tool
              calls remembered for agent-reported errors stay per worker — said at start
  redis://    everything is shared, as between replicas

In every case the in-flight and connection limits (`max_concurrency`, `max_connections`) are per
worker; `/metrics` sums every worker.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import SecretStr

from router.settings import Settings, default

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["FACTORY", "app_from_environment", "configure_logging", "runner", "store_notice"]

log = logging.getLogger("router")

ENV_PREFIX = "AGENT_ROUTER_"
FACTORY = "router.serve:app_from_environment"


def configure_logging(level: str, settings: Settings | None = None) -> None:
    """The root logger at `level`, to stderr, info lines written in batches (router/log_output.py)."""
    from router.log_output import configure

    interval = settings.log_flush_interval if settings else default("log_flush_interval")
    configure(level, interval, settings.log_buffer_bytes if settings else default("log_buffer_bytes"))
    # What the log's format never shows is not collected for every record (the access log writes one
    # per request): the caller's file and line, thread, process (the logging HOWTO's "Optimization").
    # private API: logging-srcfile, see docs/architecture.md
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False


def app_from_environment() -> Starlette:
    """The app of one worker process (uvicorn's factory): settings from the environment."""
    from router.app import create_app

    settings = Settings()
    configure_logging(settings.log_level, settings)
    return create_app(settings)


def store_notice(url: str, workers: int) -> str:
    """What N workers share through the store at `url`, to say at start; ValueError if they cannot."""
    scheme = url.partition("://")[0].lower()
    if scheme == "memory":
        raise ValueError(
            f"--workers {workers} needs a store the workers share: memory:// keeps counters, sticky sessions "
            "and response chains inside one process. Use sqlite:///PATH (counters and stored responses "
            "shared) or redis://HOST:PORT (everything shared), or --workers 1."
        )
    if scheme == "sqlite":
        return (
            f"{workers} workers share counters, shadow samples and stored responses through the SQLite file. "
            "Per worker: sticky sessions (a session's next call may land on another worker and be routed "
            "afresh), the tool calls remembered for agent-reported errors, and the in-flight and connection limits. "
            "A redis:// store shares sessions too."
        )
    return (
        f"{workers} workers share counters, sessions and stored responses through the store. "
        "Per worker: the in-flight and connection limits."
    )


def runner(settings: Settings, app: Starlette, workers: int) -> Callable[..., None]:
    """What runs the server, given uvicorn's options: router/connections.py `serve(app)` for one process; for N the
    supervisor, whose workers build the app from the environment (the settings go there). `app`,
    built in this process, has checked the policy and the store URL once for all workers."""
    from router.connections import serve

    if workers <= 1:
        return functools.partial(serve, app)
    if settings.port == 0:
        raise ValueError("--workers needs a fixed --port: every worker binds it")
    url = settings.store or app.state.runtime.policy.current.store
    notice = store_notice(url, workers)
    (log.warning if url.lower().startswith("sqlite") else log.info)("%s", notice)
    export(settings)
    return functools.partial(_supervise, workers)


def _supervise(workers: int, **options: Any) -> None:
    from router.supervisor import Supervisor

    try:
        code = Supervisor(FACTORY, workers, options).run()
    except OSError as exc:  # the port is taken
        log.error("cannot listen on %s:%s: %s", options.get("host"), options.get("port"), exc.strerror or exc)
        code = 1
    if code:
        raise SystemExit(code)


def export(settings: Settings) -> None:
    """Put the settings given explicitly (flags) into this process's environment, where the workers
    read them back; the others are there already, or defaults."""
    for name in settings.model_fields_set:
        key = ENV_PREFIX + name.upper()
        value = getattr(settings, name)
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = _env_value(value)


def _env_value(value: Any) -> str:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return orjson.dumps([v.get_secret_value() if isinstance(v, SecretStr) else v for v in value]).decode()
    return str(value)
