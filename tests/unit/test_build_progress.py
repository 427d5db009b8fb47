"""A long build says how far it got: the llama.cpp builder's progress lines while a command runs
(CMake's percentage from the log, and the minutes so far)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from llmload.servers import build_guard


def test_a_long_build_reports_its_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_guard, "PROGRESS_EVERY_S", 0.2)
    script = "import time; print('[ 45%] Building CXX object server.cpp.o', flush=True); time.sleep(1.5)"
    lines: list[str] = []
    build_guard.run_logged(
        [sys.executable, "-c", script], tmp_path / "build.log", 30.0, "cmake build", lines.append
    )
    assert lines and all(line.startswith("cmake build: ") for line in lines)
    assert "45% done" in lines[-1] and "min so far" in lines[-1]


def test_build_percent_reads_the_last_mark(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text("[ 10%] a\nnoise\n[ 98%] Linking CXX static library\n")
    assert build_guard.build_percent(log) == "98%"
    log.write_text("configuring\n")
    assert build_guard.build_percent(log) is None
