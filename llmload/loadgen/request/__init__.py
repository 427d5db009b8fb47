"""A Locust user and its requests: the user classes, which wait for the ladder's stages and play
their quota, sessions or arrivals (`users`), and one request with its retries, total timeout and
record (`client`), whose structured answer is checked against its schema (`reply_check`).

May import: `llmload.core`, `llmload.analysis`, `llmload.loadgen.options` and `shutdown`, and the
rooms below it (`run`, `workload`, `transport`, `stream`).
"""
