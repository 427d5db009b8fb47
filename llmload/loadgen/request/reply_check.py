"""Whether a structured reply is valid: the answer of a request with `response_format` parses as
JSON and fits the run's schema (`json_schema`: the `response_schema`, checked by `jsonschema`;
`json_object`: a JSON object). With tools too, a reply without answer text (a tool call) is not
judged. The record keeps the verdict (`reply_valid`); the sweep gives the valid share per rung
(`llmload.analysis.run.rung_tally`).

The validator is compiled once per configuration (a process holds one per stage configuration),
not once per request.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from jsonschema import Draft202012Validator

from llmload.core.config import SweepConfig

JSON_OBJECT: dict[str, Any] = {"type": "object"}
_CHECKERS: dict[
    int, tuple[SweepConfig, Callable[[str], bool | None] | None]
] = {}  # id -> (config, its checker)
_MAX_CHECKERS = 64  # configurations kept (a run has one, and one per capacity probe)


def reply_checker(config: SweepConfig) -> Callable[[str], bool | None] | None:
    """The check of a reply's answer under `config` (module docstring); None without response_format."""
    held = _CHECKERS.get(id(config))
    if held is not None and held[0] is config:
        return held[1]
    checker = None
    if config.response_format is not None:
        schema = config.response_schema if config.response_schema is not None else JSON_OBJECT
        checker = _fits(Draft202012Validator(schema), judge_empty=config.tools is None)
    if len(_CHECKERS) >= _MAX_CHECKERS:
        _CHECKERS.clear()
    _CHECKERS[id(config)] = (config, checker)  # the config is held, so its id is not reused
    return checker


def _fits(validator: Draft202012Validator, judge_empty: bool) -> Callable[[str], bool | None]:
    def check(answer: str) -> bool | None:
        if not answer and not judge_empty:
            return None
        try:
            value = json.loads(answer)
        except ValueError:
            return False
        return bool(validator.is_valid(value))

    return check
