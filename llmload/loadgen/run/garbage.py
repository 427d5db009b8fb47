"""Python's garbage collector out of a rung's measured time.

A full (oldest-generation) collection walks every object the process holds: with hundreds of
users, their connections, parsers and the run's bookkeeping it stops the event loop for tens of
milliseconds, during which no stream is read and chunks pile up in the sockets. At each stage's
go (the start time is announced `GO_MARGIN_S` ahead, `llmload.loadgen.run.stage_protocol`) the
process collects once and freezes what survives (`gc.freeze`): the collections during the rung
then walk only the objects made since, most of them short-lived. The previous stage's frozen
objects are unfrozen first, so what they left behind is collected at the next go.
"""

from __future__ import annotations

import gc


def settle_before_start() -> None:
    """Collect everything now and keep what survives out of later collections."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
