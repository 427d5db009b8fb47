"""The what-if twin: the simulator's step model fitted to a measured run (`fit`), the run beside
the simulator's replay of it, with the verdict and what a change gains (`replay`; the replay
itself runs in `llmload.cli.twin`), and the decision at the production rungs (`decision`).

May import: `llmload.core`, the rooms below it (`llmload.analysis.run`, `identity`) and the
commands' analyses (`llmload.analysis.budget`); never gevent, Locust or tabulate.
"""
