"""`--gpu-metrics nvml`: the GPUs of the machine llmload runs on, read through NVML (the optional
extra `llmload[nvml]`, NVIDIA's `nvidia-ml-py`), written as a DCGM exporter's series so the GPU
figures are computed the same way (llmload.analysis.run.gpu_metrics).

Per GPU (label `gpu`: its NVML index, `UUID`): power (`nvmlDeviceGetPowerUsage`, mW -> W), the
energy counter (`nvmlDeviceGetTotalEnergyConsumption`, mJ since the driver loaded), utilisation
(`nvmlDeviceGetUtilizationRates().gpu`, %) and memory used (`nvmlDeviceGetMemoryInfo().used`,
bytes -> MiB). A reading a GPU does not support is left out. No package, no driver or no GPU is
a failed first read: one line in the scrape file, and the table's one note says what to do.
"""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path
from typing import Any

from llmload.analysis.run.gpu_metrics import GPU_NAMES
from llmload.core.config import NVML
from llmload.loadgen.monitor.scraper import MetricsScraper

MIB = 1024 * 1024


def _load() -> Any:
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        raise ValueError("NVML: nvidia-ml-py is not installed (pip install 'llmload[nvml]')") from None


class NvmlSampler(MetricsScraper):
    """A `MetricsScraper` whose page is the local GPUs read through NVML."""

    def __init__(self, path: Path) -> None:
        super().__init__(NVML, path, names=GPU_NAMES)
        self._nvml: Any = None

    def read(self) -> dict[str, float]:
        nvml = self._nvml or _load()
        try:
            if self._nvml is None:
                nvml.nvmlInit()
                self._nvml = nvml
            return self._read_gpus(nvml)
        except nvml.NVMLError as e:
            raise ValueError(f"NVML: {e}") from None

    @staticmethod
    def _read_gpus(nvml: Any) -> dict[str, float]:
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            raise ValueError("NVML: no GPU on this machine")
        out: dict[str, float] = {}
        for i in range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            uuid = nvml.nvmlDeviceGetUUID(handle)
            labels = f'{{gpu="{i}",UUID="{uuid.decode() if isinstance(uuid, bytes) else uuid}"}}'
            readings = {
                "DCGM_FI_DEV_POWER_USAGE": lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": nvml.nvmlDeviceGetTotalEnergyConsumption,
                "DCGM_FI_DEV_GPU_UTIL": lambda h: nvml.nvmlDeviceGetUtilizationRates(h).gpu,
                "DCGM_FI_DEV_FB_USED": lambda h: nvml.nvmlDeviceGetMemoryInfo(h).used / MIB,
            }
            for name, reading in readings.items():
                try:
                    out[name + labels] = float(reading(handle))
                except nvml.NVMLError_NotSupported:
                    continue
        return out

    def close(self) -> None:
        super().close()
        if self._nvml is not None:
            nvml, self._nvml = self._nvml, None
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()
