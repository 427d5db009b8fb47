"""Did the server answer the same greedy text: across two runs (`output_identity`), within one run
at every rung (`determinism`), and where two texts of one prompt part (`text_identity`).

May import: `llmload.core` and `llmload.analysis.run`; never gevent, Locust or tabulate.
"""
