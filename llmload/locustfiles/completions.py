"""Concurrency-ladder sweep of an OpenAI-compatible /v1/completions endpoint.

    locust -f locustfiles/completions.py --headless --host http://127.0.0.1:8000 --csv reports/run

The ladder, request and timeouts come from config/sweep.yaml (--ladder to pick another file);
see `locust -f locustfiles/completions.py --help` for the llmload options.
"""

import llmload.loadgen.plugin  # noqa: F401  (registers llmload's options and messages)
from llmload.loadgen.ladder import LadderShape
from llmload.loadgen.users import CompletionsUser

__all__ = ["LadderShape", "CompletionsUser"]
