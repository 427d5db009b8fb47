"""The Locust web UI's "Tokens" tab and the sweep-table CSV download.

Uses Locust's own extension points (see Locust's examples/extend_web_ui.py): `template_args`
`extended_tabs` / `extended_tables` declare the tab and its columns, an `after_request` hook adds
the rows to the `/stats/requests` answer the page polls every 2 s (`extended_stats`), and
`extended_csv_files` puts the CSV link (and the link to the live charts,
`llmload.loadgen.webui.token_charts`) beside Locust's own downloads. The rows come from
`llmload.loadgen.webui.live_sweep.LiveSweep`, fed by the ladder with every record the master (or the local
process) receives. The CSV is the post-processor's (`llmload.analysis.run.postprocess`) on the run's own
files, so it is exactly what `llmload table <prefix> --format csv` prints for the same run.
"""

from __future__ import annotations

import json
import time
from typing import Any

import gevent
from flask import Response, make_response, request
from werkzeug.datastructures import ImmutableMultiDict

from llmload.analysis.run.postprocess import load_run
from llmload.core.files.records import RecordFileError
from llmload.core.files.run_files import RunFiles
from llmload.loadgen.run.ladder import LadderShape
from llmload.loadgen.webui.live_sweep import LiveSweep
from llmload.loadgen.webui.token_charts import CHARTS_PATH, register_charts
from llmload.output.run_table import render_run

TAB_KEY = "tokens"
CSV_PATH = "/llmload/sweep.csv"
COLUMNS = (
    ("rung", "Rung"),
    ("users", "Users"),
    ("state", "State"),
    ("agg_tok_s", "Agg tok/s"),
    ("per_req_tok_s", "Per-request tok/s"),
    ("valid_pct", "Valid replies %"),
    ("calls_valid_pct", "Valid tool calls %"),
    ("ttft_p50_ms", "TTFT p50 (ms)"),
    ("ttft_p99_ms", "TTFT p99 (ms)"),
    ("tpot_p50_ms", "TPOT p50 (ms)"),
    ("ttfo_p50_ms", "First answer p50 (ms)"),
    ("think_pct", "Reasoning %"),
    ("tokens", "Output tokens"),
    ("requests", "Requests"),
    ("failures", "Failures"),
    ("cache_pct", "Prefix cache %"),
    ("srv_running", "Server running"),
    ("srv_waiting", "Server waiting"),
    ("kv_usage_pct", "KV cache %"),
    ("accept_len", "Accept length"),
    ("sessions_finished", "Sessions finished"),
    ("session_makespan_p50_s", "Session makespan p50 (s)"),
    ("session_makespan_p99_s", "Session makespan p99 (s)"),
    ("now_tok_s", "Current rung tok/s"),
)


