"""GPU telemetry of a run from a DCGM exporter (`--gpu-metrics`): its scrapes, and per-rung energy,
power, utilisation, memory and tokens per joule (definitions: docs/gpu.md).

The run monitor scrapes the exporter's Prometheus page beside the server's `/metrics`, at the
same instants (every `--scrape-interval` and at every stage boundary), into
`<prefix>_gpu_metrics.jsonl`: one line per scrape, `{"t", "samples": {"name{labels}": value}}` of
the four DCGM series below, or `{"t", "error"}` (llmload.loadgen.monitor.scraper.MetricsScraper
writes both files). A GPU is told by its `gpu` label, else its `UUID`. A rung's window is its
one window (llmload.analysis.run.window: a concurrency rung's steady part, else its requests'
span; the sweep table's `wall_s`, the same as the server's counters'); the scrapes that bracket
it are the last at or before its start and the first at or after its end (the scraper samples
every `--scrape-interval` and at every stage boundary, where the server is idle). Per rung:

- energy_j: the sum over GPUs of each one's energy over the window: its energy counter's rise
  between the scrapes that bracket the window (mJ -> J), less the power each bracketing scrape
  read times its distance from the window's edge (the power read stands for the power of that
  gap: idle at a stage boundary, the ramp's or the drain's at a steady window's edge, where the
  error is the change of power within one scrape interval times that gap); for a GPU without
  the counter, or whose counter went backwards inside the bracket (a reset of that GPU alone),
  its mean power gauge inside the window x the window (`gpu_energy_from`, per GPU: "counter" or
  "power"; `energy_from`: "counter", "power" or "counter+power"; the run's note names the GPUs
  integrated from power);
- power_w: energy_j over the window (all GPUs together), so tok_per_j = agg_tok_s / power_w;
- util_pct: the mean over GPUs of each one's mean utilisation gauge inside the window;
- mem_peak_mib: the most memory any one GPU held in a scrape inside the window;
- tok_per_j: the rung's output tokens that arrived inside the window / energy_j.

A DCGM exporter refreshes its page every collect interval (30 s unless told otherwise): a page
that kept its energy counter for more than STALE_SHARE of the shortest rung gets the run's note.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llmload.analysis.run.server_metrics import Sample, counter_delta, gauge_mean
from llmload.analysis.run.window import RungWindow
from llmload.core.config import NVML
from llmload.core.files.jsonl import iter_jsonl
from llmload.core.files.run_files import RunFiles
from llmload.core.files.run_info import RunInfo
from llmload.core.names import rung_name
from llmload.core.stats import mean

# the DCGM exporter's series (dcgm-exporter etc/default-counters.csv) -> our quantity
DCGM_SERIES = {
    "DCGM_FI_DEV_POWER_USAGE": "power_w",  # gauge, W
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",  # counter since boot, mJ
    "DCGM_FI_DEV_GPU_UTIL": "util_pct",  # gauge, %
    "DCGM_FI_DEV_FB_USED": "mem_mib",  # gauge, MiB
}
GPU_NAMES = frozenset(DCGM_SERIES) | frozenset(f"{n}_total" for n in DCGM_SERIES)
STALE_SHARE = 0.02  # a page kept longer than this share of a rung gets a note (the e2e bar is 2 %)
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


def gpu_metrics_path(prefix: str | Path) -> Path:
    return RunFiles(Path(prefix)).gpu_metrics


def gpu_url(configured: str, host: str) -> str:
    """The exporter's URL: `configured` as given (or `nvml`), or, for a path, that path on the run's host."""
    return host.rstrip("/") + configured if configured.startswith("/") else configured


def gpu_values(scraped: Mapping[str, float]) -> dict[str, float]:
    """One scrape's DCGM samples as {"<quantity>|<gpu>": value}; series without a `gpu` or `UUID`
    label and values that are not finite are left out."""
    out: dict[str, float] = {}
    for key, value in scraped.items():
        name, _, labels = key.partition("{")
        quantity = DCGM_SERIES.get(name.removesuffix("_total"))
        if quantity is None or not math.isfinite(value):
            continue
        found = dict(_LABEL.findall(labels))
        gpu = found.get("gpu") or found.get("UUID")
        if gpu:
            out[f"{quantity}|{gpu}"] = value
    return out


@dataclass(slots=True)
class GpuScrapes:
    """What a run's scrape file holds."""

    samples: list[Sample]  # successful scrapes with DCGM values, in time order
    answered: int = 0  # scrapes that got a page (with or without DCGM series)
    errors: list[str] = field(default_factory=list)  # the failed scrapes' errors


def read_gpu_scrapes(path: Path) -> GpuScrapes:
    """The scrape file's samples (unreadable lines skipped); empty when there is no file."""
    found = GpuScrapes([])
    if not path.exists():
        return found
    for _, data in iter_jsonl(path):
        try:
            if data is None:
                continue
            if "error" in data:
                found.errors.append(str(data["error"]))
            elif "samples" in data:
                found.answered += 1
                values = gpu_values({str(k): float(v) for k, v in dict(data["samples"]).items()})
                if values:
                    found.samples.append(Sample(float(data["t"]), values))
        except (ValueError, TypeError, KeyError):
            continue
    found.samples.sort(key=lambda s: s.t)
    return found


