"""The manual is a manual: no page of docs/ is over 350 lines (the guide's ~300, with room for a
table), except the measurements log, docs/measurements.md, where dated runs, before/after tables
and the reasons for a bar go. A page that grows past it is split, or its history moves to the log.

The navigation (mkdocs.yml's `nav`) reads in the order a user works, in sections a reader takes in
at a glance: at most 8 entries at any level, every page listed once, and the measurements log in
the developers' section only (user pages state a figure and link the log as its evidence)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from fixtures.paths import REPO

DOCS = REPO / "docs"
MAX_LINES = 350
MAX_ENTRIES = 8
LOG = "measurements.md"
DEVELOPERS = "Developers"


def _nav() -> list[Any]:
    nav: list[Any] = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    return nav


def _crowded_levels(entries: list[Any], where: str = "nav") -> list[str]:
    """The levels of a navigation with more than MAX_ENTRIES entries, by their path of titles."""
    crowded = [f"{where}: {len(entries)} entries"] if len(entries) > MAX_ENTRIES else []
    for entry in entries:
        for title, value in entry.items() if isinstance(entry, dict) else ():
            if isinstance(value, list):
                crowded += _crowded_levels(value, f"{where} > {title}")
    return crowded


def _pages(entry: object, section: str = "") -> list[tuple[str, str]]:
    """(top-level section, page) for every page a navigation entry lists."""
    if isinstance(entry, str):
        return [(section, entry)]
    if isinstance(entry, list):
        return [p for item in entry for p in _pages(item, section)]
    if isinstance(entry, dict):
        return [p for title, value in entry.items() for p in _pages(value, section or title)]
    return []


def _log_outside_developers(nav: list[Any]) -> list[str]:
    """The sections other than the developers' that list the log."""
    return [section for section, page in _pages(nav) if page == LOG and section != DEVELOPERS]


def test_no_manual_page_is_over_350_lines() -> None:
    long = {
        page.name: lines
        for page in sorted(DOCS.glob("*.md"))
        if page.name != LOG and (lines := len(page.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"pages over {MAX_LINES} lines (split them, or move dated runs to docs/{LOG}): {long}"


def test_no_level_of_the_navigation_has_more_than_8_entries() -> None:
    crowded = _crowded_levels(_nav())
    assert not crowded, f"navigation levels over {MAX_ENTRIES} entries: {crowded}"


def test_every_page_is_in_the_navigation_once() -> None:
    listed = [page for _, page in _pages(_nav())]
    assert sorted(listed) == sorted(set(listed)), "a page is listed twice in mkdocs.yml's nav"
    missing = {p.name for p in DOCS.glob("*.md")} - set(listed)
    assert not missing, f"pages of docs/ missing from mkdocs.yml's nav: {missing}"


def test_the_measurements_log_is_in_the_developers_section_only() -> None:
    """The log exists and the site reaches it from the developers' section, never from a user's."""
    assert (DOCS / LOG).is_file()
    assert (DEVELOPERS, LOG) in _pages(_nav())
    assert not _log_outside_developers(_nav()), f"{LOG} listed outside {DEVELOPERS}"


@pytest.mark.parametrize(
    ("nav", "crowded"),
    [
        ([{f"p{i}": f"p{i}.md"} for i in range(9)], ["nav: 9 entries"]),
        ([{"Home": "index.md"}, {"Using it": [f"p{i}.md" for i in range(9)]}], ["nav > Using it: 9 entries"]),
        ([{"Home": "index.md"}, {"Using it": [f"p{i}.md" for i in range(8)]}], []),
    ],
)
def test_the_entry_count_finds_a_crowded_level(nav: list[Any], crowded: list[str]) -> None:
    assert _crowded_levels(nav) == crowded


def test_the_log_check_finds_the_log_among_the_users_pages() -> None:
    planted = [{"Home": "index.md"}, {"Using it": [{"Log": LOG}]}, {DEVELOPERS: [{"Log": LOG}]}, {"Log": LOG}]
    assert _log_outside_developers(planted) == ["Using it", "Log"]
