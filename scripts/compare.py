#!/usr/bin/env python3
"""`llmload compare` for a checkout without the console script: see `llmload compare --help`."""

import sys

from llmload.cli.compare import main

if __name__ == "__main__":
    sys.exit(main())
