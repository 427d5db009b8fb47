#!/usr/bin/env python3
"""`llmload soak-report` for a checkout without the console script: see `llmload soak-report --help`."""

import sys

from llmload.cli import run_command

if __name__ == "__main__":
    sys.exit(run_command("soak-report"))
