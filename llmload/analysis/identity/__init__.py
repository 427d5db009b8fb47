"""Is a greedy text the same text: where two texts of one prompt part (`text_identity`), and the
in-run check that every rung got the same text for the same prompt (`determinism`). The check
across two runs, `llmload.analysis.output_identity`, uses both.

May import: `llmload.core` only (a rung is read through a Protocol), so a run's post-processing
(`llmload.analysis.run.postprocess`) can call the check; never gevent, Locust or tabulate.
"""
