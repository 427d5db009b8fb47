"""The exit-code table of docs/errors-and-exit-codes.md is `llmload.core.exit_codes`, row for row."""

from __future__ import annotations

import re

from fixtures.paths import REPO

from llmload.core import exit_codes


def test_docs_table_equals_the_constants():
    page = (REPO / "docs" / "errors-and-exit-codes.md").read_text()
    section = page.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", section, re.MULTILINE))
    assert {int(code): text for code, text in rows.items()} == exit_codes.EXIT_CODES
