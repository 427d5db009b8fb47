"""The locustfiles shipped inside the package: `completions.py`, `chat.py` and `responses.py`.

`locustfile_path(name)` gives the installed file's path (what `llmload sweep` passes to
`locust -f`), so nothing depends on a checkout or the current directory.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

ENDPOINT_LOCUSTFILES = {"completions": "completions.py", "chat": "chat.py", "responses": "responses.py"}


def locustfile_path(endpoint: str) -> Path:
    """The packaged locustfile for an endpoint ("completions", "chat" or "responses")."""
    return Path(str(resources.files(__package__).joinpath(ENDPOINT_LOCUSTFILES[endpoint])))
