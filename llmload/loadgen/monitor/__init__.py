"""What watches a run besides the measurement: the load generator's own health samples in every
users' process (`health_sampler`), the master's run monitor that writes the run's environment and
scrapes the server's `/metrics` (`run_monitor`) with the live scraper (`scraper`; NVML's GPUs
read as one: `nvml`), a soak run's verdict as the exit code (`soak_monitor`), and the run's live
metrics for Prometheus and OpenTelemetry (`live_metrics`: the tally of `live_series`, served by
`prometheus_endpoint`, pushed by `otlp_push`).

May import: `llmload.core`, `llmload.analysis`, `llmload.output`, the run in progress
(`llmload.loadgen.run`) and the transport's GETs (`llmload.loadgen.transport.server_pages`); not
the web UI (an independent room).
"""
