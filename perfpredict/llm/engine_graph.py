"""The OpGraph of one step of a vLLM-class engine, on one tensor-parallel rank, with the kernels the engine runs.

vLLM runs its own model code, not the HuggingFace modules: per block, one fused add+RMSNorm, ONE GEMM for q, k and
v (``QKVParallelLinear``), one rotary kernel over q and k in place, one kernel that writes the new tokens' K and V
into their cache blocks (``reshape_and_cache``), one attention kernel (FlashAttention-2 for a prefill and for
decode, or XFormers for a prefill and vLLM's PagedAttention for decode), the output projection, a second fused
add+RMSNorm, ONE GEMM for gate and up (``MergedColumnParallelLinear``), one SiLU-and-mul, and the down projection
(Mixtral: a router GEMM, a top-k softmax and the fused MoE kernels, which read only the experts the tokens reach).
The logits are computed for the sampled positions only (one per sequence), then the sampler.

Megatron-style tensor parallelism is built in, as vLLM shards: q/k/v, gate/up and the experts' intermediate
features are column-parallel (heads/tp and intermediate/tp per rank), the output and down projections are
row-parallel (each followed by an all-reduce), the embedding and the LM head are split over the vocabulary (the
embedding's output all-reduced, the logits gathered). Key/value heads fewer than tp are replicated (vLLM's rule).
With expert parallelism (``ep``) a mixture of experts' experts are split whole over the tp GPUs instead of
sliced: each rank holds experts/tp of them at full width and runs its share of the token-expert pairs (tokens
routed uniformly, so an even share: the load-balance assumption).

The graph's batch is the number of sequences, so two graphs fix CostArrays' affine coefficients; every other size
(query tokens per sequence, context) is fixed per graph.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfpredict.core import ops
from perfpredict.core.errors import InvalidInputError
from perfpredict.core.graph import OpGraph, OpNode, TensorMeta
from perfpredict.llm import moe
from perfpredict.llm.decoder_spec import DecoderSpec

VOCAB_PADDING = 64  # vLLM pads the vocabulary to a multiple of 64 before splitting it


@dataclass(frozen=True)
class RankShape:
    """One tensor-parallel rank's share of a model."""

    tp: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    ep: int = 1  # expert-parallel ranks: a MoE's experts split whole over them (1: sliced over tp)
    experts: int = 0  # experts held by this rank
    expert_intermediate: int = 0  # each held expert's intermediate features


