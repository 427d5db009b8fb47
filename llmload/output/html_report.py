"""A run's report: PNG plots and one self-contained HTML page (plots inlined as base64).

The page holds, from the run's own files: the run summary (target, model, stage times), the
decision of `llmload twin` when there is one (a table: `--decision`, or a decision.json beside
the run's files), the sweep table, the plots, the latency and rates tables, a session run's
tables (per turn and per session), the server metrics
per rung (when they were scraped), every cross-check warning, the run configuration and the
environment recorded at run time (`<prefix>_env.json`: server version, package versions,
generator CPU, Python). Tables are the same text `llmload table` prints. Files go beside the
run's prefix (or to `out_dir`): `<stem>_report.html`, `<stem>_throughput.png`,
`<stem>_latency.png`, `<stem>_pareto.png`.
"""

from __future__ import annotations

import base64
import html
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from llmload.analysis.run.postprocess import RunResult, load_run
from llmload.analysis.run.records_pass import StartChild
from llmload.analysis.run.server_metrics import ServerMetrics, load_server_metrics
from llmload.analysis.twin.decision import Decision
from llmload.core.config import ConfigError
from llmload.core.files.run_files import DECISION, RunFiles
from llmload.core.run_environment import read_environment
from llmload.output.gpu_report import gpu_extra
from llmload.output.plots import write_plots
from llmload.output.run_table import session_tables
from llmload.output.server_report import render_server_metrics
from llmload.output.table import render, render_metrics
from llmload.output.twin_report import DECISION_STYLE, decision_table_html


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _kv_table(items: Mapping[str, Any]) -> str:
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in items.items()
    )
    return f"<table class='kv'>{rows}</table>"


def _pre(text: str) -> str:
    return f"<pre>{html.escape(text)}</pre>"


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>"


def summary_items(result: RunResult, env: Mapping[str, Any] | None) -> dict[str, Any]:
    info = result.run_info
    stages = info.stages if info else ()
    server = (env or {}).get("server_version")
    return {
        "target": (info.host if info else None) or (env or {}).get("target", "-"),
        "model": info.model or "-" if info else "-",
        "server version": f"{server['version']} (GET {server['endpoint']})" if server else "not reported",
        "rungs": ", ".join(str(r.users) for r in result.rungs),
        "started": _when(stages[0].started if stages else None),
        "finished": _when(stages[-1].finished if stages else None),
        "run complete": "unknown" if info is None or info.finished is None else info.finished,
    }


def environment_items(env: Mapping[str, Any] | None) -> dict[str, Any]:
    if not env:
        return {"environment": "not recorded (no _env.json: run made before llmload recorded it)"}
    items = {f"{name} version": v for name, v in env.get("packages", {}).items()}
    items |= {
        "python": env.get("python", "-"),
        "generator CPU": f"{env.get('cpu_model', '-')} x {env.get('cpu_count', '-')}",
        "platform": env.get("platform", "-"),
        "recorded": _when(env.get("recorded_at")),
    }
    return items


STYLE = (
    "body{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em}"
    "pre{background:#f6f6f6;padding:.8em;overflow-x:auto;font-size:12px}"
    "img{max-width:100%;display:block;margin:1em 0}"
    "table.kv th{text-align:left;padding-right:2em;font-weight:normal;color:#555}"
    ".warn{color:#a40}" + DECISION_STYLE
)


def render_html(
    result: RunResult,
    plots: Mapping[str, Path],
    server: ServerMetrics | None,
    env: Mapping[str, Any] | None,
    decision: Decision | None = None,
) -> str:
    """The report page; plots are inlined, so the file stands alone."""
    name = Path(result.prefix).name
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>llmload report: {html.escape(name)}</title><style>{STYLE}</style></head><body>",
        f"<h1>llmload report: {html.escape(name)}</h1>",
        _kv_table(summary_items(result, env)),
    ]
    if decision is not None:
        parts += ["<h2>Decision</h2>", decision_table_html(decision)]
    parts += [
        "<h2>Sweep</h2>",
        _pre(render(result.rows, "table")),
        "<h2>Plots</h2>",
        *(_img(path, key) for key, path in plots.items()),
        "<h2>Latency and rates</h2>",
        _pre(render_metrics(result.metrics or [], "table")),
    ]
    if result.sessions:
        parts += ["<h2>Sessions</h2>", _pre(session_tables(result))]
    if server is not None:
        parts += ["<h2>Server metrics</h2>", _pre(render_server_metrics(server, "table"))]
    if result.gpu is not None:  # asked for (gpu_metrics): its table and its notes (why none, if none)
        gpu = "\n".join(filter(None, [gpu_extra(result.gpu, result.rows).table("table"), *result.gpu.notes]))
        parts += ["<h2>GPU power and energy</h2>", _pre(gpu)]
    warnings = [*result.warnings, *(server.warnings if server else [])]
    if warnings:
        items = "".join(f"<li>{html.escape(w)}</li>" for w in warnings)
        parts += ["<h2>Warnings</h2>", f"<ul class='warn'>{items}</ul>"]
    config = dict(result.run_info.config) if result.run_info else None
    parts += [
        "<h2>Configuration</h2>",
        _pre(yaml.safe_dump(config, sort_keys=False) if config else "not recorded"),
    ]
    parts += ["<h2>Environment</h2>", _kv_table(environment_items(env)), "</body></html>"]
    return "\n".join(parts)


def read_decision(path: Path, what: str) -> Decision:
    """`llmload twin`'s decision.json at `path` (or in the folder `path`); ConfigError (one line,
    naming `what` and the file) when it cannot be read or is not a decision."""
    file = path / DECISION if path.is_dir() else path
    try:
        doc = json.loads(file.read_bytes())
        return Decision.from_dict(doc)
    except FileNotFoundError:
        raise ConfigError(
            f"{what} {path}: no such file (the decision.json of llmload twin --run-dir)"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ConfigError(f"{what} {file}: cannot read the decision: {e}") from None


def write_report(
    path: str | Path,
    out_dir: Path | None = None,
    decision: Decision | None = None,
    *,
    start_child: StartChild | None = None,
) -> tuple[Path, Sequence[Path]]:
    """Post-process a run and write its plots and HTML page; returns (html, plots). The page
    shows `decision` (`read_decision`), else that of a decision.json beside the run's files when
    there is one. `start_child`: a large records file read in two processes (`load_run`)."""
    prefix = str(RunFiles.find(path).prefix)
    beside = Path(prefix).parent / DECISION
    stated = decision
    if stated is None and beside.is_file():
        stated = read_decision(beside, "the run's")
    result = load_run(prefix, with_metrics=True, start_child=start_child)
    server = load_server_metrics(prefix, result.iter_records())
    env = read_environment(prefix)
    out = Path(out_dir) if out_dir is not None else Path(prefix).parent
    stem = Path(prefix).name
    plots = write_plots(result.rows, result.metrics or [], out, stem)
    page = out / f"{stem}_report.html"
    page.write_text(render_html(result, plots, server, env, stated), encoding="utf-8")
    return page, list(plots.values())
