"""The packaged locustfile `llmload.locustfiles.chat`, where a checkout's users look for it:

    locust -f locustfiles/chat.py --headless --host http://127.0.0.1:8000 --csv reports/run

Installed, the same file is `llmload locustfile chat` (prints its path).
"""

from llmload.locustfiles.chat import *  # noqa: F403  (the user class and the ladder shape)
