"""llmload inside Locust's web UI: the Tokens tab and the sweep-table CSV download (`tokens_tab`),
the live sweep it shows, tallied from the records the master receives (`live_sweep`), and the
token charts page (`token_charts`, with `token_charts.html`).

May import: `llmload.core`, `llmload.analysis`, `llmload.output` and the run in progress
(`llmload.loadgen.run`); not the monitors (an independent room).
"""
