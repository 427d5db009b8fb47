"""One declaration per key: a key added to a (fixture) schema gets its validation, command-line
flag, environment variable, web UI form field and docs row with no other edit."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from locust.argument_parser import LocustArgumentParser

from llmload.core.schema import add_flags, flag_overrides, parse_section, reference_markdown, setting


class FixtureError(ValueError):
    pass


def positive_int(source: str, key: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise FixtureError(f"{source}: '{key}' must be an integer >= 1, got {value!r}")
    return value


def text(source: str, key: str, value: object) -> str:
    if not isinstance(value, str):
        raise FixtureError(f"{source}: '{key}' must be a string, got {value!r}")
    return value


@dataclass(frozen=True)
class Limits:
    depth: int = setting(3, help="how deep", check=positive_int)


def limits(source: str, key: str, value: object) -> Limits:
    if not isinstance(value, dict):
        raise FixtureError(f"{source}: '{key}' must be a mapping")
    return Limits(**parse_section(Limits, value, source, prefix=f"{key}.", error=FixtureError))


limits.section = Limits  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Fixture:
    widgets: int = setting(4, help="widgets per batch", check=positive_int, flag="--widgets", parse=int)
    label: str = setting("plain", help="a label", check=text)
    token: str = setting("", help="the secret token", check=text, flag="--token", secret=True)
    limits: Limits = setting(default_factory=Limits, help="limits section", check=limits)
    # the key "added" by this test: one line
    gadgets: int = setting(2, help="gadgets per widget", check=positive_int, flag="--gadgets", parse=int)


def parser() -> LocustArgumentParser:
    p = LocustArgumentParser()
    add_flags(p, Fixture)
    return p


def test_the_new_key_is_validated_by_its_own_check() -> None:
    assert parse_section(Fixture, {"gadgets": 5}, "f.yaml", error=FixtureError) == {"gadgets": 5}
    with pytest.raises(FixtureError, match=r"^f.yaml: 'gadgets' must be an integer >= 1, got 0$"):
        parse_section(Fixture, {"gadgets": 0}, "f.yaml", error=FixtureError)


def test_unknown_and_nested_keys_are_named() -> None:
    with pytest.raises(
        FixtureError, match=r"unknown key 'gadget' \(known: widgets, label, token, limits, gadgets\)"
    ):
        parse_section(Fixture, {"gadget": 5}, "f.yaml", error=FixtureError)
    with pytest.raises(FixtureError, match=r"unknown key 'limits.width' \(known: depth\)"):
        parse_section(Fixture, {"limits": {"width": 1}}, "f.yaml", error=FixtureError)
    assert parse_section(Fixture, {"limits": {"depth": 7}}, "f.yaml")["limits"] == Limits(7)


def test_the_new_key_has_a_flag_and_an_env_var() -> None:
    options = parser().parse_args(["--gadgets", "9"])
    assert flag_overrides(options, Fixture) == {"gadgets": (9, "--gadgets")}
    options = parser().parse_args([], env_vars={"LOCUST_GADGETS": "11"})
    assert flag_overrides(options, Fixture)["gadgets"] == (11, "--gadgets")
    assert "label" not in flag_overrides(parser().parse_args([]), Fixture)  # file-only key


def test_the_new_key_is_a_web_ui_field_and_secrets_are_masked() -> None:
    p = parser()
    assert {"widgets", "gadgets", "token"} <= set(p.args_included_in_web_ui)
    assert set(p.secret_args_included_in_web_ui) == {"token"}


def test_the_new_key_has_a_docs_row() -> None:
    doc = reference_markdown(Fixture)
    assert "| `gadgets` | 2 | gadgets per widget | `--gadgets`, `LOCUST_GADGETS` |" in doc
    assert "| `limits.depth` | 3 | how deep |  |" in doc
