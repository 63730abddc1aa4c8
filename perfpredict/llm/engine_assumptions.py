"""The assumption lines of a serving engine's report: its version's defaults, KV pool, kernels, scheduler, host
cost and frontend, and how tensor, expert and pipeline parallelism (or llama.cpp's layer split and CPU offload)
are run (``vllm_engine.Setup`` in, a name-to-sentence dict out; renderers only print it)."""

from __future__ import annotations

from typing import Any

from perfpredict.core.ops import DTYPE_BYTES
from perfpredict.core.units import GIB


def assumptions(s: Any, prefix_hits: str | None = None) -> dict[str, str]:
    """``prefix_hits``: what prefix caching found in this run, in words (None: no shared prefixes were asked for,
    so a version that caches prefixes finds none: a batch or stream of distinct prompts)."""
    m, kv, e, v = s.model, s.kv, s.model.engine, s.version
    c = s.constants
    memory = (
        f"{e.memory_fraction:g} of the memory left after the weights, activations and runtime"
        if v.memory == "free-fraction"
        else f"{kv.budget_bytes / GIB:.1f} GiB ({e.memory_fraction:g} of the GPU) less weights "
        f"{kv.weights_bytes / GIB:.1f}, start-up profile activations {kv.activation_bytes / GIB:.2f} and "
        f"{kv.runtime_bytes / GIB:.2f} GiB outside torch"
    )
    out = {
        "engine": f"{v.label} ({v.released}); its defaults unless set: block size {e.block_size}, memory share "
        f"{e.memory_fraction:g}, max_num_seqs {e.max_num_seqs}, max_model_len {e.max_model_len}, "
        f"max_num_batched_tokens {e.max_num_batched_tokens}, chunked prefill {'on' if e.chunked_prefill else 'off'}"
        + (
            f", prefix caching on ({prefix_hits or 'no shared prefixes here: no hits'})"
            if v.prefix_caching or prefix_hits
            else ""
        )  # fmt: skip
        + (f"; {v.note}" if v.note else ""),
        "kv cache": f"{kv.blocks:,} blocks of {e.block_size} tokens ({kv.kv_pool_bytes / GIB:.1f} GiB per GPU, "
        f"{kv.capacity_tokens:,} tokens): {memory}",
        "attention": f"{e.backend}: {e.backend_reason}",
        "cuda graphs": _graphs_line(s),
        "kernels": "one GEMM for q/k/v and one for gate/up, fused add+RMSNorm, rotary, SiLU-and-mul and KV-cache "
        "write kernels; logits for one position per sequence"
        + (
            f"; {v.name}'s kernels at {c['decode_kernel_scale']:.2f}x (decode) and {c['prefill_kernel_scale']:.2f}x "
            "(prefill) the device model's time, fitted on its 7-8B rows"
            if (c["decode_kernel_scale"], c["prefill_kernel_scale"]) != (1.0, 1.0)
            else ""
        ),
        "scheduler": _scheduler_line(e, v),
        "host cost": f"{s.host_cost.label}"
        + (f", driving {s.gpus} GPU workers (each step's inputs broadcast to each)" if m.comm is not None else "")
        + f": {s.host_cost.describe(s.gpus)} ({_host_sources(s)})",
        "frontend": _frontend_line(s),
        "weights": f"{s.fmt.name}, {m.num.weight_bytes:g} bytes per layer weight",
    }
    if m.comm is not None:
        out.update(_parallel_assumptions(s))
    elif s.gpus > 1:
        out["layer split"] = (
            f"{s.gpus} GPUs each hold a share of the layers and run in turn (llama.cpp's --split-mode layer): a step "
            "takes as long as on one GPU holding them all, plus a hand-over per GPU boundary (in the host cost)"
        )
    if m.spec.experts:
        split = (
            f"split whole over the {m.rank.ep} GPUs ({m.rank.experts} each), the busiest rank's even share of the "
            "token-expert pairs (uniform routing: the load-balance assumption)"
            if m.rank.ep > 1
            else "each expert's intermediate features split over tp"
        )
        out["experts"] = (
            f"{m.spec.experts} experts, {m.spec.experts_per_token} per token, routed uniformly: a step reads the "
            f"experts its tokens reach; {split}"
        )
    if s.costs.cpu_layers:
        from perfpredict.hardware.devices import get_device

        out["layer offload"] = (
            f"{s.costs.cpu_layers} of {m.spec.layers} layers (and their KV cache) on the host CPU "
            f"({get_device('cpu').name}: the catalog's cpu, this machine unless a device file says otherwise), run "
            "after the GPU's share of each step at their roofline; the GPU holds the rest"
        )
    return out


