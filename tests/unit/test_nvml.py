"""`--gpu-metrics nvml` (issue 43 item 5, the optional extra): no GPU is on the build machine, so
its absent paths are tested for real (no package; the package without a driver), and its readings
and units against a stand-in of NVML's calls (a GPU's documented units: mW, mJ, %, bytes)."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from argparse import Namespace
from pathlib import Path

import pytest

from llmload.analysis.run.gpu_metrics import gpu_metrics_path, gpu_values, load_gpu_metrics
from llmload.analysis.run.window import span_window
from llmload.core.files.run_info import RunInfo
from llmload.loadgen.monitor.nvml import NvmlSampler
from llmload.loadgen.options import run_config

RUN_INFO = RunInfo(Path("run_run.json"), (), config={"gpu_metrics": "nvml"})


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_nvml_is_a_gpu_metrics_value():
    assert run_config(Namespace(ladder="", gpu_metrics="nvml")).gpu_metrics == "nvml"


def test_without_the_package_the_run_gets_one_note_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as when not installed
    sampler = NvmlSampler(gpu_metrics_path(tmp_path / "run"))
    assert sampler.sample(1.0) is False
    sampler.close()
    assert "pip install 'llmload[nvml]'" in _lines(sampler.path)[0]["error"]
    gpu = load_gpu_metrics(tmp_path / "run", RUN_INFO, [(span_window(0, 1, 0.0, 2.0), 10)])
    assert gpu is not None and gpu.rungs == {}
    assert gpu.note is not None and gpu.note.startswith("GPU metrics: NVML read no GPU")
    assert "llmload[nvml]" in gpu.note and "DCGM exporter" in gpu.note


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is None, reason="nvidia-ml-py not installed")
def test_with_the_package_and_no_driver_it_is_a_note_never_an_error(tmp_path):
    sampler = NvmlSampler(gpu_metrics_path(tmp_path / "run"))
    if sampler.sample(1.0):  # a machine with a GPU: nothing absent to test
        sampler.close()
        pytest.skip("this machine has an NVIDIA GPU")
    sampler.close()
    assert _lines(sampler.path)[0]["error"].startswith("NVML: ")
    gpu = load_gpu_metrics(tmp_path / "run", RUN_INFO, [(span_window(0, 1, 0.0, 2.0), 10)])
    assert gpu is not None and gpu.note is not None and "NVML read no GPU (NVML: " in gpu.note


class _NvmlError(Exception):
    pass


class _NotSupported(_NvmlError):
    pass


def _fake_nvml(gpus: int) -> types.ModuleType:
    """NVML's calls as nvidia-ml-py names them, for `gpus` GPUs drawing 250 W, at 80 %, 2 GiB used;
    GPU 1 does not support the energy counter."""
    m = types.ModuleType("pynvml")
    m.NVMLError = _NvmlError  # type: ignore[attr-defined]
    m.NVMLError_NotSupported = _NotSupported  # type: ignore[attr-defined]
    m.nvmlInit = lambda: None  # type: ignore[attr-defined]
    m.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: gpus  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"  # type: ignore[attr-defined]
    m.nvmlDeviceGetPowerUsage = lambda h: 250_000  # type: ignore[attr-defined]  # mW

    def energy(h: int) -> int:
        if h == 1:
            raise _NotSupported("Not Supported")
        return 7_000_000  # mJ

    m.nvmlDeviceGetTotalEnergyConsumption = energy  # type: ignore[attr-defined]
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=80, memory=10)  # type: ignore[attr-defined]
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=2 * 1024**3)  # type: ignore[attr-defined]
    return m


def test_the_readings_become_the_exporters_series_in_its_units(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(2))
    sampler = NvmlSampler(gpu_metrics_path(tmp_path / "run"))
    assert sampler.sample(1.0) and sampler.sample(2.0)
    sampler.close()
    values = gpu_values(_lines(sampler.path)[1]["samples"])
    assert values == {
        "power_w|0": 250.0,
        "energy_mj|0": 7_000_000.0,
        "util_pct|0": 80.0,
        "mem_mib|0": 2048.0,
        "power_w|1": 250.0,  # no energy counter on GPU 1: left out, not an error
        "util_pct|1": 80.0,
        "mem_mib|1": 2048.0,
    }


def test_a_machine_without_gpus_is_a_failed_read(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(0))
    sampler = NvmlSampler(gpu_metrics_path(tmp_path / "run"))
    assert sampler.sample(1.0) is False
    sampler.close()
    assert _lines(sampler.path)[0]["error"] == "NVML: no GPU on this machine"
