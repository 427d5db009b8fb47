#!/usr/bin/env python3
"""`llmload table` for a checkout without the console script: see `llmload table --help`."""

import sys

from llmload.cli.table import main

if __name__ == "__main__":
    sys.exit(main())