@dataclass(slots=True)
class GpuRung:
    """The GPUs during one rung (definitions in the module docstring)."""

    rung: int
    conc: int
    gpus: int
    energy_j: float | None
    energy_from: str | None  # "counter" (every GPU's), "power" (every GPU's), "counter+power", or None
    power_w: float | None
    util_pct: float | None
    mem_peak_mib: float | None
    tok_per_j: float | None
    samples: int  # scrapes inside the window
    gpu_energy_from: dict[str, str] = field(default_factory=dict)  # per GPU: "counter" or "power"
    counter_reset: list[str] = field(default_factory=list)  # GPUs whose counter went backwards

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def from_power(self) -> list[str]:
        """The GPUs whose energy is their power gauge integrated over the window."""
        return [g for g, source in self.gpu_energy_from.items() if source == POWER]


COUNTER, POWER = "counter", "power"


def _per_gpu(keys: Sequence[str], quantity: str) -> list[str]:
    return sorted(k for k in keys if k.startswith(quantity + "|"))


def _counter_energy(
    samples: Sequence[Sample], times: Sequence[float], key: str, w: RungWindow
) -> float | None:
    """One GPU's energy over the window from its counter, J: the counter's rise between the
    bracketing scrapes, less the power each of them read times its distance from the window's edge
    (module docstring); None without the
    counter on both sides, or when it went backwards between them (a reset: `_went_back`)."""
    delta, bracket = counter_delta(samples, times, key, w)
    if delta is None or bracket is None or _reset(samples, times, key, w):
        return None
    power_key = "power_w|" + key.partition("|")[2]
    first, last = samples[times.index(bracket[0])], samples[times.index(bracket[1])]
    outside = first.values.get(power_key, 0.0) * max(0.0, w.start - first.t)
    outside += last.values.get(power_key, 0.0) * max(0.0, last.t - w.end)
    return max(0.0, delta / 1000.0 - outside)


def _reset(samples: Sequence[Sample], times: Sequence[float], key: str, w: RungWindow) -> bool:
    """The counter fell between two of its scrapes from the window's bracketing scrape before to
    the one after (the GPU, its driver or its exporter restarted): a reset of that GPU alone."""
    _, bracket = counter_delta(samples, times, key, w)
    if bracket is None:
        return False
    values = [s.values[key] for s in samples if bracket[0] <= s.t <= bracket[1] and key in s.values]
    return any(b < a for a, b in zip(values, values[1:], strict=False))


def _gpu_energy(
    samples: Sequence[Sample], times: Sequence[float], inside: Sequence[Sample], gpu: str, w: RungWindow
) -> tuple[float, str] | None:
    """(energy J, "counter" or "power") of one GPU over the window: its counter's where it has a
    usable one, else its power gauge's mean over the scrapes inside the window x the window; None
    with neither."""
    energy = _counter_energy(samples, times, f"energy_mj|{gpu}", w)
    if energy is not None:
        return energy, COUNTER
    power = gauge_mean(inside, f"power_w|{gpu}")
    return None if power is None else (power * (w.end - w.start), POWER)


def gpu_rung(samples: Sequence[Sample], w: RungWindow, tokens: float) -> GpuRung:
    """One rung's GPU figures from the scrapes (in time order) and its output tokens."""
    times = [s.t for s in samples]
    inside = samples[bisect_left(times, w.start) : bisect_right(times, w.end)]
    keys = sorted({k for s in samples for k in s.values})
    gpus = sorted({k.partition("|")[2] for k in keys})
    per_gpu = {g: _gpu_energy(samples, times, inside, g, w) for g in gpus}
    energy: float | None = None
    power: float | None = None
    sources: dict[str, str] = {}
    if per_gpu and all(e is not None for e in per_gpu.values()):
        sources = {g: e[1] for g, e in per_gpu.items() if e is not None}
        energy = sum(e[0] for e in per_gpu.values() if e is not None)
        power = energy / (w.end - w.start) if w.end > w.start else None
    resets = [g for g in gpus if _reset(samples, times, f"energy_mj|{g}", w)]
    utils = [u for k in _per_gpu(keys, "util_pct") if (u := gauge_mean(inside, k)) is not None]
    mems = [s.values[k] for s in inside for k in _per_gpu(keys, "mem_mib") if k in s.values]
    return GpuRung(
        rung=w.rung,
        conc=w.conc,
        gpus=len(gpus),
        energy_j=energy,
        energy_from="+".join(sorted(set(sources.values()), key=[COUNTER, POWER].index)) or None,
        power_w=power,
        util_pct=mean(utils) if utils else None,
        mem_peak_mib=max(mems) if mems else None,
        tok_per_j=tokens / energy if energy else None,
        samples=len(inside),
        gpu_energy_from=sources,
        counter_reset=resets,
    )


