"""The simulated GPUs' power model, its exactly integrated energy, and `GET /gpu/metrics`: a page
shaped like NVIDIA's DCGM exporter, so llmload's `--gpu-metrics` has ground truth.

Every one of `gpus` GPUs draws `idle_w` watts, plus `busy_w + seq_w * batch` while an engine step
runs (the step's scheduled boundaries, as the truth log's step lines). Energy is that power
integrated exactly over the engine's steps since the simulator started: `EnergyMeter.energy_j`.
The truth log gets one `{"type": "power", "t0", "gpus", "idle_w", "busy_w", "seq_w"}` line
when the engine starts and each step line its draw `gpu_w` (all GPUs), so the energy of any span
is derivable from the log alone. Utilisation is the share of the last second a step ran; memory
used is `mem_mib` plus `kv_mib_per_token` per token the running sequences hold. With
`collect_ms` the page keeps its values for that long, like dcgm-exporter's collect interval
(`GpuPage`), so a client's handling of a stale exporter can be tested; with `no_energy_gpus` the
last GPUs have no energy counter (power only), so can its handling of a mixed exporter.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from llmload.core.checks import flag_type, number
from llmload.core.schema import setting

GPU = "gpu"  # the --help section of the power model's flags
UTIL_WINDOW_S = 1.0  # DCGM's utilisation is a share of a recent sample period


@dataclass(frozen=True, slots=True)
class PowerModel:
    """The simulated GPUs (one flag each)."""

    gpus: int = setting(
        1,
        help="simulated GPUs on /gpu/metrics",
        parse=flag_type(number(1, 64, integer=True), "gpus"),
        group=GPU,
    )
    idle_w: float = setting(
        60.0,
        help="power of one GPU with no step running, W",
        parse=flag_type(number(0, 5_000), "idle_w"),
        group=GPU,
    )
    busy_w: float = setting(
        180.0,
        help="power one GPU adds while a step runs, W",
        parse=flag_type(number(0, 5_000), "busy_w"),
        group=GPU,
    )
    seq_w: float = setting(
        6.0,
        help="power one GPU adds per running sequence while a step runs, W",
        parse=flag_type(number(0, 1_000), "seq_w"),
        group=GPU,
    )
    mem_mib: float = setting(
        2048.0,
        help="memory one GPU holds with nothing running (weights), MiB",
        parse=flag_type(number(0, 10_000_000), "mem_mib"),
        group=GPU,
    )
    kv_mib_per_token: float = setting(
        0.0625,
        help="memory one GPU adds per token the running sequences hold, MiB",
        parse=flag_type(number(0, 1_000), "kv_mib_per_token"),
        group=GPU,
    )

    collect_ms: float = setting(
        0.0,
        help="/gpu/metrics keeps its values this long, ms, as dcgm-exporter's collect interval (-c, "
        "its default 30000): the first read of each period refreshes them; 0: live",
        parse=flag_type(number(0, 3_600_000), "collect_ms"),
        group=GPU,
    )
    no_energy_gpus: int = setting(
        0,
        help="the last N GPUs on /gpu/metrics have power but no energy counter "
        "(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION), as exporters differ per GPU model; N >= gpus: none has it",
        parse=flag_type(number(0, 64, integer=True), "no_energy_gpus"),
        group=GPU,
    )

    def step_w(self, batch: int) -> float:
        """What all GPUs draw together while a step of `batch` sequences runs, W."""
        return self.gpus * (self.idle_w + self.busy_w + self.seq_w * batch)


class EnergyMeter:
    """The power model integrated over the engine's steps (epoch seconds throughout)."""

    def __init__(self, model: PowerModel, t0: float) -> None:
        self.model = model
        self.t0 = t0
        self._steps_j = 0.0  # energy above idle of the finished steps, all GPUs
        self._current: tuple[float, float] | None = None  # (start, W above idle) of the running step
        self._recent: deque[tuple[float, float]] = deque()  # finished steps of the last window

    def step_started(self, start: float, batch: int) -> None:
        self._current = (start, self.model.step_w(batch) - self.model.gpus * self.model.idle_w)

    def step_ended(self, end: float) -> None:
        if self._current is not None:
            start, extra_w = self._current
            self._steps_j += extra_w * (end - start)
            self._recent.append((start, end))
            self._current = None

    def energy_j(self, now: float) -> float:
        """Energy all GPUs used from t0 to `now`, J."""
        running = 0.0
        if self._current is not None:
            start, extra_w = self._current
            running = extra_w * max(0.0, now - start)
        return self.model.gpus * self.model.idle_w * (now - self.t0) + self._steps_j + running

    def power_w(self, now: float) -> float:
        """What one GPU draws at `now`, W."""
        busy = self._current is not None and now >= self._current[0]
        return self.model.idle_w + (self._current[1] / self.model.gpus if busy and self._current else 0.0)

    def utilisation(self, now: float) -> float:
        """Percent of the last UTIL_WINDOW_S a step ran."""
        since = now - UTIL_WINDOW_S
        while self._recent and self._recent[0][1] <= since:
            self._recent.popleft()
        spans = list(self._recent) + ([(self._current[0], now)] if self._current else [])
        busy = sum(max(0.0, min(end, now) - max(start, since)) for start, end in spans)
        return 100.0 * min(1.0, busy / UTIL_WINDOW_S)


def render(meter: EnergyMeter, now: float, held_tokens: int) -> str:
    """The DCGM exporter's page for the simulated GPUs (its metric names, units and labels)."""
    m = meter.model
    per_gpu = {
        "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W).", meter.power_w(now)),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (
            "counter",
            "Total energy consumption since boot (in mJ).",
            round(meter.energy_j(now) / m.gpus * 1000.0),
        ),
        "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %).", round(meter.utilisation(now))),
        "DCGM_FI_DEV_FB_USED": (
            "gauge",
            "Framebuffer memory used (in MiB).",
            round(m.mem_mib + m.kv_mib_per_token * held_tokens),
        ),
    }
    lines = []
    for name, (kind, help_text, value) in per_gpu.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        counted = m.gpus - m.no_energy_gpus if name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" else m.gpus
        for i in range(counted):
            uuid = f"GPU-00000000-0000-0000-0000-{i:012d}"
            labels = f'gpu="{i}",UUID="{uuid}",device="nvidia{i}",modelName="llmload-sim"'
            lines.append(f"{name}{{{labels}}} {value}")
    return "\n".join(lines) + "\n"


class GpuPage:
    """`GET /gpu/metrics`'s text: live, or kept for `collect_ms` (refreshed by the first read of
    each period of the simulator's clock since t0)."""

    def __init__(self, meter: EnergyMeter) -> None:
        self.meter = meter
        self._kept: tuple[int, str] | None = None  # (period, text)

    def text(self, now: float, held_tokens: int) -> str:
        collect_s = self.meter.model.collect_ms / 1000.0
        if collect_s <= 0:
            return render(self.meter, now, held_tokens)
        period = int((now - self.meter.t0) // collect_s)
        if self._kept is None or self._kept[0] != period:
            self._kept = (period, render(self.meter, now, held_tokens))
        return self._kept[1]
