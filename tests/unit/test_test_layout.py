"""The test tree itself: pytest imports test modules by basename (no packages under tests/), so two
test files of the same name in different tiers break collection of the whole suite; `make test`
runs the end-to-end tier in shards (`--shard K/N`), and every file must run in exactly one."""

from __future__ import annotations

from collections import Counter

import pytest
from fixtures.paths import REPO
from fixtures.shards import DEFAULT_SECONDS, FILE_SECONDS, deal, parse_shard


def test_test_file_names_are_unique_across_tiers():
    names = Counter(path.name for path in (REPO / "tests").rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []


E2E_FILES = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "tests" / "e2e").glob("test_*.py"))


@pytest.mark.parametrize("shards", [1, 2, 3, 4, 7])
def test_every_e2e_file_runs_in_exactly_one_shard(shards):
    dealt = deal(E2E_FILES, shards)
    assert sorted(f for shard in dealt for f in shard) == E2E_FILES
    assert all(shard == sorted(shard) for shard in dealt)  # each shard keeps the files' order


def test_the_shards_are_balanced_by_the_files_seconds():
    """No shard carries more than a third over an even split, unless one file alone is heavier."""
    seconds = [sum(FILE_SECONDS.get(f, DEFAULT_SECONDS) for f in shard) for shard in deal(E2E_FILES, 3)]
    heaviest = max(FILE_SECONDS.get(f, DEFAULT_SECONDS) for f in E2E_FILES)
    assert max(seconds) <= max(heaviest, 1.34 * sum(seconds) / 3), seconds


def test_the_seconds_name_only_files_that_exist():
    assert sorted(f for f in FILE_SECONDS if not (REPO / f).is_file()) == []


def test_a_shard_is_k_of_n():
    assert parse_shard("2/3") == (2, 3)
    for bad in ("0/3", "4/3", "3", "a/b", "/3", "1/0", ""):
        with pytest.raises(ValueError, match="--shard wants K/N"):
            parse_shard(bad)


def test_make_test_runs_every_tier():
    """`make test` runs each tier folder by name (in rounds): a new tier must be added there."""
    tiers = {p.parent.name for p in (REPO / "tests").rglob("test_*.py")}
    assert tiers == {"unit", "e2e", "real", "browser"}
    recipe = (REPO / "Makefile").read_text()
    assert all(f"tests/{tier}" in recipe for tier in tiers)
    assert "-m untimed --shard $*/2 tests/e2e" in recipe
    assert "TIMED_MARK := not untimed and not alone" in recipe
    timed = '-m "$(TIMED_MARK)" -o cache_dir=$(TIMED_CACHE)-$* --shard $*/$(TIMED_PROCESSES) tests/e2e'
    assert timed in recipe
    # the second chance runs only the part's failed tests, by the same mark, from the part's cache
    again = '-m "$(TIMED_MARK)" -o cache_dir=$$d --last-failed --last-failed-no-failures none tests/e2e'
    assert again in recipe
    assert "-m alone tests/e2e" in recipe
    assert "--shard $*/2 tests/real;" in recipe
