"""The shared vocabulary every layer uses: the run configuration and its schema, per-request
records, run-file names, Locust entry names, exit codes and small pure helpers.

Imports nothing of llmload outside `core` (an import-linter contract checks it).
"""
