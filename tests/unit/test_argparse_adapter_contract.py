"""The installed argparse (and configargparse, the base of Locust's parser) still lists a parser's
actions where `llmload.loadgen.argparse_adapter` reads them, and a changed `Action.type` still
converts that option's value."""

from __future__ import annotations

import argparse

import configargparse
import pytest

from llmload.loadgen.argparse_adapter import parser_actions


@pytest.mark.parametrize("parser_class", [argparse.ArgumentParser, configargparse.ArgumentParser])
def test_the_actions_of_a_parser_and_its_groups(parser_class: type[argparse.ArgumentParser]) -> None:
    parser = parser_class(add_help=False)
    csv = parser.add_argument("--csv", default="")
    html = parser.add_argument_group("reports").add_argument("--html", default="")
    assert [a for a in parser_actions(parser) if a.dest in ("csv", "html")] == [csv, html]
    csv.type = str.upper
    assert parser.parse_args(["--csv", "x", "--html", "y"]) == argparse.Namespace(csv="X", html="y")


def test_an_object_without_actions_has_none() -> None:
    assert parser_actions(object()) == []
