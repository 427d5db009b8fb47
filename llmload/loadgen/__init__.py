"""What runs inside Locust: the plugin (options, messages, shutdown), the ladder shape and the
modules it drives (its messages, stage plan, the users' side, the master's run state, start, end
and record sinks), the user classes, the HTTP/SSE client with kernel receive stamps, workloads
and arrival schedules, preflight, the generator's health sampler, the run monitor and the web
UI's Tokens tab.
"""
