"""Names of the Locust stats entries the harness fires, shared by the users and the post-processor.

One entry per rung carries the requests: type `REQUEST_TYPE`, name `rung_name(...)`,
response_time = end-to-end ms, response_length = output tokens. Nothing else is fired, so
Locust's own "Aggregated" row counts real requests only (TTFT and TPOT are in the web UI's Tokens
tab and the sweep table). Runs of older versions also fired "TTFT"/"TPOT" pseudo-entries with the
same names; readers filter on `REQUEST_TYPE`, so their files still read the same.
"""

from __future__ import annotations

import re

REQUEST_TYPE = "POST"
WARMUP_RUNG = -1
# a record's phase: only "measure" records make a rung's figures; the warm-up, the
# greedy-determinism check's probes (one after each rung, at its concurrency, on prompts of their
# own) and the requests that calibrated synthetic prompts or probed the server are recorded apart
MEASURE_PHASE = "measure"
WARMUP_PHASE = "warmup"
DETERMINISM_PHASE = "determinism"
CALIBRATION_PHASE = "calibration"
PHASES = (MEASURE_PHASE, WARMUP_PHASE, DETERMINISM_PHASE, CALIBRATION_PHASE)

_RUNG_RE = re.compile(r"^rung(?P<num>\d+) c(?P<users>\d+)$")


def rung_name(rung: int, users: int, phase: str = MEASURE_PHASE) -> str:
    """Entry name for rung index `rung` (0-based) at `users` concurrency: 'rung01 c4'; the
    determinism probe after it: 'determinism rung01 c4'."""
    if rung == WARMUP_RUNG:
        return f"warmup c{users}"
    name = f"rung{rung + 1:02d} c{users}"
    return name if phase == MEASURE_PHASE else f"{phase} {name}"


def parse_rung_name(name: str) -> tuple[int, int] | None:
    """(rung index, users) from an entry name, or None if it is not a rung entry."""
    m = _RUNG_RE.match(name)
    if m is None:
        return None
    return int(m["num"]) - 1, int(m["users"])