def rank_shape(spec: DecoderSpec, tp: int, expert_parallel: bool = False) -> RankShape:
    """Heads, key/value heads, intermediate features and vocabulary rows per rank; refuses a tp vLLM refuses.
    ``expert_parallel``: a mixture of experts' experts split whole over the tp ranks."""
    if tp < 1:
        raise InvalidInputError(f"--tp {tp} must be at least 1")
    if expert_parallel:
        return _expert_parallel(spec, tp)
    kv_ok = spec.kv_heads % tp == 0 or tp % spec.kv_heads == 0
    if spec.heads % tp or not kv_ok or spec.intermediate % tp:
        choices = ", ".join(str(t) for t in range(1, spec.heads + 1) if splits(spec, t) and t <= 64)
        what = (
            f"the {spec.heads} attention heads"
            if spec.heads % tp
            else f"the {spec.kv_heads} key/value heads"
            if not kv_ok
            else f"the {spec.intermediate} intermediate features"
        )
        raise InvalidInputError(f"tp={tp} does not split {what} of {spec.name} evenly; choose tp from {choices}")
    vocab = -(-spec.vocab // VOCAB_PADDING) * VOCAB_PADDING
    inter = spec.intermediate // tp
    kv = max(spec.kv_heads // tp, 1)
    return RankShape(tp, spec.heads // tp, kv, inter, -(-vocab // tp), 1, spec.experts, inter if spec.experts else 0)


def _expert_parallel(spec: DecoderSpec, tp: int) -> RankShape:
    """Attention split over tp as without it; the experts split whole over the same ranks."""
    from dataclasses import replace

    if not spec.experts:
        raise InvalidInputError(
            f"--enable-expert-parallel splits a mixture of experts' experts over the GPUs; {spec.name} has none "
            "(a dense MLP): drop the flag"
        )
    if tp < 2 or spec.experts % tp:
        choices = ", ".join(str(t) for t in range(2, spec.experts + 1) if spec.experts % t == 0 and splits(spec, t))
        raise InvalidInputError(
            f"expert parallelism over tp={tp} GPUs does not split the {spec.experts} experts of {spec.name} evenly "
            f"over two or more; choose tp from {choices}"
        )
    base = rank_shape(spec, tp)
    return replace(base, ep=tp, experts=spec.experts // tp, expert_intermediate=spec.intermediate)


def splits(spec: DecoderSpec, tp: int) -> bool:
    """Whether ``tp`` ranks split the heads, the key/value heads and the MLP evenly (as vLLM requires)."""
    kv_ok = spec.kv_heads % tp == 0 or tp % spec.kv_heads == 0
    return spec.heads % tp == 0 and kv_ok and spec.intermediate % tp == 0


@dataclass(frozen=True)
class StepShape:
    """One engine step: ``seqs`` sequences, each with ``query_tokens`` new tokens attending to ``context`` tokens
    (the new ones included). A decode step has one query token; a prefill has as many as its prompt (chunk)."""

    seqs: int
    query_tokens: int
    context: int
    identical: bool = False  # the sequences are one request repeated: their tokens route to the same experts

    @property
    def tokens(self) -> int:
        return self.seqs * self.query_tokens

    @property
    def causal(self) -> bool:
        return self.query_tokens > 1


@dataclass(frozen=True)
class Numerics:
    """Dtypes and the weight format: ``weight_bytes`` per layer weight (compressed formats' scales included),
    ``dequant_bytes`` per weight more on a many-token step of the weight-only route (a compute-dtype copy written
    and read back)."""

    dtype: str
    kv_dtype: str
    weight_bytes: float
    dequant_bytes: float = 0.0


PARTS = frozenset({"dense", "attention", "head"})


def step_graph(
    spec: DecoderSpec, rank: RankShape, step: StepShape, num: Numerics, parts: frozenset[str] = PARTS
) -> OpGraph:
    """The OpGraph of ``step`` on one rank (see the module docstring). ``parts`` keeps some of its kernels: "dense"
    (the embedding and every per-token kernel of the blocks: their cost depends on the step's tokens), "attention"
    (the attention kernels: they depend on each sequence's query tokens and context) and "head" (the final norm,
    the LM head and the sampler: they depend on the sequences sampled). A mixed step sums its parts."""
    b = _Builder(num, parts)
    b.embedding(rank, step.tokens, spec.hidden)
    for layer in range(spec.layers):
        _block(b, spec, rank, step, f"model.layers.{layer}")
    b.head(spec, rank, step.tokens, step.seqs)
    weights = sum(n.params for n in b.nodes if n.module_path.startswith("model.layers."))
    other = sum(n.params for n in b.nodes) - weights
    return OpGraph(
        nodes=tuple(b.nodes),
        edges=tuple(b.edges),
        batch_size=step.seqs,
        seq_len=step.query_tokens,
        dtype=num.dtype,
        source="engine",
        param_count=weights + other,
        param_bytes=int(weights * num.weight_bytes + other * ops.DTYPE_BYTES[num.dtype]),
        input_bytes=step.tokens * 8,
        name=f"{spec.name} engine step ({step.seqs} x {step.query_tokens} tokens, context {step.context})",
    )


def _block(b: _Builder, spec: DecoderSpec, rank: RankShape, step: StepShape, path: str) -> None:
    t, h, d = step.tokens, spec.hidden, spec.head_dim
    q, kv = rank.heads * d, rank.kv_heads * d
    b.norm(f"{path}.input_layernorm", t, h, fused_add=not path.endswith(".0"))
    b.linear(f"{path}.self_attn.qkv_proj", t, h, q + 2 * kv, bias=spec.qkv_bias)
    b.pointwise(f"{path}.self_attn.rotary_emb", "rotary_embedding", t * (q + kv), t * (q + kv), extra=t * d * 4)
    b.kv_write(f"{path}.self_attn.attn", t, kv)
    b.attention(f"{path}.self_attn.attn", rank, step, d)
    b.linear(f"{path}.self_attn.o_proj", t, q, h)
    b.norm(f"{path}.post_attention_layernorm", t, h, fused_add=True)
    if spec.experts:
        routed = step.query_tokens if step.identical else t  # distinct tokens: what spreads over the experts
        _experts(b, spec, rank, t, f"{path}.block_sparse_moe", routed)
    elif spec.gated_mlp:
        b.linear(f"{path}.mlp.gate_up_proj", t, h, 2 * rank.intermediate)
        b.pointwise(f"{path}.mlp.act_fn", "silu_and_mul", t * 2 * rank.intermediate, t * rank.intermediate)
        b.linear(f"{path}.mlp.down_proj", t, rank.intermediate, h)
    else:
        b.linear(f"{path}.mlp.fc1", t, h, rank.intermediate, bias=True)
        b.pointwise(f"{path}.mlp.act", "gelu", t * rank.intermediate, t * rank.intermediate)
        b.linear(f"{path}.mlp.fc2", t, rank.intermediate, h, bias=True)


def _experts(
    b: _Builder, spec: DecoderSpec, rank: RankShape, tokens: int, path: str, routed: int | None = None
) -> None:
    """A fused MoE (vLLM's Triton kernels, TensorRT-LLM's and DeepSpeed's): the router, top-k, the gate+up GEMMs
    and the down GEMMs of the experts the tokens reach (``moe.expected_experts`` of the ``routed`` distinct tokens,
    uniform routing), SiLU-and-mul between, and the sum over the k. With expert parallelism the step waits for the
    busiest rank: an even share of the token-expert pairs rounded up, on an even share of the experts reached, at
    least one."""
    e, k, h = spec.experts, spec.experts_per_token, spec.hidden
    inter, held = rank.expert_intermediate or rank.intermediate, rank.experts or e
    reached = min(float(held), max(1.0, moe.expected_experts(e, k, routed or tokens) / rank.ep))
    pairs = -(-tokens * k // rank.ep)
    b.linear(f"{path}.gate", tokens, h, e, quantized=False)
    b.pointwise(f"{path}.topk", "topk_softmax", tokens * e, tokens * k * 2)
    b.grouped_linear(f"{path}.experts.w13", pairs, h, 2 * inter, held, reached)
    b.pointwise(f"{path}.experts.act_fn", "silu_and_mul", pairs * 2 * inter, pairs * inter)
    b.grouped_linear(f"{path}.experts.w2", pairs, inter, h, held, reached)
    b.pointwise(f"{path}.experts.sum", "moe_sum", tokens * k * h, tokens * h)


def _in_head(path: str) -> bool:
    return path in ("model.norm", "lm_head", "logits_processor", "sampler")


class _Builder:
    """Appends nodes in execution order, each fed by the one before it (the block's dataflow is a chain; the
    residual stream is carried by the fused add+norm kernels)."""

    def __init__(self, num: Numerics, parts: frozenset[str] = PARTS) -> None:
        self.num = num
        self.parts = parts
        self.act = ops.DTYPE_BYTES[num.dtype]
        self.nodes: list[OpNode] = []
        self.edges: list[tuple[int, int]] = []

    def add(self, node: OpNode) -> None:
        part = "attention" if node.op == ops.ATTENTION else "head" if _in_head(node.module_path) else "dense"
        if part not in self.parts:
            return
        if self.nodes:
            self.edges.append((len(self.nodes) - 1, len(self.nodes)))
        self.nodes.append(node)

    def meta(self, *shape: int, dtype: str | None = None) -> TensorMeta:
        return TensorMeta(tuple(int(s) for s in shape), dtype or self.num.dtype)

    def embedding(self, rank: RankShape, tokens: int, hidden: int) -> None:
        table = self.meta(rank.vocab, hidden)
        out = self.meta(tokens, hidden)
        node = OpNode(
            "embed_tokens", ops.EMBEDDING, "embedding", (self.meta(tokens, dtype="int64"), table), (out,),
            bytes_read=tokens * 8 + out.nbytes, bytes_written=out.nbytes, params=rank.vocab * hidden,
            module_path="model.embed_tokens",
        )  # fmt: skip
        self.add(node)

    def norm(self, path: str, tokens: int, hidden: int, fused_add: bool) -> None:
        """RMSNorm; fused with the residual add where vLLM fuses it (reads and writes the residual too)."""
        x = self.meta(tokens, hidden)
        streams = 2 if fused_add else 1
        node = OpNode(
            path.rsplit(".", 1)[-1], ops.NORM, "fused_add_rms_norm" if fused_add else "rms_norm",
            (x,) * streams + (self.meta(hidden),), (x,) * 2,
            flops=ops.norm_flops(tokens * hidden) + (tokens * hidden if fused_add else 0),
            bytes_read=streams * x.nbytes + hidden * self.act, bytes_written=2 * x.nbytes, params=hidden,
            module_path=path,
        )  # fmt: skip
        self.add(node)

    def linear(self, path: str, tokens: int, k: int, n: int, bias: bool = False, quantized: bool = True) -> None:
        """A GEMM with a weight (N, K): its weight read in the layer's format (the router stays in the compute
        dtype), plus the dequantized copy a weight-only format writes and reads back on a many-token step."""
        per_weight = self.num.weight_bytes if quantized else self.act
        extra = self.num.dequant_bytes if quantized and tokens > 16 else 0.0
        x, w, out = self.meta(tokens, k), self.meta(n, k), self.meta(tokens, n)
        node = OpNode(
            path.rsplit(".", 1)[-1], ops.MATMUL, "linear", (x, w), (out,), flops=2 * tokens * n * k,
            bytes_read=int(x.nbytes + n * k * (per_weight + extra) + (n * self.act if bias else 0)),
            bytes_written=out.nbytes, params=n * k + (n if bias else 0), module_path=path,
        )  # fmt: skip
        self.add(node)

    def grouped_linear(self, path: str, rows: int, k: int, n: int, experts: int, reached: float) -> None:
        """A fused-MoE GEMM: ``rows`` token-expert pairs, every expert's (N, K) weight held, the reached ones read."""
        x, w, out = self.meta(rows, k), self.meta(experts, n, k), self.meta(rows, n)
        read = x.nbytes + reached * n * k * (self.num.weight_bytes + (self.num.dequant_bytes if rows > 16 else 0))
        node = OpNode(
            path.rsplit(".", 1)[-1], ops.MATMUL, "fused_moe", (x, w), (out,), flops=2 * rows * n * k,
            bytes_read=int(read), bytes_written=out.nbytes, params=experts * n * k, module_path=path,
        )  # fmt: skip
        self.add(node)

    def pointwise(self, path: str, target: str, read: int, written: int, extra: int = 0) -> None:
        """An elementwise kernel over ``read`` input and ``written`` output elements (``extra`` bytes more read:
        rotary's cos/sin cache)."""
        node = OpNode(
            path.rsplit(".", 1)[-1], ops.ELEMENTWISE, target, (self.meta(read),), (self.meta(written),),
            flops=max(read, written), bytes_read=read * self.act + extra, bytes_written=written * self.act,
            module_path=path,
        )  # fmt: skip
        self.add(node)

    def kv_write(self, path: str, tokens: int, kv_features: int) -> None:
        """``reshape_and_cache``: the new tokens' K and V into their cache slots (in the cache's dtype)."""
        new = self.meta(2, tokens, kv_features)
        cached = self.meta(2, tokens, kv_features, dtype=self.num.kv_dtype)
        node = OpNode(
            "reshape_and_cache", ops.COPY, "reshape_and_cache", (new,), (cached,), bytes_read=new.nbytes,
            bytes_written=cached.nbytes, module_path=path,
        )  # fmt: skip
        self.add(node)

    def attention(self, path: str, rank: RankShape, step: StepShape, head_dim: int) -> None:
        """Attention of each sequence's new tokens to its context: causal for a prefill (a FlashAttention-style
        kernel skips the masked half), one query against the cached K/V for decode (read from the cache blocks;
        ``step_costs`` times a decode step's attention as a stream of these bytes)."""
        s, tq, c = step.seqs, step.query_tokens, step.context
        q = self.meta(s, rank.heads, tq, head_dim)
        k = self.meta(s, rank.kv_heads, c, head_dim, dtype=self.num.kv_dtype)
        pairs = tq * c - (tq * (tq - 1)) // 2 if step.causal else tq * c  # query-key pairs the mask keeps
        flops = 4 * s * rank.heads * pairs * head_dim
        node = OpNode(
            "attn", ops.ATTENTION, "flash_attn" if step.causal else "paged_attention", (q, k, k), (q,),
            flops=flops, bytes_read=q.nbytes + 2 * k.nbytes,
            bytes_written=q.nbytes, module_path=path,
        )  # fmt: skip
        self.add(node)

    def head(self, spec: DecoderSpec, rank: RankShape, tokens: int, seqs: int) -> None:
        """The final norm over every token, the sampled positions' hidden states (one per sequence), the LM head
        on them, and the sampler (fp32 logits, softmax, sampling)."""
        hidden = spec.hidden
        self.norm("model.norm", tokens, hidden, fused_add=True)
        if tokens > seqs:
            picked = self.meta(seqs, hidden)
            self.add(
                OpNode(
                    "prune_hidden_states",
                    ops.COPY,
                    "index_select",
                    (self.meta(tokens, hidden),),
                    (picked,),
                    bytes_read=picked.nbytes,
                    bytes_written=picked.nbytes,
                    module_path="logits_processor",
                )  # fmt: skip
            )
        x, w, logits = self.meta(seqs, hidden), self.meta(rank.vocab, hidden), self.meta(seqs, rank.vocab)
        node = OpNode(
            "lm_head", ops.MATMUL, "linear", (x, w), (logits,), flops=2 * seqs * rank.vocab * hidden,
            bytes_read=x.nbytes + w.nbytes, bytes_written=logits.nbytes,
            params=0 if spec.tied_embeddings else rank.vocab * hidden, module_path="lm_head",
        )  # fmt: skip
        self.add(node)
        full = seqs * rank.vocab * rank.tp  # the gathered logits, on the rank that samples
        fp32 = self.meta(full, dtype="float32")
        for target, op in (("logits_to_float", ops.ELEMENTWISE), ("softmax", ops.SOFTMAX), ("sample", ops.REDUCTION)):
            node = OpNode(
                target, op, target, (fp32,), (fp32,) if op != ops.REDUCTION else (self.meta(seqs, dtype="int64"),),
                flops=5 * full, bytes_read=fp32.nbytes, bytes_written=fp32.nbytes if op != ops.REDUCTION else seqs * 8,
                module_path="sampler",
            )  # fmt: skip
            self.add(node)


def weight_elements(spec: DecoderSpec, rank: RankShape) -> tuple[int, int]:
    """(layer weights, other weights: embedding, LM head, norms) held by one rank, in elements."""
    q, kv = rank.heads * spec.head_dim, rank.kv_heads * spec.head_dim
    mlp = (3 if spec.gated_mlp else 2) * spec.hidden * rank.intermediate
    if spec.experts:
        held, inter = rank.experts or spec.experts, rank.expert_intermediate or rank.intermediate
        mlp = held * (3 if spec.gated_mlp else 2) * spec.hidden * inter + spec.hidden * spec.experts
    layer = (
        spec.hidden * (q + 2 * kv) + q * spec.hidden + mlp + 2 * spec.hidden + ((q + 2 * kv) if spec.qkv_bias else 0)
    )
    other = rank.vocab * spec.hidden * (1 if spec.tied_embeddings else 2) + spec.hidden
    return spec.layers * layer, other
