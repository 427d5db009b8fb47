"""Pure post-processing of a run's files: sweep rows, latency metrics, token reconciliation, the
Locust CSV cross-check, server metrics, comparisons, budgets, soak judgement.

Never imports gevent or Locust (an import-linter contract checks it), so it runs anywhere.
"""
