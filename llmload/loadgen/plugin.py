"""Hooks llmload into Locust: its command-line options and its custom messages.

Importing this module registers the listeners on Locust's global `events`, the way Locust
plugins do; locustfiles import it once.
"""

from __future__ import annotations

import sys
from typing import Any

from locust import events

from llmload.core import exit_codes
from llmload.core.config import ConfigError
from llmload.loadgen.csv_watch import watch_csv_writer
from llmload.loadgen.monitor.health_sampler import start_sampling
from llmload.loadgen.monitor.live_metrics import LiveMetrics
from llmload.loadgen.monitor.run_monitor import RunMonitor
from llmload.loadgen.monitor.soak_monitor import SoakMonitor
from llmload.loadgen.options import register_options, run_config
from llmload.loadgen.run.error_log import RunErrors
from llmload.loadgen.run.ladder import register_messages
from llmload.loadgen.shutdown import install as install_shutdown
from llmload.loadgen.webui.tokens_tab import register_web_ui


@events.init_command_line_parser.add_listener  # type: ignore[untyped-decorator]
def _add_options(parser: Any, **_: Any) -> None:
    register_options(parser)  # output paths checked while parsing: one line, not a traceback


@events.init.add_listener  # type: ignore[untyped-decorator]
def _on_init(environment: Any, **_: Any) -> None:
    register_messages(environment)
    install_shutdown(environment)  # Ctrl+C and SIGTERM: clean exit, final CSVs (llmload.loadgen.shutdown)
    start_sampling(environment)  # the generator's own CPU and event-loop lag (processes with users)
    RunMonitor.install(environment)  # env file and server-metrics scraping, on the master
    if not getattr(environment.parsed_options, "worker", False):
        watch_csv_writer(environment)  # Locust's CSVs failing (a full disk) stop the run at once
    SoakMonitor.install(environment)  # soak runs: the verdict is the exit code
    try:  # --metrics-port, --otlp: the run's live metrics (llmload.loadgen.monitor.live_metrics)
        LiveMetrics.install(environment)
    except ConfigError as e:  # the port taken since the command line was parsed
        refuse(environment, e)
    register_web_ui(environment)  # the Tokens tab, when this process serves the web UI
    options = environment.parsed_options
    if options is not None and getattr(options, "headless", False) and not getattr(options, "worker", False):
        try:  # fail fast on a bad ladder file, before any user starts; the run takes it (begin_run)
            environment.llmload_config = run_config(options)
        except ConfigError as e:
            refuse(environment, e)


def refuse(environment: Any, error: ConfigError) -> None:
    """Bad input found before any file of the run: logged, no run file (error_log), exit 2."""
    RunErrors(environment).record("bad_config", str(error), exit_codes.BAD_INPUT)
    sys.exit(exit_codes.BAD_INPUT)
