"""The test tree itself: pytest imports test modules by basename (no packages under tests/), so two
test files of the same name in different tiers break collection of the whole suite."""

from __future__ import annotations

from collections import Counter

from fixtures.paths import REPO


def test_test_file_names_are_unique_across_tiers():
    names = Counter(path.name for path in (REPO / "tests").rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
