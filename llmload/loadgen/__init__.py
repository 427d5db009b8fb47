"""What runs inside Locust, in rooms by job (their order is an import-linter contract, "loadgen
rooms"; docs/architecture.md):

- `plugin` (with `options`, `locust_args`, `argparse_adapter`, `shutdown` and `csv_watch` beside
  it): hooks llmload into Locust: its options, messages, monitors, web UI, how a process ends,
  and Locust's own CSVs that cannot be written stopping the run.
- `webui/`, `monitor/`: what watches a run: the web UI's Tokens tab and charts; the generator's
  health, the server's `/metrics`, a soak's verdict.
- `request/`: a Locust user and its requests (retries, the record).
- `run/`: the ladder and the master's run: stages, messages, records' sinks, start and end.
- `workload/`: what a run sends and when: prompts, the request body, sessions, traces, arrivals.
- `transport/`: everything that speaks HTTP to the target: a user's exchange, its connections,
  kernel receive stamps, the hub's stream reader, the preflight.
- `stream/`: the SSE parser that turns a stream into timed token chunks.

A room imports only the rooms below it; all may import `llmload.core`, `llmload.analysis` and
`llmload.output`.
"""
