#!/usr/bin/env python3
"""`llmload soak-report` for a checkout without the console script: see `llmload soak-report --help`."""

import sys

from llmload.cli.soak_report import main

if __name__ == "__main__":
    sys.exit(main())
