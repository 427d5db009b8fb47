#!/usr/bin/env python3
"""The load generator's own cost and timing error, against the simulator's ground truth.

    .venv/bin/python benchmarks/overhead.py [--streams 16,64,256] [--tokens-per-chunk 1,4]
        [--duration 3] [--step-ms 1] [--repeats 3] [--floor] [--bare] [--no-aiohttp]

One locust process (llmload's CompletionsUser, time-based rungs, one rung per stream count) and
then, for comparison, the minimal asyncio + aiohttp client (benchmarks/aiohttp_client.py) run the
same workload: N concurrent streams of `max_tokens`-token completions against a simulator with a
near-zero step time (1 ms; accept length k: k tokens per SSE chunk, as speculative decoding sends
them, up to 1,000 chunks/s per stream), so the clients, not the server, are the bottleneck at
high N. Both clients run against the same simulator, one after the other, in each repeat. Per
tokens-per-chunk and stream count it prints:

- tok/s: streamed output tokens per second of the rung's wall time;
- cpu_%: the client process's CPU time over the rung's window (polled every 50 ms) / wall;
- cpu_s/1k_tok: client CPU seconds per 1,000 streamed tokens;
- sim_cpu_%: the simulator's CPU over the same window (near 100 %: the server is the limit);
- chunk err p50/p99/max ms: per chunk of every request of the rung, from its start on (the first
  wave of sends included), the time the client gave it minus when the simulator wrote it (truth
  log);
- first err p50/p99/max ms: the same for each request's first chunk only: the TTFT error;
- itl_err p50/p99 ms: per gap between chunks, the client's gap minus the server's;
- marked: llmload only, the share of chunks whose time the client marked uncertain (several
  chunks taken by one read: `uncertain_chunks`), and the largest lateness of a chunk not marked
  (ms; early chunks are left out: their error is the truth log's, see `figures`);
- start ms: llmload only, the users' first sends of the rung, the last one's lag after the
  rung's go (the ladder's start promise).

With `--baseline DIR` (a checkout of another commit, e.g. `git worktree add --detach DIR REV`),
that commit's llmload runs the same rungs in each repeat, before this one's in odd repeats and
after it in even ones, as client `baseline`: a before/after comparison within one run, on one simulator.

With `--floor`, a third client runs in each repeat: llmload with the per-read Python cut to the
`recvmsg` and the HTTP framing (benchmarks/read_floor_locustfile.py), so the table shows how much of
a token's CPU the per-read Python is and what is left without it (CPU only: its times are not
per chunk).

With `--bare`, another client runs in each repeat: a plain Locust user that does the least a
streamed request needs (one prebuilt write, a `recv` per readiness until the message's end, the
request event; benchmarks/bare_locustfile.py), one locust process per stream count: the floor
of Locust, gevent and the kernel under llmload's cost (CPU only, tokens from the truth log).

With `--no-chunk-usage`, llmload also runs in each repeat without usage on every chunk
(`continuous_usage: false`), as client `nousage`, the two in turn first: what the per-chunk usage
that a run asks for by default where the server honours it (the simulator does) costs the client.

Figures are the median over `--repeats` runs. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import psutil

from llmload.analysis.run.health import timing_errors
from llmload.core.files.records import read_records
from llmload.core.stats import percentile
from llmload.runner.sweep_run import LOCUSTFILES, locust_command
from llmload.servers.simulator import SimulatorProcess
from llmload.sim.truth import load_truth

SIM = {"per_seq_ms": 0, "max_num_seqs": 1024}  # and base_ms (--step-ms), accept_len (tokens per chunk)
AIOHTTP_CLIENT = Path(__file__).resolve().parent / "aiohttp_client.py"
BARE_LOCUSTFILE = Path(__file__).resolve().parent / "bare_locustfile.py"
UNTIMED = ("floor", "bare")  # clients whose records count neither tokens nor chunk times
FLOOR_LOCUSTFILE = Path(__file__).resolve().parent / "read_floor_locustfile.py"
POLL_S = 0.05


class CpuTrack:
    """Polls a process's CPU time (user + system, children excluded) from a thread."""

    def __init__(self, pid: int) -> None:
        self._proc = psutil.Process(pid)
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                times = self._proc.cpu_times()
            except psutil.Error:
                return
            self.samples.append((time.time(), times.user + times.system))
            self._stop.wait(POLL_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def cpu_at(self, t: float) -> float:
        """CPU seconds used by time t (linear between polls)."""
        before = [s for s in self.samples if s[0] <= t] or self.samples[:1]
        after = [s for s in self.samples if s[0] >= t] or self.samples[-1:]
        (t0, c0), (t1, c1) = before[-1], after[0]
        return c0 if t1 == t0 else c0 + (c1 - c0) * (t - t0) / (t1 - t0)

    def between(self, start: float, end: float) -> float:
        return self.cpu_at(end) - self.cpu_at(start)


@dataclass(slots=True)
class Figures:
    """One client at one stream count in one repeat."""

    tok_s: float
    cpu_pct: float
    cpu_s_per_1k: float
    sim_cpu_pct: float
    delay_p50: float
    delay_p99: float
    delay_max: float
    first_p50: float
    first_p99: float
    first_max: float
    itl_p50: float
    itl_p99: float
    marked_pct: float  # of the chunks, marked uncertain by the client (nan: a client that cannot)
    unmarked_max: float  # the largest lateness of a chunk not marked
    start_ms: float  # the last user's first send after the rung's go (nan: not known)


@dataclass(frozen=True, slots=True)
class Timed:
    """One request as a client saw it: what the figures need."""

    request_id: str
    t_start: float
    t_end: float
    chunk_times: Sequence[float]  # s after t_start
    output_tokens: int
    uncertain: frozenset[int] | None = None  # chunk indices the client marked (None: it cannot)


def _ms_percentiles(values: Sequence[float]) -> tuple[float, float, float]:
    ms = [v * 1000.0 for v in values] or [math.nan]
    return percentile(ms, 50.0), percentile(ms, 99.0), max(ms)


def figures(
    requests: Sequence[Timed],
    truth: dict[str, dict[str, Any]],
    client: CpuTrack,
    sim: CpuTrack,
    timed: bool = True,
    start_ms: float = math.nan,
) -> Figures:
    """`timed`: False for the floor, whose records count neither tokens nor chunk times right:
    its tokens are the truth log's and its timing errors nan."""
    start, end = min(r.t_start for r in requests), max(r.t_end for r in requests)
    wall = end - start
    tokens = sum(r.output_tokens if timed else truth[r.request_id]["completion_tokens"] for r in requests)
    cpu = client.between(start, end)
    delays: list[float] = []
    first: list[float] = []
    itl: list[float] = []
    marked, unmarked_max, can_mark = 0, 0.0, False
    for r in requests if timed else ():
        own, gaps = timing_errors([(r.request_id, r.t_start, r.chunk_times)], truth)
        if not own:
            continue
        delays += own
        first.append(own[0])
        itl += gaps
        if r.uncertain is not None:
            can_mark = True
            marked += len(r.uncertain)
            # late only: a kernel stamp cannot precede the server's send, so a chunk timed early
            # shows how late the simulator read its clock after the write, not a client error
            unmarked = [d for i, d in enumerate(own) if i not in r.uncertain]
            unmarked_max = max([unmarked_max, *unmarked])
    d50, d99, dmax = _ms_percentiles(delays)
    f50, f99, fmax = _ms_percentiles(first)
    itl_ms = [d * 1000.0 for d in itl] or [0.0 if timed else math.nan]
    return Figures(
        tok_s=tokens / wall,
        cpu_pct=100.0 * cpu / wall,
        cpu_s_per_1k=1000.0 * cpu / tokens,
        sim_cpu_pct=100.0 * sim.between(start, end) / wall,
        delay_p50=d50,
        delay_p99=d99,
        delay_max=dmax,
        first_p50=f50,
        first_p99=f99,
        first_max=fmax,
        itl_p50=percentile(itl_ms, 50.0),
        itl_p99=percentile(itl_ms, 99.0),
        marked_pct=100.0 * marked / len(delays) if can_mark and delays else math.nan,
        unmarked_max=1000.0 * unmarked_max if can_mark else math.nan,
        start_ms=start_ms,
    )


def run_tracked(
    cmd: list[str],
    log: Path,
    timeout: float,
    ok_codes: tuple[int, ...] = (0,),
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> CpuTrack:
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        track = CpuTrack(proc.pid)
        try:
            proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            track.stop()
    if proc.returncode not in ok_codes:
        raise RuntimeError(f"{cmd[:4]} exited {proc.returncode}; see {log}")
    return track


def run_locust(
    url: str,
    streams: Sequence[int],
    args: argparse.Namespace,
    work: Path,
    locustfile: Path,
    name: str,
    code: Path | None = None,
    ladder: Path | None = None,
):
    """`code`: the checkout whose llmload (package and locustfile) runs; None: this one. `ladder`:
    a ladder file of settings the flags do not set."""
    prefix = work / name
    extra = ["--rungs", ",".join(map(str, streams)), "--rung-duration", str(args.duration)]
    extra += ["--ladder", str(ladder)] if ladder is not None else []
    extra += ["--warmup-requests", "0", "--max-tokens", str(args.max_tokens), "--loglevel", "WARNING"]
    timeout = 60 + len(streams) * (args.duration + 30)
    # the floor's records fail llmload's token reconciliation (exit 3): its tokens come from the truth log
    ok_codes = (0, 3) if locustfile == FLOOR_LOCUSTFILE else (0,)
    env = None
    if code is not None:
        locustfile = code / locustfile.relative_to(LOCUSTFILES["completions"].parents[2])
        env = checkout_env(code)
    track = run_tracked(
        locust_command(url, prefix, locustfile, extra), work / f"{name}.log", timeout, ok_codes, env, code
    )
    records, _ = read_records(Path(f"{prefix}_records.jsonl"))
    by_streams: dict[int, list[Timed]] = {}
    for r in records:
        if r.ok and r.phase == "measure":
            marked = frozenset(r.uncertain_chunks or ())
            by_streams.setdefault(r.users, []).append(
                Timed(r.request_id, r.t_start, r.t_end, r.chunk_times, r.output_tokens, marked)
            )
    return by_streams, track, start_lags(Path(f"{prefix}_run.json"))


def checkout_env(code: Path) -> dict[str, str]:
    """The environment that makes `python -m locust`, started in `code`, import that checkout's
    llmload. `python -m` puts the working directory first on sys.path, ahead of PYTHONPATH, so
    the process must start in the checkout (run_tracked's cwd): started here, it would import this
    checkout's llmload and the "baseline" would be this code. Checked, not assumed."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    where = subprocess.run(
        [sys.executable, "-c", "import llmload; print(llmload.__file__)"],  # sys.path as with -m
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(where).resolve().is_relative_to(code.resolve()):
        raise RuntimeError(f"--baseline {code}: its python imports llmload from {where}, not from it")
    return env


def start_lags(run_file: Path) -> dict[int, float]:
    """users -> the last user's first send after the rung's go, ms (the run file's `start`)."""
    try:
        stages = json.loads(run_file.read_text())["stages"]
    except (OSError, ValueError, KeyError):
        return {}
    return {s["users"]: s["start"]["last_ms"] for s in stages if s.get("start") and s["rung"] >= 0}


def run_aiohttp(url: str, n: int, args: argparse.Namespace, work: Path):
    out = work / f"aiohttp_{n}.jsonl"
    cmd = [sys.executable, str(AIOHTTP_CLIENT), "--url", url, "--streams", str(n)]
    cmd += ["--duration", str(args.duration), "--max-tokens", str(args.max_tokens), "--out", str(out)]
    track = run_tracked(cmd, work / f"aiohttp_{n}.log", timeout=args.duration + 120)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return [
        Timed(r["request_id"], r["t_start"], r["t_end"], r["chunk_times"], r["output_tokens"]) for r in rows
    ], track


def run_bare(url: str, n: int, args: argparse.Namespace, work: Path):
    out = work / f"bare_{n}.jsonl"
    cmd = [sys.executable, "-m", "locust", "-f", str(BARE_LOCUSTFILE), "--headless", "--only-summary"]
    cmd += ["-u", str(n), "-r", str(n), "-t", f"{args.duration:g}s", "--host", url, "--loglevel", "WARNING"]
    cmd += ["--max-tokens", str(args.max_tokens), "--bare-out", str(out)]
    track = run_tracked(cmd, work / f"bare_{n}.log", timeout=args.duration + 120)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return [Timed(r["request_id"], r["t_start"], r["t_end"], [], 0) for r in rows], track


def one_repeat(
    args: argparse.Namespace, work: Path, per_chunk: int, repeat: int
) -> dict[tuple[str, int], Figures]:
    out: dict[tuple[str, int], Figures] = {}
    truth_log = work / "sim_truth.jsonl"
    sim_log = work / "sim.log"
    engine = {**SIM, "max_num_seqs": args.max_num_seqs, "base_ms": args.step_ms, "accept_len": per_chunk}
    with SimulatorProcess(truth_log=truth_log, log_path=sim_log, **engine) as server:
        sim = CpuTrack(server.pid)
        runs: list[tuple[str, int, list[Timed], CpuTrack, float]] = []
        llmloads: list[tuple[str, Path | None, Path | None]] = [("locust", None, None)]
        if args.baseline is not None:  # the two in turn first, so neither always has the fresh simulator
            llmloads.insert(repeat % 2, ("baseline", args.baseline, None))
        if args.no_chunk_usage:
            ladder = work / "no_chunk_usage.yaml"
            ladder.write_text("continuous_usage: false\n")
            llmloads.insert(repeat % 2, ("nousage", None, ladder))
        for name, code, ladder_file in llmloads:
            by_streams, track, lags = run_locust(
                server.url, args.streams, args, work, LOCUSTFILES["completions"], name, code, ladder_file
            )
            runs += [(name, n, by_streams[n], track, lags.get(n, math.nan)) for n in args.streams]
        if args.floor:
            by_streams, track, _ = run_locust(server.url, args.streams, args, work, FLOOR_LOCUSTFILE, "floor")
            runs += [("floor", n, by_streams[n], track, math.nan) for n in args.streams]
        for n in args.streams if args.bare else ():
            requests, btrack = run_bare(server.url, n, args, work)
            runs.append(("bare", n, requests, btrack, math.nan))
        for n in args.streams if args.aiohttp else ():
            requests, atrack = run_aiohttp(server.url, n, args, work)
            runs.append(("aiohttp", n, requests, atrack, math.nan))
        time.sleep(0.2)  # the truth log's last lines
        sim.stop()
    truth, _ = load_truth(truth_log)
    for client, n, requests, ctrack, lag in runs:
        out[(client, n)] = figures(requests, truth, ctrack, sim, timed=client not in UNTIMED, start_ms=lag)
    return out


def machine() -> str:
    model = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}; load average before the run: {load}"
    )


def _median_figures(results: Iterable[Figures]) -> Figures:
    items = list(results)
    return Figures(*(median(getattr(f, name) for f in items) for name in Figures.__slots__))


def report(
    per_repeat: list[dict[tuple[str, int, int], Figures]],
    chunkings: Sequence[int],
    streams: Sequence[int],
    out: Callable[[str], None],
) -> None:
    med = {key: _median_figures(r[key] for r in per_repeat) for key in per_repeat[0]}
    clients = ("locust", "nousage", "baseline", "floor", "bare", "aiohttp")
    out(
        "client    tok/chunk  streams     tok/s  cpu_%  cpu_s/1k_tok  ratio  sim_cpu_%  "
        "chunk_err_p50/p99/max_ms  first_err_p50/p99/max_ms  itl_err_p50/p99_ms  marked_%  "
        "unmarked_max_ms  start_ms"
    )
    for client in clients:
        if not any(key[0] == client for key in med):
            continue
        for k in chunkings:
            for n in streams:
                f = med[(client, k, n)]
                base = med.get(("aiohttp", k, n))
                ratio = f.cpu_s_per_1k / base.cpu_s_per_1k if base is not None else math.nan
                out(
                    f"{client:<8}  {k:>9}  {n:>7}  {f.tok_s:>8.0f}  {f.cpu_pct:>5.0f}  "
                    f"{f.cpu_s_per_1k:>12.4f}  {ratio:>5.2f}  {f.sim_cpu_pct:>9.0f}  "
                    f"{f.delay_p50:>6.2f} / {f.delay_p99:>6.2f} / {f.delay_max:<7.2f}  "
                    f"{f.first_p50:>6.2f} / {f.first_p99:>6.2f} / {f.first_max:<7.2f}  "
                    f"{f.itl_p50:>6.2f} / {f.itl_p99:<6.2f}  {f.marked_pct:>8.3f}  {f.unmarked_max:>15.2f}  "
                    f"{f.start_ms:>8.1f}"
                )
    out("")
    out("cpu_s/1k_tok of each repeat, in run order (the spread a comparison must exceed):")
    for key in sorted(med, key=lambda k: (clients.index(k[0]), k[1], k[2])):
        values = "  ".join(f"{r[key].cpu_s_per_1k:.4f}" for r in per_repeat)
        out(f"  {key[0]:<8}  {key[1]:>2} tok/chunk  {key[2]:>5} streams:  {values}")
    out("")
    if any(key[0] == "aiohttp" for key in med):
        out("ratio: the client's CPU per token over the asyncio client's, medians of the same repeats")
    if any(key[0] == "floor" for key in med):
        out(
            "floor: llmload with the per-read Python cut to recvmsg + HTTP framing (each read's SSE lines "
            "dropped unparsed; benchmarks/read_floor_locustfile.py): CPU only, tokens from the truth log"
        )
    if any(key[0] == "bare" for key in med):
        out(
            "bare: a plain Locust user doing the least a streamed request needs "
            "(benchmarks/bare_locustfile.py): the floor of Locust, gevent and the kernel; CPU only, "
            "tokens from the truth log"
        )
    if any(f.sim_cpu_pct > 90 for f in med.values()):
        out("note: the simulator used > 90 % of a core somewhere: tok/s is the machine's limit there")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=lambda s: [int(x) for x in s.split(",")], default=[16, 64, 256])
    p.add_argument(
        "--tokens-per-chunk", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4], dest="chunking"
    )
    p.add_argument("--duration", type=float, default=3.0, help="seconds per stream count")
    p.add_argument("--step-ms", type=float, default=1.0, help="the simulator's step: the time between chunks")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-num-seqs", type=int, default=SIM["max_num_seqs"], help="the simulator's batch cap")
    p.add_argument(
        "--floor",
        action="store_true",
        help="also run llmload with its per-read Python cut to the floor (read_floor_locustfile.py)",
    )
    p.add_argument(
        "--bare",
        action="store_true",
        help="also run a plain Locust user doing the least a streamed request needs (bare_locustfile.py)",
    )
    p.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="also run the llmload of this checkout (another commit) in each repeat, the two in turn first",
    )
    p.add_argument(
        "--no-aiohttp", action="store_false", dest="aiohttp", help="skip the asyncio + aiohttp yardstick"
    )
    p.add_argument(
        "--no-chunk-usage",
        action="store_true",
        help="also run llmload without usage on every chunk (continuous_usage: false), as client nousage",
    )
    p.add_argument("--keep", type=Path, default=None, help="keep the runs' files in this directory")
    args = p.parse_args(argv)
    if args.baseline is not None:
        args.baseline = args.baseline.resolve()
        checkout_env(args.baseline)  # before any run: a baseline that is this code is no baseline
    print(f"machine: {machine()}", flush=True)
    print(
        f"simulator: {SIM}, step {args.step_ms:g} ms; {args.max_tokens} tokens per request; "
        f"{args.duration:g} s per stream count"
    )
    per_repeat: list[dict[tuple[str, int, int], Figures]] = []
    with tempfile.TemporaryDirectory(prefix="llmload-overhead-") as tmp:
        root = (args.keep or Path(tmp)).resolve()  # absolute: a baseline runs in its checkout
        for i in range(args.repeats):
            figures_of_repeat = {}
            for k in args.chunking:
                work = root / f"repeat{i}-chunk{k}"
                work.mkdir(parents=True, exist_ok=True)
                for (client, n), f in one_repeat(args, work, k, i).items():
                    figures_of_repeat[(client, k, n)] = f
            per_repeat.append(figures_of_repeat)
            print(f"repeat {i + 1}/{args.repeats} done", file=sys.stderr, flush=True)
    print(f"median of {args.repeats} repeats:")
    report(per_repeat, args.chunking, args.streams, print)
    return 0


if __name__ == "__main__":
    sys.exit(main())
