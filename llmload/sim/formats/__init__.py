"""How the simulator frames a reasoning model's tokens on the wire: its thinking in a chat delta
field or in `<think>` tags (`reasoning`), and the Responses API's events (`responses`); its tool
calls and JSON answers (`structured`), with values that fit a JSON Schema (`json_values`)."""
