"""The simulator's structured replies without a server: JSON values that fit their schema (checked
by jsonschema, not by the generator), the request fields refused with the field's name, the
invalid share drawn from the seed, and its bad flag values."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest

from llmload.sim.__main__ import SimFlagError, config_from_args
from llmload.sim.api import ApiError
from llmload.sim.formats.json_values import value_for
from llmload.sim.formats.structured import is_invalid, parse_structured, plan_reply

SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": ["null", "integer"]}}},
    {"type": "array", "items": {"type": "number", "minimum": -1.5, "exclusiveMaximum": 2}, "minItems": 2},
    {"type": "array", "items": {"type": "boolean"}, "minItems": 5, "maxItems": 5},
    {"type": "string", "minLength": 30, "maxLength": 31},
    {"type": "string", "maxLength": 0},
    {"type": "array", "maxItems": 0},
    {"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 5},
    {"enum": ["x", 2, None]},
    {"const": {"k": [1]}},
    {"anyOf": [{"type": "integer", "minimum": 10}, {"type": "string"}]},
    {
        "$ref": "#/$defs/node",
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            }
        },
    },  # fmt: skip
    {"type": "object"},
    {},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_values_fit_their_schema(schema):
    for seed in range(40):
        value = value_for(schema, random.Random(seed))
        jsonschema.validate(json.loads(json.dumps(value)), schema)


def test_the_invalid_share_is_drawn_from_the_seed_and_the_prompt():
    draws = [is_invalid(29, h, 0.25) for h in range(2000)]
    assert 0.22 < sum(draws) / len(draws) < 0.28
    assert draws == [is_invalid(29, h, 0.25) for h in range(2000)]  # the same seed, the same replies
    assert draws != [is_invalid(30, h, 0.25) for h in range(2000)]
    assert not any(is_invalid(29, h, 0.0) for h in range(200)) and all(
        is_invalid(29, h, 1.0) for h in range(200)
    )


def test_an_invalid_reply_does_not_parse_and_a_valid_one_does():
    spec = parse_structured({"response_format": {"type": "json_object"}}, responses=False)
    for phash in range(50):
        reply = plan_reply(spec, phash, seed=1, invalid_share=0.5, auto_share=1.0)
        assert reply is not None
        text = reply.text_of(reply.pieces)
        try:
            parsed = isinstance(json.loads(text), dict)
        except ValueError:
            parsed = False
        assert parsed == reply.valid == (not is_invalid(1, phash, 0.5))


@pytest.mark.parametrize(
    "body, param",
    [
        ({"tools": {}}, "tools"),
        ({"tools": [{"type": "code_interpreter"}]}, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]}, "tools"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"response_format": {"type": "yaml"}}, "response_format"),
    ],
)
def test_bad_fields_name_themselves(body, param):
    with pytest.raises(ApiError) as caught:
        parse_structured(body, responses=False)
    assert caught.value.param == param and caught.value.status == 400


@pytest.mark.parametrize(
    "argv", [["--invalid-share", "1.5"], ["--auto-tool-share", "-0.1"], ["--invalid-share", "x"]]
)
def test_bad_share_flags(argv):
    with pytest.raises(SimFlagError, match=argv[0]) as caught:
        config_from_args(argv, exit_on_error=False)
    assert "\n" not in str(caught.value)