def _parallel_assumptions(s: Any) -> dict[str, str]:
    """The report's lines on tensor, expert and pipeline parallelism and what their collectives cost."""
    m, comm, out = s.model, s.model.comm, {}
    dtype = DTYPE_BYTES[m.num.dtype]
    decode = max(1, s.engine_batch(min(m.engine.max_num_seqs, 256))) * m.spec.hidden * dtype
    prefill = m.engine.max_num_batched_tokens * m.spec.hidden * dtype
    if m.rank.tp > 1:
        out["tensor parallel"] = (
            f"tp={m.rank.tp}: {m.rank.heads} heads, {m.rank.kv_heads} key/value heads, {m.rank.intermediate} "
            "intermediate features per GPU; two all-reduces per block, the embedding's all-reduce and the logits' "
            f"gather per step on {m.link.description}; all-reduce at a full decode batch and a full prefill: "
            + comm.describe(decode, prefill)
        )
    if m.rank.ep > 1:
        out["expert parallel"] = (
            f"ep={m.rank.ep} over the tp GPUs: a MoE block's all-reduce becomes a reduce-scatter and an all-gather "
            "of the same bytes around an all-to-all dispatch and an all-to-all combine of each rank's token-expert "
            "pairs (DeepSpeed-MoE's and SGLang's layout; vLLM >= 0.8 with tensor-parallel attention keeps every "
            "token on every GPU and combines with the all-reduce instead), NCCL costed from the measured curves"
        )
    if s.pp > 1:
        out["pipeline parallel"] = (
            f"pp={s.pp}: {m.spec.layers} layers per stage (the slowest), {s.pp} virtual engines (vLLM V0; V1's "
            f"batch queue alike), each with {s.engine_kv.blocks:,} KV blocks and up to "
            f"{m.engine.max_num_seqs} sequences; a step of one virtual engine passes the stages in turn, "
            f"{s.pp - 1} send(s) of its activations between them ("
            + ("across nodes" if comm.stage_crosses_node else "inside a node")
            + "), while the other virtual engines' steps fill the other stages; a prefill waits behind half the "
            "others on each stage"
        )
    return out


def _graphs_line(s: Any) -> str:
    v, e = s.version, s.model.engine
    if e.config.enforce_eager:
        return "none (--enforce-eager): every kernel launched from Python"
    return {
        "decode": f"decode steps of up to {v.graph_max} sequences replay the captured graph of the next size up (1, 2, "
        f"4, 8, 16, ...); larger steps, prefills and contexts over {e.config.max_seq_len_to_capture:,} tokens run "
        "eagerly",
        "piecewise": f"piecewise CUDA graphs (torch.compile): every step of up to {v.graph_max} tokens replays the "
        "graph of the next size up, attention launched between the pieces; larger steps run eagerly",
        "one-token": "one-token steps replay a CUDA graph; prompt batches launch from C++",
        "none": "none: the C++ runtime launches each kernel (no Python dispatch)"
        if v.runtime == "c++"
        else "none: every kernel launched from Python",
    }[v.graphs]


def _scheduler_line(e, v) -> str:
    policy = (
        "mixed batching: whole prompts join the decodes of a step while its token budget holds them"
        if v.policy == "mixed"
        else "chunked prefill: each step decodes the running sequences, then fills its token budget with prompt chunks"
        if e.chunked_prefill
        else "prefill-first: a step runs waiting prompts alone, else decodes"
    )
    admission = (
        "a request is admitted only when its prompt and all its new tokens fit (no preemption)"
        if v.admission == "reserve"
        else "preemption by recompute"
    )
    return f"{policy}; {admission}"


def _frontend_line(s: Any) -> str:
    o = s.options
    if o is None or o.frontend == "offline":
        return "offline: the engine's generate call in a script (no API server)"
    process = o.frontend_process or s.version.frontend_process
    where = "in the engine's process, in turn with each step" if process == "engine" else "in its own process"
    return f"{o.frontend}: streams every new token to its client and takes every request, {where}"


def _host_sources(s: Any) -> str:
    return "; ".join(sorted({p.source for p in s.host_cost.phases if p.source}))
