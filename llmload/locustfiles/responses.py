"""Concurrency-ladder sweep of an OpenAI-compatible /v1/responses endpoint (the Responses API,
streamed: its reasoning and output-text events are timed as chat's chunks are).

    locust -f locustfiles/responses.py --headless --host http://127.0.0.1:8000 --csv reports/responses
"""

import llmload.loadgen.plugin  # noqa: F401  (registers llmload's options and messages)
from llmload.loadgen.request.users import ResponsesUser
from llmload.loadgen.run.ladder import LadderShape

__all__ = ["LadderShape", "ResponsesUser"]
