"""Concurrency-ladder sweep of an OpenAI-compatible /v1/chat/completions endpoint.

locust -f locustfiles/chat.py --headless --host http://127.0.0.1:8000 --csv reports/chat
"""

import llmload.locust_plugin  # noqa: F401  (registers llmload's options and messages)
from llmload.ladder import LadderShape  # noqa: F401
from llmload.users import ChatUser  # noqa: F401
