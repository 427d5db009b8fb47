"""Command line of the simulator: `python -m llmload.sim` / `llmload-sim`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from llmload.sim.config import USAGE_STYLES, SimConfig
from llmload.sim.engine import StepModel
from llmload.sim.faults import FAULT_KINDS, FaultPicker, parse_fault
from llmload.sim.run import run


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Show defaults, keep the fault table's line breaks."""


def build_parser() -> argparse.ArgumentParser:
    d, m = SimConfig(), StepModel()
    p = argparse.ArgumentParser(
        prog="llmload sim",
        description="OpenAI-compatible (vLLM-shaped) LLM server simulator with a continuous-batching "
        "engine and a ground-truth log of when every token left the server.",
        epilog="fault kinds:\n" + "\n".join(f"  {k:<19} {v}" for k, v in FAULT_KINDS.items()),
        formatter_class=_HelpFormatter,
    )
    net = p.add_argument_group("server")
    net.add_argument("--host", default=d.host, help="address to bind")
    net.add_argument("--port", type=int, default=d.port, help="port to bind; 0 lets the OS pick a free one")
    net.add_argument("--port-file", type=Path, default=None, help="write the bound port here once listening")
    net.add_argument("--truth-log", type=Path, default=None, help="ground-truth JSONL file (appended)")
    net.add_argument("--model", default=d.model, help="served model name; other names get 404")
    net.add_argument(
        "--api-key",
        default=d.api_key,
        help="require `Authorization: Bearer KEY` on /v1/* (401 otherwise), as vLLM's --api-key",
    )
    net.add_argument("--ssl-certfile", type=Path, default=None, help="serve HTTPS with this PEM certificate")
    net.add_argument("--ssl-keyfile", type=Path, default=None, help="the PEM private key of --ssl-certfile")
    net.add_argument("--max-model-len", type=int, default=d.max_model_len, help="context window in tokens")
    net.add_argument(
        "--usage-style",
        choices=USAGE_STYLES,
        default=d.usage_style,
        help="vllm: usage only with stream_options.include_usage, in a separate choices=[] chunk; "
        "llamacpp: usage+timings always, on the final chunk whose choices is not empty",
    )
    net.add_argument(
        "--close-after-stream",
        action="store_true",
        help="close the connection after every streamed reply although HTTP/1.1 keeps it alive "
        "(llama-server does this): a pooling client must reconnect, not fail",
    )
    net.add_argument(
        "--ignore-eos-unsupported",
        action="store_true",
        help="ignore the ignore_eos request field (requests stop at their natural length)",
    )
    eng = p.add_argument_group(
        "engine (step_ms = (base + per_seq*batch + prefill*new_prompt_tokens) * degrade)"
    )
    eng.add_argument("--base-ms", type=float, default=m.base_ms, help="fixed cost of one decode step, ms")
    eng.add_argument(
        "--per-seq-ms", type=float, default=m.per_seq_ms, help="step cost per running sequence, ms"
    )
    eng.add_argument(
        "--prefill-ms-per-token",
        type=float,
        default=m.prefill_ms_per_token,
        help="added to the step that admits a prompt, per prompt token, ms",
    )
    eng.add_argument(
        "--accept-len",
        type=float,
        default=m.accept_len,
        help="mean tokens per sequence per step (speculative)",
    )
    eng.add_argument("--max-draft", type=int, default=m.max_draft, help="draft tokens proposed per step")
    eng.add_argument(
        "--max-num-seqs", type=int, default=d.max_num_seqs, help="running batch limit; the rest wait (FIFO)"
    )
    eng.add_argument("--seed", type=int, default=d.seed, help="seed of the per-prompt acceptance pattern")
    eng.add_argument(
        "--degrade-pct-per-min",
        type=float,
        default=m.degrade_pct_per_min,
        help="step time grows linearly by this percent per minute since start (soak drift)",
    )
    eng.add_argument(
        "--prefix-cache-blocks",
        type=int,
        default=d.prefix_cache_blocks,
        help="prefix cache capacity in blocks (LRU); cached prompt tokens are not prefilled and are "
        "reported as usage.prompt_tokens_details.cached_tokens; 0: no cache",
    )
    eng.add_argument("--block-size", type=int, default=d.block_size, help="tokens per prefix-cache block")
    flt = p.add_argument_group("faults")
    flt.add_argument(
        "--fault",
        type=parse_fault,
        action="append",
        default=[],
        metavar="KIND=RATE",
        help="inject a fault into this fraction of requests (repeatable); kinds: " + ", ".join(FAULT_KINDS),
    )
    flt.add_argument(
        "--fault-seed", type=int, default=d.fault_seed, help="seed of the per-request fault draw"
    )
    flt.add_argument("--stall-s", type=float, default=d.stall_s, help="pause of the stall fault, s")
    flt.add_argument(
        "--slow-headers-s", type=float, default=d.slow_headers_s, help="delay of slow_headers, s"
    )
    flt.add_argument(
        "--drop-after", type=int, default=d.drop_after, help="tokens sent before drop cuts a stream"
    )
    return p


def config_from_args(argv: Sequence[str] | None = None) -> SimConfig:
    parser = build_parser()
    args = parser.parse_args(argv)
    faults = dict(args.fault)
    try:
        FaultPicker(faults)  # validates the sum of the rates
        step = StepModel(
            base_ms=args.base_ms,
            per_seq_ms=args.per_seq_ms,
            prefill_ms_per_token=args.prefill_ms_per_token,
            accept_len=args.accept_len,
            max_draft=args.max_draft,
            degrade_pct_per_min=args.degrade_pct_per_min,
        )
        return SimConfig(
            host=args.host,
            port=args.port,
            port_file=args.port_file,
            truth_log=args.truth_log,
            model=args.model,
            step=step,
            max_num_seqs=args.max_num_seqs,
            max_model_len=args.max_model_len,
            seed=args.seed,
            usage_style=args.usage_style,
            ignore_eos_unsupported=args.ignore_eos_unsupported,
            close_after_stream=args.close_after_stream,
            faults=faults,
            fault_seed=args.fault_seed,
            stall_s=args.stall_s,
            slow_headers_s=args.slow_headers_s,
            drop_after=args.drop_after,
            api_key=args.api_key,
            ssl_certfile=args.ssl_certfile,
            ssl_keyfile=args.ssl_keyfile,
            prefix_cache_blocks=args.prefix_cache_blocks,
            block_size=args.block_size,
        )
    except ValueError as err:
        parser.error(str(err))


def main(argv: Sequence[str] | None = None) -> int:
    run(config_from_args(argv))
    return 0


if __name__ == "__main__":
    main()
