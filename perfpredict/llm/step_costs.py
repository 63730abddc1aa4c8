"""Seconds of each engine step, from perfpredict's per-op device model, tabulated once per (model, GPU, tp).

A step is three parts of ``engine_graph`` (each timed by the two-timeline predictor, so the engine never has its own
idea of how fast a GEMM runs):

- **dense**: the embedding and every per-token kernel of the blocks, a function of the step's tokens T;
- **attention**: a prefill's is compute-bound, a function of its query-key pairs (the device model's attention,
  tabulated over prompt lengths); decode attention, one query token per sequence, is a stream of the sequences'
  cached K and V with four FLOPs per pair of values read, so each layer's kernel is timed as the device model
  streams its bytes (``TwoTimelinePredictor.stream_s``), tabulated over sizes: the device model's attention is a
  score GEMM per head, which a one-token query is not;
- **head**: the final norm, the LM head on one position per sequence, the sampler, a function of the sequences.

A step that replays a captured CUDA graph runs in ``cuda_graph`` mode at the padded size (the dense part and the
head run on the padding too; attention only on the real sequences): vLLM V0's and SGLang's decode steps (up to
256 and 160 sequences), every step of vLLM V1 of up to 512 tokens (piecewise graphs; its attention runs between
the pieces), llama.cpp's one-token steps. A C++ runtime (TensorRT-LLM, llama.cpp) launches its other steps'
kernels without Python's dispatch: they are timed in ``cuda_graph`` mode unpadded (the launches' host time is the
engine's fitted host cost). Any other step runs ``eager``, each kernel dispatched from Python.
Tensor parallelism adds its collectives per step on the critical path (``tp_comm``: the two all-reduces of each
block, the embedding's all-reduce and the gather of the logits; vLLM's custom all-reduce or NCCL's measured
curves). Expert parallelism replaces a MoE block's all-reduce with a reduce-scatter and an all-gather of the same
bytes around two all-to-alls (dispatch and combine) of each rank's token-expert pairs.

With pipeline parallelism (``pp`` stages) the model's ``spec`` is one stage's (layers/pp): a step of one virtual
engine's sequences passes through the pp stages in turn, so its time is pp times a stage's dense and attention
parts (the embedding is counted on every stage: one lookup per token, small), the head once, and pp - 1 sends of
the activations between stages. A prefill also waits, on average, for half the other virtual engines' prefills
ahead of it on each stage ((pp - 1)/2 stage times more): vLLM runs them on the same GPUs.
The engine's host time per step (``host_costs``) is not here: it is the engine's, not the GPU's.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from perfpredict.core.units import KIB, TIB
from perfpredict.llm.engine_graph import Numerics, RankShape, StepShape, step_graph
from perfpredict.llm.vllm_config import ResolvedEngine, capture_bucket, paged_attention_kernel
from perfpredict.parallel.collectives import ALL_GATHER, REDUCE_SCATTER

STREAM_ANCHORS = np.geomspace(KIB, TIB, 31)  # bytes a decode attention kernel reads, tabulated then interpolated


@dataclass(frozen=True)
class EngineModel:
    """What is fixed for one serving question: the model, its rank's share, the numerics, the GPU and its link."""

    spec: Any  # DecoderSpec
    rank: RankShape
    num: Numerics
    device: Any
    engine: ResolvedEngine
    link: Any = None  # the tensor-parallel group's GroupLink (tp > 1)
    v1_rereads_kv: bool = True  # PagedAttention v1 reads each key/value head once per query head (calibrated)
    host: str | None = None  # the host profile that times dispatch and launches (RunConfig.host); None: the default
    pp: int = 1  # pipeline stages; ``spec`` is then one stage's
    comm: Any = None  # the step's collectives (tp_comm.CommModel); None: none (one GPU, or llama.cpp's layer split)
    # the engine's steps against the device model's (decode-only steps, and steps that prefill), collectives included:
    # fitted per engine on its 7-8B rows (TensorRT-LLM's fused kernels, llama.cpp's ggml); 1: the device model's
    decode_kernel_scale: float = 1.0
    prefill_kernel_scale: float = 1.0
    # every request the same prompt (a benchmark's dummy input): a MoE step's tokens all route to the same experts
    identical_requests: bool = False

    @property
    def group_size(self) -> int:
        return max(self.spec.heads // self.spec.kv_heads, 1)


class StepCosts:
    """Seconds of decode and prefill steps for one EngineModel, up to ``max_seqs`` sequences per step."""

    def __init__(self, model: EngineModel, max_seqs: int) -> None:
        self.m = model
        self.max_seqs = max(1, max_seqs)
        self.graphable = not model.engine.config.enforce_eager
        self.version = model.engine.engine_version
        # the mode of a step no graph replays: Python dispatches each kernel, or a C++ runtime launches them
        self.unreplayed = "cuda_graph" if self.version.runtime == "c++" else "eager"

    # -- the tables -------------------------------------------------------------------------------------------
    def _walls(self, parts: frozenset[str], query: int, context: int, mode: str, columns):
        """Wall seconds of ``parts`` of a step with each of ``columns`` sequences. Every size but a mixture of
        experts' weight reads is affine in the sequences (two graphs fit CostArrays exactly); the experts a step
        reaches saturate (``moe.expected_experts``), so a MoE model's dense part is timed at anchors and
        interpolated."""
        columns = np.asarray(columns, dtype=float)
        if self.m.spec.experts and "dense" in parts:
            anchors = np.unique(np.concatenate([[1.0, 2.0, 4.0], np.round(np.geomspace(1, columns.max(), 20))]))
            walls = [self._evaluate(parts, query, context, mode, [a], int(a))[0] for a in anchors]
            return np.interp(columns, anchors, walls)
        walls = self._evaluate(parts, query, context, mode, columns)
        # more sequences never make a step faster: the learned efficiency can dip at one size (a GEMM of 33 rows
        # against 40), which an engine would not see, since it could always run the larger shape padded
        order = np.argsort(columns)
        walls[order] = np.maximum.accumulate(walls[order])
        return walls

    def _evaluate(self, parts, query: int, context: int, mode: str, columns, at: int | None = None):
        from perfpredict.predictors.base import RunConfig
        from perfpredict.predictors.cost_arrays import CostArrays
        from perfpredict.predictors.registry import get_predictor

        same = self.m.identical_requests
        graph = lambda seqs: step_graph(
            self.m.spec, self.m.rank, StepShape(seqs, query, context, same), self.m.num, parts
        )
        arrays = CostArrays.from_graph(graph(at)) if at else CostArrays.fit(graph(2), graph(3))
        config = RunConfig(weights_built_in=None, mode=mode, host=self.m.host)
        ev = get_predictor("two_timeline").evaluate(arrays, self.m.device, config, np.asarray(columns, dtype=float))
        return np.asarray(ev.latency_s, dtype=float)

    @cached_property
    def _seq_columns(self) -> np.ndarray:
        return np.arange(1, self.max_seqs + 1, dtype=float)

    @cached_property
    def _token_columns(self) -> np.ndarray:
        """Token counts the dense part is tabulated at: every count up to 256 (a decode step's, and its captured
        sizes), every multiple of 8 up to the largest captured size or sequence count, then a geometric grid up to
        the largest step."""
        top = max(self.m.engine.max_num_batched_tokens + self.max_seqs, self.max_seqs + 1)
        dense = np.arange(1, min(self.max_seqs, 256) + 1, dtype=float)
        eighths = np.arange(264, max(self.max_seqs, self.version.graph_max) + 1, 8, dtype=float)
        start = max(dense[-1], eighths[-1] if len(eighths) else 0) + 1
        grid = np.unique(np.round(np.geomspace(start, max(top, start + 1), 24)))
        return np.unique(np.concatenate([dense, eighths, grid]))

    @cached_property
    def _dense(self) -> dict[str, np.ndarray]:
        """The dense part's wall time per mode over the token columns; a graph-replayed mode only as far as the
        largest captured size where the engine launches its other steps from Python."""
        parts = frozenset({"dense"})
        cols = self._token_columns
        graphed = cols if self.unreplayed == "cuda_graph" else cols[cols <= max(self.version.graph_max, 8)]
        out = {"cuda_graph": self._walls(parts, 1, 1, "cuda_graph", graphed)}
        if len(graphed) < len(cols):  # beyond the captured sizes: never looked up (eager instead)
            out["cuda_graph"] = np.concatenate([out["cuda_graph"], np.full(len(cols) - len(graphed), np.inf)])
        if self.unreplayed == "eager":
            out["eager"] = self._walls(parts, 1, 1, "eager", cols)
        return out

    @cached_property
    def _head(self) -> dict[str, np.ndarray]:
        parts = frozenset({"head"})
        return {mode: self._walls(parts, 1, 1, mode, self._seq_columns) for mode in ("cuda_graph", "eager")}

    @cached_property
    def _stream(self) -> np.ndarray:
        """Seconds the device model takes to stream each of ``STREAM_ANCHORS`` bytes in one kernel."""
        from perfpredict.predictors.registry import get_predictor

        seconds = get_predictor("two_timeline").stream_s(self.m.device, STREAM_ANCHORS, self.m.num.kv_dtype)
        return np.maximum.accumulate(seconds)  # more bytes never stream faster (the learned efficiency can dip)

    @cached_property
    def _prefill_attention(self) -> tuple[np.ndarray, np.ndarray]:
        """(query-key pairs of one causal sequence, eager seconds) on a grid of prompt lengths."""
        lengths = np.unique(np.round(np.geomspace(16, max(self.m.engine.max_model_len, 32), 10))).astype(int)
        parts = frozenset({"attention"})
        pairs = lengths * (lengths + 1) / 2
        seconds = np.array([self._walls(parts, int(n), int(n), "eager", [1.0])[0] for n in lengths])
        return pairs, seconds

    # -- one step ---------------------------------------------------------------------------------------------
    def graph_bucket(self, tokens: int, seqs: int, decode: bool, max_context: int) -> int | None:
        """The captured size a step replays (tokens for V1's piecewise graphs, else sequences), or None."""
        v = self.version
        if not self.graphable or v.graphs == "none":
            return None
        if v.graphs == "piecewise":
            return capture_bucket(tokens, 10**9, min(v.graph_max, self.m.engine.max_num_batched_tokens))
        if not decode:
            return None
        if v.graphs == "one-token":
            return 1 if seqs == 1 else None
        if max_context > self.m.engine.config.max_seq_len_to_capture:
            return None
        return capture_bucket(seqs, self.m.engine.max_num_seqs, v.graph_max)

    def decode_s(self, seqs: int, context_sum: float, max_context: int) -> float:
        """A decode-only step: ``seqs`` sequences holding ``context_sum`` tokens of cache in all."""
        if seqs < 1:
            return 0.0
        bucket = self.graph_bucket(seqs, seqs, True, max_context)
        mode = "cuda_graph" if bucket is not None else self.unreplayed
        padded = bucket or seqs
        seconds = self._lookup(self._dense[mode], self._token_columns, padded)
        attention_mode = "eager" if self.version.graphs == "piecewise" else mode  # between V1's graph pieces
        seconds += self._decode_attention(seqs, context_sum / seqs, max_context, attention_mode)
        seconds *= self.m.pp  # every stage's layers in turn
        seconds += self._lookup(self._head[mode], self._seq_columns, min(padded, self.max_seqs))
        gpu = (seconds + self.collectives_s(padded, padded)) * self.m.decode_kernel_scale
        return self._offloaded(gpu, seqs, 1, int(context_sum / seqs))

    def prefill_s(self, chunks: list[tuple[int, int]], decode_seqs: int = 0, decode_context_sum: float = 0.0) -> float:
        """A step that prefills ``chunks`` ((query tokens, context) per sequence) and, with chunked prefill or
        mixed batching, decodes ``decode_seqs`` sequences in the same launch."""
        tokens = sum(q for q, _ in chunks) + decode_seqs
        seqs = len(chunks) + decode_seqs
        bucket = self.graph_bucket(tokens, seqs, False, 0)
        mode = "cuda_graph" if bucket is not None else self.unreplayed
        padded = bucket or tokens
        seconds = self._lookup(self._dense[mode], self._token_columns, padded)
        pairs_axis, pair_s = self._prefill_attention
        pairs = sum(q * c - q * (q - 1) / 2 for q, c in chunks)
        seconds += self._lookup(pair_s, pairs_axis, pairs)  # several prompts in one step may pass the grid
        if decode_seqs:
            seconds += self._decode_attention(decode_seqs, decode_context_sum / decode_seqs, 0, "eager")
        seconds *= self.m.pp + (self.m.pp - 1) / 2  # the stages in turn, behind half the other virtual engines
        seconds += self._lookup(self._head[mode], self._seq_columns, min(seqs, self.max_seqs))
        gpu = (seconds + self.collectives_s(padded, seqs)) * self.m.prefill_kernel_scale
        longest = max((q for q, _ in chunks), default=1)
        return self._offloaded(gpu, seqs, max(longest, 1), max((c for _, c in chunks), default=1))

    @cached_property
    def cpu_layers(self) -> int:
        """Layers llama.cpp leaves on the host CPU (``--n-gpu-layers``)."""
        n = self.m.engine.config.n_gpu_layers
        return 0 if n is None else max(self.m.spec.layers - n, 0)

    def _offloaded(self, gpu_s: float, seqs: int, query: int, context: int) -> float:
        """A step with ``cpu_layers`` of the layers on the host CPU: the GPU's share of the step, then those
        layers one after another on the CPU (the catalog's ``cpu``: this machine's, or a device file's), at their
        roofline (weights streamed from host memory, FLOPs at the CPU's peak)."""
        if not self.cpu_layers:
            return gpu_s
        share = 1 - self.cpu_layers / self.m.spec.layers
        return gpu_s * share + self.cpu_layers * self._cpu_layer_s(seqs, query, max(context, 1))

    def _cpu_layer_s(self, seqs: int, query: int, context: int) -> float:
        from dataclasses import replace

        from perfpredict.hardware.devices import get_device
        from perfpredict.predictors.analytical import AnalyticalPredictor
        from perfpredict.predictors.base import RunConfig

        block = replace(self.m.spec, layers=1)
        graph = step_graph(block, self.m.rank, StepShape(seqs, query, context), self.m.num, frozenset({"dense",
                           "attention"}))  # fmt: skip
        return float(AnalyticalPredictor().latency_s(graph, get_device("cpu"), RunConfig(weights_built_in=None)))

    def collectives_s(self, tokens: int, seqs: int) -> float:
        """Communication of one step on the critical path: the tensor-parallel collectives of every stage, expert
        parallelism's dispatch and combine, and the sends between pipeline stages."""
        comm = self.m.comm
        if comm is None:
            return 0.0
        act = tokens * self.m.spec.hidden * _bytes(self.m.num.dtype)
        layers = self.m.spec.layers * self.m.pp
        seconds = (comm.pp - 1) * comm.send_recv_s(act)
        if comm.tp <= 1:
            return seconds
        logits = seqs * self.m.rank.vocab * comm.tp * _bytes(self.m.num.dtype)
        seconds += comm.all_reduce_s(act) + comm.all_gather_s(logits)  # the embedding's, the logits' gather
        if self.m.rank.ep > 1:
            pairs = -(-tokens * self.m.spec.experts_per_token // self.m.rank.ep) * self.m.spec.hidden
            moe = comm.nccl_s(REDUCE_SCATTER, act) + comm.nccl_s(ALL_GATHER, act)
            moe += 2 * comm.all_to_all_s(pairs * _bytes(self.m.num.dtype))
            return seconds + layers * (comm.all_reduce_s(act) + moe)
        return seconds + layers * 2 * comm.all_reduce_s(act)

    def compute_share(self, seqs, context: int) -> np.ndarray:
        """Per decode batch in ``seqs``: the share of the step's roofline time in compute-bound kernels (under 0.5:
        the step is memory-bound), from the analytical model on the same graph."""
        from perfpredict.predictors.analytical import AnalyticalPredictor
        from perfpredict.predictors.base import RunConfig
        from perfpredict.predictors.cost_arrays import CostArrays

        graphs = (step_graph(self.m.spec, self.m.rank, StepShape(s, 1, context), self.m.num) for s in (2, 3))
        arrays = CostArrays.fit(*graphs)
        batches = np.asarray(seqs, dtype=float)
        ev = AnalyticalPredictor().evaluate(arrays, self.m.device, RunConfig(weights_built_in=None), batches)
        busy = np.maximum(ev.compute_s, ev.memory_s)
        return np.where(ev.compute_s >= ev.memory_s, busy, 0).sum(axis=0) / np.maximum(busy.sum(axis=0), 1e-30)

    def activity(self, seqs: int, query: int, context: int, kernel_s: float) -> float:
        """How hard a step's kernels drive the GPU (``hardware.power_draw``): its roofline time, compute or memory
        weighted by ``MEMORY_POWER_WEIGHT``, over ``kernel_s``, the time its kernels take (collectives left out)."""
        from perfpredict.predictors.analytical import MEMORY_POWER_WEIGHT, AnalyticalPredictor
        from perfpredict.predictors.base import RunConfig
        from perfpredict.predictors.cost_arrays import CostArrays

        graph = step_graph(
            self.m.spec, self.m.rank, StepShape(seqs, query, context, self.m.identical_requests), self.m.num
        )
        ev = AnalyticalPredictor().evaluate(
            CostArrays.from_graph(graph), self.m.device, RunConfig(weights_built_in=None), np.array([seqs], float)
        )
        roofline = float(np.maximum(ev.compute_s, MEMORY_POWER_WEIGHT * ev.memory_s).sum())
        return min(1.0, roofline / kernel_s) if kernel_s > 0 else 0.0

    def _decode_attention(self, seqs: int, mean_context: float, max_context: int, mode: str) -> float:
        """Every layer's decode attention kernel: it reads each sequence's query, its cached K and V
        (``kv_read_factor`` times) and writes the output; never under the shortest kernel, plus the graph's gap
        between kernels when replayed."""
        from perfpredict.predictors.two_timeline import GRAPH_NODE_GAP_S, MIN_KERNEL_S

        r, d = self.m.rank, self.m.spec.head_dim
        factor = self._kv_read_factor(seqs, max(max_context, int(mean_context)))
        kv = 2 * seqs * mean_context * r.kv_heads * d * _bytes(self.m.num.kv_dtype) * factor
        moved = kv + 2 * seqs * r.heads * d * _bytes(self.m.num.dtype)
        per_layer = float(np.exp(np.interp(np.log(moved), np.log(STREAM_ANCHORS), np.log(self._stream))))
        gap = GRAPH_NODE_GAP_S if mode == "cuda_graph" else 0.0
        return self.m.spec.layers * (max(per_layer, MIN_KERNEL_S) + gap)

    def _kv_read_factor(self, seqs: int, max_context: int) -> float:
        """PagedAttention v1 (XFormers' decode) reads each key/value head once per query head of its group."""
        if self.m.engine.backend != "xformers" or self.m.group_size == 1 or not self.m.v1_rereads_kv:
            return 1.0
        kernel = paged_attention_kernel(seqs, self.m.rank.heads, max_context)
        return float(self.m.group_size) if kernel == "v1" else 1.0

    @staticmethod
    def _lookup(table: np.ndarray, columns: np.ndarray, x: float) -> float:
        if x <= columns[-1]:
            return float(np.interp(x, columns, table))
        return float(table[-1] * x / columns[-1])  # beyond the grid: the work scales with it


def _bytes(dtype: str) -> int:
    from perfpredict.core.ops import DTYPE_BYTES

    return DTYPE_BYTES[dtype]
