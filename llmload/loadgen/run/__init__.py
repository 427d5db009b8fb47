"""The ladder and the master's run: the `LoadTestShape` that walks the rungs (`ladder`), its pure
stage machine (`stage_protocol`), the stages a configuration asks for (`stage_plan`), the custom
messages (`messages`), a users' process's view of the announced stage (`worker_state`), and on the
master the run in progress (`run_state`), its start (`run_start`), what happens to each record
(`record_sinks`, `capacity_probes`), its errors (`run_errors`) and its end (`run_end`).

May import: `llmload.core`, `llmload.analysis`, `llmload.output` and the other rooms of
`llmload.loadgen` (a user's request path, workloads, monitors); nothing in `llmload.cli`.
"""
