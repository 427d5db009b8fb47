"""Concurrency-ladder sweep of an OpenAI-compatible /v1/completions endpoint.

    locust -f locustfiles/completions.py --headless --host http://127.0.0.1:8000 --csv reports/run

The ladder, request and timeouts come from config/sweep.yaml (--ladder to pick another file);
see `locust -f locustfiles/completions.py --help` for the llmload options.
"""

import llmload.locust_plugin  # noqa: F401  (registers llmload's options and messages)
from llmload.ladder import LadderShape  # noqa: F401
from llmload.users import CompletionsUser  # noqa: F401
