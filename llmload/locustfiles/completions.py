"""Concurrency-ladder sweep of an OpenAI-compatible /v1/completions endpoint.

    locust -f locustfiles/completions.py --headless --host http://127.0.0.1:8000 --csv reports/run

The ladder, request and timeouts come from the built-in ladder (the same as config/sweep.yaml in
a checkout) or the file given with --ladder; `llmload sweep --help` lists the llmload options
(Locust's own --help cannot: it is printed before the locustfile is loaded).
"""

import llmload.loadgen.plugin  # noqa: F401  (registers llmload's options and messages)
from llmload.loadgen.request.users import CompletionsUser
from llmload.loadgen.run.ladder import LadderShape

__all__ = ["LadderShape", "CompletionsUser"]
