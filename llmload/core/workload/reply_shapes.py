"""What a request asks of its reply's shape: the `tools` it offers (a file, inline, or a built-in
set), and the JSON Schema of a `response_format: json_schema` (a file, or inline). Both are
checked when the configuration is read, so a bad file stops the run before anything starts:

- `tools`: a JSON or YAML list of OpenAI function tools, each `{"type": "function", "function":
  {"name": ..., "description": ..., "parameters": <JSON Schema>}}` (`type` may be left out), or
  the name of a built-in set (`BUILTIN_TOOLS`); the parameters must be JSON Schema
  (`jsonschema`'s `check_schema`, draft 2020-12).
- `response_schema`: a JSON or YAML file holding one JSON Schema (checked the same way).

A schema's `$ref`s must point inside it (`#/...`): it is checked here and by the client, never
fetched.

A relative file is read from the configuration file's folder. What is kept is the loaded value,
so the configuration travels to the workers as plain data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from llmload.core.checks import ConfigError
from llmload.core.schema import shown

_CITY = {"type": "string", "description": "a city name"}
_PATH = {"type": "string", "description": "a file path in the repository"}
BUILTIN_TOOLS: dict[str, tuple[dict[str, Any], ...]] = {
    "weather": (
        {"type": "function", "function": {"name": "get_weather", "description": "the weather in a city",
         "parameters": {"type": "object", "properties": {
             "city": _CITY, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
             "required": ["city"]}}},
        {"type": "function", "function": {"name": "get_forecast", "description": "a city's forecast",
         "parameters": {"type": "object", "properties": {
             "city": _CITY, "days": {"type": "integer", "minimum": 1, "maximum": 14}},
             "required": ["city", "days"]}}},
    ),
    "coding": (
        {"type": "function", "function": {"name": "read_file", "description": "read a file",
         "parameters": {"type": "object", "properties": {"path": _PATH}, "required": ["path"]}}},
        {"type": "function", "function": {"name": "search_code", "description": "grep the repository",
         "parameters": {"type": "object", "properties": {
             "pattern": {"type": "string"}, "max_results": {"type": "integer", "minimum": 1, "maximum": 100}},
             "required": ["pattern"]}}},
        {"type": "function", "function": {"name": "run_tests", "description": "run a test file",
         "parameters": {"type": "object", "properties": {"path": _PATH, "verbose": {"type": "boolean"}},
         "required": ["path"]}}},
    ),
}  # fmt: skip


def _read(source: str, key: str, name: str) -> Any:
    """A JSON or YAML file named by `key`, relative to the configuration file's folder."""
    base = Path(source).parent if Path(source).is_file() else Path()
    path = Path(name) if Path(name).is_absolute() else base / name
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as e:  # ValueError: a name the system cannot hold
        reason = getattr(e, "strerror", None) or str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"{source}: '{key}': cannot read {shown(name)}: {reason[:100]}") from None
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError, RecursionError) as e:
        problem = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"{source}: '{key}': {shown(name)} is not JSON or YAML: {problem[:100]}") from None


def _schema(source: str, key: str, value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: '{key}': {where} must be a JSON Schema object, got {shown(value)}")
    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as e:
        raise ConfigError(f"{source}: '{key}': {where} is not JSON Schema: {e.message[:100]}") from None
    for ref in _refs(value):
        if not _resolves(value, ref):
            raise ConfigError(
                f"{source}: '{key}': {where} has $ref {shown(ref)}, which is not a JSON pointer into "
                "it (#/...): a schema is checked here, never fetched"
            )
    return value


def _refs(node: Any, depth: int = 0) -> list[str]:
    """Every `$ref` string in a schema (bounded depth: a YAML file's nesting is bounded too)."""
    if depth > 100:
        return []
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in _refs(v, depth + 1)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v, depth + 1)]
    return []


def _resolves(root: dict[str, Any], ref: str) -> bool:
    """Whether `ref` is `#` or a JSON pointer `#/...` to a schema inside `root`."""
    if ref == "#":
        return True
    if not ref.startswith("#/"):
        return False
    node: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return isinstance(node, dict | bool)


def tools_key(source: str, key: str, value: Any) -> tuple[dict[str, Any], ...]:
    """The `tools` key: a built-in set's name, a file, or an inline list (module docstring)."""
    if isinstance(value, str) and value in BUILTIN_TOOLS:
        return BUILTIN_TOOLS[value]
    if isinstance(value, str):
        value = _read(source, key, value)
    if not isinstance(value, list | tuple) or not value:
        raise ConfigError(
            f"{source}: '{key}': expected a non-empty list of function tools, got {shown(value)}"
        )
    return tuple(_function_tool(source, key, i, tool) for i, tool in enumerate(value))


def _function_tool(source: str, key: str, index: int, tool: Any) -> dict[str, Any]:
    """One entry of a tools list as a function tool with checked parameters (`type` filled in)."""
    fn: Any = tool.get("function") if isinstance(tool, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str) or not name or tool.get("type", "function") != "function":
        raise ConfigError(
            f"{source}: '{key}': tool {index + 1} is not a function tool "
            f'({{"type": "function", "function": {{"name": ...}}}}), got {shown(tool)}'
        )
    params = fn.get("parameters", {"type": "object", "properties": {}})
    _schema(source, key, params, f"the parameters of tool {shown(name)}")
    return {"type": "function", "function": {**fn, "parameters": params}}


def schema_key(source: str, key: str, value: Any) -> dict[str, Any]:
    """The `response_schema` key: a file, or an inline schema."""
    return _schema(source, key, _read(source, key, value) if isinstance(value, str) else value, "the schema")


def function_names(tools: tuple[dict[str, Any], ...]) -> list[str]:
    return [str(t["function"]["name"]) for t in tools]
