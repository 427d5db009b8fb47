"""Pure post-processing of a run's files, as data; it renders nothing (`llmload.output` does).

- `run/`: one run's figures: the records' pass, per-rung tallies, sweep rows, latency metrics,
  token reconciliation, the Locust CSV cross-check, the generator's health, server metrics.
- `identity/`: is a greedy text the same text (within a run: the determinism check).
- the commands' analyses, one module each: `budget` (Amdahl), `compare` (two runs, with
  `output_identity`), `capacity` (the SLO search), `trace_stats`; `soak/` (windows, drift, the
  verdict).
- `twin/`: the simulator's model fitted to a run, and the replay's verdict.

Rooms in that order, upward only ("analysis rooms" contract). Never imports gevent, Locust or
tabulate (import-linter contracts check it), so it runs anywhere.
"""
