"""The load generator's own health samples, taken inside every process that runs users.

Every second each local or worker process sends the master one sample as the custom message
`llmload_health`: `cpu` (percent of one core since the previous sample), `rss` (bytes) and
`lag_ms` (the largest oversleep of a greenlet that sleeps `PROBE_S` again and again: how late a
stream whose bytes just arrived gets the CPU), and the machine's own figures over the same
interval, so a late event loop can be told from a busy machine: `machine_cpu` (percent of all
cores busy), `steal` (percent stolen by the hypervisor), `load1` and `cores`; and, on Linux, `wait`:
the percent of the interval its event loop's thread was runnable but waited for a CPU (the
kernel's run_delay), so a generator that wanted the CPU can be told from one that did not get it
or did not want it. The master writes
them to `<prefix>_health.jsonl`; `llmload.analysis.run.health` (analysis) judges rungs from them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import gevent
import psutil
from locust.runners import MasterRunner, WorkerRunner

from llmload.analysis.run.health import SAMPLE_INTERVAL_S
from llmload.core.clock import wall
from llmload.loadgen.run.messages import MSG_HEALTH

PROBE_S = 0.1  # the lag probe's sleep


class HealthSampler:
    """Samples this process every `interval` seconds and hands each sample to `send`."""

    def __init__(
        self, worker: str, send: Callable[[dict[str, Any]], None], interval: float = SAMPLE_INTERVAL_S
    ):
        self.worker = worker
        self.interval = interval
        self._send = send
        self._process = psutil.Process()
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        if self._greenlet is None:
            self._process.cpu_percent(None)  # the first calls only set the baselines
            psutil.cpu_times_percent(None)
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _interval_lag(self) -> float:
        """Sleep PROBE_S until the interval is over; the largest oversleep in seconds."""
        perf = time.perf_counter
        end = perf() + self.interval
        worst = 0.0
        while (now := perf()) < end:
            gevent.sleep(PROBE_S)
            worst = max(worst, perf() - now - PROBE_S)
        return worst

    def _run(self) -> None:
        waited, began = run_queue_wait_s(), time.perf_counter()
        while True:
            lag = self._interval_lag()
            sample = {
                "t": wall(),  # on the master's clock, as the records (llmload.core.clock)
                "worker": self.worker,
                "cpu": self._process.cpu_percent(None),
                "rss": self._process.memory_info().rss,
                "lag_ms": round(lag * 1000.0, 3),
                **machine_figures(),
            }
            now_waited, now = run_queue_wait_s(), time.perf_counter()
            if waited is not None and now_waited is not None and now > began:
                sample["wait"] = round(100.0 * (now_waited - waited) / (now - began), 1)
            waited, began = now_waited, now
            self._send(sample)


def run_queue_wait_s() -> float | None:
    """Seconds the process's main thread (its event loop) has waited for a CPU while runnable
    (Linux `/proc/self/schedstat`, run_delay); None where the kernel does not say."""
    try:
        with open("/proc/self/schedstat", encoding="ascii") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def machine_figures() -> dict[str, float]:
    """The whole machine since the previous call: busy and stolen CPU, 1-minute load, cores."""
    times = psutil.cpu_times_percent(None)
    idle = times.idle + getattr(times, "iowait", 0.0)
    return {
        "machine_cpu": round(max(0.0, 100.0 - idle), 1),
        "steal": round(getattr(times, "steal", 0.0), 1),
        "load1": round(os.getloadavg()[0], 2),
        "cores": psutil.cpu_count() or 1,
    }


def start_sampling(environment: Any) -> None:
    """In a process that runs users (local or worker; not a master), sample from test start to
    test stop and send each sample to the master (call from `events.init`)."""
    runner = environment.runner
    if isinstance(runner, MasterRunner) or runner is None:
        return
    worker = runner.client_id if isinstance(runner, WorkerRunner) else "local"
    sampler = HealthSampler(worker, lambda sample: runner.send_message(MSG_HEALTH, sample))
    environment.events.test_start.add_listener(lambda **_: sampler.start())
    environment.events.test_stop.add_listener(lambda **_: sampler.stop())
