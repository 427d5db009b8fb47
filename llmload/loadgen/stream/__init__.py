"""A streamed answer, parsed: the SSE accumulator that turns an OpenAI-compatible stream's messages
into token chunks with their receive times, counts and usage, and marks what a late read may have
delayed (`sse`), and its fast path for a stream's repeated token-chunk shape (`sse_template`); the
token chunks' state by kind and what it adds up to (`chunks`); a data line's JSON and the stream's
errors (`decode`); a reasoning model's thinking told from its answer (`reasoning`); a reply's tool
calls gathered from their pieces (`tool_calls`); the Responses API's events (`responses`, and
`accumulator_for`: the accumulator of an endpoint).

May import: `llmload.core` and `llmload.analysis`; nothing else of `llmload.loadgen` (the
transport feeds it, the request client reads it).
"""
