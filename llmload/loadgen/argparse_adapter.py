"""The one private attribute of argparse llmload uses, behind a named function whose docstring
states the contract it relies on (checked by `tests/unit/test_argparse_adapter_contract.py`).

llmload checks the output paths of options Locust itself declares (`llmload.loadgen.options`:
`guard_output_paths`), which needs Locust's own `argparse.Action`s; argparse lists a parser's
actions only privately.
"""

from __future__ import annotations

import argparse
from typing import Any


def parser_actions(parser: Any) -> list[argparse.Action]:
    """Every action declared on `parser`, its groups' too, in declaration order
    (`ArgumentParser._actions`, which `parse_args` reads: a changed `Action.type` converts that
    option's value from then on); none for an object without them."""
    actions: list[argparse.Action] = getattr(parser, "_actions", [])
    return actions
