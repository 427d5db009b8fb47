"""The shared vocabulary every layer uses: the run configuration, its schema and value checks
(`config`, `schema`, `checks`), names, exit codes, every command's one error boundary
(`command_line`), a child's reason for stopping told over a pipe (`status_pipe`), and small pure
helpers; `files/` (records,
their chunk index, every file of a run) and `workload/` (lengths, prompt files, traces, the token
model).

Imports nothing of llmload outside `core` (an import-linter contract checks it).
"""
