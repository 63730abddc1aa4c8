"""Automatic prefix caching (vLLM's ``--enable-prefix-caching``): what each request finds cached, and what the
cache holds once for all of them.

vLLM hashes each *whole* block of a prompt (16 tokens) by its tokens and everything before it; a block whose hash
is already in the pool is reused, not computed. So only whole blocks are shared, and at least the prompt's last
token is always computed (it makes the first output token).

- **A shared prefix** (``PrefixCache.shared_tokens`` = P, carried by ``hit_rate`` of the requests, default all,
  chosen by the stream's seed): the prompt lengths include it. Its floor(P / block size) whole blocks are computed
  by the first request that carries it and held by the cache from then on (once, whatever the number of
  requests); each later carrier skips them and holds only its own blocks.
- **A hit rate alone** (h): each prompt finds floor(h x prompt / block size) whole blocks cached and skips them;
  each request still holds all its blocks, since nothing says which requests share them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PrefixPlan:
    cached_tokens: np.ndarray  # per request: prompt tokens it finds cached (whole blocks)
    carriers: np.ndarray  # per request: it carries the shared prefix (its blocks are the cache's, held once)
    shared_blocks: int  # blocks the shared prefix holds once (0: no shared prefix)

    @property
    def hit_share(self) -> float:
        """The share of requests that find anything cached."""
        return float(np.mean(self.cached_tokens > 0)) if len(self.cached_tokens) else 0.0


def plan(prefix, prompt: np.ndarray, block_size: int, seed: int = 0) -> PrefixPlan:
    """What each of the requests (``prompt`` lengths) finds cached under ``prefix`` (a ``PrefixCache``)."""
    n = len(prompt)
    whole = lambda tokens: (np.asarray(tokens) // block_size) * block_size
    most = whole(np.maximum(prompt - 1, 0))  # never the last token
    if prefix.shared_tokens:
        share = 1.0 if prefix.hit_rate is None else prefix.hit_rate
        carriers = np.random.default_rng([seed, 1]).random(n) < share  # its own stream: the arrivals keep theirs
        blocks = prefix.shared_tokens // block_size
        cached = np.where(carriers, np.minimum(blocks * block_size, most), 0)
        return PrefixPlan(cached.astype(np.int64), carriers & (blocks > 0), int(blocks))
    cached = np.minimum(whole(np.floor(prefix.hit_rate * prompt)), most)
    return PrefixPlan(cached.astype(np.int64), np.zeros(n, dtype=bool), 0)
