"""Figures per session: a top-level session and its sub-agents rolled up per rung (`figures`:
makespan percentiles, turns, tool calls and sub-agents per session, the shares of a session's
time on the model, on tools and elsewhere, the sessions cut apart), from the time intervals of
their requests and tool waits (`intervals`).

May import: `llmload.core`; never gevent, Locust or tabulate.
"""
