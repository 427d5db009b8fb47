"""A user's request path, from its Locust user to its record: the user classes (`users`), one
request with its retries and its record (`client`), the request body (`payload`), the SSE parser
that times every token chunk (`sse`, with its fast path `sse_template`), reads before writes
(`send_gate`) and the garbage collector out of a rung (`garbage`). The wire itself is
`llmload.loadgen.transport`'s.

May import: `llmload.core`, `llmload.analysis`, `llmload.loadgen.transport`,
`llmload.loadgen.workload.prompts` and the run's stage board (`llmload.loadgen.run.worker_state`).
"""
