"""What a run sends and when: the prompts of a workload, built before the timed path and
reproducible from the seed, and their calibration on the server (`prompts`), multi-turn sessions
(`sessions`), trace replay (`trace`) and request-rate arrival schedules (`arrivals`).

May import: `llmload.core` (and, for the calibration request, `llmload.loadgen.transport.preflight`'s
HTTP helpers); never the ladder or a user.
"""
