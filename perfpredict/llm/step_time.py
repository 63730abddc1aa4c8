"""The one seam between the serving simulation and the engine: how long a step of a given batch takes.

A step runs prefill chunks ((query tokens, context after them) per prefilling sequence) and decodes (sequences,
the tokens of cache they hold in all, the longest); :class:`EngineStepTime` answers with the engine's own
functions, ``StepCosts.decode_s`` and ``StepCosts.prefill_s`` for the GPU and ``host_costs.HostCost.step`` for
the engine's host time per step, combined by ``HostStep.wall_s``: added in turn where the version runs a phase in
its loop (vLLM 0.6's scheduler), hidden behind the GPU where it overlaps (0.6's asynchronous output processing,
SGLang's overlap scheduler), or a floor where another process runs it (V1's frontend, an API server). Nothing
else of the engine is read: :meth:`EngineStepTime.wall_s` is the only place that combines the GPU's and the
host's time.

A simulation asks for thousands of decode steps, each a slightly different context, and one exact answer costs
about 0.2 ms, so :class:`StepTimeSurface` answers decodes from exact answers at a few points: for each decode batch
size that occurs (every size exactly: a CUDA-graph step runs at its padded size, which no interpolation across
sizes would see), at mean contexts on a geometric grid (``CONTEXT_POINTS`` per doubling), interpolated linearly in
the context between the two around it, each computed once when first needed. Its error against exact answers is
measured by ``benchmarks/serving_sim.py`` (``benchmarks/results/serving_sim.md``). Prefill and mixed steps are
exact, memoised on their exact shape (a simulation has about one per admitted request).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

CONTEXT_POINTS = 6  # anchors per doubling of the mean context (a ratio of 2^(1/6) between neighbours)


class EngineStepTime:
    """Step times from the engine's ``StepCosts`` (GPU) and ``HostCost`` (host), driving ``workers`` GPU workers
    (and ``pp`` virtual engines, whose host parts the driver runs in turn)."""

    def __init__(self, costs, host, workers: int, capture_len: int | None = None, pp: int = 1) -> None:
        self.costs, self.host, self.workers, self.pp = costs, host, workers, pp
        # the longest context a captured CUDA graph decodes (vLLM's max_seq_len_to_capture): beyond, steps are eager
        self.capture_len = capture_len

    def decode_s(self, seqs: int, context_sum: float, max_context: int) -> float:
        """GPU seconds of a decode-only step."""
        return self.costs.decode_s(seqs, context_sum, max_context)

    def mixed_s(
        self, chunks: Sequence[tuple[int, int]], decode_seqs: int = 0, decode_context_sum: float = 0.0
    ) -> float:
        """GPU seconds of a step that prefills ``chunks`` and decodes ``decode_seqs`` sequences with it."""
        return self.costs.prefill_s(list(chunks), decode_seqs, decode_context_sum)

    def wall_s(self, gpu_s: float, seqs: int, prefill_tokens: int, output_tokens: int, new_requests: int) -> float:
        """The step's wall time: the GPU's and the engine's host time, as its version places each phase."""
        step = self.host.step(seqs, prefill_tokens, output_tokens, self.workers, new_requests)
        return step.wall_s(gpu_s, self.pp)


class StepTimeSurface:
    """``exact``'s step times, decodes from a lazily filled surface (see the module docstring)."""

    def __init__(self, exact, max_context: int) -> None:
        self.exact = exact
        doublings = max(np.log2(max(max_context, 2)), 1.0)
        self.anchors = tuple(float(a) for a in np.exp2(np.arange(0.0, doublings + 1e-9, 1.0 / CONTEXT_POINTS)))
        self._decode = lru_cache(maxsize=None)(self._decode_exact)
        self._mixed = lru_cache(maxsize=4096)(self._mixed_exact)

    def decode_s(self, seqs: int, context_sum: float, max_context: int) -> float:
        mean = max(context_sum / max(seqs, 1), 1.0)
        long = self.exact.capture_len is not None and max_context > self.exact.capture_len
        i = min(max(bisect.bisect_right(self.anchors, mean) - 1, 0), len(self.anchors) - 2)
        lo, hi = self.anchors[i], self.anchors[i + 1]
        y0, y1 = self._decode(seqs, i, long), self._decode(seqs, i + 1, long)
        return y0 + (y1 - y0) * (mean - lo) / (hi - lo)

    def _decode_exact(self, seqs: int, i: int, long: bool) -> float:
        mean = self.anchors[i]
        longest = max(int(mean), self.exact.capture_len + 1) if long else int(mean)
        return self.exact.decode_s(seqs, seqs * mean, longest)

    def mixed_s(
        self, chunks: Sequence[tuple[int, int]], decode_seqs: int = 0, decode_context_sum: float = 0.0
    ) -> float:
        return self._mixed(tuple(chunks), decode_seqs, float(decode_context_sum))

    def _mixed_exact(self, chunks: tuple, decode_seqs: int, decode_context_sum: float) -> float:
        return self.exact.mixed_s(chunks, decode_seqs, decode_context_sum)

    def wall_s(self, gpu_s: float, seqs: int, prefill_tokens: int, output_tokens: int, new_requests: int) -> float:
        return self.exact.wall_s(gpu_s, seqs, prefill_tokens, output_tokens, new_requests)

    @property
    def exact_decodes(self) -> int:
        """Exact decode answers computed so far (what the surface cost)."""
        return self._decode.cache_info().currsize


class SpeculativeStepTime:
    """A decode step under speculative decoding: ``k`` proposals from the draft (``draft``'s decode steps; none
    for n-gram lookup), then the target verifies them as a prefill of k + 1 tokens per sequence."""

    def __init__(self, target, k: int, draft=None) -> None:
        self.target, self.k, self.draft = target, k, draft
        self.capture_len = getattr(target, "capture_len", None)

    def decode_s(self, seqs: int, context_sum: float, max_context: int) -> float:
        q = self.k + 1
        mean = context_sum / max(seqs, 1)
        # each sequence's chunk: k + 1 query tokens over its context and them
        verify = self.target.mixed_s(((q, int(round(mean)) + q),) * seqs) if seqs else 0.0
        drafts = self.k * self.draft.decode_s(seqs, context_sum, max_context) if self.draft is not None else 0.0
        return verify + drafts

    def mixed_s(self, chunks, decode_seqs: int = 0, decode_context_sum: float = 0.0) -> float:
        return self.target.mixed_s(chunks, decode_seqs, decode_context_sum)

    def wall_s(self, gpu_s: float, seqs: int, prefill_tokens: int, output_tokens: int, new_requests: int) -> float:
        return self.target.wall_s(gpu_s, seqs, prefill_tokens, output_tokens, new_requests)