@dataclass(slots=True)
class GpuMetrics:
    """A run's GPU figures per measured rung, and the one note when it has none."""

    url: str
    rungs: dict[int, GpuRung]  # by rung index (measured rungs only)
    note: str | None = None  # the exporter gave nothing, or kept its values too long
    energy_note: str | None = None  # the GPUs whose energy came from their power (`energy_note`)

    @property
    def notes(self) -> list[str]:
        return [n for n in (self.note, self.energy_note) if n]


def load_gpu_metrics(
    prefix: str | Path, run_info: RunInfo | None, rungs: Sequence[tuple[RungWindow, float]]
) -> GpuMetrics | None:
    """The run's GPU figures; None when the run did not ask for them (no `gpu_metrics`). `rungs`:
    each measured rung's window (`RungTally.window`) and the output tokens that arrived in it."""
    asked = run_info.recorded("gpu_metrics") if run_info is not None else None
    if asked is None or not asked.gpu_metrics or run_info is None:
        return None
    url = gpu_url(asked.gpu_metrics, run_info.host or "")
    found = read_gpu_scrapes(gpu_metrics_path(prefix))
    if not found.samples:
        return GpuMetrics(url, {}, _absent_note(url, found))
    figures = {w.rung: gpu_rung(found.samples, w, tokens) for w, tokens in rungs}
    timed = [w for w, _ in rungs if figures[w.rung].energy_from == COUNTER and w.end > w.start]
    shortest = min(timed, key=lambda w: w.end - w.start, default=None)
    held = held_s(found.samples)
    gpu = GpuMetrics(url, figures, energy_note=energy_note(url, list(figures.values())))
    if shortest is None or held <= STALE_SHARE * (shortest.end - shortest.start):
        return gpu
    wall = shortest.end - shortest.start
    gpu.note = (
        f"GPU metrics: {url} kept its values for at least {held:.1f} s, {held / wall:.0%} of the "
        f"shortest rung ({rung_name(shortest.rung, shortest.conc)}: {wall:.1f} s), so each rung's energy "
        f"may be off by up to that share: restart the DCGM exporter with -c 1000 "
        f"(DCGM_EXPORTER_INTERVAL=1000; its default is 30 s) and make each rung last at least "
        f"{1 / STALE_SHARE:.0f} times that interval"
    )
    return gpu


def energy_note(url: str, figures: Sequence[GpuRung]) -> str | None:
    """The note naming the GPUs whose energy is their power gauge integrated over the window (no
    energy counter on the page, or one that went backwards: its rungs named), or None when every
    GPU's energy came from its counter (or none came from its power)."""
    powered = sorted({g for f in figures for g in f.from_power}, key=_gpu_order)
    if not powered:
        return None
    resets = {g: [rung_name(f.rung, f.conc) for f in figures if g in f.counter_reset] for g in powered}
    named = ", ".join(
        f"GPU {g}" + (f" (its counter went backwards in {', '.join(r)})" if r else "")
        for g, r in resets.items()
    )
    return (
        f"GPU metrics: energy of {named} from {'its' if len(powered) == 1 else 'their'} power gauge "
        f"(DCGM_FI_DEV_POWER_USAGE, the mean of the scrapes inside each rung x the rung's window), "
        f"not the energy counter (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION) of {url}: as fine as the "
        "scrapes (--scrape-interval)"
    )


def _gpu_order(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)


def held_s(samples: Sequence[Sample]) -> float:
    """The longest a GPU's energy counter kept one value across scrapes, s: at least the exporter's
    collect interval when it is longer than the scrapes' (a live counter moves at every scrape:
    0). A GPU always draws power, so an unmoved counter is a page that was not refreshed."""
    longest = 0.0
    for key in {k for s in samples for k in s.values if k.startswith("energy_mj|")}:
        since: tuple[float, float] | None = None  # (first scrape with the value, the value)
        for s in samples:
            value = s.values.get(key)
            if value is None:
                continue
            if since is not None and value == since[1]:
                longest = max(longest, s.t - since[0])
            else:
                since = (s.t, value)
    return longest


def _absent_note(url: str, found: GpuScrapes) -> str:
    """What to do about a run that asked for GPU figures and got none."""
    if url == NVML:
        reason = f" ({found.errors[0][:200]})" if found.errors else ""
        return (
            f"GPU metrics: NVML read no GPU{reason}, so the run has no GPU figures: run llmload on the "
            "machine with the GPUs and their driver, with pip install 'llmload[nvml]', or give "
            "--gpu-metrics a DCGM exporter's URL (e.g. http://HOST:9400/metrics)"
        )
    if found.answered:
        return (
            f"GPU metrics: {url} answered without DCGM series (DCGM_FI_DEV_POWER_USAGE ...), so the "
            "run has no GPU figures: give --gpu-metrics a DCGM exporter's page (e.g. http://HOST:9400/metrics)"
        )
    error = found.errors[0] if found.errors else ""
    error = error.removeprefix("<urlopen error ").removesuffix(">") if error.startswith("<urlopen") else error
    reason = f" ({error[:200]})" if error else ""
    return (
        f"GPU metrics: {url} did not answer{reason}, so the run has no GPU figures: start the DCGM "
        "exporter there, or give --gpu-metrics its URL (e.g. http://HOST:9400/metrics)"
    )
