"""A full disk at any rung of `llmload sweep`: the run stops within seconds of the first write
that failed, with one line naming the file and the errno and the exit code WRITE_FAILED, no storm
of connect errors at a dead simulator, the finished rungs in the table, and nothing left running.

The disk is real (tests/fixtures/full_disk.py): a tmpfs of a few tens of KB in a private mount
namespace, or, where the machine allows none, a file-size limit (EFBIG). Its size decides which
write fails first and when: the simulator's truth log, the records, the run file, Locust's CSVs.
What is measured on that disk (the last write, the records) is read by a script run inside the
same namespace after the sweep, as the disk is gone with it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import psutil
import pytest
from fixtures.full_disk import full_disk

from llmload.core.exit_codes import WRITE_FAILED

pytestmark = pytest.mark.untimed  # asserts nothing about time: `make test` runs it beside other work

LADDER = ["--rungs", "1,2,4,8", "--requests-per-user", "4", "--max-tokens", "32"]
FAST_SIM = ["--sim", "base_ms=2", "--sim", "per_seq_ms=0.5"]
# tmpfs sizes that fill during the first, the third and the last rung on this machine; under the
# file-size limit instead, the limit of each file (the truth log, the largest, reaches it first)
SIZES = {"ENOSPC": (64 * 1024, 88 * 1024, 120 * 1024), "EFBIG": (12 * 1024, 24 * 1024, 40 * 1024)}
USERS = 8  # the largest rung
AFTER = r"""
import json, os, sys
folder = sys.argv[1]
times = [os.stat(os.path.join(d, f)).st_mtime for d, _, fs in os.walk(folder) for f in fs]
connect = 0
try:
    for line in open(os.path.join(folder, "run", "run_records.jsonl"), "rb"):
        connect += b'"outcome":"connect_error"' in line
except OSError:
    pass
print("FULLDISK " + json.dumps({"last_write": max(times, default=0), "connect_errors": connect}))
"""


def sweep_on_full_disk(tmp_path, size: int) -> tuple[subprocess.CompletedProcess[str], dict, float, str]:
    disk = full_disk(tmp_path / f"disk{size}", size)
    run_dir = disk.folder / "run"
    sweep = [sys.executable, "-m", "llmload", "sweep", "--run-dir", str(run_dir), *LADDER, *FAST_SIM]
    after = tmp_path / "after.py"  # beside the disk, not on it
    after.write_text(AFTER)
    script = f'"$@"; rc=$?; {sys.executable} {after} {disk.folder} >&2; exit $rc'
    argv = disk.argv(["sh", "-c", script, "sh", *sweep])
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=240, preexec_fn=disk.preexec, cwd=tmp_path
    )
    ended = time.time()
    found = re.search(r"^FULLDISK (.*)$", done.stderr, re.MULTILINE)
    assert found, done.stderr[-3000:]
    return done, json.loads(found.group(1)), ended, disk.errno_name


def test_a_full_disk_at_several_rungs_stops_the_sweep_at_once(tmp_path):
    finished = []
    for size in SIZES[full_disk(tmp_path / "probe", 1).errno_name]:
        done, measured, ended, errno_name = sweep_on_full_disk(tmp_path, size)
        out, err = done.stdout, done.stderr
        assert done.returncode == WRITE_FAILED, err[-3000:]
        assert "Traceback" not in err and "Traceback" not in out
        lines = [line for line in err.splitlines() if not line.startswith("FULLDISK ")]
        errors = [line for line in lines if ": error: " in line]
        assert len(errors) == 1, err[-3000:]
        assert lines[-1] == errors[0]  # the last line says why
        assert f"[Errno {28 if errno_name == 'ENOSPC' else 27} {errno_name}]" in errors[0], errors[0]
        assert str(tmp_path) in errors[0]  # the file is named
        # the last write that reached the disk (just before the first that failed) to the exit:
        # the sweep's own exit is less than the measured gap (the script after it is quick)
        assert ended - measured["last_write"] < 10.0, (measured, ended)
        assert measured["connect_errors"] <= 2 * USERS, measured  # no storm at a dead simulator
        # nothing of the run is left: no process names the disk's folder
        time.sleep(0.5)
        alive = [
            p.info["cmdline"]
            for p in psutil.process_iter(["cmdline"])
            if any(f"disk{size}" in part for part in (p.info["cmdline"] or []))
        ]
        assert alive == []
        rows = [line for line in out.splitlines() if re.match(r"^\s+\d+[!~]?\s", line)]
        assert len(rows) == 4, out  # every rung of the ladder, the unfinished marked
        finished.append(sum(1 for row in rows if not re.match(r"^\s+\d+[!~]", row)))
    # the disk filled at different rungs: what finished before it is in the table, unmarked
    assert len(set(finished)) >= 2, finished
