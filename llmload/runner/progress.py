"""The progress line `llmload sweep` shows on a terminal while Locust runs: the stage being run,
its requests done of expected, and its agg and per-request tok/s so far.

`Progress(prefix)` follows the run's own files as Locust writes them: it reads the growing
`<prefix>_records.jsonl` from where it stopped last time (a half-written last line waits for the
next poll) and `<prefix>_run.json` (the stages begun so far, with their expected requests). The
figures are those of the sweep table: `llmload.analysis.run.rung_tally` (the post-processor's
definitions on running sums) with the table's rounding (`llmload.output.toolkit.cells.fmt_num`). The line
is rewritten in place with `\\r` only when the stream is a terminal; piped or redirected, nothing
is written (poll() still returns the line).

Use: `progress = Progress(prefix)`, then `progress.poll()` about once a second while Locust runs,
and `progress.close()` when it has exited (or `with Progress(prefix) as progress:`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

from llmload.analysis.run.rung_tally import SweepTally
from llmload.core.files.jsonl import loads
from llmload.core.files.run_files import RunFiles
from llmload.core.files.run_info import read_run_file
from llmload.core.names import MEASURE_PHASE, WARMUP_RUNG
from llmload.output.toolkit.cells import fmt_num


class Progress:
    """One run's progress line, computed from its files; written only to a terminal."""

    def __init__(
        self, prefix: str | Path | RunFiles, stream: TextIO | None = None, columns: int | None = None
    ) -> None:
        """`prefix`: the run's prefix, or its files; `columns`: the terminal's width (default:
        asked from the stream); the line is cut to fit in it, as a longer one would wrap and
        defeat the rewrite in place."""
        files = prefix if isinstance(prefix, RunFiles) else RunFiles(Path(prefix))
        self.records_path, self.run_path = files.records, files.run
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.on_terminal = bool(isatty and isatty())
        self.width = (columns or _columns(self.stream)) - 1
        self.tally = SweepTally()
        self._offset = 0  # bytes of the records file read into the tally (complete lines only)
        self._shown = ""  # the line on the terminal now

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read_records(self) -> None:
        """Tally the complete lines added since the last call (a line without its newline is
        being written: read it next time). A file shorter than what was read is a new run."""
        try:
            with self.records_path.open("rb") as fh:
                fh.seek(0, 2)
                if fh.tell() < self._offset:
                    self.tally, self._offset = SweepTally(), 0
                fh.seek(self._offset)
                chunk = fh.read()
        except OSError:
            return
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(complete)
        for line in complete.splitlines():
            try:
                self.tally.add(loads(line))  # orjson: the line shares the generator's cores
            except (ValueError, TypeError, KeyError):
                continue  # not a record: the post-processor skips it too (and says so)

    def line(self) -> str | None:
        """The progress line for what has been read so far; None before the first stage began."""
        run = read_run_file(self.run_path)[0]  # None before the ladder wrote it (written whole)
        if run is None or not run.stages:
            return None
        stage = run.stages[-1]
        expected = stage.expected_requests
        if stage.rung == WARMUP_RUNG:
            head, done, rates = "warm-up", self.tally.warmup_requests, ""  # no rates: not measured
        elif stage.phase != MEASURE_PHASE:  # a determinism probe
            head, done, rates = stage.name, None, ""
        else:
            ladder = run.recorded("rungs", "mode")
            rungs = ladder.rungs if ladder else ()
            head = f"{stage.name} ({len(run.measured_stages)}/{len(rungs)})" if rungs else stage.name
            tally = self.tally.rungs.get(stage.rung)
            done = tally.requests if tally else 0
            row = tally.row() if tally else None
            rates = (
                f"  agg {fmt_num(row.agg_tok_s)} tok/s  per-request {fmt_num(row.per_req_tok_s)} tok/s"
                if row and row.tokens
                else ""
            )
        of = f"/{expected}" if expected is not None else ""
        state = "  done" if run.finished else ""
        if done is None:
            return f"{head}  {expected} requests{state}"
        return f"{head}  {done}{of} requests{rates}{state}"

    def poll(self) -> str | None:
        """Read what the run wrote since the last poll and, on a terminal, rewrite the line."""
        self._read_records()
        try:
            text = self.line()
        except (KeyError, TypeError, IndexError, AttributeError):
            return None  # a run file of another shape: no line (never an error in the sweep)
        shown = text[: self.width] if text is not None else ""
        if shown and shown != self._shown and self.on_terminal:
            self.stream.write("\r" + shown.ljust(len(self._shown)))
            self.stream.flush()
            self._shown = shown
        return text

    def close(self) -> None:
        """Show the final figures and end the line (on a terminal), so what follows starts clean."""
        self.poll()
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = ""


def _columns(stream: TextIO) -> int:
    """The terminal's width in columns (80 when the stream does not say)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 80
