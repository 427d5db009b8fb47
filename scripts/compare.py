#!/usr/bin/env python3
"""`llmload compare` for a checkout without the console script: see `llmload compare --help`."""

import sys

from llmload.cli import run_command

if __name__ == "__main__":
    sys.exit(run_command("compare"))
