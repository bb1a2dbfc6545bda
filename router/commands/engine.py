"""llama.cpp's own HTTP server from the prebuilt `xllamacpp` wheel, run as a program that takes
`llama-server`'s flags: `python -m router.commands.engine --model M --port P ...`.

The wheel embeds llama.cpp's server (the same HTTP API as `llama-server`: slots, `cache_prompt`,
`/health`, `/props`, `/slots`, `/apply-template`, `/tokenize`, `/completion`, OpenAI chat completions
with `timings`) and starts it in-process on a port. Nothing is compiled: `pip install xllamacpp` is
the whole install (router/commands/llama.py's ENGINES; `--engine source` runs a `llama-server`
built from source instead, with the same flags).

Only the flags router/commands/llama.py's `server_argv` writes are read (and `--n-gpu-layers` for a
GPU build of the wheel); any other flag is refused with a one-line error, never ignored. The program
runs until SIGTERM or SIGINT, then exits: the server's threads go with the process.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m router.commands.engine", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--alias", default="")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ctx-size", type=int, default=4096)
    p.add_argument("--parallel", type=int, default=1)
    p.add_argument("--no-kv-unified", action="store_true")
    p.add_argument("--cache-ram", type=int, default=None, help="MiB of host memory for prompts slots let go")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--ubatch-size", type=int, default=None)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--threads-batch", type=int, default=None)
    p.add_argument("--jinja", action="store_true")
    p.add_argument("--chat-template-file", type=Path, default=None)
    p.add_argument("--no-webui", action="store_true")
    p.add_argument("--n-gpu-layers", type=int, default=None)
    return p


def params(args: argparse.Namespace, xllamacpp: Any) -> Any:
    """The wheel's CommonParams for these flags (what `llama-server` would set from them)."""
    p = xllamacpp.CommonParams()
    p.model.path = str(args.model)
    if args.alias:
        p.model_alias = {args.alias}
    p.hostnames = [args.host]
    p.port = args.port
    p.n_ctx = args.ctx_size
    p.n_parallel = args.parallel
    p.kv_unified = not args.no_kv_unified
    p.endpoint_props = True  # llama-server has /props on; the router reads a slot's context there
    p.endpoint_slots = True
    p.use_jinja = args.jinja
    if args.chat_template_file is not None:
        p.chat_template = args.chat_template_file.read_text()
    if args.cache_ram is not None:
        p.cache_ram_mib = args.cache_ram
    if args.batch_size is not None:
        p.n_batch = args.batch_size
    if args.ubatch_size is not None:
        p.n_ubatch = args.ubatch_size
    if args.threads is not None:
        p.cpuparams.n_threads = args.threads
    if args.threads_batch is not None:
        p.cpuparams_batch.n_threads = args.threads_batch
    if args.n_gpu_layers is not None:
        p.n_gpu_layers = args.n_gpu_layers
    p.ui = not args.no_webui
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.model.is_file():
        print(f"engine: no model file at {args.model}", file=sys.stderr)
        return 2
    try:
        import xllamacpp
    except ImportError:
        print("engine: xllamacpp is not installed: pip install 'agent-router[local]'", file=sys.stderr)
        return 2
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # the server's threads inherit the mask: this thread waits
    try:
        server = xllamacpp.Server(params(args, xllamacpp))  # loads the model, then listens
    except Exception as exc:  # the wheel raises plain RuntimeErrors: say which, never a traceback
        print(f"engine: the server did not start: {exc}", file=sys.stderr)
        return 1
    print(f"engine: listening on {server.listening_address}", flush=True)
    signal.sigwait(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
