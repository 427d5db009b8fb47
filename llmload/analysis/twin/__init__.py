"""The what-if twin: the simulator's step model fitted to a measured run (`fit`), and the run beside
the simulator's replay of it, with the verdict and what a change gains (`replay`).

May import: `llmload.core`, `llmload.analysis.run` and `llmload.analysis.budget`; never gevent,
Locust or tabulate (the replay itself runs in `llmload.cli.twin`).
"""
