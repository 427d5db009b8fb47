"""`SimConfig`: everything the simulator server is configured with (one field per CLI flag)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from llmload.sim.engine import StepModel

USAGE_STYLES = ("vllm", "llamacpp")


@dataclass(frozen=True, slots=True)
class SimConfig:
    host: str = "127.0.0.1"
    port: int = 0  # 0: the OS picks a free port
    port_file: Path | None = None
    truth_log: Path | None = None
    model: str = "sim-model"
    step: StepModel = field(default_factory=StepModel)
    max_num_seqs: int = 256
    max_model_len: int = 32768
    seed: int = 0
    usage_style: str = "vllm"
    ignore_eos_unsupported: bool = False
    close_after_stream: bool = False  # close the connection after each streamed reply (llama-server)
    faults: dict[str, float] = field(default_factory=dict)
    fault_seed: int = 0
    stall_s: float = 30.0
    slow_headers_s: float = 2.0
    drop_after: int = 8
    api_key: str = ""  # when set, /v1/* answers 401 unless `Authorization: Bearer <api_key>`
    ssl_certfile: Path | None = None  # serve HTTPS with this certificate chain (PEM) ...
    ssl_keyfile: Path | None = None  # ... and this private key (PEM)
    prefix_cache_blocks: int = 0  # prefix cache capacity in blocks; 0: no prefix cache (issue 16)
    block_size: int = 16  # tokens per prefix-cache block

    def __post_init__(self) -> None:
        if self.usage_style not in USAGE_STYLES:
            raise ValueError(f"usage_style must be one of {USAGE_STYLES}")
        if self.drop_after < 0:
            raise ValueError("drop_after must be >= 0")
        if self.max_num_seqs < 1 or self.max_model_len < 1:
            raise ValueError("max_num_seqs and max_model_len must be >= 1")
        if self.prefix_cache_blocks < 0 or self.block_size < 1:
            raise ValueError("--prefix-cache-blocks must be >= 0 and --block-size >= 1")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("--ssl-certfile and --ssl-keyfile go together")
