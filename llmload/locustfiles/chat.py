"""Concurrency-ladder sweep of an OpenAI-compatible /v1/chat/completions endpoint.

locust -f locustfiles/chat.py --headless --host http://127.0.0.1:8000 --csv reports/chat
"""

import llmload.loadgen.plugin  # noqa: F401  (registers llmload's options and messages)
from llmload.loadgen.request.users import ChatUser
from llmload.loadgen.run.ladder import LadderShape

__all__ = ["LadderShape", "ChatUser"]
