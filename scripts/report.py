#!/usr/bin/env python3
"""`llmload report` for a checkout without the console script: see `llmload report --help`."""

import sys

from llmload.cli.report import main

if __name__ == "__main__":
    sys.exit(main())
