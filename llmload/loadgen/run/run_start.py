"""The start of a ladder run on the master (or the local process), at the shape's first tick.

Owns what happens before the first stage is announced (`begin_run`): the run configuration read
once, a master's workers checked (at least one connected, else `NoWorkers`: Locust's master would
spawn nobody and the first rung would wait for users that never come; and each one's clock
measured, else `WorkerClockError`: `llmload.loadgen.run.clock_sync`) and the users-per-process
limit, all before anything is sent, the preflight
(`llmload.loadgen.transport.preflight`: `GET /v1/models` and the lengths the model must fit; with
`continuous_usage: null`, whether the server honours per-chunk usage, which the run then asks
for), the prompt file
checked and synthetic prompts, traces and sessions calibrated on the server (`prepare_workload`),
the stages planned (`llmload.loadgen.run.stage_plan`), the run's files started anew (as Locust
rewrites its CSVs at a second start from the web UI; the generation requests sent before the
ladder as records of phase "calibration" in `<prefix>_calibration.jsonl`), and the list of sinks
every record goes to.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from pathlib import Path
from typing import Any

from locust.runners import MasterRunner

from llmload.analysis.capacity import CapacitySearch
from llmload.analysis.run.health import health_path
from llmload.core.config import SweepConfig
from llmload.core.files.records import OUTCOME_OK, RecordWriter, RequestRecord, new_record, new_run_id
from llmload.core.files.run_files import RunFiles
from llmload.core.names import CALIBRATION_PHASE, WARMUP_RUNG
from llmload.core.workload.lengths import as_lengths
from llmload.core.workload.prompt_files import load_prompt_file
from llmload.loadgen.options import api_key, run_config
from llmload.loadgen.run.capacity_probes import CapacityProbes
from llmload.loadgen.run.clock_sync import ClockSync
from llmload.loadgen.run.error_log import RunErrors
from llmload.loadgen.run.fall_watch import FallWatch, watches
from llmload.loadgen.run.precision_stop import PrecisionStop
from llmload.loadgen.run.record_sinks import FirstBadRequest, RecordCounter, RecordSink, RungReconciler
from llmload.loadgen.run.run_state import RecordHook, RunState
from llmload.loadgen.run.stage_plan import check_users_per_process, plan_stages, stall_limit
from llmload.loadgen.run.stage_protocol import StageProtocol
from llmload.loadgen.transport.preflight import (
    auth_headers,
    preflight,
    probe_continuous_usage,
    probe_fields,
    tls_context,
)
from llmload.loadgen.transport.token_counts import ServerTokenCounts
from llmload.loadgen.workload.payload import build_payload, endpoint_path, reply_shape
from llmload.loadgen.workload.prompts import calibrate_prompts, workload_for

log = logging.getLogger("llmload")
NO_WORKERS = (
    "no worker is connected to this master: start the workers (locust --worker --master-host "
    "<this master>), then start the run"
)


class NoWorkers(Exception):
    """A master was told to start a run with no worker connected (a POST /swarm from a script, or
    the web UI's form before its page noticed a worker drop): Locust's master then only logs that
    it cannot start and spawns nobody, and the ladder's first rung would wait for users that never
    come. Refused in the run's first tick instead, before anything is sent."""


def records_path(options: Any) -> Path:
    """--records, else <--csv prefix>_records.jsonl, else reports/run-<time>_records.jsonl."""
    if getattr(options, "records", ""):
        return Path(options.records)
    prefix = getattr(options, "csv_prefix", None) or time.strftime("reports/run-%Y%m%d-%H%M%S")
    return RunFiles(Path(prefix)).records


def begin_run(
    runner: Any,
    record_hooks: list[RecordHook],
    errors: RunErrors,
    path: Path,
    clocks: ClockSync | None = None,
) -> RunState:
    """A new run of the runner's configuration, its stages planned and its files open (its records
    at `path`: `records_path`); each record goes to the run's own sinks, then to `record_hooks`;
    its errors are `errors` (attached to the run); a master's workers' clocks are measured by
    `clocks` before anything is sent. Raises ConfigError, NoWorkers, WorkerClockError,
    PreflightError, FileInUse (another run writes the records file) or OSError when the run cannot
    start."""
    env = runner.environment
    options = env.parsed_options
    # parsed once per process: the plugin's check of a headless run's configuration, once; a run
    # started from the web UI reads the options its form set
    config = getattr(env, "llmload_config", None) or run_config(options)
    env.llmload_config = None
    if isinstance(runner, MasterRunner) and runner.worker_count == 0:  # Locust's own test to spawn
        raise NoWorkers(NO_WORKERS)
    processes = runner.worker_count if isinstance(runner, MasterRunner) else 1
    check_users_per_process(config, processes)  # before the preflight: nothing is sent
    if clocks is not None:  # the run's offsets, measured anew (llmload.loadgen.run.clock_sync)
        clocks.history.clear()
        clocks.start()
    ctx = tls_context(getattr(options, "ca_bundle", ""), getattr(options, "tls_insecure", False))
    model = preflight(
        env.host or "",
        model=config.model,
        api_key=api_key(options),
        context=ctx,
        timeout=config.timeouts.connect,
        max_tokens=as_lengths(config.max_tokens).high,  # the longest request must fit
        prompt_tokens=None if config.prompt_tokens is None else as_lengths(config.prompt_tokens).high,
    )
    sent: list[dict[str, Any]] = []  # the generation requests sent before the ladder (recorded below)
    if config.stream and config.continuous_usage is None:  # usage on every chunk where honoured
        headers = auth_headers(api_key(options))
        honoured = probe_continuous_usage(
            env.host or "",
            model,
            sent_endpoint(env, config) == "chat",
            headers,
            ctx,
            config.timeouts.first_token,
            sent,
        )
        config = dataclasses.replace(config, continuous_usage=honoured)
        log.info(
            "llmload: per-chunk usage (stream_options.continuous_usage_stats) %s",
            "honoured: asked on every request"
            if honoured
            else "not honoured: chunk counts are a lower bound",
        )
    if config.structured:  # a server that refuses a key of the tools or format stops the run here
        endpoint = sent_endpoint(env, config)
        body = build_payload(dataclasses.replace(config, stream=False, endpoint=endpoint), model, "Hello", 8)
        fields = reply_shape(config)
        body = {k: v for k, v in body.items() if k not in fields}
        url = (env.host or "").rstrip("/") + endpoint_path(endpoint)
        headers = auth_headers(api_key(options))
        probe_fields(url, endpoint, body, fields, headers, ctx, config.timeouts.first_token, sent)
    prompt_words, prompt_vocab, prompt_overhead = prepare_workload(env, config, model, ctx, sent)
    files = RunFiles.of_records(path)
    workload = workload_for(config, prompt_words, prompt_vocab)
    prompts = len(workload.pool) if not workload.distinct else max(len(workload.pool), config.most_users)
    run_id = new_run_id()  # the stages carry it to the users, whose records carry it
    stages = plan_stages(config, model, prompt_words, prompt_vocab, prompts, prompt_overhead, run_id)
    held = config.duration if config.rung_precision is None else config.precision_max_s  # a rung's time
    protocol = StageProtocol(stages, duration=held, stall_limit=stall_limit(config))
    reconciler = RungReconciler(config)
    writer = RecordWriter(path, fsync=False, truncate=True, chunk_index=True, exclusive=True)
    calibration = RecordWriter(files.calibration, fsync=False, truncate=True)
    for number, request in enumerate(sent):
        calibration.write(calibration_record(request, number, run_id))
    calibration.close()
    state = RunState(
        config,
        env.host,
        model,
        writer,
        files,
        stages,
        protocol,
        reconciler,
        errors,
        run_id=run_id,
        clocks=clocks,
    )
    repeats = config.mode == "trace" or config.sessions is not None  # their prompts share on purpose
    state.prompts = None if repeats else workload.shared_prefix(prompt_overhead)
    errors.attach(state.write_run_file)
    state.workload = {
        "prompt_words": prompt_words,
        "prompt_vocab": prompt_vocab,
        "prompt_overhead": prompt_overhead,
        "run_id": run_id,
    }
    if config.mode == "capacity":
        state.probes = CapacityProbes(CapacitySearch(config.capacity, config.slo))
        state.probes.plan_next(state)
    state.health = RecordWriter(health_path(path), fsync=False, truncate=True)
    if watches(config):
        state.falls = FallWatch()
    probes: list[RecordSink] = [] if state.probes is None else [state.probes]
    if config.rung_precision is not None:
        state.precision = PrecisionStop(config)
        probes.append(state.precision)
    probes += [] if state.falls is None else [state.falls]
    hooks: list[RecordSink] = [functools.partial(hook, state) for hook in record_hooks]
    state.sinks = [
        writer.write,
        reconciler,
        *probes,
        FirstBadRequest(errors),
        RecordCounter(protocol),
        *hooks,
    ]
    log.info("llmload: model %s, rungs %s, records in %s", model, list(config.rungs), path)
    return state


def sent_endpoint(env: Any, config: SweepConfig) -> str:
    """The endpoint the users send to: a user class may pin one (ChatUser), whatever the file says;
    mixed: the file's (checked later)."""
    sent = {getattr(u, "endpoint", None) or config.endpoint for u in env.user_classes or ()}
    return sent.pop() if len(sent) == 1 else config.endpoint


def calibration_record(request: dict[str, Any], number: int, run_id: str) -> RequestRecord:
    """A generation request sent before the ladder (the per-chunk usage probe, a calibration's
    one-token request) as a record of phase "calibration": in no rung's figures, but the server's
    counters count it, so the records do too."""
    usage = request["usage"] if isinstance(request["usage"], dict) else {}
    return new_record(
        request_id=request.get("id") or f"calibration-{number}",
        rung=WARMUP_RUNG,
        users=1,
        phase=CALIBRATION_PHASE,
        endpoint=request["endpoint"],
        stream=request["stream"],
        max_tokens=request["max_tokens"],
        t_start=request["t_start"],
        t_end=request["t_end"],
        prompt_tokens=usage.get("prompt_tokens"),
        output_tokens=int(usage.get("completion_tokens") or 0),
        outcome=OUTCOME_OK if usage else "no_usage",
        worker="master",
        run_id=run_id,
    )


def prepare_workload(
    env: Any, config: SweepConfig, model: str, ctx: Any, sent: list[dict[str, Any]] | None = None
) -> tuple[int | None, list[str] | None, int | None]:
    """Check the prompt file; for synthetic prompts, traces and sessions, calibrate on the
    server (llmload.loadgen.workload.prompts): the words per synthetic prompt (None without
    prompt_tokens), the words that cost one token each, and the tokens every prompt costs. The
    generation requests the calibration sends are appended to `sent`."""
    if config.prompt_file is not None:
        load_prompt_file(config.prompt_file, config.prompt_format)
    if config.prompt_tokens is None and config.mode != "trace" and config.sessions is None:
        return None, None, None
    endpoint = sent_endpoint(env, config)
    headers = auth_headers(api_key(env.parsed_options))
    cal = calibrate_prompts(ServerTokenCounts(env.host or "", model, endpoint == "chat", headers, ctx, sent))
    if config.prompt_tokens is None:
        log.info(
            "llmload: %d one-token words (by %s), %d tokens every prompt costs (by %s)",
            len(cal.vocab),
            cal.method,
            cal.overhead,
            cal.overhead_method,
        )
        return None, list(cal.vocab), cal.overhead
    lengths = as_lengths(config.prompt_tokens)
    cal.words_for(lengths.low, config.tagged_prompts)  # the shortest drawn prompt is possible
    words = cal.words_for(lengths.high, config.tagged_prompts)  # the longest (the pool's)
    log.info(
        "llmload: prompt_tokens %s -> %d one-token words (the longest) + %d tokens every prompt "
        "costs (%d one-token words found by %s, overhead by %s)",
        lengths.describe(),
        words,
        cal.overhead,
        len(cal.vocab),
        cal.method,
        cal.overhead_method,
    )
    return words, list(cal.vocab), cal.overhead
