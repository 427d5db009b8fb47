"""OpenAI-compatible simulator server with a continuous-batching engine and a ground-truth log."""
