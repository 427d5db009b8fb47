"""Process lifecycle: bind the port, announce it, run the engine, shut down cleanly on SIGTERM/SIGINT.

Shutdown order: stop the engine (every open stream gets `STOPPED` and ends without `[DONE]`),
close the HTTP server (open connections are closed after a short grace), then flush and close
the truth log, so no line is lost or half-written when the process is stopped by its PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import ssl
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from llmload.core.command_line import errno_text, path_text
from llmload.core.exit_codes import WRITE_FAILED
from llmload.core.status_pipe import tell
from llmload.sim.config import SimConfig, SimFlagError
from llmload.sim.connections import listening_socket
from llmload.sim.engine import Engine
from llmload.sim.power import EnergyMeter
from llmload.sim.prefix_cache import PrefixCache
from llmload.sim.server import SimServer
from llmload.sim.truth import TruthLog

LISTEN_BACKLOG = 1024  # room for a burst of hundreds of connections
SHUTDOWN_TIMEOUT_S = 2.0  # grace for open connections when stopping


def write_port_file(path: Path, port: int) -> None:
    """Write the port atomically (temp file + rename), so a reader never sees a partial number."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(f"{port}\n")
    tmp.replace(path)


def server_tls(config: SimConfig) -> ssl.SSLContext | None:
    """The HTTPS context when a certificate is configured, else None (plain HTTP)."""
    if config.ssl_certfile is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(config.ssl_certfile, config.ssl_keyfile)
    return ctx


def listen(config: SimConfig) -> socket.socket:
    """The bound listening socket of --host and --port; SimFlagError naming them when the address
    cannot be used (unknown, not this machine's, taken)."""
    try:
        return listening_socket(config.host, config.port)  # kernel receive stamps (truth)
    except (OSError, UnicodeError) as e:  # getaddrinfo's gaierror is an OSError; IDNA a UnicodeError
        reason = getattr(e, "strerror", None) or str(e)
        raise SimFlagError(
            f"--host {path_text(config.host)} --port {config.port}: cannot listen: {reason}"
        ) from None


def _say(line: str) -> None:
    """A line on stderr (the simulator's log), if it can still be written."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


async def serve(config: SimConfig, listener: socket.socket | None = None) -> int:
    """Run the simulator until SIGTERM or SIGINT; its exit code: 0, or WRITE_FAILED when the truth
    log could not be written (the server stops at once: llmload.sim.truth.TruthLog)."""
    stop = asyncio.Event()
    truth = TruthLog(config.truth_log, on_failure=lambda _: stop.set()) if config.truth_log else None
    cache = PrefixCache(config.block_size, config.prefix_cache_blocks) if config.prefix_cache_blocks else None
    energy = EnergyMeter(config.power, time.time())
    if truth is not None:
        truth.power({"t0": energy.t0, **dataclasses.asdict(config.power)})
    engine = Engine(
        config.step,
        max_num_seqs=config.max_num_seqs,
        max_model_len=config.max_model_len,
        truth=truth,
        batch_variance=config.batch_variance,
        prefix_cache=cache,
        energy=energy,
    )
    sim = SimServer(config, engine, truth)
    keep_alive: dict[str, Any] = (
        {} if config.keep_alive_timeout is None else {"keepalive_timeout": config.keep_alive_timeout}
    )
    runner = web.AppRunner(sim.app(), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S, **keep_alive)
    await runner.setup()
    assert runner.server is not None
    sim.connections.watch(runner.server)
    engine_task = asyncio.create_task(engine.run(), name="llmload-sim-engine")
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        tls = server_tls(config)
        site = web.SockSite(runner, listener or listen(config), backlog=LISTEN_BACKLOG, ssl_context=tls)
        await site.start()
        port = int(runner.addresses[0][1])
        if config.port_file is not None:
            write_port_file(config.port_file, port)
        _say(f"llmload-sim: serving {config.model!r} on {'https' if tls else 'http'}://{config.host}:{port}")
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({stopped, engine_task}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if engine_task.done():
            engine_task.result()  # the engine died: raise its error
    finally:
        engine_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await engine_task
        await runner.cleanup()
        if truth is not None:
            truth.close()
    if truth is not None and truth.failure is not None:
        line = f"--truth-log {path_text(truth.path)}: cannot write: {errno_text(truth.failure)}"
        _say(f"llmload sim: error: {line}")
        tell("simulator", "write_failed", f"the simulator stopped: {line}", WRITE_FAILED)
        return WRITE_FAILED
    return 0


def run(config: SimConfig) -> int:
    """Serve `config` until stopped; the exit code (`serve`)."""
    listener = listen(config)  # a bad address is refused before anything else starts
    return asyncio.run(serve(config, listener))
