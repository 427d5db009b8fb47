"""llmload: Locust-based load testing for OpenAI-compatible LLM inference servers.

The package holds all logic; `locustfiles/` and `scripts/` are thin entry points over it.
"""

__version__ = "0.1.0"
