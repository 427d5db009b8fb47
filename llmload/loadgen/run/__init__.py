"""The ladder and the master's run: the `LoadTestShape` that walks the rungs (`ladder`), its pure
stage machine (`stage_protocol`), the stages a configuration asks for (`stage_plan`), the custom
messages (`messages`), a users' process's view of the announced stage (`worker_state`) and the
garbage collector kept out of a rung (`garbage`); on the master, the run in progress
(`run_state`), its start (`run_start`), what happens to each record (`record_sinks`,
`capacity_probes`), its errors (`error_log`) and its end (`run_end`).

May import: `llmload.core`, `llmload.analysis`, `llmload.loadgen.options`, and the rooms below it
(`workload`, `transport`, `stream`); never a user, a monitor or the web UI.
"""
