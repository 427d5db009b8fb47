#!/usr/bin/env python3
"""Write the configuration reference table of docs/configuration.md from the declarations in
llmload/core/config.py (tests/unit/test_config.py fails when the page is out of date)."""

import sys
from pathlib import Path

from llmload.core.config import SweepConfig
from llmload.core.schema import reference_markdown

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
START, END = "<!-- config-reference:start", "<!-- config-reference:end -->"


def render(page: str) -> str:
    """The page with the table between its markers replaced by the generated one."""
    head, _, rest = page.partition(START)
    marker_line, _, rest = rest.partition("\n")
    _, _, tail = rest.partition(END)
    return f"{head}{START}{marker_line}\n{reference_markdown(SweepConfig)}{END}{tail}"


if __name__ == "__main__":
    PAGE.write_text(render(PAGE.read_text()))
    sys.exit(0)
