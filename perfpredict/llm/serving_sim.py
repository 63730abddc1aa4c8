"""A vLLM-class engine serving a stream of requests, simulated step by step over time.

Requests arrive (``request_stream``) into a first-come-first-served queue, and every step the scheduler decides
what the GPU runs, as vLLM 0.6's V0 scheduler does (``scheduler.Scheduler`` runs the same rules over a batch that
arrives at once; this one keeps every request's state in arrays so that a thousand requests simulate in well
under a second):

- **Admission**: the request at the head of the queue is admitted while the step's token budget
  (``max_num_batched_tokens``), the sequence limit (``max_num_seqs``) and the free KV blocks less a 1% watermark
  allow; a head that does not fit blocks the queue behind it. Blocks for its prompt (vLLM, SGLang, MII), or with
  ``reserve`` (TensorRT-LLM's GUARANTEED_NO_EVICT) for its prompt and every token it will generate, taken at
  once: such an engine never preempts.
- **Without chunked prefill** a step that admits any runs those prefills alone (each emits its first token);
  otherwise it decodes every running sequence.
- **With chunked prefill** each step spends its budget on one token per decoding sequence first, then on chunks
  of the prompts being prefilled, then on new prompts; a step mixes both.
- **Whole prompts** (``whole_prompts``: TensorRT-LLM's in-flight batching without chunked context) as chunked
  prefill, but a prompt joins a step only whole, while the budget left holds it.
- **Preemption**: a decoding sequence that needs a new block when none is free evicts the most recently admitted
  sequence (its blocks freed, its prompt and generated tokens prefilled again later: recompute).
- **Prefix caching** (``prefix_cache.PrefixPlan``): a request skips computing its cached tokens, and a shared
  prefix's blocks are held once.
- **Speculative decoding**: a decode step gains ``tokens_per_step`` tokens per sequence on average and reserves
  ``lookahead`` KV slots ahead; steps that prefill decode without speculation, as vLLM's V0 does.

Between events (an arrival the engine could admit, a sequence finishing, a block boundary the pool cannot cover),
decode steps differ only in their growing context, so a run of them is timed in one go at its mean context. Each
step's time comes from one seam (``step_time``): GPU seconds of the batch, then the wall time with the host's.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfpredict.core.errors import InvalidInputError

RUN_CAP = 64  # decode steps timed together at most (their context grows by one token a step)


@dataclass(frozen=True)
class SimEngine:
    """What the simulation needs of an engine: the step-time seam, the KV pool and the scheduler's limits."""

    step: Any  # step_time.EngineStepTime, StepTimeSurface or anything with decode_s, mixed_s and wall_s
    kv: Any  # paged_kv.KvPlan: blocks, block_size, window
    max_num_seqs: int
    budget_tokens: int  # max_num_batched_tokens
    chunked_prefill: bool
    watermark: float = 0.01
    tokens_per_step: float = 1.0  # speculative decoding's expected tokens per sequence per decode step
    lookahead: int = 0  # KV slots a speculative step writes ahead of the sequence
    reserve: bool = False  # admission takes the blocks of the prompt and all its new tokens (no preemption)
    whole_prompts: bool = False  # prompts join a step only whole (mixed batching without chunking)


@dataclass
class SimStats:
    """Totals over the run: seconds, steps, tokens."""

    busy_s: float = 0.0  # steps' wall time (the engine idles between requests otherwise)
    gpu_s: float = 0.0
    prefill_gpu_s: float = 0.0  # of gpu_s, in steps that prefill (the rest decodes): what the power model weighs
    seq_s: float = 0.0  # sequences in each step x its wall time: its mean over busy_s is the mean running batch
    steps: int = 0
    prefill_steps: int = 0
    preemptions: int = 0
    peak_blocks: int = 0
    peak_running: int = 0
    prefill_tokens: int = 0  # computed (a cache hit's tokens are not)
    cached_tokens: int = 0  # skipped by prefix caching
    hit_requests: int = 0  # requests whose first prefill found tokens in the prefix cache

    @property
    def host_s(self) -> float:
        return self.busy_s - self.gpu_s


