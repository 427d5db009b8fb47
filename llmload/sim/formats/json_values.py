"""A JSON value that fits a JSON Schema, drawn from a seeded generator: the simulated model's tool
arguments and structured answers (`llmload.sim.formats.structured`).

What is honoured: `type` (a list: its first type other than null), `enum`, `const`, `properties`
(every one), `items`, `minItems`/`maxItems`, `minLength`/`maxLength`, `minimum`/`maximum` (and
their exclusive forms), `anyOf`/`oneOf` (the first alternative), `allOf` of one schema, and local
`$ref`s (`#/$defs/...`, `#/definitions/...`). A schema without a type gives a string; an object
without properties gives two to three keys of words; below `MAX_DEPTH` levels an object has only
its required properties and an array its minimum of items (so a recursive schema ends). Patterns
and formats are not honoured: a schema that needs them may not fit.
Strings are words of the simulator's vocabulary (`llmload.sim.tokens.VOCAB`).
"""

from __future__ import annotations

import math
import random
from typing import Any

from llmload.sim.tokens import VOCAB

MAX_DEPTH = 6
MAX_ITEMS = 3  # items of an array without minItems above it
MAX_LENGTH = 10_000  # the most characters of a string, items of an array, a schema may ask for
_TYPES = ("string", "integer", "number", "boolean", "array", "object", "null")


def _resolve(schema: Any, root: dict[str, Any]) -> dict[str, Any]:
    """The schema a local `$ref` points at (the schema itself otherwise; {} for a bad ref)."""
    for _ in range(MAX_DEPTH):  # a ref to a ref, bounded
        if not isinstance(schema, dict):
            return {}
        ref = schema.get("$ref")
        if not isinstance(ref, str):
            return schema
        node: Any = root
        for part in ref.removeprefix("#/").split("/") if ref.startswith("#/") else ["\0"]:
            node = node.get(part) if isinstance(node, dict) else None
        schema = node
    return schema if isinstance(schema, dict) else {}


def _type_of(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null" and k in _TYPES), "null")
    if kind in _TYPES:
        return str(kind)
    if "properties" in schema:
        return "object"
    return "array" if "items" in schema else "string"


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(count))


def _count(schema: dict[str, Any], key: str, default: int) -> int:
    value = schema.get(key)
    return min(value, MAX_LENGTH) if isinstance(value, int) and not isinstance(value, bool) else default


def _string(schema: dict[str, Any], rng: random.Random) -> str:
    text = _words(rng, rng.randint(1, 3))
    while len(text) < _count(schema, "minLength", 0):
        text += " " + rng.choice(VOCAB)
    return text[: max(0, _count(schema, "maxLength", len(text)))]


def _bound(schema: dict[str, Any], key: str, default: float) -> tuple[float, bool]:
    """A numeric bound of `key` (or its exclusive form) and whether it is exclusive."""
    for name, exclusive in ((key, False), ("exclusive" + key.capitalize(), True)):
        value = schema.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value), exclusive
    return default, False


def _number(schema: dict[str, Any], rng: random.Random, integer: bool) -> int | float:
    low, low_open = _bound(schema, "minimum", 0.0)
    high, high_open = _bound(schema, "maximum", low + 100.0)
    if integer:
        lo = math.floor(low) + 1 if low_open or low != math.floor(low) else int(low)
        hi = math.ceil(high) - 1 if high_open or high != math.ceil(high) else int(high)
        return rng.randint(lo, max(lo, hi))
    return round(low + (high - low) * rng.uniform(0.1, 0.9), 4)  # strictly inside: open bounds too


def value_for(schema: Any, rng: random.Random, root: dict[str, Any] | None = None, depth: int = 0) -> Any:
    """A value fitting `schema` (module docstring), drawn from `rng`; `root` resolves `$ref`s."""
    root = root if root is not None else schema if isinstance(schema, dict) else {}
    schema = _resolve(schema, root)
    if depth > 2 * MAX_DEPTH:  # a schema that requires itself without end
        return None
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return value_for(options[0], rng, root, depth + 1)
    kind, deep = _type_of(schema), depth >= MAX_DEPTH
    if kind == "object":
        props = schema.get("properties")
        if not isinstance(props, dict) or not props:
            return (
                {} if deep else {rng.choice(VOCAB) + str(i): _words(rng, 2) for i in range(rng.randint(2, 3))}
            )
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        return {
            str(name): value_for(sub, rng, root, depth + 1)
            for name, sub in props.items()
            if not deep or name in required
        }
    if kind == "array":
        high = _count(schema, "maxItems", MAX_ITEMS)
        low = min(_count(schema, "minItems", 0 if deep else 1), high)
        high = low if deep else high
        count = rng.randint(low, max(low, min(high, MAX_ITEMS)))
        return [value_for(schema.get("items", {}), rng, root, depth + 1) for _ in range(count)]
    if kind in ("integer", "number"):
        return _number(schema, rng, kind == "integer")
    if kind == "boolean":
        return rng.random() < 0.5
    return None if kind == "null" else _string(schema, rng)
