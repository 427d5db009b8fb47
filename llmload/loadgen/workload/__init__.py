"""What a run sends and when: the prompts of a workload, built before the timed path and
reproducible from the seed, and their calibration on the server (`prompts`), the request body
(`payload`), multi-turn sessions (`sessions`), trace replay (`trace`) and a conversation trace's conversations
(`trace_play`), and request-rate arrival schedules (`arrivals`).

May import: `llmload.core` only.
"""