@dataclass(frozen=True)
class SimTrace:
    """Each request's arrival, first-token and finish seconds, and the run's totals."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    preempted: np.ndarray
    stats: SimStats = field(default_factory=SimStats)

    @property
    def makespan_s(self) -> float:
        return float(self.finish_s.max() - self.arrival_s.min()) if len(self.finish_s) else 0.0


class Simulator:
    """One run of ``requests`` (``request_stream.Requests``) through ``engine``."""

    def __init__(self, engine: SimEngine, requests, prefix=None) -> None:
        n = len(requests)
        self.e, self.kv, self.step = engine, engine.kv, engine.step
        self.arrival, self.prompt, self.output = requests.arrival_s, requests.prompt, requests.output
        self.gen = np.zeros(n)  # tokens generated (fractional under speculation: an expectation)
        self.pre = np.zeros(n, dtype=np.int64)  # tokens in the cache from the current (re)prefill
        self.goal = np.zeros(n, dtype=np.int64)  # tokens that (re)prefill puts in the cache
        self.blocks = np.zeros(n, dtype=np.int64)  # blocks the request holds itself (a shared prefix's are not)
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.preempted = np.zeros(n, dtype=np.int64)
        self.cached = prefix.cached_tokens if prefix is not None else np.zeros(n, dtype=np.int64)
        self.carrier = prefix.carriers if prefix is not None else np.zeros(n, dtype=bool)
        self.shared_blocks = prefix.shared_blocks if prefix is not None else 0
        self.owner: int | None = None  # the request that computes the shared prefix first
        self.resident = False  # the shared prefix is computed: later carriers skip it
        self.free = self.kv.blocks
        self.watermark = int(engine.watermark * self.kv.blocks)
        self.waiting: deque[int] = deque()
        self.running: list[int] = []
        self.next, self.done, self.now = 0, 0, 0.0
        self.stats = SimStats()

    # -- the loop ---------------------------------------------------------------------------------------------
    def run(self) -> SimTrace:
        n = len(self.prompt)
        while self.done < n:
            self._arrive()
            if not self.waiting and not self.running:
                self.now = max(self.now, float(self.arrival[self.next]))
                continue
            if not self.running and not self._can_allocate(self.waiting[0]):
                self._refuse(self.waiting[0])
            if not self.running and self.e.whole_prompts and self._computed(self.waiting[0]) > self.e.budget_tokens:
                self._refuse_long(self.waiting[0])
            if self.e.chunked_prefill or self.e.whole_prompts:
                self._chunked_step()
            else:
                self._default_step()
        return SimTrace(self.arrival, self.first, self.finish, self.prompt, self.output, self.preempted, self.stats)

    def _arrive(self) -> None:
        n = len(self.arrival)
        while self.next < n and self.arrival[self.next] <= self.now + 1e-12:
            self.waiting.append(self.next)
            self.next += 1

    def _refuse(self, i: int) -> None:
        if self.e.reserve:  # admission reserves the prompt and every token the request will generate
            tokens = int(self.prompt[i] + self.output[i] + self.e.lookahead)
            what, fix = f"{tokens} tokens: its prompt and every new token, reserved at admission", "shorter outputs"
        else:
            what, fix = f"{self._target(i)} tokens", "a shorter prompt"
        raise InvalidInputError(
            f"request {i} ({what}) needs more KV blocks than the engine has ({self.kv.blocks} less a "
            f"{self.watermark}-block watermark); the engine would never schedule it: ask for {fix}, or give the KV "
            "cache more memory (--gpu-memory-utilization, --tp)"
        )

    def _refuse_long(self, i: int) -> None:
        raise InvalidInputError(
            f"request {i} computes {self._computed(i)} prompt tokens, more than a step's budget of "
            f"{self.e.budget_tokens} (max_num_tokens), and this engine batches only whole prompts: raise "
            "--max-num-batched-tokens, turn on --chunked-prefill (chunked context), or shorten the prompt"
        )

    # -- the default (prefill-first) policy -------------------------------------------------------------------
    def _default_step(self) -> None:
        admitted, tokens = [], 0
        while self.waiting and len(self.running) + len(admitted) < self.e.max_num_seqs:
            i = self.waiting[0]
            need = self._computed(i)
            if tokens + need > self.e.budget_tokens or not self._can_allocate(i):
                break
            self.waiting.popleft()
            self._allocate(i)
            admitted.append(i)
            tokens += need
        if not admitted:
            self._decode_run()
            return
        chunks = [(int(self.goal[i] - self.pre[i]), int(self.goal[i])) for i in admitted]
        new = sum(1 for i in admitted if self.preempted[i] == 0)
        self._spend(self.step.mixed_s(chunks), len(admitted), tokens, len(admitted), new, prefill=True)
        for i in admitted:
            self.pre[i] = self.goal[i]
            self._emit(i)
        self.running.extend(admitted)
        self._settle_prefix()
        self._retire(admitted)

    # -- chunked prefill --------------------------------------------------------------------------------------
    def _chunked_step(self) -> None:
        self._grow(self._split_running()[0], lookahead=0)  # a step that prefills: no proposals
        decodes, prefilling = self._split_running()
        left = self.e.budget_tokens - len(decodes)
        chunks: list[tuple[int, int]] = []
        for i in prefilling:
            if left <= 0:
                break
            take = int(min(self.goal[i] - self.pre[i], left))
            chunks.append((i, take))
            left -= take
        new = 0
        while left > 0 and self.waiting and len(self.running) < self.e.max_num_seqs:
            i = self.waiting[0]
            if not self._can_allocate(i) or (self.e.whole_prompts and self._computed(i) > left):
                break
            self.waiting.popleft()
            self._allocate(i)
            self.running.append(i)
            new += int(self.preempted[i] == 0)
            take = int(min(self.goal[i] - self.pre[i], left))
            chunks.append((i, take))
            left -= take
        if not chunks:  # nothing to prefill, or the decodes took the whole budget
            self._decode_run(decodes)
            return
        context = float(sum(self.prompt[i] + self.gen[i] for i in decodes))
        shapes = [(q, int(self.pre[i] + q)) for i, q in chunks]
        tokens = sum(q for _, q in chunks)
        gpu = self.step.mixed_s(shapes, len(decodes), context)
        self._spend(gpu, len(decodes) + len(chunks), tokens, len(decodes), new, prefill=True)
        for i in decodes:
            self._emit(i)
        for i, q in chunks:
            self.pre[i] += q
            if self.pre[i] >= self.goal[i]:
                self._emit(i)
        self._settle_prefix()
        self._retire(self.running)

    # -- decode runs ------------------------------------------------------------------------------------------
    def _decode_run(self, decoding: list[int] | None = None) -> None:
        """Decode steps of the ``decoding`` sequences (default: every running one) with the running set unchanged,
        up to the next event (one step at least)."""
        ids = np.array(self.running if decoding is None else decoding, dtype=np.int64)
        if not len(ids):
            return
        per = self.e.tokens_per_step
        lengths = self.prompt[ids] + self.gen[ids]
        steps = min(RUN_CAP, max(1, math.ceil(float((self.output[ids] - self.gen[ids]).min()) / per - 1e-9)))
        context, longest = float(lengths.sum()), int(lengths.max())
        one = self.step.decode_s(len(ids), context, longest)
        steps = min(steps, self._steps_to_arrival(one, len(ids)))
        # a step writes the K and V of each sequence's last token (and of the proposals under speculation)
        need = self._blocks_for(lengths + (steps - 1) * per + self.e.lookahead) - self._shared(ids) - self.blocks[ids]
        need = np.maximum(need, 0)
        if need.sum() > self.free:  # the pool cannot cover the run: one step at a time, preempting as vLLM does
            steps = 1
            self._grow(ids.tolist(), self.e.lookahead)
            ids = ids[np.isin(ids, self.running)]  # less the preempted
            if not len(ids):
                return
            lengths = self.prompt[ids] + self.gen[ids]
            context, longest = float(lengths.sum()), int(lengths.max())
        else:
            self.blocks[ids] += need
            self.free -= int(need.sum())
        n = len(ids)
        mid = context + n * per * (steps - 1) / 2  # the run's mean context
        gpu = self.step.decode_s(n, mid, int(longest + per * (steps - 1))) * steps
        self._spend(gpu, n * steps, 0, int(round(n * per * steps)), 0, prefill=False, steps=steps)
        self.gen[ids] = np.minimum(self.gen[ids] + per * steps, self.output[ids])
        self._retire(list(ids))

    def _steps_to_arrival(self, step_gpu_s: float, seqs: int) -> int:
        """Decode steps before the next arrival is queued, where the engine could admit it then (else no limit)."""
        if self.waiting or self.next >= len(self.arrival) or len(self.running) >= self.e.max_num_seqs:
            return RUN_CAP
        if not self._can_allocate(self.next):
            return RUN_CAP  # it waits for a finish, which ends the run anyway
        wall = self.step.wall_s(step_gpu_s, seqs, 0, seqs, 0)
        return max(1, math.ceil((float(self.arrival[self.next]) - self.now) / max(wall, 1e-12) - 1e-9))

    def _grow(self, seqs: list[int], lookahead: int) -> None:
        """Give each decoding sequence the blocks its next step writes, oldest first, preempting the newest
        running sequence while none is free."""
        ids = np.asarray(seqs, dtype=np.int64)
        if len(ids):  # the common case, room for every sequence's blocks: one array step, not a loop
            tokens = self.prompt[ids] + self.gen[ids] + lookahead
            need = np.maximum(self._blocks_for(tokens) - self._shared(ids) - self.blocks[ids], 0)
            if int(need.sum()) <= self.free and set(self.running).issuperset(seqs):
                self.free -= int(need.sum())
                self.blocks[ids] += need
                return
        alive = set(self.running)  # membership in the running list is a scan: a thousand sequences made it O(n^2)
        for i in seqs:
            if i not in alive:
                continue
            want = self._blocks_one(self.prompt[i] + self.gen[i] + lookahead) - self._shared_one(i)
            need = want - int(self.blocks[i])
            while need > self.free and i in alive:
                victim = self.running[-1]
                self._preempt(victim)
                alive.discard(victim)
            if i in alive and need > 0:
                self.free -= need
                self.blocks[i] += need

    def _preempt(self, i: int) -> None:
        self.running.remove(i)
        self.free += int(self.blocks[i])
        self.blocks[i], self.pre[i], self.goal[i] = 0, 0, 0
        self.preempted[i] += 1
        self.stats.preemptions += 1
        self.waiting.appendleft(i)

    # -- bookkeeping ------------------------------------------------------------------------------------------
    def _split_running(self) -> tuple[list[int], list[int]]:
        """The running sequences that decode and those that prefill, each in running order (one array test, not a
        call per sequence: a step of a thousand sequences asked it three times)."""
        run = np.asarray(self.running, dtype=np.int64)
        if not len(run):
            return [], []
        decoding = (self.goal[run] > 0) & (self.pre[run] >= self.goal[run])
        return run[decoding].tolist(), run[~decoding].tolist()

    def _decoding(self, i: int) -> bool:
        return self.goal[i] > 0 and self.pre[i] >= self.goal[i]

    def _target(self, i: int) -> int:
        """Tokens a (re)prefill puts in the cache: the prompt, and after a preemption what it had generated."""
        return int(self.prompt[i] + int(self.gen[i]))

    def _computed(self, i: int) -> int:
        """Tokens admitting ``i`` would prefill: its target less what the prefix cache holds."""
        return self._target(i) - self._skip(i)

    def _skip(self, i: int) -> int:
        """Prompt tokens found in the prefix cache (never the whole target: the last token is computed)."""
        if self.carrier[i] and not self.resident:
            return 0
        return int(min(self.cached[i], self._target(i) - 1))

    def _shared(self, ids):
        return np.where(self.carrier[ids], self.shared_blocks, 0) if self.shared_blocks else 0

    def _shared_one(self, i: int) -> int:
        return self.shared_blocks if self.shared_blocks and self.carrier[i] else 0

    def _admission_blocks(self, i: int) -> int:
        """Blocks admitting ``i`` takes: its (re)prefill's, or with reservation its whole length's (the prompt,
        every new token and a speculative step's slots ahead), and the shared prefix's if it computes them first."""
        tokens = self.prompt[i] + self.output[i] + self.e.lookahead if self.e.reserve else self._target(i)
        own = self._blocks_one(tokens) - self._shared_one(i)
        first = self.carrier[i] and self.owner is None
        return max(own, 0) + (self.shared_blocks if first else 0)

    def _can_allocate(self, i: int) -> bool:
        return self.free - self._admission_blocks(i) >= self.watermark

    def _allocate(self, i: int) -> None:
        blocks = self._admission_blocks(i)
        if self.carrier[i] and self.owner is None:
            self.owner = i  # its prefill computes the shared prefix; its blocks are held once from now on
            blocks -= self.shared_blocks
            self.free -= self.shared_blocks
        skip = self._skip(i)
        self.goal[i], self.pre[i], self.blocks[i] = self._target(i), skip, blocks
        self.free -= blocks
        self.stats.cached_tokens += skip
        self.stats.hit_requests += int(skip > 0 and self.preempted[i] == 0)

    def _settle_prefix(self) -> None:
        if self.owner is not None and not self.resident and self.pre[self.owner] >= self.goal[self.owner] > 0:
            self.resident = True

    def _blocks_for(self, tokens: np.ndarray) -> np.ndarray:
        """Blocks sequences of ``tokens`` hold (fractional tokens under speculation round up)."""
        blocks = np.ceil(tokens / self.kv.block_size - 1e-9).astype(np.int64)
        if self.kv.window is not None:
            blocks = np.minimum(blocks, -(-self.kv.window // self.kv.block_size) + 1)
        return blocks

    def _blocks_one(self, tokens: float) -> int:
        blocks = math.ceil(float(tokens) / self.kv.block_size - 1e-9)
        if self.kv.window is not None:
            blocks = min(blocks, -(-self.kv.window // self.kv.block_size) + 1)
        return blocks

    def _emit(self, i: int) -> None:
        self.gen[i] += 1
        if np.isnan(self.first[i]):
            self.first[i] = self.now

    def _retire(self, ids) -> None:
        """Finish the sequences of ``ids`` (running ones) that have all their tokens (the step's end: its peaks
        are taken first)."""
        self.stats.peak_running = max(self.stats.peak_running, len(self.running))
        self.stats.peak_blocks = max(self.stats.peak_blocks, self.kv.blocks - self.free)
        ids = np.asarray(ids, dtype=np.int64)
        finished = ids[self.gen[ids] >= self.output[ids]].tolist()
        if not finished:
            return
        gone = set(finished)
        self.running = [i for i in self.running if i not in gone]
        for i in finished:
            self.finish[i] = self.now
            self.free += int(self.blocks[i])
            self.blocks[i] = 0
        self.done += len(finished)

    def _spend(self, gpu_s: float, seqs: int, prefill_tokens: int, output_tokens: int, new: int, *, prefill: bool,
               steps: int = 1) -> None:  # fmt: skip
        per_step = self.step.wall_s(gpu_s / steps, seqs // steps, prefill_tokens, output_tokens // steps, new)
        wall = per_step * steps
        self.now += wall
        s = self.stats
        s.busy_s += wall
        s.gpu_s += gpu_s
        s.prefill_gpu_s += gpu_s if prefill else 0.0
        s.seq_s += seqs / steps * wall
        s.steps += steps
        s.prefill_steps += steps if prefill else 0
        s.prefill_tokens += prefill_tokens
