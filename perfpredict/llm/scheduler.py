"""vLLM v0.6's scheduler (the V0 engine), run step by step over a batch of identical requests.

Every step the scheduler decides what the GPU runs, and the step takes the engine's host time plus the GPU time
of what it runs (``StepCosts``):

- **Without chunked prefill** (the default below 32K tokens of context): waiting prompts go first. A prompt is
  admitted while it fits the token budget (``max_num_batched_tokens``), the sequence limit (``max_num_seqs``) and
  the free KV blocks less a watermark of 1%; a step that admits any runs those prefills alone (each samples its
  first token). Otherwise the step decodes every running sequence; one that needs a new block when none is free
  preempts the most recently admitted sequence, whose blocks are freed and which goes back to the front of the
  queue, to be prefilled again with the tokens it had generated (recompute, vLLM's default for one sequence per
  request).
- **With chunked prefill**: each step spends the token budget on the running sequences' decodes first, then on
  chunks of prompts (a prompt's blocks are allocated when it is first scheduled); a step mixes both.
- **Mixed** (TensorRT-LLM's in-flight batching without chunked context): as chunked prefill, but a prompt enters
  a step only whole, when the budget left holds it. With chunked prefill on (TensorRT-LLM's
  ``enable_chunked_context``) its prompts are chunked as above.

An engine that reserves (``admission="reserve"``, TensorRT-LLM's GUARANTEED_NO_EVICT) admits a request only when
the blocks of its prompt and all its new tokens are free, and takes them at once: nothing is ever preempted.

The host's part of each step is the engine's (``host_costs``): the step lasts ``HostStep.wall_s(gpu)``, the host
work that overlaps the GPU (or runs in another process) hiding behind it.

Between events (a sequence crossing into a new block, finishing, or a prompt being admitted) a run of decode steps
is identical but for its growing context, so it is timed in one go: at most ``block_size`` steps at a time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from perfpredict.core.errors import InvalidInputError


@dataclass(eq=False)  # identity: two requests with the same lengths are still two sequences
class _Seq:
    prompt: int
    new: int
    generated: int = 0
    prefilled: int = 0  # prompt (and recomputed) tokens in the cache
    goal: int = 0  # tokens its current (re)prefill computes, fixed when it is admitted
    blocks: int = 0
    first_token_s: float | None = None
    finish_s: float = 0.0
    preempted: int = 0

    @property
    def decoding(self) -> bool:
        return self.goal > 0 and self.prefilled >= self.goal

    @property
    def length(self) -> int:
        return self.prompt + self.generated

    @property
    def target(self) -> int:
        """Tokens a (re)prefill puts in the cache: the prompt, and after a preemption what it had generated too."""
        return self.prompt + self.generated


@dataclass
class Trace:
    """What the run did: its time, its steps, and each sequence's first-token and finish times."""

    e2e_s: float = 0.0
    prefill_steps: int = 0
    decode_steps: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    prefill_gpu_s: float = 0.0  # the GPU's busy time in prefill (and mixed) steps
    decode_gpu_s: float = 0.0
    host_s: float = 0.0  # the host's exposed time: the steps' wall time beyond their GPU time
    preemptions: int = 0
    seq_steps: int = 0  # sequences summed over the steps (what the host's per-sequence time multiplies)
    prefill_tokens: int = 0
    peak_running: int = 0
    peak_blocks: int = 0
    seqs: list = field(default_factory=list)

    @property
    def steps(self) -> int:
        return self.prefill_steps + self.decode_steps

    @property
    def gpu_s(self) -> float:
        return self.e2e_s - self.host_s

    @property
    def ttft_s(self) -> list[float]:
        return [s.first_token_s for s in self.seqs]

    @property
    def tpot_s(self) -> list[float]:
        return [(s.finish_s - s.first_token_s) / max(s.new - 1, 1) for s in self.seqs]


