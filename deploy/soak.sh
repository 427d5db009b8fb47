#!/bin/sh
# Run one soak test of the server and exit with its verdict: 0 pass, 1 a threshold breached,
# 2 could not run (bad config, server unreachable, stopped before its duration).
#
#   LLMLOAD_HOST=http://server:8000 deploy/soak.sh [more locust options]
#
# LLMLOAD_HOST         the OpenAI-compatible server (required)
# LLMLOAD_SOAK_CONFIG  soak config (default: config/soak.yaml)
# LLMLOAD_REPORTS      where each run's files go, as <dir>/soak-<time>_* (default: reports)
# LLMLOAD_VENV         the virtualenv holding llmload (default: .venv, made by `make test`/`make sweep`)
# Used by deploy/cron/llmload-soak and deploy/systemd/llmload-soak.service.
set -eu
cd "$(dirname "$0")/.."
if [ -z "${LLMLOAD_HOST:-}" ]; then
    echo "soak.sh: set LLMLOAD_HOST to the server's URL, e.g. http://127.0.0.1:8000" >&2
    exit 2
fi
reports="${LLMLOAD_REPORTS:-reports}"
mkdir -p "$reports"
exec "${LLMLOAD_VENV:-.venv}/bin/locust" -f locustfiles/completions.py --headless \
    --host "$LLMLOAD_HOST" --ladder "${LLMLOAD_SOAK_CONFIG:-config/soak.yaml}" \
    --csv "$reports/soak-$(date +%Y%m%d-%H%M%S)" --only-summary "$@"
