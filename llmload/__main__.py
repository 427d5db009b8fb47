"""`python -m llmload`: the `llmload` command."""

import sys

from llmload.cli import main

sys.exit(main())
