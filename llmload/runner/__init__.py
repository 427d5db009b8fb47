"""Running sweeps as processes, for the commands (`llmload.cli`) that start them.

`sweep_run`: one sweep: the simulator (unless a host is named) and Locust started and stopped by
PID, stop signals acted on; `progress`: its progress line on a terminal; `sweep_input`: what is
checked before any process starts (the --sim flags, Locust's options, the run folder's claim);
`run_outcome`: how a run ended, said once (its exit code and its one line) for `llmload sweep` and
`llmload capacity`; `twin_replays`: `llmload sweep` as child processes, the twin's replays.

May import: loadgen, output, analysis, core, servers, the simulator's flag parser and truth log,
the packaged locustfiles; never `llmload.cli` (the layers: cli > runner > loadgen > output >
analysis > core).
"""