class Scheduler:
    """Runs ``batch`` requests of ``prompt`` tokens each, ``new`` tokens out, through the engine (one virtual
    engine of a pipeline: ``pp`` of them share the driver's host time, so a step is never shorter than pp times
    its host part), driving ``workers`` GPU workers."""

    def __init__(self, costs, kv, engine, host, workers: int, pp: int = 1) -> None:
        """``host``: a ``host_costs.HostCost`` (anything with ``step(seqs, prefill_tokens, output_tokens, workers,
        new_requests) -> HostStep``); ``workers``: the GPU workers the driver drives; ``pp``: virtual engines."""
        self.costs, self.kv, self.engine, self.host, self.workers, self.pp = costs, kv, engine, host, workers, pp
        self.budget = engine.max_num_batched_tokens
        self.max_seqs = engine.max_num_seqs
        self.watermark = int(engine.config.watermark * kv.blocks)
        version = engine.engine_version
        self.reserve = version.admission == "reserve"
        self.whole_prompts = version.policy == "mixed" and not engine.chunked_prefill

    def run(self, batch: int, prompt: int, new: int) -> Trace:
        self.trace = Trace(seqs=[_Seq(prompt, new) for _ in range(batch)])
        self.waiting: deque[_Seq] = deque(self.trace.seqs)
        self.running: list[_Seq] = []
        self.free = self.kv.blocks
        self.now = 0.0
        step = self._chunked_step if self.engine.chunked_prefill or self.whole_prompts else self._default_step
        while self.waiting or self.running:
            if not self.running and not self._admissible():
                raise InvalidInputError(
                    f"a sequence of {self.waiting[0].target} tokens needs more KV blocks than the engine has "
                    f"({self.kv.blocks} less a {self.watermark}-block watermark); vLLM would drop it: shorten the "
                    "request, or give the KV cache more memory (--gpu-memory-utilization, --tp)"
                )
            step()
            self.trace.peak_running = max(self.trace.peak_running, len(self.running))
            self.trace.peak_blocks = max(self.trace.peak_blocks, self.kv.blocks - self.free)
        self.trace.e2e_s = self.now
        return self.trace

    # -- the default (prefill-first) policy -------------------------------------------------------------------
    def _default_step(self) -> None:
        admitted, tokens = [], 0
        while self.waiting and len(self.running) + len(admitted) < self.max_seqs:
            seq = self.waiting[0]
            need = seq.target
            if tokens + need > self.budget or not self._can_allocate(self._held(seq)):
                break
            self.waiting.popleft()
            self._allocate(seq, need)
            admitted.append(seq)
            tokens += need
        if admitted:
            seconds = self.costs.prefill_s([(s.goal, s.goal) for s in admitted])
            self._spend(seconds, len(admitted), tokens, prefill=True, outputs=len(admitted), new=len(admitted))
            for seq in admitted:
                seq.prefilled = seq.goal
                self._emit(seq)
            self.running.extend(admitted)
            self._retire()
            return
        self._decode_run()

    # -- chunked prefill --------------------------------------------------------------------------------------
    def _chunked_step(self) -> None:
        self._grow([s for s in self.running if s.decoding])
        decodes = [s for s in self.running if s.decoding]
        left = self.budget - len(decodes)
        chunks: list[tuple[_Seq, int]] = []
        for seq in [s for s in self.running if not s.decoding]:
            if left <= 0:
                break
            take = min(seq.goal - seq.prefilled, left)
            chunks.append((seq, take))
            left -= take
        new = 0
        while left > 0 and self.waiting and len(self.running) < self.max_seqs:
            seq = self.waiting[0]
            if not self._can_allocate(self._held(seq)) or (self.whole_prompts and seq.target > left):
                break
            self.waiting.popleft()
            self._allocate(seq, seq.target)
            self.running.append(seq)
            take = min(seq.goal, left)
            chunks.append((seq, take))
            left -= take
            new += 1
        if not chunks:
            self._decode_run()
            return
        context = float(sum(s.length for s in decodes))
        seconds = self.costs.prefill_s([(q, s.prefilled + q) for s, q in chunks], len(decodes), context)
        tokens = sum(q for _, q in chunks)
        done = sum(1 for s, q in chunks if s.prefilled + q >= s.goal)
        self._spend(seconds, len(decodes) + len(chunks), tokens, prefill=True, outputs=len(decodes) + done, new=new)
        for seq in decodes:
            self._emit(seq)
        for seq, q in chunks:
            seq.prefilled += q
            if seq.decoding:
                self._emit(seq)
        self._retire()

    # -- decode runs ------------------------------------------------------------------------------------------
    def _decode_run(self) -> None:
        """Decode steps with the running set unchanged until the next block boundary or finish (one at least)."""
        if not self._grow(self.running):
            return
        run = self.running
        to_finish = min(s.new - s.generated for s in run)
        steps = max(1, min(min(self._room(s) for s in run), to_finish))
        if self.waiting and self._admissible():
            steps = 1  # a waiting prompt goes first at the next step
        context = sum(s.length for s in run) + len(run) * (steps - 1) / 2  # the run's mean
        longest = max(s.length for s in run) + steps - 1
        seconds = self.costs.decode_s(len(run), context, longest)
        self._spend(seconds, len(run), 0, prefill=False, steps=steps, outputs=len(run))
        for seq in run:
            seq.generated += steps
            if seq.first_token_s is None:
                seq.first_token_s = self.now
        self._retire()

    def _room(self, seq: _Seq) -> int:
        """Decode steps ``seq`` can take before it needs another block (a sliding window caps its blocks)."""
        if self.kv.blocks_for(seq.length + 10 * self.kv.block_size) <= seq.blocks:
            return seq.new - seq.generated
        return seq.blocks * self.kv.block_size - seq.length + 1

    def _grow(self, seqs: list[_Seq]) -> bool:
        """Give each decoding sequence the block its next token needs, preempting the newest when none is free.
        False when nothing is left running (the step is scheduled again)."""
        for seq in list(seqs):
            if not seq.goal:  # preempted by an earlier one in this loop (a running sequence has a goal)
                continue
            need = self.kv.blocks_for(seq.length) - seq.blocks
            if need <= 0:
                continue
            while need > self.free and seq.goal:
                self._preempt(self.running[-1])
            if seq.goal:
                self.free -= need
                seq.blocks += need
        return bool(self.running)

    def _preempt(self, seq: _Seq) -> None:
        self.running.remove(seq)
        self.free += seq.blocks
        seq.blocks, seq.prefilled, seq.goal = 0, 0, 0
        seq.preempted += 1
        self.trace.preemptions += 1
        self.waiting.appendleft(seq)

    # -- bookkeeping ------------------------------------------------------------------------------------------
    def _can_allocate(self, tokens: int) -> bool:
        return self.free - self.kv.blocks_for(tokens) >= self.watermark

    def _held(self, seq: _Seq) -> int:
        """Tokens whose blocks admitting ``seq`` takes: its prompt (and what it had generated), or with
        reservation its whole length."""
        return seq.prompt + seq.new if self.reserve else seq.target

    def _admissible(self) -> bool:
        seq = self.waiting[0]
        fits = (self.engine.chunked_prefill and not self.whole_prompts) or seq.target <= self.budget
        return fits and len(self.running) < self.max_seqs and self._can_allocate(self._held(seq))

    def _allocate(self, seq: _Seq, tokens: int) -> None:
        seq.goal = tokens
        seq.blocks = self.kv.blocks_for(self._held(seq))
        self.free -= seq.blocks

    def _emit(self, seq: _Seq) -> None:
        seq.generated += 1
        if seq.first_token_s is None:
            seq.first_token_s = self.now

    def _retire(self) -> None:
        for seq in [s for s in self.running if s.generated >= s.new]:
            seq.finish_s = self.now
            self.running.remove(seq)
            self.free += seq.blocks
            seq.blocks = 0

    def _spend(self, gpu_s: float, seqs: int, prefill_tokens: int, *, prefill: bool, steps: int = 1,
               outputs: int = 0, new: int = 0) -> None:  # fmt: skip
        """Advance ``steps`` identical steps of ``gpu_s`` GPU seconds each, ``seqs`` sequences, ``prefill_tokens``
        prompt tokens, ``outputs`` new tokens and ``new`` admitted requests each, with the host's time (the driver
        runs the ``pp`` virtual engines' host parts in turn)."""
        host = self.host.step(seqs, prefill_tokens, outputs, self.workers, new)
        wall = host.wall_s(gpu_s, self.pp) * steps
        exposed = wall - gpu_s * steps
        self.now += wall
        self.trace.host_s += exposed
        self.trace.seq_steps += seqs * steps
        self.trace.prefill_tokens += prefill_tokens * steps
        if prefill:
            self.trace.prefill_steps += steps
            self.trace.prefill_s += wall
            self.trace.prefill_gpu_s += gpu_s * steps
        else:
            self.trace.decode_steps += steps
            self.trace.decode_s += wall
            self.trace.decode_gpu_s += gpu_s * steps
