"""What watches a run besides the measurement: the target's check before the first rung
(`preflight`), the load generator's own health samples in every users' process
(`health_sampler`), the master's run monitor that scrapes the server's `/metrics` (`run_monitor`),
and a soak run's verdict as the exit code (`soak_monitor`).

May import: `llmload.core`, `llmload.analysis` and the run in progress (`llmload.loadgen.run`).
"""
