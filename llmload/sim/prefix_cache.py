"""The simulator's prefix cache: fixed-size blocks of prompt tokens, chained by content, evicted LRU.

The model (the same one `llmload trace-stats` uses to predict hit rates):
- A prompt is a sequence of token units (`prompt_units`): the BOS unit, then the simulator's
  tokens of a completions prompt (`llmload.core.workload.token_count.text_tokens`), or for chat, per
  message three template units then the tokens of its content; so unit i is the prompt's token i, and
  the units count exactly the tokens `count_tokens` / `chat_prompt` count.
- Its full blocks of `block_size` units get keys chained over the prefix (a block's key hashes
  its parent's key and its own units), so a block hits only when the whole prompt before it is
  the same. A trailing partial block is never cached.
- When a request is admitted to the batch, its leading blocks are looked up in order until the
  first miss; a hit never covers the prompt's last token (the server must compute it to produce
  the first output token; vLLM caps hits the same way), so only blocks within the first
  prompt_tokens - 1 tokens count. cached_tokens = hit blocks * block_size.
- Then every full block of the prompt is touched (hits) or inserted (misses) in prompt order as
  the most recently used; beyond `capacity_blocks` the least recently used block is evicted.
  Blocks of running requests are not pinned: the capacity is the whole cache budget.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping, Sequence

from llmload.core.workload.token_count import text_tokens
from llmload.sim.tokens import BOS_TOKENS, CHAT_TEMPLATE_TOKENS_PER_MESSAGE

TEMPLATE_UNITS = ("<|start|>", "<|sep|>")  # with the role unit: 3 per chat message
assert len(TEMPLATE_UNITS) + 1 == CHAT_TEMPLATE_TOKENS_PER_MESSAGE
BOS_UNITS = ["<|bos|>"] * BOS_TOKENS


def prompt_units(prompt: str | None, messages: Iterable[Mapping[str, object]] | None = None) -> list[str]:
    """The token units of a completions prompt, or of chat messages when given."""
    if messages is None:
        return BOS_UNITS + text_tokens(prompt or "")
    units = list(BOS_UNITS)
    for m in messages:
        units += [TEMPLATE_UNITS[0], f"<|{m.get('role', '')}|>", TEMPLATE_UNITS[1]]
        units += text_tokens(str(m.get("content") or ""))
    return units


def block_keys(units: Sequence[str], block_size: int) -> list[bytes]:
    """Chained content keys of the full blocks of `units`."""
    keys: list[bytes] = []
    parent = b""
    for start in range(0, len(units) - block_size + 1, block_size):
        block = "\x00".join(units[start : start + block_size]).encode()
        parent = hashlib.blake2b(parent + b"\x00" + block, digest_size=16).digest()
        keys.append(parent)
    return keys


class PrefixCache:
    """An LRU set of block keys with a capacity in blocks; `admit` is the whole policy."""

    def __init__(self, block_size: int, capacity_blocks: int) -> None:
        if block_size < 1 or capacity_blocks < 1:
            raise ValueError("the prefix cache needs block_size >= 1 and capacity_blocks >= 1")
        self.block_size = block_size
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[Hashable, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def admit(self, keys: Sequence[Hashable], prompt_tokens: int) -> int:
        """Look up then store a prompt's full blocks (see the module docstring); its cached tokens."""
        blocks = self._blocks
        lookable = min(len(keys), max(prompt_tokens - 1, 0) // self.block_size)
        hits = 0
        while hits < lookable and keys[hits] in blocks:
            hits += 1
        for key in keys:
            if key in blocks:
                blocks.move_to_end(key)
            else:
                blocks[key] = None
                if len(blocks) > self.capacity_blocks:
                    blocks.popitem(last=False)
        return hits * self.block_size