def register_web_ui(environment: Any) -> LiveSweep | None:
    """Add the Tokens tab and the CSV download to this process's web UI (master or local; call
    from `events.init`). Returns the live table, or None without a web UI or a ladder shape."""
    web_ui = environment.web_ui
    shape = environment.shape_class
    if web_ui is not None:
        protect_secrets(web_ui)
        answer_settled_states(web_ui, environment)
    if web_ui is None or not isinstance(shape, LadderShape):
        return None
    live = LiveSweep()
    shape.record_hooks.append(live.add)
    base = getattr(environment.parsed_options, "web_base_path", "") or ""

    def active() -> bool:
        """Follow the ladder's run; whether the ladder still runs it."""
        live.follow(shape.run)
        return shape.run is not None and shape.run is live.run

    def tab_rows() -> list[dict[str, str]]:
        return live.table(active=active())

    def add_rows(response: Response) -> Response:
        if request.endpoint == "locust.request_stats" and response.is_json:
            data = response.get_json()
            data["extended_stats"] = [{"key": TAB_KEY, "data": tab_rows()}]
            response.set_data(json.dumps(data))
        return response

    def sweep_csv() -> Response:
        live.follow(shape.run)
        if live.run is None:
            return make_response("no run yet: start one first\n", 404)
        prefix = str(RunFiles.of_records(live.run.writer.path).prefix)
        try:
            text = render_run(load_run(prefix), "csv")
        except RecordFileError as e:
            return make_response(f"{e}\n", 404)
        response = make_response(text)
        response.headers["Content-Type"] = "text/csv"
        stamp = time.strftime("%Y%m%d-%H%M%S")
        response.headers["Content-Disposition"] = f"attachment;filename=llmload_sweep_{stamp}.csv"
        return response

    def charts(since: int) -> dict[str, Any]:
        return live.charts(active=active(), since=since)

    web_ui.app.after_request(add_rows)
    web_ui.app.add_url_rule(base + CSV_PATH, "llmload_sweep_csv", web_ui.auth_required_if_enabled(sweep_csv))
    register_charts(web_ui, base, charts)
    web_ui.template_args |= {
        "extended_tabs": [{"title": "Tokens", "key": TAB_KEY}],
        "extended_tables": [{"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in COLUMNS]}],
        "extended_csv_files": [
            {"href": "." + CSV_PATH, "title": "Download sweep table CSV (llmload)"},
            {"href": "." + CHARTS_PATH, "title": "Live token charts (llmload)"},
        ],
    }
    return live


# --- the page's poll never sees a passing state --------------------------------------------------
PASSING_STATES = ("cleanup", "stopping")  # Locust's runner states between running and stopped
SETTLE_WAIT_S = 10.0  # longest a poll is held; a master waiting for its workers can take seconds
SETTLE_POLL_S = 0.02


def answer_settled_states(web_ui: Any, environment: Any) -> None:
    """Hold a `/stats/requests` poll that arrives while the runner passes from running to stopped
    until it is stopped (at most SETTLE_WAIT_S). Locust's page polls only while the state it last
    saw was spawning or running: one answer of "cleanup" (a few ms when a ladder ends, but the
    answer is cached for 2 s, and the shape's 1 s ticks fall in step with the page's 2 s polls)
    left the page showing it for good, with the Tokens tab frozen before the last rung's end."""

    def settle() -> None:
        if request.endpoint != "locust.request_stats" or environment.runner is None:
            return
        deadline = time.monotonic() + SETTLE_WAIT_S
        while environment.runner.state in PASSING_STATES and time.monotonic() < deadline:
            gevent.sleep(SETTLE_POLL_S)

    web_ui.app.before_request(settle)


# --- secrets: a key set on the server never leaves it --------------------------------------------
SECRET_PLACEHOLDER = "(set on the server: leave as is to keep it)"
SECRET_OPTIONS = ("api_key",)  # llmload's is_secret options (llmload.loadgen.options)


def protect_secrets(web_ui: Any) -> None:
    """Locust renders every web-UI option's running value into the start page
    (`templateArgs.extra_options.<name>.default_value`), secret ones included; a password field
    only masks it on screen. Here a secret's value is replaced by SECRET_PLACEHOLDER (or '' when
    unset) before any page is rendered, and a start form that sends the placeholder back, or
    nothing, keeps the running value: only a new value typed into the form replaces it."""
    update_template_args = web_ui.update_template_args

    def scrub() -> None:
        for option in (web_ui.template_args.get("extra_options") or {}).values():
            if option.get("is_secret"):
                option["default_value"] = SECRET_PLACEHOLDER if option.get("default_value") else ""

    def update_without_secrets() -> None:
        update_template_args()
        scrub()

    def keep_running_secrets() -> None:
        if request.endpoint != "locust.swarm" or request.method != "POST":
            return
        extra = web_ui.template_args.get("extra_options") or {}
        secrets = {*SECRET_OPTIONS, *(k for k, o in extra.items() if o.get("is_secret"))}
        form = request.form.copy()
        for name in secrets:
            if form.get(name, "") in ("", SECRET_PLACEHOLDER):
                form.pop(name, None)
        request.form = ImmutableMultiDict(form)

    scrub()  # Locust filled them in once already, when it created the web UI
    web_ui.update_template_args = update_without_secrets
    web_ui.app.before_request(keep_running_secrets)
