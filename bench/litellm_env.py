"""LiteLLM's proxy for `bench.overhead`: its own venv (bench/.env-litellm), its config and environment."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bench.overhead_model import BENCH, ROOT, console

LITELLM_ENV = BENCH / ".env-litellm"
# 1.106.2: the newest release whose `[proxy]` extras resolve from this machine's registry (newer
# ones need a certifi release it does not have). Same pin as pyproject's `litellm` extra.
LITELLM_SPEC = "litellm[proxy]==1.106.2"
LITELLM_VERSION = "1.106.2"
PYSPY_SPEC = "py-spy==0.4.1"


def _env_python() -> Path:
    return LITELLM_ENV / "bin" / "python"


def _installed_version(python: Path, dist: str) -> str | None:
    if not python.exists():
        return None
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60, check=False)
    return out.stdout.strip() if out.returncode == 0 else None


def _pip(args: list[str], what: str, log: Path, timeout: float = 1200) -> None:
    status = console.status(f"[bold]installing {what}[/] into {LITELLM_ENV.relative_to(ROOT)} (log: {log})")
    with status, log.open("ab") as out:
        proc = subprocess.run(
            [str(_env_python()), "-m", "pip", "install", "--disable-pip-version-check", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise SystemExit(f"pip install {' '.join(args)} failed (exit {proc.returncode}):\n{tail}")


def ensure_litellm(log_dir: Path) -> str:
    """Create bench/.env-litellm with LiteLLM's proxy unless the pinned version is already there."""
    have = _installed_version(_env_python(), "litellm")
    if have == LITELLM_VERSION and (LITELLM_ENV / "bin" / "litellm").exists():
        console.print(f"[green]✓[/] LiteLLM {have} found in {LITELLM_ENV.relative_to(ROOT)}")
        return have
    if not _env_python().exists():
        with console.status(f"creating venv {LITELLM_ENV.relative_to(ROOT)}"):
            subprocess.run([sys.executable, "-m", "venv", str(LITELLM_ENV)], check=True, timeout=300)
    started = time.monotonic()
    _pip([LITELLM_SPEC], LITELLM_SPEC, log_dir / "pip-litellm.log")
    have = _installed_version(_env_python(), "litellm") or "?"
    console.print(f"[green]✓[/] installed LiteLLM {have} in {time.monotonic() - started:.0f}s")
    return have


def ensure_pyspy(log_dir: Path) -> Path:
    exe = LITELLM_ENV / "bin" / "py-spy"
    if not exe.exists():
        _pip([PYSPY_SPEC], PYSPY_SPEC, log_dir / "pip-pyspy.log", timeout=600)
    return exe


def litellm_config(path: Path, fake_port: int) -> Path:
    """One model, every optional feature off (no DB, no callbacks, no spend or error logs)."""
    text = f"""\
model_list:
  - model_name: fake
    litellm_params:
      model: openai/fake-model
      api_base: http://127.0.0.1:{fake_port}/v1
      api_key: dummy
litellm_settings:
  telemetry: false
  set_verbose: false
  json_logs: false
  drop_params: true
  turn_off_message_logging: true
  callbacks: []
  success_callback: []
  failure_callback: []
  cache: false
general_settings:
  disable_spend_logs: true
  disable_error_logs: true
  disable_adding_master_key_hash_to_db: true
  allow_requests_on_db_unavailable: true
  background_health_checks: false
  store_model_in_db: false
"""
    path.write_text(text)
    return path


LITELLM_ENVIRON: dict[str, str | None] = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOG": "ERROR",
    "LITELLM_TELEMETRY": "False",
    "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True",
    "DISABLE_SCHEMA_UPDATE": "True",
    "DATABASE_URL": None,  # unset: no database at all
    # no client auth, like agent-router's bench policy (no client_keys); this release refuses to
    # start without a master key unless told so
    "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
    "STORE_MODEL_IN_DB": "False",
    "NO_DOCS": "True",
    "NO_REDOC": "True",
    "TOKENIZERS_PARALLELISM": "false",
}
