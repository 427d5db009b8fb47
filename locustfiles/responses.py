"""The packaged locustfile `llmload.locustfiles.responses`, where a checkout's users look for it:

    locust -f locustfiles/responses.py --headless --host http://127.0.0.1:8000 --csv reports/run

Installed, the same file is `llmload locustfile responses` (prints its path).
"""

from llmload.locustfiles.responses import *  # noqa: F403  (the user class and the ladder shape)
