"""The web UI's live token charts: a page of llmload's own (`CHARTS_PATH`) and its JSON
(`CHARTS_JSON_PATH`), served by the web UI's Flask app beside Locust's pages.

Locust 2.47's React tabs only render tables (`extended_tabs` + `extended_tables`: rows of strings)
and its Charts tab draws a fixed list of Locust's own series, so a chart cannot live inside the
Tokens tab. Locust's bundle includes ECharts but only inside its one application module, with
nothing exported; no installed package ships ECharts as a file, and the UI must work with no
internet. So the page (`token_charts.html`, shipped in the package) draws SVG with a few lines of
its own script, in the look of Locust's Charts tab: same colours, title and legend placement,
split lines, time axis, 2 s poll. The figures are `LiveSweep.charts()`: the same tallies the
Tokens tab shows (docs/web-ui.md defines every field).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from importlib.resources import files
from typing import Any

from flask import Response, make_response, request

CHARTS_PATH = "/llmload/charts"
CHARTS_JSON_PATH = "/llmload/charts.json"
PAGE = "token_charts.html"

logger = logging.getLogger(__name__)


def register_charts(web_ui: Any, base: str, charts: Callable[[int], dict[str, Any]]) -> None:
    """Serve the charts page and its JSON on `web_ui`'s app under `base` (Locust's
    --web-base-path). `charts(since)` returns the JSON's data with the time series from point
    `since` on."""
    page = files(__package__).joinpath(PAGE).read_text(encoding="utf-8")

    def charts_page() -> Response:
        response = make_response(page)
        response.headers["Content-Type"] = "text/html; charset=utf-8"
        return response

    def charts_json() -> Response:
        since = request.args.get("since", "0")
        if not (since.isascii() and since.isdigit()):
            return make_response(f"since={since!r}: expected a whole number >= 0\n", 400)
        # compact, unlike Flask's jsonify in the debug mode Locust runs its app in
        return Response(json.dumps(charts(int(since)), separators=(",", ":")), mimetype="application/json")

    app, auth = web_ui.app, web_ui.auth_required_if_enabled
    app.add_url_rule(base + CHARTS_PATH, "llmload_charts", auth(charts_page))
    app.add_url_rule(base + CHARTS_JSON_PATH, "llmload_charts_json", auth(charts_json))
    logger.info("llmload: live token charts at %s of the web UI", base + CHARTS_PATH)
