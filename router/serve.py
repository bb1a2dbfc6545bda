"""How `agent-router serve` runs: one process, or `--workers N` processes on one port.

With N > 1, uvicorn's supervisor binds the port once and starts N worker processes that share the
listening socket (the kernel spreads connections over them); each worker builds its own app, event
loop, upstream pools and store client with `app_from_environment`, reading its settings from the
`AGENT_ROUTER_*` environment that `target()` fills from the command line. The supervisor:

  SIGTERM, SIGINT   every worker stops taking connections and finishes its calls in flight
                    (uvicorn's graceful shutdown, 5 s), then the supervisor exits
  SIGHUP            rolling restart: each worker is replaced by a new one once that one is ready
  a dead worker     is replaced (one that fails at start-up stops the supervisor instead)

The store rule for N > 1 (what the workers share, and what stays inside each one):

  memory://   refused: counters, sticky sessions and response chains would be split N ways
  sqlite:///  counters, shadow samples and stored responses are shared through the file (WAL,
              busy timeout: several writer processes are fine); sticky sessions and the tool
              calls remembered for agent-reported errors stay per worker — said at start
  redis://    everything is shared, as between replicas

In every case `/metrics` (Prometheus) and the in-flight limit are per worker.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import SecretStr

from router.settings import Settings

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["FACTORY", "app_from_environment", "configure_logging", "store_notice", "target"]

log = logging.getLogger("router")

ENV_PREFIX = "AGENT_ROUTER_"
FACTORY = "router.serve:app_from_environment"


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def app_from_environment() -> Starlette:
    """The app of one worker process (uvicorn's factory): settings from the environment."""
    from router.app import create_app

    settings = Settings()
    configure_logging(settings.log_level)
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
            "afresh), the tool calls remembered for agent-reported errors, /metrics and the in-flight limit. "
            "A redis:// store shares sessions too."
        )
    return (
        f"{workers} workers share counters, sessions and stored responses through the store. "
        "Per worker: /metrics and the in-flight limit."
    )


def target(settings: Settings, app: Starlette, workers: int) -> tuple[Starlette | str, dict[str, Any]]:
    """What to hand `uvicorn.run`: the app itself for one process; for N workers the factory's import
    string and its options (the settings go to the workers through the environment). `app` (built
    here, in the supervisor) has checked the policy and the store URL once for all workers."""
    if workers <= 1:
        return app, {}
    router = app.state.router
    log.warning("%s", store_notice(settings.store or router.policy.current.store, workers))
    export(settings)
    return FACTORY, {"factory": True, "workers": workers}


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
