"""GPU telemetry's parts (issue 43 item 5): the DCGM page read per GPU, the per-rung figures on
hand-built scrapes whose true energy is known, the note of an exporter that gave nothing, the
`--gpu-metrics` input's checks, the simulator's energy meter against its integral, and the figures
in json, csv and `table --metrics`."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import pytest

from llmload.analysis.run.gpu_metrics import (
    GpuMetrics,
    gpu_metrics_path,
    gpu_rung,
    gpu_url,
    gpu_values,
    load_gpu_metrics,
)
from llmload.analysis.run.server_metrics import Sample
from llmload.analysis.run.sweep_rows import SweepRow
from llmload.analysis.run.window import span_window
from llmload.core.config import ConfigError, load_config
from llmload.core.files.run_info import RunInfo
from llmload.core.prometheus_text import parse_prometheus
from llmload.loadgen.options import run_config
from llmload.output.gpu_report import gpu_extra, gpu_notes
from llmload.output.table import render
from llmload.sim.power import EnergyMeter, PowerModel
from llmload.sim.power import render as render_page

# as the DCGM exporter writes it (its README's example labels, a k8s variant, one non-DCGM series)
PAGE = """# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0", UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52", device="nvidia0"} 23.528000
DCGM_FI_DEV_POWER_USAGE{gpu="1", UUID="GPU-8c16", container="foo",namespace="bar",pod="baz"} 301.5
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0", UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"} 310356866
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{UUID="GPU-8c16"} 1000
DCGM_FI_DEV_GPU_UTIL{gpu="0"} NaN
DCGM_FI_DEV_FB_USED{gpu="0"} 1024
DCGM_FI_DEV_SM_CLOCK{gpu="0"} 139
vllm:num_requests_running{model_name="m"} 3
"""


def test_the_dcgm_page_is_read_per_gpu():
    values = gpu_values(parse_prometheus(PAGE))
    assert values == {
        "power_w|0": 23.528,
        "power_w|1": 301.5,
        "energy_mj|0": 310356866.0,
        "energy_mj|GPU-8c16": 1000.0,  # no `gpu` label: its UUID names it
        "mem_mib|0": 1024.0,  # NaN utilisation left out, SM clock and vLLM's series not ours
    }


def test_a_path_is_on_the_host_and_a_url_as_given():
    assert gpu_url("/gpu/metrics", "http://127.0.0.1:8000/") == "http://127.0.0.1:8000/gpu/metrics"
    assert gpu_url("http://gpu:9400/metrics", "http://h:1") == "http://gpu:9400/metrics"


def _scrapes(times, power_at, gpus=("0", "1"), energy=True):
    """Scrapes of GPUs drawing power_at(t) W each, piecewise constant between the scrape times
    given (the true energy counter integrates exactly that), 1 GB used, 50 % busy."""
    out, joules = [], 0.0
    for i, t in enumerate(times):
        if i:
            joules += power_at(times[i - 1]) * (t - times[i - 1])
        values = {}
        for g in gpus:
            values[f"power_w|{g}"] = power_at(t)
            values[f"util_pct|{g}"] = 50.0
            values[f"mem_mib|{g}"] = 1000.0 + float(g)
            if energy:
                values[f"energy_mj|{g}"] = 5e6 + joules * 1000.0
        out.append(Sample(t, values))
    return out


def test_energy_is_the_counters_rise_in_the_window_and_tokens_per_joule_follow():
    # idle 50 W until the rung starts at 10, 300 W from 10 to 14, idle after; scrapes at the
    # boundaries' neighbourhood (9.8 before the start, 14.1 after the end) and inside
    def power(t):
        return 300.0 if 10.0 <= t < 14.0 else 50.0

    samples = _scrapes([9.8, 10.0, 11.0, 12.0, 13.0, 14.0, 14.1], power)
    g = gpu_rung(samples, span_window(0, 4, 10.0, 14.0), tokens=2400)
    true_energy = 2 * 300.0 * 4.0  # two GPUs, the window only
    assert g.energy_from == "counter" and g.gpus == 2
    assert g.energy_j == pytest.approx(true_energy)
    assert g.power_w == pytest.approx(600.0)
    assert g.tok_per_j == pytest.approx(2400 / true_energy)
    assert g.util_pct == 50.0 and g.mem_peak_mib == 1001.0 and g.samples == 5


def test_without_the_energy_counter_energy_is_mean_power_times_the_window():
    samples = _scrapes([9.8, 10.5, 11.5, 12.5, 14.1], lambda t: 200.0, energy=False)
    g = gpu_rung(samples, span_window(0, 4, 10.0, 14.0), tokens=800)
    assert g.energy_from == "power"
    assert g.power_w == pytest.approx(400.0)
    assert g.energy_j == pytest.approx(1600.0) and g.tok_per_j == pytest.approx(0.5)


def test_no_scrape_around_a_rung_gives_no_figures():
    g = gpu_rung(_scrapes([1.0, 2.0], lambda t: 100.0), span_window(0, 1, 10.0, 14.0), tokens=10)
    assert g.energy_j is None and g.tok_per_j is None and g.power_w is None and g.util_pct is None


RUN_INFO = RunInfo(
    Path("run_run.json"), (), host="http://127.0.0.1:8000", config={"gpu_metrics": "/gpu/metrics"}
)
WALLS = [(span_window(0, 1, 3.0, 5.0), 10)]


def test_an_exporter_that_gave_nothing_is_one_note_saying_what_to_do(tmp_path: Path):
    prefix = tmp_path / "run"
    assert (
        load_gpu_metrics(prefix, RunInfo(Path("run_run.json"), (), {}), WALLS) is None
    )  # not asked: nothing
    down = load_gpu_metrics(prefix, RUN_INFO, WALLS)  # asked, no file
    assert isinstance(down, GpuMetrics) and down.rungs == {}
    assert "http://127.0.0.1:8000/gpu/metrics did not answer" in (down.note or "")
    gpu_metrics_path(prefix).write_text(
        '{"t": 1, "error": "<urlopen error [Errno 111] Connection refused>"}\n'
    )
    note = load_gpu_metrics(prefix, RUN_INFO, WALLS).note  # type: ignore[union-attr]
    assert note is not None and "([Errno 111] Connection refused)" in note and "DCGM exporter" in note
    gpu_metrics_path(prefix).write_text('{"t": 1, "samples": {}}\n{"t": 2, "samples": {"x": 1}}\n')
    note = load_gpu_metrics(prefix, RUN_INFO, WALLS).note  # type: ignore[union-attr]
    assert note is not None and "without DCGM series" in note
    assert gpu_notes(load_gpu_metrics(prefix, RUN_INFO, WALLS)) == [note]


def test_a_scrape_file_gives_each_rungs_figures_unreadable_lines_skipped(tmp_path: Path):
    prefix = tmp_path / "run"
    lines = []
    for t in (0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 5.5):
        energy = f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0"}} {t * 100_000}'
        page = f'DCGM_FI_DEV_POWER_USAGE{{gpu="0"}} 100\n{energy}\n'
        lines.append(json.dumps({"t": t, "samples": parse_prometheus(page)}))
    lines.insert(2, "not json")
    gpu_metrics_path(prefix).write_text("\n".join(lines) + "\n")
    gpu = load_gpu_metrics(prefix, RUN_INFO, [(span_window(0, 1, 3.0, 5.0), 300)])
    assert gpu is not None and gpu.note is None and list(gpu.rungs) == [0]
    assert gpu.rungs[0].energy_j == pytest.approx(200.0) and gpu.rungs[0].tok_per_j == pytest.approx(1.5)


@pytest.mark.parametrize(
    "value",
    ["x", "ftp://gpu/metrics", "http://", "http://h:99999/m", "//h/m", "http://a b/", "h" * 3000, "/a\nb"],
)
def test_a_bad_gpu_metrics_value_is_one_line_naming_the_flag(value):
    """(An empty flag is refused by its parser: `empty value`, as every flag's; see the fuzz.)"""
    with pytest.raises(ConfigError) as err:
        run_config(Namespace(ladder="", gpu_metrics=value))
    message = str(err.value)
    assert message.startswith("--gpu-metrics") and "\n" not in message and len(message) < 400


def test_the_key_in_a_ladder_file(tmp_path: Path):
    path = tmp_path / "ladder.yaml"
    path.write_text("gpu_metrics: http://gpu-host:9400/metrics\n")
    assert load_config(path).gpu_metrics == "http://gpu-host:9400/metrics"
    for bad in ("[1]", '""', "ftp://x", "'/a b'"):
        path.write_text(f"gpu_metrics: {bad}\n")
        with pytest.raises(ConfigError, match="gpu_metrics"):
            load_config(path)


def test_the_simulators_meter_integrates_its_power_model_exactly():
    model = PowerModel(gpus=2, idle_w=50.0, busy_w=100.0, seq_w=10.0, mem_mib=1000.0, kv_mib_per_token=1.0)
    meter = EnergyMeter(model, t0=100.0)
    assert meter.energy_j(101.0) == pytest.approx(100.0)  # 2 GPUs idle for 1 s
    meter.step_started(101.0, batch=3)
    assert meter.power_w(101.5) == pytest.approx(50.0 + 100.0 + 30.0)
    assert meter.energy_j(101.5) == pytest.approx(150.0 + 0.5 * 2 * 130.0)  # mid-step
    meter.step_ended(102.0)
    assert meter.energy_j(103.0) == pytest.approx(300.0 + 2 * 130.0)
    assert meter.utilisation(102.5) == pytest.approx(50.0)  # the last second: half a step
    page = gpu_values(parse_prometheus(render_page(meter, 103.0, held_tokens=24)))
    assert page["energy_mj|0"] + page["energy_mj|1"] == pytest.approx(560_000.0)
    assert page["mem_mib|1"] == 1024.0 and page["power_w|0"] == 50.0


def test_the_figures_in_json_csv_and_the_metrics_table(tmp_path: Path):
    prefix = tmp_path / "run"
    row = SweepRow(
        rung=0,
        conc=1,
        agg_tok_s=10.0,
        per_req_tok_s=10.0,
        tokens=300,
        wall_s=2.0,
        ttft_p50_ms=1.0,
        requests=1,
        failures=0,
    )
    gpu_metrics_path(prefix).write_text(
        "\n".join(
            json.dumps({"t": t, "samples": {'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0"}': t * 100_000}})
            for t in (2.0, 5.0)
        )
    )
    gpu = load_gpu_metrics(prefix, RUN_INFO, [(span_window(0, 1, 3.0, 5.0), 300)])
    assert gpu is not None
    extra = [gpu_extra(gpu, [row])]
    data = json.loads(render([row], "json", extras=extra))
    assert data[0]["gpu"]["energy_j"] == pytest.approx(300.0) and data[0]["gpu"][
        "tok_per_j"
    ] == pytest.approx(1.0)
    csv_text = render([row], "csv", extras=extra)
    header, values = csv_text.splitlines()
    assert dict(zip(header.split(","), values.split(","), strict=True))["tok_per_j"] == "1.000"
    table = render([row], "table", metrics=None, extras=extra)
    assert "tok/J" not in table  # the plain table stays the sweep's


@pytest.mark.parametrize("value", ["ftp://x", "not a url", "h" * 100_000, "http://h:0x/m"])
def test_the_sweep_refuses_a_bad_gpu_metrics_before_anything_starts(value, monkeypatch, capsys, tmp_path):
    from llmload.cli import sweep

    def started(*_, **__):
        raise AssertionError("the run started")

    monkeypatch.setattr(sweep, "run_sweep", started)
    monkeypatch.chdir(tmp_path)
    assert sweep.main(["--gpu-metrics", value, "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--gpu-metrics" in err[0] and len(err[0]) < 400, err


def test_an_overwritten_run_loses_its_gpu_scrapes(tmp_path: Path):
    """The scraper appends: an earlier run's file left in place would be read as this run's."""
    from llmload.core.files.output_paths import earlier_run
    from llmload.core.files.run_files import RunFiles

    gpu_metrics_path(tmp_path / "run").write_text('{"t": 1, "error": "x"}\n')
    assert earlier_run(tmp_path, RunFiles(tmp_path / "run")) == [gpu_metrics_path(tmp_path / "run")]


def test_a_page_that_was_not_refreshed_is_noted_with_what_to_do(tmp_path: Path):
    """A DCGM exporter collects every 30 s by default: its counter then stands still across
    scrapes, and a rung's energy is off by up to that time's share of the rung."""
    prefix = tmp_path / "run"
    live = [(t, t * 100_000) for t in (2.0, 3.0, 4.0, 5.0, 6.0)]
    stale = [
        (t, (t // 3.0) * 300_000) for t in (2.0, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0)
    ]  # one value from 3 s to 5 s
    for points, noted in ((live, False), (stale, True)):
        gpu_metrics_path(prefix).write_text(
            "".join(
                json.dumps({"t": t, "samples": {'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0"}': e}}) + "\n"
                for t, e in points
            )
        )
        gpu = load_gpu_metrics(prefix, RUN_INFO, [(span_window(0, 1, 3.0, 5.0), 10)])
        assert gpu is not None and (gpu.note is not None) == noted, gpu.note
    assert gpu.note is not None and "at least 2.0 s, 100% of the shortest rung (rung01 c1: 2.0 s)" in gpu.note
    assert "-c 1000" in gpu.note


# --- every GPU counted (issue 53 item 4) -------------------------------------------------------
EIGHT = tuple(str(g) for g in range(8))


def _mixed_page(times, power_at, reset=None):
    """An exporter's scrapes of 8 GPUs drawing power_at(t) W each (piecewise constant between the
    scrape times); GPU 7 has power but no energy counter; `reset`: (GPU, time) from which that
    GPU's counter restarts from 0."""
    samples = _scrapes(times, power_at, gpus=EIGHT)
    for s in samples:
        del s.values["energy_mj|7"]
        if reset is not None and s.t >= reset[1]:
            key = f"energy_mj|{reset[0]}"
            s.values[key] -= 5e6 + 1000.0 * 135.0 * (reset[1] - times[0])
    return samples


def test_a_gpu_without_the_energy_counter_is_integrated_from_its_power():
    # the exporter: 8 GPUs at 135 W, GPU 7 without DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION;
    # the truth is 8 x 135 = 1,080 W (summing only the GPUs with the counter read 945 W)
    times = [9.9, 10.0, 10.5, 11.0, 11.5, 12.0, 12.5, 13.0, 13.5, 14.0, 14.1]
    g = gpu_rung(_mixed_page(times, lambda t: 135.0), span_window(0, 4, 10.0, 14.0), tokens=4320)
    assert g.gpus == 8 and g.power_w == pytest.approx(1080.0, rel=0.01)
    assert g.energy_j == pytest.approx(1080.0 * 4.0, rel=0.01)
    assert g.gpu_energy_from == {**dict.fromkeys(EIGHT[:7], "counter"), "7": "power"}
    assert g.energy_from == "counter+power" and g.from_power == ["7"] and g.counter_reset == []
    assert g.as_dict()["gpu_energy_from"]["7"] == "power"  # in the json's `gpu` object


def test_a_counter_that_goes_backwards_is_a_reset_of_that_gpu_alone():
    # GPU 3's counter restarts from 0 at 12.0 (inside the rung): only GPU 3 is taken from its power
    times = [9.9, 10.0, 11.0, 12.0, 13.0, 14.0, 14.1]
    g = gpu_rung(
        _mixed_page(times, lambda t: 135.0, reset=("3", 12.0)), span_window(0, 4, 10.0, 14.0), tokens=1
    )
    assert g.counter_reset == ["3"] and g.from_power == ["3", "7"]
    assert g.gpu_energy_from["0"] == "counter" and g.gpu_energy_from["4"] == "counter"
    assert g.power_w == pytest.approx(1080.0, rel=0.01)
    # a rung after the reset keeps GPU 3's counter
    later = gpu_rung(
        _mixed_page([*times, 15.0, 16.0, 16.1], lambda t: 135.0, reset=("3", 12.0)),
        span_window(1, 4, 15.0, 16.0),
        1,
    )
    assert later.counter_reset == [] and later.gpu_energy_from["3"] == "counter"


def test_the_note_names_the_gpus_integrated_from_power(tmp_path: Path):
    prefix = tmp_path / "run"
    times = [2.9, 3.0, 3.5, 4.0, 4.5, 5.0, 5.1]
    with gpu_metrics_path(prefix).open("w") as fh:
        for s in _mixed_page(times, lambda t: 135.0, reset=("3", 4.0)):
            samples = {
                f'DCGM_FI_DEV_{_SERIES[k.partition("|")[0]]}{{gpu="{k.partition("|")[2]}"}}': v
                for k, v in s.values.items()
            }
            fh.write(json.dumps({"t": s.t, "samples": samples}) + "\n")
    gpu = load_gpu_metrics(prefix, RUN_INFO, [(span_window(0, 1, 3.0, 5.0), 300)])
    assert gpu is not None and gpu.note is None and gpu.rungs[0].power_w == pytest.approx(1080.0, rel=0.01)
    assert gpu.energy_note is not None and gpu_notes(gpu) == [gpu.energy_note]
    assert "GPU 3 (its counter went backwards in rung01 c1), GPU 7 from their power gauge" in gpu.energy_note


_SERIES = {
    "power_w": "POWER_USAGE",
    "energy_mj": "TOTAL_ENERGY_CONSUMPTION",
    "util_pct": "GPU_UTIL",
    "mem_mib": "FB_USED",
}


def test_the_simulators_page_can_leave_the_last_gpus_without_the_counter():
    meter = EnergyMeter(PowerModel(gpus=8, no_energy_gpus=1), t0=100.0)
    page = gpu_values(parse_prometheus(render_page(meter, 101.0, held_tokens=0)))
    assert sorted(k for k in page if k.startswith("energy_mj|")) == [f"energy_mj|{g}" for g in range(7)]
    assert sorted(k for k in page if k.startswith("power_w|")) == [f"power_w|{g}" for g in range(8)]
