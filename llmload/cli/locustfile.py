"""`llmload locustfile [completions|chat]`: print the packaged locustfile's path, so an installed
llmload runs under plain Locust without a checkout:

    locust -f "$(llmload locustfile completions)" --headless --host http://127.0.0.1:8000
"""

from __future__ import annotations

from llmload.core.command_line import ArgumentParser, command
from llmload.locustfiles import ENDPOINT_LOCUSTFILES, locustfile_path


@command("llmload locustfile")
def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="llmload locustfile", description=__doc__.split("\n\n")[0])
    p.add_argument("endpoint", nargs="?", default="completions", choices=sorted(ENDPOINT_LOCUSTFILES))
    args = p.parse_args(argv)
    print(locustfile_path(args.endpoint))
    return 0
