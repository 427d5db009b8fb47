"""The packaged locustfile `llmload.locustfiles.completions`, where a checkout's users look for it:

    locust -f locustfiles/completions.py --headless --host http://127.0.0.1:8000 --csv reports/run

Installed, the same file is `llmload locustfile completions` (prints its path).
"""

from llmload.locustfiles.completions import *  # noqa: F403  (the user class and the ladder shape)
