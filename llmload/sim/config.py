"""`SimConfig`: everything the simulator server is configured with, each field declared once with
its flag and help (llmload.core.schema): `llmload sim --help` and the parser come from here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from llmload.core.checks import file_path, flag_type, number
from llmload.core.schema import setting
from llmload.sim.engine import ENGINE, StepModel
from llmload.sim.formats.reasoning import REASONING_FORMATS, ReasoningSpec, parse_reasoning
from llmload.sim.power import PowerModel

USAGE_STYLES = ("vllm", "llamacpp")
SERVER, FAULTS = "server", "faults"  # --help sections (the step model's flags are "engine")


class SimFlagError(ValueError):
    """A simulator flag the simulator would refuse (or an address it cannot listen on); the
    message is one line."""


# The default seed's draws give the default prompt 256 tokens in 59 steps (4.34 a step), as the
# draws the simulator made before its acceptance generator was seeded by a 64-bit integer (for
# the twin's offline replay), so the default model still reproduces the seed's sweep table
# (tests/e2e/test_sweep_e2e.py); seed 0 now gives 53 steps (4.83 a step, 11 % faster).
DEFAULT_SEED = 29


@dataclass(frozen=True, slots=True)
class SimConfig:
    host: str = setting("127.0.0.1", help="address to bind", group=SERVER)
    port: int = setting(
        0,
        help="port to bind; 0 lets the OS pick a free one",
        parse=flag_type(number(0, 65535, integer=True), "port"),
        group=SERVER,
    )
    port_file: Path | None = setting(
        None, help="write the bound port here once listening", parse=file_path, group=SERVER
    )
    truth_log: Path | None = setting(
        None, help="ground-truth JSONL file (started anew)", parse=file_path, group=SERVER
    )
    model: str = setting("sim-model", help="served model name; other names get 404", group=SERVER)
    api_key: str = setting(
        "",
        help="require `Authorization: Bearer KEY` on /v1/* (401 otherwise), as vLLM's --api-key",
        group=SERVER,
    )
    ssl_certfile: Path | None = setting(
        None, help="serve HTTPS with this PEM certificate", parse=file_path, group=SERVER
    )
    ssl_keyfile: Path | None = setting(
        None, help="the PEM private key of --ssl-certfile", parse=file_path, group=SERVER
    )
    max_model_len: int = setting(
        32768,
        help="context window in tokens",
        parse=flag_type(number(1, 10_000_000, integer=True), "max_model_len"),
        group=SERVER,
    )
    usage_style: str = setting(
        "vllm",
        help="vllm: usage only with stream_options.include_usage, in a separate choices=[] chunk; "
        "llamacpp: usage+timings always, on the final chunk whose choices is not empty",
        choices=USAGE_STYLES,
        group=SERVER,
    )
    close_after_stream: bool = setting(
        False,
        help="close the connection after every streamed reply although HTTP/1.1 keeps it alive "
        "(llama-server does this): a pooling client must reconnect, not fail",
        group=SERVER,
    )
    empty_last_text: bool = setting(
        False,
        help="send the last content chunk with empty text and the finish_reason, as vLLM does when "
        "the last token's bytes end inside a character (an emoji): still a token by usage",
        group=SERVER,
    )
    reasoning: str = setting(
        "0",
        help="reasoning tokens each request thinks before it answers: N, LO-HI (drawn per prompt) or "
        "P%% of max_tokens; 0: none (docs/simulator.md)",
        group=SERVER,
    )
    reasoning_format: str = setting(
        "reasoning",
        help="chat: the thinking in delta.reasoning (vLLM), delta.reasoning_content (SGLang, llama.cpp) "
        "or <think> tags in the content; completions always tags, /v1/responses its reasoning events",
        choices=REASONING_FORMATS,
        group=SERVER,
    )
    reasoning_salt: int = setting(
        0,
        help="another salt: other words of thinking, the same answer and times",
        parse=flag_type(number(-(2**63), 2**63 - 1, integer=True), "reasoning_salt"),
        group=SERVER,
    )
    ignore_eos_unsupported: bool = setting(
        False,
        help="ignore the ignore_eos request field (requests stop at their natural length)",
        group=SERVER,
    )
    invalid_share: float = setting(
        0.0,
        help="share of structured replies (tool calls, response_format JSON) sent invalid: cut before "
        "their last token, drawn from the seed and the prompt (llmload.sim.formats.structured)",
        parse=flag_type(number(0, 1), "invalid_share"),
        group=SERVER,
    )
    auto_tool_share: float = setting(
        1.0,
        help="with tools and tool_choice auto, the share of prompts answered with tool calls (drawn "
        "from the prompt); the others answer in text",
        parse=flag_type(number(0, 1), "auto_tool_share"),
        group=SERVER,
    )
    reject_keys: str = setting(
        "",
        help="request body keys answered with 400 (comma-separated, e.g. tools,response_format), "
        "as a server without tool calling or structured output",
        group=SERVER,
    )
    keep_alive_timeout: float | None = setting(
        None,
        help="close a connection idle for S seconds and announce it (Keep-Alive: timeout=S); "
        "llama-server uses 5",
        parse=flag_type(number(0, 86_400, above=True), "keep_alive_timeout"),
        group=SERVER,
    )
    max_requests_per_connection: int | None = setting(
        None,
        help="answer the N-th request of a connection with Connection: close, then close it",
        parse=flag_type(number(1, 10**9, integer=True), "max_requests_per_connection"),
        group=SERVER,
    )
    step: StepModel = setting(default_factory=StepModel, help="the step model")
    power: PowerModel = setting(default_factory=PowerModel, help="the simulated GPUs (GET /gpu/metrics)")
    max_num_seqs: int = setting(
        256,
        help="running batch limit; the rest wait (FIFO)",
        parse=flag_type(number(1, 100_000, integer=True), "max_num_seqs"),
        group=ENGINE,
    )
    seed: int = setting(
        DEFAULT_SEED,
        help="seed of the per-prompt acceptance pattern",
        parse=flag_type(number(-(2**63), 2**63 - 1, integer=True), "seed"),
        group=ENGINE,
    )
    prefix_cache_blocks: int = setting(
        0,
        help="prefix cache capacity in blocks (LRU); cached prompt tokens are not prefilled and are "
        "reported as usage.prompt_tokens_details.cached_tokens; 0: no cache",
        parse=flag_type(number(0, 10_000_000, integer=True), "prefix_cache_blocks"),
        group=ENGINE,
    )
    block_size: int = setting(
        16,
        help="tokens per prefix-cache block",
        parse=flag_type(number(1, 65_536, integer=True), "block_size"),
        group=ENGINE,
    )
    batch_variance: float = setting(
        0.0,
        help="chance that a generated token differs when its step's batch holds more than one "
        "sequence (drawn from prompt, position and batch size; the truth log lists the flips)",
        parse=flag_type(number(0, 1), "batch_variance"),
        group=ENGINE,
    )
    faults: dict[str, float] = field(default_factory=dict)  # from the repeatable --fault KIND=RATE
    fault_seed: int = setting(
        0,
        help="seed of the per-request fault draw",
        parse=flag_type(number(-(2**63), 2**63 - 1, integer=True), "fault_seed"),
        group=FAULTS,
    )
    stall_s: float = setting(
        30.0, help="pause of the stall fault, s", parse=flag_type(number(0, 3_600), "stall_s"), group=FAULTS
    )
    slow_headers_s: float = setting(
        2.0,
        help="delay of slow_headers, s",
        parse=flag_type(number(0, 3_600), "slow_headers_s"),
        group=FAULTS,
    )
    drop_after: int = setting(
        8,
        help="tokens sent before drop cuts a stream",
        parse=flag_type(number(0, 10_000_000, integer=True), "drop_after"),
        group=FAULTS,
    )

    @property
    def rejected_keys(self) -> frozenset[str]:
        return frozenset(k.strip() for k in self.reject_keys.split(",") if k.strip())

    @property
    def reasoning_spec(self) -> ReasoningSpec:
        return parse_reasoning(self.reasoning)

    def __post_init__(self) -> None:
        self.reasoning_spec  # noqa: B018 (ValueError naming the flag, before the server starts)
        if self.reasoning_format not in REASONING_FORMATS:
            raise ValueError(f"--reasoning-format must be one of {', '.join(REASONING_FORMATS)}")
        if self.usage_style not in USAGE_STYLES:
            raise ValueError(f"usage_style must be one of {USAGE_STYLES}")
        if self.drop_after < 0:
            raise ValueError("drop_after must be >= 0")
        if self.max_num_seqs < 1 or self.max_model_len < 1:
            raise ValueError("max_num_seqs and max_model_len must be >= 1")
        if self.keep_alive_timeout is not None and self.keep_alive_timeout <= 0:
            raise ValueError("--keep-alive-timeout must be > 0")
        if self.max_requests_per_connection is not None and self.max_requests_per_connection < 1:
            raise ValueError("--max-requests-per-connection must be >= 1")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0-65535, got {self.port}")
        if not (0.0 <= self.stall_s < math.inf and 0.0 <= self.slow_headers_s < math.inf):
            raise ValueError("stall_s and slow_headers_s must be finite numbers >= 0")
        if not (0.0 <= self.invalid_share <= 1.0 and 0.0 <= self.auto_tool_share <= 1.0):
            raise ValueError("--invalid-share and --auto-tool-share must be in [0, 1]")
        if not 0.0 <= self.batch_variance <= 1.0:
            raise ValueError("--batch-variance must be in [0, 1]")
        if self.prefix_cache_blocks < 0 or self.block_size < 1:
            raise ValueError("--prefix-cache-blocks must be >= 0 and --block-size >= 1")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("--ssl-certfile and --ssl-keyfile go together")
