"""End to end: a real Prometheus (Debian's `prometheus`, started here on a free loopback port with
its own config and storage) scrapes llmload's live metrics (`--metrics-port`) every second during
a sweep with `--processes 2` (records reach the master from the workers) and a soak, both on the
simulator, which it scrapes too (vLLM's and DCGM's series). Checked through its query API against
the run's own files: each rung's token counter at the first scrape after the rung finished equals
the table's tokens; after the run every counter equals the records' sums exactly; `increase()`
over a window matches the tokens of the records that ended in it within one scrape interval's
tokens; the master's `/metrics`, fetched during a rung, shows that rung's counters; and every
query of the Grafana dashboard in deploy/grafana evaluates, on data. Without `prometheus` the
tests skip with one line (`.ci/run` installs it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures.paths import REPO

from llmload.analysis.run.postprocess import load_run
from llmload.core.files.records import RequestRecord, read_records
from llmload.runner.sweep_run import SweepRun, run_sweep, target
from llmload.servers.process import LOOPBACK, free_port

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

SCRAPE_S = 1.0
RUN_TIMEOUT_S = 120.0
READY_TIMEOUT_S = 30.0
SIM = {"base_ms": 10, "per_seq_ms": 1}
DASHBOARD = REPO / "deploy" / "grafana" / "llmload-dashboard.json"


@dataclass
class Prometheus:
    url: str

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr} | ({} if at is None else {"time": f"{at:.3f}"})
        with urllib.request.urlopen(
            f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=10
        ) as r:
            answer = json.loads(r.read())
        assert answer["status"] == "success", (expr, answer)
        return answer["data"]["result"]  # type: ignore[no-any-return]


def start_prometheus(
    tmp: Path, targets: dict[str, tuple[str, str]]
) -> tuple[subprocess.Popen[bytes], Prometheus]:
    """Prometheus on a free loopback port scraping `targets` (job -> (host:port, path)) every second."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("Debian's prometheus is not installed (apt-get install prometheus; .ci/run does)")
    jobs = [
        {"job_name": job, "metrics_path": path, "static_configs": [{"targets": [address]}]}
        for job, (address, path) in targets.items()
    ]
    config = {"global": {"scrape_interval": f"{SCRAPE_S:g}s", "scrape_timeout": "1s"}, "scrape_configs": jobs}
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    command = [binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
               f"--web.listen-address={LOOPBACK}:{port}"]  # fmt: skip
    with (tmp / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://{LOOPBACK}:{port}"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as answer:
                if answer.status == 200:
                    return proc, Prometheus(url)
        except OSError:
            time.sleep(0.1)
    stop(proc)
    raise AssertionError("prometheus was not ready: " + (tmp / "prometheus.log").read_text()[-2000:])


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


class Poller:
    """GETs the master's /metrics every 0.25 s while a run is in progress (as `curl` would)."""

    def __init__(self, port: int) -> None:
        self.url = f"http://{LOOPBACK}:{port}/metrics"
        self.texts: list[tuple[float, str]] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self.done.wait(0.25):
            try:
                with urllib.request.urlopen(self.url, timeout=2) as answer:
                    self.texts.append((time.time(), answer.read().decode()))
            except OSError:
                continue


@dataclass
class Watched:
    run: SweepRun
    prometheus: Prometheus
    fetched: list[tuple[float, str]]  # (when, the text) of each GET of /metrics during the run


def watched_run(tmp: Path, locust_args: list[str]) -> Iterator[Watched]:
    port = free_port()
    with target(None, tmp, SIM) as (url, _):
        sim = urllib.parse.urlsplit(url).netloc
        targets = {"llmload": (f"{LOOPBACK}:{port}", "/metrics"), "vllm": (sim, "/metrics"),
                   "dcgm": (sim, "/gpu/metrics")}  # fmt: skip
        proc, prometheus = start_prometheus(tmp, targets)
        poller = Poller(port)
        poller.thread.start()
        try:
            args = [*locust_args, "--metrics-port", str(port)]
            run = run_sweep(host=url, run_dir=tmp / "run", locust_args=args, timeout=RUN_TIMEOUT_S)
            poller.done.set()
            poller.thread.join(timeout=5)
            assert run.returncode == 0, run.log.read_text()[-3000:]
            yield Watched(run, prometheus, poller.texts)
        finally:
            poller.done.set()
            stop(proc)


def soak_yaml(path: Path) -> Path:
    """config/soak.yaml cut to a 6-second soak of 4 users, 2-second windows, thresholds it meets."""
    raw = yaml.safe_load((REPO / "config" / "soak.yaml").read_text())
    raw.update(duration=6, max_tokens=64, rungs=[4])
    raw["soak"] = {"window_s": 2, "settle_windows": 0, "min_agg_tok_s": 1}
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Iterator[Watched]:
    """Two rungs of 3 s on a master and two workers."""
    args = ["--processes", "2", "--rungs", "2,4", "--rung-duration", "3", "--max-tokens", "64"]
    yield from watched_run(tmp_path_factory.mktemp("sweep"), args)


@pytest.fixture(scope="module")
def soak(tmp_path_factory) -> Iterator[Watched]:
    tmp = tmp_path_factory.mktemp("soak")
    yield from watched_run(tmp, ["--ladder", str(soak_yaml(tmp / "soak.yaml"))])


RUNS = ["sweep", "soak"]


def records_of(watched: Watched) -> list[RequestRecord]:
    records, skipped = read_records(watched.run.records)
    assert skipped == []
    return records


def run_file(watched: Watched) -> dict[str, Any]:
    return json.loads(watched.run.files.run.read_text())  # type: ignore[no-any-return]


def series(watched: Watched, expr: str) -> dict[tuple[str, ...], list[tuple[float, float]]]:
    """Every scraped sample of `expr` (a selector) in the last 10 minutes, by its labels' values
    (rung, phase, outcome where present)."""
    found = {}
    for result in watched.prometheus.query(f"{expr}[10m]"):
        labels = result["metric"]
        key = tuple(labels.get(k, "") for k in ("rung", "phase", "outcome"))
        found[key] = [(float(t), float(v)) for t, v in result["values"]]
    return found


@pytest.mark.parametrize("name", RUNS)
def test_each_rungs_tokens_at_the_first_scrape_after_it_equal_the_table(name, request):
    watched = request.getfixturevalue(name)
    info = run_file(watched)
    run_id = info["run_id"]
    rows = {row.rung: row for row in load_run(watched.run.prefix).rows}
    tokens = series(watched, f'llmload_output_tokens_total{{run="{run_id}",phase="measure"}}')
    measured = [s for s in info["stages"] if s["phase"] == "measure"]
    assert len(measured) == (2 if name == "sweep" else 1) and len(rows) == len(measured)
    for stage in measured:
        samples = tokens[(str(stage["rung"]), "measure", "")]
        after = [v for t, v in samples if t >= stage["finished"]]
        assert after, (stage, samples[-3:])
        assert after[0] == rows[stage["rung"]].tokens > 0


@pytest.mark.parametrize("name", RUNS)
def test_after_the_run_every_counter_equals_the_records_sums(name, request):
    """The last scrape (the master waits for one after the end) against the records file."""
    watched = request.getfixturevalue(name)
    run_id = run_file(watched)["run_id"]
    records = records_of(watched)
    tokens = series(watched, f'llmload_output_tokens_total{{run="{run_id}"}}')
    requests = series(watched, f'llmload_requests_total{{run="{run_id}"}}')
    want_tokens: Counter[tuple[str, ...]] = Counter()
    for rec in records:
        if rec.ok:
            want_tokens[(str(rec.rung), rec.phase, "")] += rec.output_tokens
    want_requests = Counter((str(rec.rung), rec.phase, rec.outcome) for rec in records)
    assert {k: v[-1][1] for k, v in tokens.items()} == dict(want_tokens)
    assert {k: v[-1][1] for k, v in requests.items()} == dict(want_requests)
    ttft = series(watched, f'llmload_ttft_seconds_count{{run="{run_id}"}}')
    assert sum(v[-1][1] for v in ttft.values()) == sum(1 for r in records if r.ok and r.ttft_s is not None)


@pytest.mark.parametrize("name", RUNS)
def test_increase_over_a_window_matches_the_records_within_one_scrape(name, request):
    """increase() over 3 s at each second of the run against the tokens of the records that ended
    in those 3 s, within the most tokens any one scrape interval of the run held."""
    watched = request.getfixturevalue(name)
    run_id = run_file(watched)["run_id"]
    done = sorted((r.t_end, r.output_tokens) for r in records_of(watched) if r.ok)
    per_interval = max(sum(n for t, n in done if start <= t < start + SCRAPE_S) for start, _ in done)
    window = 3.0
    samples = series(watched, f'llmload_output_tokens_total{{run="{run_id}"}}')
    scrapes = sorted({t for values in samples.values() for t, _ in values})
    checked = 0
    for at in scrapes[int(window) + 1 : -1]:
        got = watched.prometheus.query(
            f'sum(increase(llmload_output_tokens_total{{run="{run_id}"}}[{window:g}s]))', at
        )
        want = sum(n for t, n in done if at - window < t <= at)
        assert abs(float(got[0]["value"][1]) - want) <= per_interval, (at, got, want, per_interval)
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize("name", RUNS)
def test_the_masters_metrics_during_a_rung_show_its_counters(name, request):
    watched = request.getfixturevalue(name)
    info = run_file(watched)
    run_id = info["run_id"]
    for stage in (s for s in info["stages"] if s["phase"] == "measure"):
        during = [text for at, text in watched.fetched if stage["started"] + 0.5 < at < stage["finished"]]
        assert during, stage
        text = during[-1]
        tokens = re.search(
            rf'llmload_output_tokens_total{{phase="measure",run="{run_id}",rung="{stage["rung"]}"}} (\S+)',
            text,
        )
        assert tokens is not None and float(tokens.group(1)) > 0, text[:3000]
        assert f'llmload_rung{{run="{run_id}"}} {float(stage["rung"])}' in text
        assert f'llmload_rung_users{{run="{run_id}"}} {float(stage["users"])}' in text
        assert "llmload_client_cpu_percent{" in text and "llmload_client_loop_lag_seconds{" in text


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]


def test_every_dashboard_query_evaluates_on_data(sweep):
    """Grafana's variables as Grafana would fill them (every run, a rate window of 5 scrapes), at
    the middle of the last rung, while every series is live."""
    last = run_file(sweep)["stages"][-1]
    at = (last["started"] + last["finished"]) / 2
    for expr in dashboard_queries():
        filled = expr.replace("$__rate_interval", "5s").replace("$run", ".*")
        assert sweep.prometheus.query(filled, at), expr
