"""A soak run judged from its files: windows, thresholds and the verdict (`verdict`), and the
straight-line trend with its confidence interval that judges drift (`drift`).

May import: `llmload.core`, `llmload.analysis.run` and `identity`; never gevent, Locust or tabulate.
"""
