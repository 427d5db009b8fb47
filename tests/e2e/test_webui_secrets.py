"""The API key never leaves the web UI process. Locust puts every web-UI option's running value
into the start page (`templateArgs.extra_options.api_key.default_value`, only masked on screen);
llmload replaces a secret with a placeholder, and a start form that sends the placeholder back
keeps the running key server-side. Checked over HTTP against a real `locust` web UI with the key
from LOCUST_API_KEY and from --api-key: every GET route Locust's web UI serves (read from Locust's
own source, so a new route cannot escape the test), the JS/CSS assets the page loads, and
llmload's CSV download, before and after a run started from the form, hold no trace of the key;
and the run's requests were accepted by a simulator that requires that key."""

from __future__ import annotations

import re
import urllib.error
from pathlib import Path

import locust.web
import pytest
from fixtures.webui import LocustWebUI, template_args

from llmload.core.files.records import read_records
from llmload.loadgen.webui.tokens_tab import CSV_PATH, SECRET_PLACEHOLDER

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

KEY = "sk-webui-9d41c7e2-SECRET"
ROUTE = re.compile(r'@app_blueprint\.route\("([^"]+)"(?:, methods=\[([^\]]*)\])?\)')


def get_routes() -> list[str]:
    """The web UI's GET routes without path parameters, from Locust's web.py, and llmload's CSV."""
    source = Path(locust.web.__file__).read_text()
    routes = [path for path, methods in ROUTE.findall(source) if not methods or "GET" in methods]
    assert {"/", "/stats/requests", "/stats/report", "/logs"} <= set(routes)
    return [path for path in routes if "<" not in path] + [CSV_PATH]


def everything_served(ui: LocustWebUI) -> dict[str, bytes]:
    bodies = {}
    for path in get_routes():
        try:
            bodies[path] = ui.get(path)
        except urllib.error.HTTPError as e:  # e.g. the CSV before a run: 404 with a reason
            bodies[path] = e.read()
    assets = set(re.findall(rb'(?:src|href)="\.?/?(assets/[^"]+)"', bodies["/"]))
    assert assets, "the start page loads no asset?"
    for asset in assets:
        bodies[asset.decode()] = ui.get("/" + asset.decode())
    return bodies


def assert_no_key(bodies: dict[str, bytes]) -> None:
    leaks = [path for path, body in bodies.items() if KEY.encode() in body or KEY[3:15].encode() in body]
    assert leaks == []


@pytest.mark.parametrize("source", ["LOCUST_API_KEY", "--api-key"])
def test_the_web_ui_never_serves_the_api_key(tmp_path, sim_start, monkeypatch, source):
    for var in ("LOCUST_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    extra: tuple[str, ...] = ()
    if source == "--api-key":
        extra = ("--api-key", KEY)
    else:
        monkeypatch.setenv("LOCUST_API_KEY", KEY)  # inherited by the locust process
    sim = sim_start(api_key=KEY, accept_len=1, base_ms=2, per_seq_ms=0)
    with LocustWebUI(tmp_path, sim.url, extra) as ui:
        assert template_args(ui)["extra_options"]["api_key"]["default_value"] == SECRET_PLACEHOLDER
        assert_no_key(everything_served(ui))
        # the start form as the page sends it: the placeholder back in the api_key field
        form = {"rungs": "1", "requests_per_user": "2", "warmup_requests": "0", "max_tokens": "4"}
        started = ui.start(host=sim.url, api_key=SECRET_PLACEHOLDER, **form)
        assert started["success"], started
        ui.wait_stopped(60)
        assert_no_key(everything_served(ui))
    records, skipped = read_records(Path(f"{ui.prefix}_records.jsonl"))
    assert not skipped and len(records) == 2
    assert all(r.ok for r in records), {r.outcome for r in records}  # the key stayed in use (no 401)
