"""One run's figures, read from its files: the one pass over the records (`records_pass`) into
per-rung tallies (`rung_tally`: the sweep row, `sweep_rows`, and the latency metrics, `metrics`),
the whole post-processing in one call (`postprocess`), token reconciliation (`reconcile`), the
Locust CSV cross-check (`locust_csv`), the generator's health (`health`), timing uncertainty
where the generator read late (`uncertainty`), the server's own metrics per rung
(`server_metrics`), the decode step and batch as the server ran them (`steps`) and
production-shaped traffic's figures (`production_traffic`).

May import: `llmload.core` and `llmload.analysis.identity` (the determinism check); never gevent,
Locust or tabulate.
"""
