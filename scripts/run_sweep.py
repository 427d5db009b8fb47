#!/usr/bin/env python3
"""`llmload sweep` for a checkout without the console script: see `llmload sweep --help`."""

import sys

from llmload.cli.sweep import main

if __name__ == "__main__":
    sys.exit(main())
