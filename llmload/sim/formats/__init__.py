"""How the simulator frames a reasoning model's tokens on the wire: its thinking in a chat delta
field or in `<think>` tags (`reasoning`), and the Responses API's events (`responses`)."""
