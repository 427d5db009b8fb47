"""Everything that speaks HTTP to the target: each user's `Transport` and the exchange of one
request (`exchange`), its connections (`connections`), the request head (`request_head`), kernel
receive stamps (`receive_stamps`), the hub's stream reader (`stream_reader`), reads before writes
(`send_gate`), the run's one-off check of the target with the TLS context and auth header every
request uses (`preflight`), a text's tokens as the server counts them, for the calibration of
synthetic prompts (`token_counts`), and the server's pages read with one GET: `/metrics` and its
version (`server_pages`). Its contact with geventhttpclient's and gevent's private internals is all in
`ghc_adapter`, whose contract test (`tests/unit/test_ghc_adapter_contract.py`) checks every
private name it relies on against the installed releases.

May import: `llmload.core` and `llmload.loadgen.stream` (it feeds the parser); no other room.
"""
